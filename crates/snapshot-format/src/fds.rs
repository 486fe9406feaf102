//! The records of a snapshot's open descriptors and their checks: what a
//! restore trusts of a descriptor record before the restorer rebuilds it.
use crate::{Blob, StateError};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use thaw_error::fail;

/// One watch of an epoll instance: the watched descriptor's number, the
/// events asked for (with EPOLLET/EPOLLONESHOT...) and the user data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpollWatch {
    pub fd: i32,
    pub events: u32,
    pub data: u64,
}

/// A socket a restore recreates: `pair` names the descriptor holding the
/// other end of a socketpair (both ends are in the process); otherwise it
/// comes back unconnected (closed by its peer with `SOCK_OPT_DROPPED`),
/// bound to `addr` when that is not empty, and listening when `backlog` is
/// `Some`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedSocket {
    pub family: u32,
    pub ty: u32,
    pub protocol: u32,
    /// `struct sockaddr` bytes it was bound to (empty: unbound)
    pub addr: Vec<u8>,
    pub backlog: Option<u32>,
    /// SOCK_OPT_* bits
    pub options: u32,
    /// socketpair: the other end's descriptor
    pub pair: Option<i32>,
    /// shut down directions (1 reading, 2 writing)
    pub shutdown: u32,
    /// bytes queued for this end to read (socketpairs)
    pub queued: Blob,
}

/// SO_REUSEADDR was set.
pub const SOCK_OPT_REUSEADDR: u32 = 1;
/// SO_REUSEPORT was set.
pub const SOCK_OPT_REUSEPORT: u32 = 2;
/// IPV6_V6ONLY was set.
pub const SOCK_OPT_V6ONLY: u32 = 4;
/// A TCP connection, closed at the snapshot: restored as one its peer
/// closed (reads see end of file, writes `EPIPE`), not as a new socket.
pub const SOCK_OPT_DROPPED: u32 = 8;
/// A custom runtime's Runtime API connection, its `next` pending: restored
/// as a unix stream socket connected to the abstract address `addr`, where
/// the worker listens in the new sandbox (`runtime_api`).
pub const SOCK_OPT_CONNECT: u32 = 16;

/// What an open descriptor is, with what a restore needs to rebuild it.
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
/// Most watches of one epoll instance.
pub const MAX_WATCHES: usize = 1024;
/// Largest pipe a snapshot recreates (`/proc/sys/fs/pipe-max-size`'s default).
pub const MAX_PIPE_SIZE: u32 = 1 << 20;
/// Longest path or memfd name kept.
const MAX_PATH: usize = 4096;
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
const F_SEAL_ALL: u32 = 0x3f;
/// The kernel's O_LARGEFILE on x86_64 (set on every 64-bit open; libc says 0).
const O_LARGEFILE: libc::c_int = 0o100000;
/// The clocks a timerfd may be on.
pub const CLOCKS: [u32; 3] = [
    libc::CLOCK_REALTIME as u32,
    libc::CLOCK_MONOTONIC as u32,
    libc::CLOCK_BOOTTIME as u32,
];

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
    let by_fd: HashMap<i32, &SavedFd> = fds.iter().map(|f| (f.fd, f)).collect();
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
        let blob = |b: &Blob| -> Result<(), StateError> {
            if b.len > 0 && (b.image_off < pages || b.image_off.checked_add(b.len).is_none()) {
                return Err(bad(format!(
                    "content at {}+{} is not after the pages",
                    b.image_off, b.len
                )));
            }
            Ok(())
        };
        match &f.kind {
            FdKind::Dup { of } => {
                let orig = by_fd.get(of).filter(|o| o.fd < fd);
                if orig.is_none_or(|o| matches!(o.kind, FdKind::Dup { .. })) {
                    return Err(bad(format!("a dup of {of}, which is no earlier record")));
                }
            }
            FdKind::File { path, .. } => check_abs_path(path).map_err(bad)?,
            FdKind::Pipe {
                first,
                read,
                size,
                fifo,
                unread,
            } => {
                blob(unread)?;
                if !size.is_power_of_two() || !(4096..=MAX_PIPE_SIZE).contains(size) {
                    return Err(bad(format!("a pipe of {size} bytes")));
                }
                // a pipe's read end carries the unread bytes; a FIFO's first record
                let carrier = if fifo.is_some() { *first == fd } else { *read };
                if unread.len > *size as u64 || (!carrier && unread.len != 0) {
                    return Err(bad(format!(
                        "{} unread bytes in a pipe of {size}",
                        unread.len
                    )));
                }
                if let (Some(_), true) = (fifo, *first != fd) {
                    // any number of opens of a FIFO, each by its path
                    let ok = by_fd.get(first).is_some_and(|o| {
                        o.fd < fd
                            && matches!(&o.kind, FdKind::Pipe { first: f2, fifo: p2, size: s2, .. }
                                if f2 == first && p2 == fifo && s2 == size)
                    });
                    if !ok {
                        return Err(bad(format!("a FIFO opened first at {first}, which is not")));
                    }
                } else if *first != fd {
                    let ok = by_fd.get(first).is_some_and(|o| {
                        o.fd < fd
                            && matches!(&o.kind, FdKind::Pipe { first: f2, read: r2, fifo: p2, size: s2, .. }
                                if f2 == first && r2 != read && p2 == fifo && s2 == size)
                    });
                    if !ok {
                        return Err(bad(format!("the other end of pipe {first}, which is not")));
                    }
                }
                if let Some(p) = fifo {
                    crate::check_path(p).map_err(|e| bad(e.to_string()))?;
                }
            }
            FdKind::EventFd { count, .. } => {
                if *count == u64::MAX {
                    return Err(bad("an eventfd count of 2^64-1".into()));
                }
            }
            FdKind::Epoll { watches } => {
                if watches.len() > MAX_WATCHES {
                    return Err(bad(format!("{} epoll watches", watches.len())));
                }
                let mut seen = std::collections::HashSet::new();
                for w in watches {
                    let target = by_fd.get(&w.fd);
                    let ok = (0..=2).contains(&w.fd)
                        || target.is_some_and(|t| !matches!(t.kind, FdKind::Epoll { .. }));
                    if !ok || !seen.insert(w.fd) {
                        return Err(bad(format!("watches descriptor {}, which it cannot", w.fd)));
                    }
                }
            }
            FdKind::TimerFd {
                clock,
                value_ns,
                interval_ns,
                ..
            } => {
                if !CLOCKS.contains(clock) || *value_ns >= 1 << 62 || *interval_ns >= 1 << 62 {
                    return Err(bad(format!("a timer on clock {clock}")));
                }
            }
            FdKind::SignalFd { .. } => {}
            FdKind::Memfd {
                name,
                size,
                seals,
                data,
                ..
            } => {
                blob(data)?;
                if name.len() > 249 || name.contains('\0') || data.len > *size {
                    return Err(bad("a malformed memfd".into()));
                }
                if seals & !F_SEAL_ALL != 0 {
                    return Err(bad(format!("memfd seals {seals:#x}")));
                }
            }
            FdKind::Socket(s) => {
                blob(&s.queued)?;
                check_socket(fd, s, &by_fd).map_err(bad)?;
            }
        }
    }
    Ok(())
}

fn check_socket(
    fd: i32,
    s: &SavedSocket,
    by_fd: &HashMap<i32, &SavedFd>,
) -> std::result::Result<(), String> {
    let families = [libc::AF_UNIX, libc::AF_INET, libc::AF_INET6];
    let types = [libc::SOCK_STREAM, libc::SOCK_DGRAM, libc::SOCK_SEQPACKET];
    let known = |v: u32, of: &[i32]| i32::try_from(v).is_ok_and(|v| of.contains(&v));
    if !known(s.family, &families) || !known(s.ty, &types) || s.protocol > 255 {
        return Err(format!(
            "a socket of family {}, type {}, protocol {}",
            s.family, s.ty, s.protocol
        ));
    }
    if s.addr.len() > 128
        || (!s.addr.is_empty()
            && (s.addr.len() < 2 || u16::from_ne_bytes([s.addr[0], s.addr[1]]) as u32 != s.family))
    {
        return Err("a malformed socket address".into());
    }
    if s.options & !31 != 0 || s.shutdown > 3 || s.backlog.is_some_and(|b| b > 65535) {
        return Err("malformed socket options".into());
    }
    if s.options & SOCK_OPT_DROPPED != 0
        && (s.family == libc::AF_UNIX as u32
            || s.ty != libc::SOCK_STREAM as u32
            || !s.addr.is_empty()
            || s.backlog.is_some())
    {
        return Err("a dropped connection that is not an unbound TCP socket".into());
    }
    let abstract_unix = s.addr.len() > 2 && s.addr[2] == 0;
    if s.options & SOCK_OPT_CONNECT != 0
        && (s.family != libc::AF_UNIX as u32
            || s.ty != libc::SOCK_STREAM as u32
            || !abstract_unix
            || s.backlog.is_some()
            || s.options != SOCK_OPT_CONNECT)
    {
        return Err("a connection to remake that is not to an abstract unix address".into());
    }
    match s.pair {
        Some(p) => {
            let ok = by_fd.get(&p).is_some_and(
                |o| matches!(&o.kind, FdKind::Socket(t) if t.pair == Some(fd) && t.ty == s.ty),
            );
            if !ok
                || p == fd
                || s.family != libc::AF_UNIX as u32
                || !s.addr.is_empty()
                || s.backlog.is_some()
            {
                return Err(format!("half of a socketpair with {p}, which is not"));
            }
        }
        None if s.queued.len > 0 => return Err("queued bytes on an unconnected socket".into()),
        None => {}
    }
    Ok(())
}

/// An absolute plain path: no empty, `.` or `..` component, no NUL.
pub fn check_abs_path(p: &str) -> std::result::Result<(), String> {
    let rel = p
        .strip_prefix('/')
        .ok_or_else(|| format!("path {p:?} is not absolute"))?;
    if p.len() > MAX_PATH
        || (!rel.is_empty()
            && rel
                .split('/')
                .any(|c| c.is_empty() || c == "." || c == ".." || c.contains('\0')))
    {
        return Err(format!("path {p:?} is not a plain path"));
    }
    Ok(())
}
