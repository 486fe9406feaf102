//! Work done inside a sandbox's network namespace from the worker: a socket
//! belongs to the namespace it was made in, so a short-lived thread joins
//! the sandbox's namespace, makes it, and hands it back. Setting an
//! interface up (`interface_up`) is here too: the worker does it on such a
//! thread, the sandbox's child between clone and exec.
use crate::error::{HostError, Result};
use std::os::fd::{AsRawFd, RawFd};
use thaw_error::fail;

/// Runs `f` on a thread that has joined runtime `pid`'s network namespace.
pub fn in_netns<T: Send + 'static>(
    pid: i32,
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    let ns = std::fs::File::open(format!("/proc/{pid}/ns/net"))?;
    std::thread::spawn(move || -> Result<T> {
        // SAFETY: setns on this short-lived thread only; the file is ours.
        if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } < 0 {
            fail!(
                HostError::Failed,
                "joining the sandbox's network namespace: {}",
                std::io::Error::last_os_error()
            );
        }
        f()
    })
    .join()
    .map_err(|_| HostError::Failed("the namespace thread panicked".into()))?
}

/// An `ifreq` naming interface `name` (cut to `IFNAMSIZ - 1` bytes), all
/// else zero. On the stack: the sandbox's child may make one.
pub(crate) fn ifreq_of(name: &str) -> libc::ifreq {
    // SAFETY: ifreq is plain data; all zero is a valid value.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (slot, b) in ifr.ifr_name[..libc::IFNAMSIZ - 1]
        .iter_mut()
        .zip(name.bytes())
    {
        *slot = b.cast_signed();
    }
    ifr
}

/// Sets interface `name` up (`IFF_UP`) through datagram socket `s`, naming
/// the ioctl that failed (`"flags"` reading, `"up"` setting). It neither
/// allocates nor takes a lock, so the sandbox's child calls it between
/// clone and exec.
pub(crate) fn interface_up(
    s: RawFd,
    name: &str,
) -> std::result::Result<(), (&'static str, std::io::Error)> {
    let mut ifr = ifreq_of(name);
    #[allow(clippy::cast_possible_truncation)] // IFF_UP is 1
    let up = libc::IFF_UP as libc::c_short;
    // SAFETY: SIOCGIFFLAGS fills and SIOCSIFFLAGS reads the ifreq passed,
    // which outlives both calls; a bad `s` fails with EBADF.
    unsafe {
        if libc::ioctl(s, libc::SIOCGIFFLAGS, &mut ifr) != 0 {
            return Err(("flags", std::io::Error::last_os_error()));
        }
        ifr.ifr_ifru.ifru_flags |= up;
        if libc::ioctl(s, libc::SIOCSIFFLAGS, &ifr) != 0 {
            return Err(("up", std::io::Error::last_os_error()));
        }
    }
    Ok(())
}
