//! The system calls descriptor capture makes on the frozen runtime's
//! descriptors and root, each wrapped once.
use crate::error::Result;
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use thaw_error::{fail, ResultExt};
use thaw_restorer as r;
use thaw_sandbox::HostError;

pub(super) const KCMP_FILE: libc::c_long = 0;
const KCMP_EPOLL_TFD: libc::c_long = 7;

pub(super) fn pidfd_open(pid: i32) -> Result<OwnedFd> {
    // SAFETY: pidfd_open with a pid and no flags.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        fail!(
            HostError::Failed,
            "pidfd_open({pid}): {}",
            std::io::Error::last_os_error()
        );
    }
    let fd = RawFd::try_from(fd).context("pidfd_open's descriptor")?;
    // SAFETY: a descriptor just returned to us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub(super) fn pidfd_getfd(pidfd: &OwnedFd, fd: i32) -> Result<OwnedFd> {
    // SAFETY: pidfd_getfd on a pidfd we hold; the result is a new descriptor.
    let got = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
    if got < 0 {
        fail!(
            HostError::Failed,
            "pidfd_getfd: {}",
            std::io::Error::last_os_error()
        );
    }
    let got = RawFd::try_from(got).context("pidfd_getfd's descriptor")?;
    // SAFETY: a descriptor just returned to us.
    Ok(unsafe { OwnedFd::from_raw_fd(got) })
}

/// kcmp of two things of `pid`: true when they are the same.
pub(super) fn kcmp(pid: i32, ty: libc::c_long, a: i32, b: u64) -> bool {
    // SAFETY: kcmp only compares kernel objects; `b` is a number or a
    // pointer to a slot we own, per `ty`.
    unsafe { libc::syscall(libc::SYS_kcmp, pid, pid, ty, a, b) == 0 }
}

/// Whether epoll `epfd`'s watch of `tfd` is of the file open at `tfd` now.
pub(super) fn kcmp_epoll(pid: i32, epfd: i32, tfd: i32) -> bool {
    let (Ok(efd), Ok(target)) = (u32::try_from(epfd), u32::try_from(tfd)) else {
        return false; // no descriptor is negative
    };
    let slot: [u32; 3] = [efd, target, 0];
    kcmp(pid, KCMP_EPOLL_TFD, tfd, slot.as_ptr() as u64)
}

pub(super) fn fstat(fd: &OwnedFd) -> std::io::Result<libc::stat> {
    // SAFETY: a zeroed stat is a valid out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat fills `st`.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(st)
}

pub(super) fn ioctl_int(fd: &OwnedFd, req: libc::Ioctl) -> std::io::Result<libc::c_int> {
    let mut n: libc::c_int = 0;
    // SAFETY: the ioctl writes one int.
    if unsafe { libc::ioctl(fd.as_raw_fd(), req, &mut n) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(n)
}

pub(super) fn getsockopt_int(
    fd: &OwnedFd,
    level: libc::c_int,
    name: libc::c_int,
) -> std::io::Result<i32> {
    let mut v: libc::c_int = 0;
    #[allow(clippy::cast_possible_truncation)] // a c_int's 4 bytes
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `v`.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&mut v as *mut i32).cast(),
            &mut len,
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(v)
}

/// getsockname (`peer`: getpeername) as raw `struct sockaddr` bytes.
pub(super) fn sockname(fd: &OwnedFd, peer: bool) -> std::io::Result<Vec<u8>> {
    let mut buf = [0u8; 128];
    #[allow(clippy::cast_possible_truncation)] // 128 bytes
    let mut len = buf.len() as libc::socklen_t;
    let p = buf.as_mut_ptr().cast();
    // SAFETY: the call writes at most `len` bytes into `buf`.
    let r = unsafe {
        if peer {
            libc::getpeername(fd.as_raw_fd(), p, &mut len)
        } else {
            libc::getsockname(fd.as_raw_fd(), p, &mut len)
        }
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(buf[..(len as usize).min(buf.len())].to_vec())
}

pub(super) fn open_root(pid: i32) -> Result<OwnedFd> {
    let c = CString::new(format!("/proc/{pid}/root")).context("the root's path")?;
    // SAFETY: open with a NUL-terminated path.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        fail!(
            HostError::Failed,
            "opening the sandbox's root: {}",
            std::io::Error::last_os_error()
        );
    }
    // SAFETY: just returned to us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `path` inside the sandbox's root, as the restorer will open it: no
/// symbolic link on the way, never above the root.
pub(crate) fn open_in_root(
    root: &OwnedFd,
    path: &str,
    flags: libc::c_int,
) -> std::io::Result<OwnedFd> {
    let c = CString::new(path.trim_start_matches('/')).map_err(std::io::Error::other)?;
    let c = if c.as_bytes().is_empty() {
        CString::new(".").expect("no NUL")
    } else {
        c
    };
    let how = r::OpenHow {
        flags: u64::try_from(flags | libc::O_CLOEXEC).map_err(std::io::Error::other)?,
        mode: 0,
        resolve: r::RESOLVE_FLAGS,
    };
    // SAFETY: openat2 with a NUL-terminated path and an open_how we own.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root.as_raw_fd(),
            c.as_ptr(),
            &how as *const r::OpenHow,
            std::mem::size_of::<r::OpenHow>(),
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let fd = RawFd::try_from(fd).map_err(std::io::Error::other)?;
    // SAFETY: just returned to us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
