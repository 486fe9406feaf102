//! An epoll instance ([`super::FdKind::Epoll`]) and its watches, each of a
//! descriptor that is kept (or stdio) and not itself an epoll. Captured and
//! planned in `crates/checkpoint/src/fds/epoll.rs`.
use super::{FdKind, Table};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;

/// One watch of an epoll instance: the watched descriptor's number, the
/// events asked for (with EPOLLET/EPOLLONESHOT...) and the user data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpollWatch {
    pub fd: i32,
    pub events: u32,
    pub data: u64,
}

/// Most watches of one epoll instance.
pub const MAX_WATCHES: usize = 1024;

/// An epoll's watches: few enough, each of a distinct descriptor it can
/// watch again.
pub(super) fn check(watches: &[EpollWatch], table: &Table<'_>) -> Result<(), String> {
    if watches.len() > MAX_WATCHES {
        return Err(format!("{} epoll watches", watches.len()));
    }
    let mut seen = HashSet::new();
    for w in watches {
        let target = table.get(w.fd);
        let ok = (0..=2).contains(&w.fd)
            || target.is_some_and(|t| !matches!(t.kind, FdKind::Epoll { .. }));
        if !ok || !seen.insert(w.fd) {
            return Err(format!("watches descriptor {}, which it cannot", w.fd));
        }
    }
    Ok(())
}
