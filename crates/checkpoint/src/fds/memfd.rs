//! A memfd: made again with its name, size, data, seals and position.
//!
//! Its record is `FdKind::Memfd` (`crates/snapshot-format/src/fds/mod.rs`),
//! its check `memfd.rs` beside it; the restorer's `make_fd`
//! (`crates/restorer/src/restorer.c`) rebuilds it.
use super::sys::fstat;
use super::{plan_len, stored, Append, Kind, Open, PlanCx};
use std::os::fd::AsRawFd;
use thaw_memory::usize_of;
use thaw_restorer as r;
use thaw_snapshot_format::{Blob, FdKind, StateError};

pub(super) fn capture(o: &Open, name: &str, append: &mut Option<Append<'_>>) -> Kind {
    let st = fstat(&o.dup).map_err(|e| e.to_string())?;
    // SAFETY: fcntl on a descriptor we own.
    let seals = unsafe { libc::fcntl(o.dup.as_raw_fd(), libc::F_GET_SEALS) };
    // F_GET_SEALS fails (negative) on anything but a memfd
    let (Ok(seals), libc::S_IFREG, 0) =
        (u32::try_from(seals), st.st_mode & libc::S_IFMT, st.st_nlink)
    else {
        return Err(format!("/memfd:{name}, which is not a memfd"));
    };
    let size = u64::try_from(st.st_size).map_err(|_| format!("a memfd of {} bytes", st.st_size))?;
    let mut data = Blob::default();
    if let (Some(append), true) = (append.as_mut(), size > 0) {
        let mut buf = vec![0u8; usize_of(size)];
        let f = std::fs::File::from(o.dup.try_clone().map_err(|e| e.to_string())?);
        std::os::unix::fs::FileExt::read_exact_at(&f, &mut buf, 0)
            .map_err(|e| format!("reading the memfd: {e}"))?;
        data = stored(append, &buf)?;
    }
    Ok(FdKind::Memfd {
        name: name.to_string(),
        pos: o.info.pos,
        size,
        seals,
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
    (p.path_off, p.path_len) = (cx.plan.add_string(name), plan_len(name.len())?);
    (p.a, p.b, p.arg) = (pos, size, seals);
    cx.content(fd, data, p)
}
