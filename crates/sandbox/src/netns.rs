//! Work done inside a sandbox's network namespace from the worker: a socket
//! belongs to the namespace it was made in, so a short-lived thread joins
//! the sandbox's namespace, makes it, and hands it back.
use crate::error::{HostError, Result};
use std::os::fd::AsRawFd;
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
