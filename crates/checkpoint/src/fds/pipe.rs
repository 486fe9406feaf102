//! A pipe's end or a FIFO's open: made again with the pipe's size, its
//! unread bytes (copied with `tee`, which does not consume them) carried
//! by the read end's record (a FIFO's: its first open's).
//!
//! Its record is `FdKind::Pipe` (`crates/snapshot-format/src/fds/mod.rs`),
//! its check `pipe.rs` beside it; the restorer's `make_fd`
//! (`crates/restorer/src/restorer.c`) rebuilds it.
use super::sys::{fstat, ioctl_int, open_in_root};
use super::{plan_len, stored, Append, Kind, Open, PlanCx};
use crate::error::Result;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use thaw_error::fail;
use thaw_restorer as r;
use thaw_sandbox::HostError;
use thaw_snapshot_format::{Blob, FdKind, StateError, MAX_PIPE_SIZE};

pub(super) fn capture(
    o: &Open,
    pipes: &mut HashMap<String, i32>,
    append: &mut Option<Append<'_>>,
) -> Kind {
    let access = o.info.flags & libc::O_ACCMODE as u32;
    if access == libc::O_RDWR as u32 {
        return Err("a pipe opened for both reading and writing".into());
    }
    if o.info.flags & libc::O_DIRECT as u32 != 0 {
        return Err("a pipe in packet mode (O_DIRECT)".into());
    }
    let read = access == libc::O_RDONLY as u32;
    let size = pipe_size(&o.dup, "pipe")?;
    let key = format!("{}:{read}", o.link);
    if pipes.contains_key(&key) {
        return Err("a second open of the same end of a pipe".into());
    }
    pipes.insert(key, o.fd);
    let other = pipes.get(&format!("{}:{}", o.link, !read)).copied();
    // the read end's record carries the unread bytes
    let unread = match read {
        true => unread_bytes(&o.dup, size, append)?,
        false => Blob::default(),
    };
    Ok(FdKind::Pipe {
        first: other.unwrap_or(o.fd),
        read,
        size,
        fifo: None,
        unread,
    })
}

pub(super) fn is_fifo(fd: &OwnedFd) -> bool {
    fstat(fd).is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFIFO)
}

/// A FIFO of /tmp or /dev/shm, opened by its path: each descriptor is
/// reopened by that path; the first carries the size and the unread bytes
/// (read through an open of our own, whichever ends the runtime holds).
pub(super) fn capture_fifo(
    o: &Open,
    root: &OwnedFd,
    pipes: &mut HashMap<String, i32>,
    append: &mut Option<Append<'_>>,
) -> Kind {
    let path = &o.link;
    thaw_snapshot_format::check_path(path)
        .map_err(|_| format!("{path}, a FIFO outside /tmp and /dev/shm"))?;
    let st = fstat(&o.dup).map_err(|e| e.to_string())?;
    let there = open_in_root(root, path, libc::O_RDONLY | libc::O_NONBLOCK)
        .map_err(|e| format!("{path}, a FIFO that cannot be reopened: {e}"))?;
    let t = fstat(&there).map_err(|e| e.to_string())?;
    if (t.st_dev, t.st_ino) != (st.st_dev, st.st_ino) {
        return Err(format!("{path}, a FIFO no longer at that path"));
    }
    let size = pipe_size(&o.dup, "FIFO")?;
    let key = format!("fifo:{path}");
    let first = *pipes.entry(key).or_insert(o.fd);
    let unread = match first == o.fd {
        true => unread_bytes(&there, size, append)?,
        false => Blob::default(),
    };
    Ok(FdKind::Pipe {
        first,
        read: o.info.flags & libc::O_ACCMODE as u32 != libc::O_WRONLY as u32,
        size,
        fifo: Some(path.clone()),
        unread,
    })
}

/// The size of pipe (or FIFO) `fd`, which a restore can give a pipe again
/// (at most `MAX_PIPE_SIZE`).
fn pipe_size(fd: &OwnedFd, what: &str) -> std::result::Result<u32, String> {
    // SAFETY: fcntl on a descriptor we own.
    let size = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETPIPE_SZ) };
    match u32::try_from(size) {
        Ok(s) if s <= MAX_PIPE_SIZE => Ok(s),
        _ => Err(format!("a {what} of {size} bytes")),
    }
}

/// The unread bytes of pipe `fd` (of `size` bytes), stored through
/// `append` (none when only looking).
fn unread_bytes(
    fd: &OwnedFd,
    size: u32,
    append: &mut Option<Append<'_>>,
) -> std::result::Result<Blob, String> {
    let n = ioctl_int(fd, libc::FIONREAD).map_err(|e| format!("FIONREAD: {e}"))?;
    match (append.as_mut(), usize::try_from(n)) {
        (Some(append), Ok(n)) if n > 0 => {
            let bytes = tee_all(fd, n, size as usize).map_err(|e| e.to_string())?;
            stored(append, &bytes)
        }
        _ => Ok(Blob::default()),
    }
}

/// `n` unread bytes of the pipe `src`, copied without consuming them.
fn tee_all(src: &OwnedFd, n: usize, size: usize) -> Result<Vec<u8>> {
    let (rd, wr) = make_pipe()?;
    let want = libc::c_int::try_from(size.max(n))
        .map_err(|_| HostError::Failed(format!("a pipe of {} bytes", size.max(n))))?;
    // SAFETY: fcntl on our own pipe.
    if unsafe { libc::fcntl(wr.as_raw_fd(), libc::F_SETPIPE_SZ, want) } < 0 {
        fail!(
            HostError::Failed,
            "sizing a pipe: {}",
            std::io::Error::last_os_error()
        );
    }
    // tee copies from the start of the source: one call into a pipe large
    // enough takes everything
    // SAFETY: tee between two pipes we hold; the source is not consumed.
    let got = unsafe { libc::tee(src.as_raw_fd(), wr.as_raw_fd(), n, libc::SPLICE_F_NONBLOCK) };
    if got < 0 {
        fail!(
            HostError::Failed,
            "tee of a pipe's unread bytes: {}",
            std::io::Error::last_os_error()
        );
    }
    if usize::try_from(got) != Ok(n) {
        fail!(HostError::Failed, "tee copied {got} of {n} unread bytes");
    }
    let mut buf = vec![0u8; n];
    let mut f = std::fs::File::from(rd);
    std::io::Read::read_exact(&mut f, &mut buf)?;
    Ok(buf)
}

fn make_pipe() -> Result<(OwnedFd, OwnedFd)> {
    let mut p = [0; 2];
    // SAFETY: pipe2 fills two descriptors.
    if unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        fail!(
            HostError::Failed,
            "pipe2: {}",
            std::io::Error::last_os_error()
        );
    }
    // SAFETY: both just returned to us.
    Ok(unsafe { (OwnedFd::from_raw_fd(p[0]), OwnedFd::from_raw_fd(p[1])) })
}

pub(super) fn plan(
    fd: i32,
    (first, read, size): (i32, bool, u32),
    fifo: &Option<String>,
    unread: &Blob,
    p: &mut r::PlanFd,
    cx: &mut PlanCx,
) -> Result<(), StateError> {
    p.kind = r::FD_PIPE;
    if let Some(path) = fifo {
        (p.path_off, p.path_len) = (cx.plan.add_string(path), plan_len(path.len())?);
    }
    p.reference = if first == fd { -1 } else { cx.index_of(first)? };
    p.arg = size;
    p.arg2 = u32::from(read);
    cx.content(fd, unread, p)
}
