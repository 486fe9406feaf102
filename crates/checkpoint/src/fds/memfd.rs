//! A memfd: made again with its name, size, data, seals and position.
use super::sys::fstat;
use super::{stored, Append, Kind, Open, PlanCx};
use std::os::fd::AsRawFd;
use thaw_restorer as r;
use thaw_snapshot_format::{Blob, FdKind, StateError};

pub(super) fn capture(o: &Open, name: &str, append: &mut Option<Append<'_>>) -> Kind {
    let st = fstat(&o.dup).map_err(|e| e.to_string())?;
    // SAFETY: fcntl on a descriptor we own.
    let seals = unsafe { libc::fcntl(o.dup.as_raw_fd(), libc::F_GET_SEALS) };
    if seals < 0 || st.st_mode & libc::S_IFMT != libc::S_IFREG || st.st_nlink != 0 {
        return Err(format!("/memfd:{name}, which is not a memfd"));
    }
    let size = st.st_size as u64;
    let mut data = Blob::default();
    if let (Some(append), true) = (append.as_mut(), size > 0) {
        let mut buf = vec![0u8; size as usize];
        let f = std::fs::File::from(o.dup.try_clone().map_err(|e| e.to_string())?);
        std::os::unix::fs::FileExt::read_exact_at(&f, &mut buf, 0)
            .map_err(|e| format!("reading the memfd: {e}"))?;
        data = stored(append, &buf)?;
    }
    Ok(FdKind::Memfd {
        name: name.to_string(),
        pos: o.info.pos,
        size,
        seals: seals as u32,
        data,
    })
}

pub(super) fn plan(
    fd: i32,
    name: &str,
    (pos, size, seals): (u64, u64, u32),
    data: &Blob,
    p: &mut r::PlanFd,
    cx: &mut PlanCx,
) -> Result<(), StateError> {
    p.kind = r::FD_MEMFD;
    (p.path_off, p.path_len) = (cx.plan.add_string(name), name.len() as u32);
    (p.a, p.b, p.arg) = (pos, size, seals);
    cx.content(fd, data, p)
}
