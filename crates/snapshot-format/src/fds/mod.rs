//! The records of a snapshot's open descriptors and their checks: what a
//! restore trusts of a descriptor record before the restorer rebuilds it.
//!
//! [`FdKind`] names every kind; each kind's file here (`file.rs`,
//! `pipe.rs`, `eventfd.rs`, `epoll.rs`, `timerfd.rs`, `memfd.rs`,
//! `socket.rs`) holds its record type where it has one and its check,
//! beside the same kind's capture and plan in `crates/checkpoint/src/fds/`
//! and its rebuilding in the restorer (`make_fd` in
//! `crates/restorer/src/restorer.c`). This file checks what every record
//! shares (numbers, order, flags, where contents lie) and dispatches the
//! rest; a dup and a signalfd (any mask) have no check of their own.
mod epoll;
mod eventfd;
mod file;
mod memfd;
mod pipe;
mod socket;
mod timerfd;

pub use epoll::{EpollWatch, MAX_WATCHES};
pub use file::check_abs_path;
pub use pipe::MAX_PIPE_SIZE;
pub use socket::{
    SavedSocket, SOCK_OPT_CONNECT, SOCK_OPT_DROPPED, SOCK_OPT_REUSEADDR, SOCK_OPT_REUSEPORT,
    SOCK_OPT_V6ONLY,
};
pub use timerfd::CLOCKS;

use crate::{Blob, StateError};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use thaw_error::fail;

/// What an open descriptor is, with what a restore needs to rebuild it.
///
/// The variants' order and their fields' are the state file's encoding:
/// add a kind at the end, never between.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum FdKind {
    /// the same open file as the lower descriptor `of` (a dup)
    Dup {
        of: i32,
    },
    /// a regular file, directory or device, reopened by path in the
    /// sandbox (the read-only root, the restored /tmp and /dev/shm)
    File {
        path: String,
        pos: u64,
    },
    /// one end of a pipe (`fifo`: opened by that path); the unread bytes are
    /// in the record of the pipe's lowest descriptor, `first`
    Pipe {
        first: i32,
        read: bool,
        size: u32,
        fifo: Option<String>,
        unread: Blob,
    },
    EventFd {
        count: u64,
        semaphore: bool,
    },
    Epoll {
        watches: Vec<EpollWatch>,
    },
    /// remaining time and interval in nanoseconds, expirations not read yet
    TimerFd {
        clock: u32,
        value_ns: u64,
        interval_ns: u64,
        ticks: u64,
    },
    SignalFd {
        mask: u64,
    },
    Memfd {
        name: String,
        pos: u64,
        size: u64,
        seals: u32,
        data: Blob,
    },
    Socket(SavedSocket),
}

/// An open descriptor of the runtime (besides stdio and the control socket).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedFd {
    pub fd: i32,
    /// file status flags as fdinfo shows them (access mode, O_NONBLOCK,
    /// O_APPEND...), O_CLOEXEC for the descriptor's close-on-exec flag
    pub flags: u32,
    pub kind: FdKind,
}

/// Most descriptors a snapshot keeps (the restorer's table holds them).
pub const MAX_FDS: usize = thaw_restorer::MAX_FDS;
/// Highest descriptor number a snapshot names.
#[allow(clippy::cast_possible_wrap)] // 65536
pub const MAX_FD_NUMBER: i32 = thaw_restorer::MAX_FD_NUMBER as i32;
/// The file status flags a saved descriptor may carry.
const KNOWN_FLAGS: u32 = (libc::O_ACCMODE
    | libc::O_APPEND
    | libc::O_NONBLOCK
    | libc::O_DSYNC
    | libc::O_SYNC
    | O_LARGEFILE
    | libc::O_DIRECTORY
    | libc::O_NOFOLLOW
    | libc::O_NOATIME
    | libc::O_CLOEXEC
    | libc::O_PATH
    | libc::O_DIRECT
    | libc::O_ASYNC) as u32;
/// The kernel's O_LARGEFILE on x86_64 (set on every 64-bit open; libc says 0).
const O_LARGEFILE: libc::c_int = 0o100000;

/// What a kind's check may look at besides its own record: the other
/// records by number, and where the image's pages end.
struct Table<'a> {
    by_fd: HashMap<i32, &'a SavedFd>,
    pages: u64,
}

impl Table<'_> {
    /// The record of descriptor `fd`, if there is one.
    fn get(&self, fd: i32) -> Option<&SavedFd> {
        self.by_fd.get(&fd).copied()
    }

    /// A record's content lies in the image after the pages.
    fn blob(&self, b: &Blob) -> Result<(), String> {
        if b.len > 0 && (b.image_off < self.pages || b.image_off.checked_add(b.len).is_none()) {
            return Err(format!(
                "content at {}+{} is not after the pages",
                b.image_off, b.len
            ));
        }
        Ok(())
    }
}

/// Checks saved descriptors (what a restore trusts): numbers, kinds, paths,
/// references between records, and contents after the image's `pages` bytes.
pub(crate) fn check(fds: &[SavedFd], pages: u64) -> Result<(), StateError> {
    if fds.len() > MAX_FDS {
        fail!(
            StateError::Corrupt,
            "{} descriptors (at most {MAX_FDS})",
            fds.len()
        );
    }
    let table = Table {
        by_fd: fds.iter().map(|f| (f.fd, f)).collect(),
        pages,
    };
    let mut last = 3;
    for f in fds {
        let fd = f.fd;
        let bad = |why: String| StateError::Corrupt(format!("descriptor {fd}: {why}"));
        if fd <= last || fd >= MAX_FD_NUMBER {
            return Err(bad(format!(
                "out of order, a duplicate, one of 0-3 or over {MAX_FD_NUMBER}"
            )));
        }
        last = fd;
        if f.flags & !KNOWN_FLAGS != 0 {
            return Err(bad(format!("unknown flags {:#o}", f.flags)));
        }
        check_kind(fd, &f.kind, &table).map_err(bad)?;
    }
    Ok(())
}

/// The checks of descriptor `fd`'s own kind.
fn check_kind(fd: i32, kind: &FdKind, table: &Table<'_>) -> Result<(), String> {
    match kind {
        FdKind::Dup { of } => {
            let orig = table.get(*of).filter(|o| o.fd < fd);
            if orig.is_none_or(|o| matches!(o.kind, FdKind::Dup { .. })) {
                return Err(format!("a dup of {of}, which is no earlier record"));
            }
            Ok(())
        }
        FdKind::File { path, .. } => check_abs_path(path),
        FdKind::Pipe {
            first,
            read,
            size,
            fifo,
            unread,
        } => pipe::check(fd, *first, *read, *size, fifo.as_deref(), unread, table),
        FdKind::EventFd { count, .. } => eventfd::check(*count),
        FdKind::Epoll { watches } => epoll::check(watches, table),
        FdKind::TimerFd {
            clock,
            value_ns,
            interval_ns,
            ..
        } => timerfd::check(*clock, *value_ns, *interval_ns),
        FdKind::SignalFd { .. } => Ok(()),
        FdKind::Memfd {
            name,
            size,
            seals,
            data,
            ..
        } => memfd::check(name, *size, *seals, data, table),
        FdKind::Socket(s) => socket::check(fd, s, table),
    }
}
