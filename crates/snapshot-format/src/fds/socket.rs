//! A socket ([`super::FdKind::Socket`]): its family, type and address, the
//! options a restore carries, and, for a socketpair's end, the record of
//! its other end. Captured and planned in
//! `crates/checkpoint/src/fds/socket.rs`.
use super::{FdKind, Table};
use crate::Blob;
use serde::{Deserialize, Serialize};

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

/// Descriptor `fd`'s socket record.
pub(super) fn check(fd: i32, s: &SavedSocket, table: &Table<'_>) -> Result<(), String> {
    table.blob(&s.queued)?;
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
            let ok = table.get(p).is_some_and(
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
