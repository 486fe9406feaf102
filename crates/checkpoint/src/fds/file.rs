//! A regular file, directory or device: reopened by its path in the new
//! sandbox (the read-only root, the restored /tmp and /dev/shm), at its
//! position.
//!
//! Its record is `FdKind::File` (`crates/snapshot-format/src/fds/mod.rs`),
//! its check `file.rs` beside it; the restorer's `make_fd`
//! (`crates/restorer/src/restorer.c`) rebuilds it.
use super::sys::{fstat, open_in_root};
use super::{plan_len, Kind, Open, PlanCx};
use std::os::fd::OwnedFd;
use thaw_restorer as r;
use thaw_snapshot_format::{check_abs_path, FdKind, StateError};

/// The devices of the sandbox's /dev.
const DEVICES: [&str; 4] = ["/dev/null", "/dev/zero", "/dev/random", "/dev/urandom"];

/// A path as the runtime sees it: the same file (or device) must be there
/// in its root, reached without a symbolic link.
pub(super) fn capture(o: &Open, root: &OwnedFd) -> Kind {
    let path = &o.link;
    check_abs_path(path)?;
    let st = fstat(&o.dup).map_err(|e| e.to_string())?;
    let fmt = st.st_mode & libc::S_IFMT;
    let there = open_in_root(root, path, libc::O_PATH).and_then(|fd| fstat(&fd));
    let same = match (fmt, &there) {
        (libc::S_IFCHR, Ok(t)) => DEVICES.contains(&path.as_str()) && t.st_rdev == st.st_rdev,
        (libc::S_IFREG | libc::S_IFDIR, Ok(t)) => t.st_dev == st.st_dev && t.st_ino == st.st_ino,
        _ => false,
    };
    if !same {
        return Err(format!(
            "{path}, which a restore could not reopen (not that file of the sandbox's root, /tmp or /dev/shm, or not a regular file, directory or /dev/null|zero|random|urandom)"
        ));
    }
    Ok(FdKind::File {
        path: path.clone(),
        pos: o.info.pos,
    })
}

pub(super) fn plan(
    path: &str,
    pos: u64,
    p: &mut r::PlanFd,
    cx: &mut PlanCx,
) -> Result<(), StateError> {
    p.kind = r::FD_FILE;
    (p.path_off, p.path_len) = (cx.plan.add_string(path), plan_len(path.len())?);
    p.a = pos;
    Ok(())
}
