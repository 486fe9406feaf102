//! A socket: a socketpair's ends made again with the bytes queued for each
//! (unix sockets' peers from `sock_diag` in the sandbox's network
//! namespace); any other socket unconnected, bound and listening as it
//! was. An established TCP or connected UDP socket is shut down at the
//! checkpoint (the live instance sees its connection closed too); the TCP
//! one comes back as a connection its peer closed (`SOCK_OPT_DROPPED`: end
//! of file, `EPIPE`), the UDP one unconnected. A custom runtime's waiting
//! Runtime API connection comes back connected to the worker's listener in
//! the new sandbox (`SOCK_OPT_CONNECT`).
//!
//! Its record (`FdKind::Socket`, a `SavedSocket`) and check:
//! `crates/snapshot-format/src/fds/socket.rs`; the restorer's `make_fd`
//! (`crates/restorer/src/restorer.c`) rebuilds it.
use super::sys::{getsockopt_int, ioctl_int, sockname};
use super::{plan_len, stored, Append, Kind, Open, PlanCx};
use crate::error::Result;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use thaw_error::fail;
use thaw_restorer as r;
use thaw_sandbox::HostError;
use thaw_snapshot_format::{
    Blob, FdKind, SavedFd, SavedSocket, StateError, SOCK_OPT_CONNECT, SOCK_OPT_DROPPED,
    SOCK_OPT_REUSEADDR, SOCK_OPT_REUSEPORT, SOCK_OPT_V6ONLY,
};

const SO_DOMAIN: libc::c_int = 39;
const SO_PROTOCOL: libc::c_int = 38;
const SO_REUSEPORT: libc::c_int = 15;

/// A unix socket as `sock_diag` reports it.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct UnixDiag {
    peer: u32,
    /// listening: pending connections and the backlog
    rqueue: u32,
    wqueue: u32,
    shutdown: u32,
}

pub(super) fn capture(
    o: &Open,
    open: &[Open],
    unix: &HashMap<u32, UnixDiag>,
    append: &mut Option<Append<'_>>,
    runtime_api: Option<thaw_sandbox::runtime_api::PendingConn>,
) -> Kind {
    let fd = &o.dup;
    let opt = |level, name| getsockopt_int(fd, level, name).map_err(|e| e.to_string());
    let unsigned = |v: i32| u32::try_from(v).map_err(|_| format!("a socket option of {v}"));
    let domain = opt(libc::SOL_SOCKET, SO_DOMAIN)?;
    let family = unsigned(domain)?;
    let ty = unsigned(opt(libc::SOL_SOCKET, libc::SO_TYPE)?)?;
    let protocol = unsigned(opt(libc::SOL_SOCKET, SO_PROTOCOL)?)?;
    let listening = opt(libc::SOL_SOCKET, libc::SO_ACCEPTCONN)? != 0;
    if o.info.get("scm_fds").is_some_and(|n| n != "0") {
        return Err("a socket with descriptors in flight".into());
    }
    let mut options = 0;
    if opt(libc::SOL_SOCKET, libc::SO_REUSEADDR)? != 0 {
        options |= SOCK_OPT_REUSEADDR;
    }
    if family != libc::AF_UNIX as u32 && opt(libc::SOL_SOCKET, SO_REUSEPORT)? != 0 {
        options |= SOCK_OPT_REUSEPORT;
    }
    if family == libc::AF_INET6 as u32 && opt(libc::IPPROTO_IPV6, libc::IPV6_V6ONLY)? != 0 {
        options |= SOCK_OPT_V6ONLY;
    }
    let mut s = SavedSocket {
        family,
        ty,
        protocol,
        addr: Vec::new(),
        backlog: None,
        options,
        pair: None,
        shutdown: 0,
        queued: Blob::default(),
    };
    let addr = sockname(fd, false).map_err(|e| format!("getsockname: {e}"))?;
    match domain {
        libc::AF_UNIX => {
            let ino: u32 = socket_ino(&o.link)?;
            let d = unix.get(&ino).copied().unwrap_or_default();
            // sun_path after the 2-byte family: empty (unbound) or abstract
            if addr.len() > 2 && addr[2] != 0 {
                return Err(format!(
                    "a unix socket bound to the path {:?}",
                    String::from_utf8_lossy(&addr[2..]).trim_end_matches('\0')
                ));
            }
            if addr.len() > 2 {
                s.addr = addr;
            }
            if listening {
                s.backlog = Some(d.wqueue);
            } else if d.peer != 0 {
                let peer = open
                    .iter()
                    .find(|p| p.link == format!("socket:[{}]", d.peer))
                    .ok_or("a unix socket connected to a peer outside the process")?;
                s.pair = Some(peer.fd);
                s.shutdown = d.shutdown & 3;
                let n = ioctl_int(fd, libc::FIONREAD).map_err(|e| format!("SIOCINQ: {e}"))?;
                if n > 0 && ty != libc::SOCK_STREAM as u32 {
                    return Err("a unix socketpair with queued datagrams".into());
                }
                if let (Some(append), Ok(n @ 1..)) = (append.as_mut(), usize::try_from(n)) {
                    s.queued = stored(append, &peek(fd, n)?)?;
                }
            }
        }
        libc::AF_INET | libc::AF_INET6 => {
            if ![0, libc::IPPROTO_TCP as u32, libc::IPPROTO_UDP as u32].contains(&protocol) {
                return Err(format!("a socket of protocol {protocol}"));
            }
            let peer = sockname(fd, true);
            if let (Ok(peer), Some(p)) = (&peer, runtime_api) {
                if thaw_sandbox::runtime_api::is_pending_connection(&addr, peer, p.port) {
                    let s = reconnecting_socket(p.waiting);
                    return Ok(FdKind::Socket(s));
                }
            }
            let connected = peer.is_ok();
            if connected {
                // the connection ends here: the live instance sees it
                // closed; a restored one gets a TCP connection its peer
                // closed (end of file, EPIPE), a UDP socket unconnected
                if ty == libc::SOCK_STREAM as u32 {
                    s.options |= SOCK_OPT_DROPPED;
                }
                if append.is_some() {
                    // SAFETY: shutdown on a descriptor we own (shared with the runtime).
                    unsafe { libc::shutdown(fd.as_raw_fd(), libc::SHUT_RDWR) };
                }
            } else {
                if port_of(&addr) != 0 {
                    s.addr = addr;
                }
                if listening {
                    s.backlog = Some(tcp_backlog(fd)?);
                }
            }
        }
        _ => return Err(format!("a socket of family {family}")),
    }
    Ok(FdKind::Socket(s))
}

fn socket_ino(link: &str) -> std::result::Result<u32, String> {
    link.strip_prefix("socket:[")
        .and_then(|l| l.strip_suffix(']'))
        .and_then(|n| n.parse().ok())
        .ok_or(format!("a socket link {link:?}"))
}

fn port_of(addr: &[u8]) -> u16 {
    addr.get(2..4)
        .map_or(0, |p| u16::from_be_bytes([p[0], p[1]]))
}

/// A listening TCP socket's backlog (`tcp_info.tcpi_sacked` of a listener).
fn tcp_backlog(fd: &OwnedFd) -> std::result::Result<u32, String> {
    let mut info = [0u8; 104];
    #[allow(clippy::cast_possible_truncation)] // 104 bytes
    let mut len = info.len() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `info`.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if r < 0 || len < 36 {
        // a UDP socket cannot listen; nothing else gets here
        return Err(format!("TCP_INFO: {}", std::io::Error::last_os_error()));
    }
    // u8 x8, then u32 rto, ato, snd_mss, rcv_mss, unacked, sacked
    Ok(u32::from_ne_bytes(
        info[28..32].try_into().expect("4 bytes"),
    ))
}

fn peek(fd: &OwnedFd, n: usize) -> std::result::Result<Vec<u8>, String> {
    let mut buf = vec![0u8; n];
    let mut ctl = [0u8; 64];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: n,
    };
    // SAFETY: a zeroed msghdr is valid; its pointers are set below.
    let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
    m.msg_iov = &mut iov;
    m.msg_iovlen = 1;
    m.msg_control = ctl.as_mut_ptr().cast();
    m.msg_controllen = ctl.len();
    let flags = libc::MSG_PEEK | libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC;
    // SAFETY: recvmsg into the buffers above, which outlive the call.
    let got = unsafe { libc::recvmsg(fd.as_raw_fd(), &mut m, flags) };
    if m.msg_controllen > 0 {
        // descriptors or credentials in the queue: a snapshot keeps bytes only
        // (SAFETY: CMSG_FIRSTHDR reads the header we passed)
        let c = unsafe { libc::CMSG_FIRSTHDR(&m) };
        // SAFETY: c points into `ctl` when not null.
        if !c.is_null() && unsafe { (*c).cmsg_type } == libc::SCM_RIGHTS {
            // SAFETY: as above; the kernel installed these descriptors for us.
            let data = unsafe { libc::CMSG_DATA(c) } as *const RawFd;
            // SAFETY: as above.
            let count = (unsafe { (*c).cmsg_len } as usize - 16) / 4;
            for k in 0..count {
                // SAFETY: each is a descriptor just given to us.
                drop(unsafe { OwnedFd::from_raw_fd(*data.add(k)) });
            }
        }
        return Err("a socket with descriptors or credentials queued".into());
    }
    if usize::try_from(got) != Ok(n) {
        return Err(format!("peeked {got} of {n} queued bytes"));
    }
    Ok(buf)
}

/// Every unix socket of runtime `pid`'s network namespace: peer, queues,
/// shutdown (`sock_diag`, asked from a thread that joins that namespace).
pub(super) fn unix_diag(pid: i32) -> Result<HashMap<u32, UnixDiag>> {
    // a netlink socket belongs to the namespace it was made in
    let sock = thaw_sandbox::netns::in_netns(pid, || -> Result<OwnedFd> {
        // SAFETY: socket with constant arguments.
        let s = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                4, // NETLINK_SOCK_DIAG
            )
        };
        if s < 0 {
            fail!(
                HostError::Failed,
                "netlink socket: {}",
                std::io::Error::last_os_error()
            );
        }
        // SAFETY: just returned to us.
        Ok(unsafe { OwnedFd::from_raw_fd(s) })
    })?;
    // nlmsghdr (16) + unix_diag_req (24)
    let mut req = Vec::with_capacity(40);
    req.extend_from_slice(&40u32.to_ne_bytes());
    req.extend_from_slice(&20u16.to_ne_bytes()); // SOCK_DIAG_BY_FAMILY
    #[allow(clippy::cast_possible_truncation)] // the flags are 0x301
    req.extend_from_slice(&((libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16).to_ne_bytes());
    req.extend_from_slice(&1u32.to_ne_bytes());
    req.extend_from_slice(&0u32.to_ne_bytes());
    #[allow(clippy::cast_possible_truncation)] // AF_UNIX is 1
    req.extend_from_slice(&[libc::AF_UNIX as u8, 0, 0, 0]);
    req.extend_from_slice(&u32::MAX.to_ne_bytes()); // every state
    req.extend_from_slice(&0u32.to_ne_bytes()); // ino
    req.extend_from_slice(&(0x4u32 | 0x10).to_ne_bytes()); // SHOW_PEER | SHOW_RQLEN
    req.extend_from_slice(&[0xff; 8]);
    // SAFETY: send of our own buffer on our socket.
    if unsafe { libc::send(sock.as_raw_fd(), req.as_ptr().cast(), req.len(), 0) } < 0 {
        fail!(
            HostError::Failed,
            "sock_diag request: {}",
            std::io::Error::last_os_error()
        );
    }
    let mut out = HashMap::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        // SAFETY: recv into our buffer.
        let n = unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        let Ok(n) = usize::try_from(n) else {
            fail!(
                HostError::Failed,
                "sock_diag reply: {}",
                std::io::Error::last_os_error()
            );
        };
        let mut msg = &buf[..n];
        while msg.len() >= 16 {
            let len = u32::from_ne_bytes(msg[0..4].try_into().expect("4")) as usize;
            let ty = u16::from_ne_bytes(msg[4..6].try_into().expect("2"));
            if len < 16 || len > msg.len() {
                fail!(HostError::Failed, "sock_diag: a malformed reply");
            }
            match ty as i32 {
                libc::NLMSG_DONE => return Ok(out),
                libc::NLMSG_ERROR => fail!(HostError::Failed, "sock_diag refused the request"),
                _ => {}
            }
            // unix_diag_msg: family, type, state, pad, ino, cookie[2]
            let body = &msg[16..len];
            if body.len() >= 16 {
                let ino = u32::from_ne_bytes(body[4..8].try_into().expect("4"));
                let mut d = UnixDiag::default();
                let mut attrs = &body[16..];
                while attrs.len() >= 4 {
                    let alen = u16::from_ne_bytes([attrs[0], attrs[1]]) as usize;
                    let aty = u16::from_ne_bytes([attrs[2], attrs[3]]);
                    if alen < 4 || alen > attrs.len() {
                        break;
                    }
                    let val = &attrs[4..alen];
                    let word = |i: usize| {
                        val.get(i * 4..i * 4 + 4)
                            .map_or(0, |b| u32::from_ne_bytes(b.try_into().expect("4")))
                    };
                    match aty {
                        2 => d.peer = word(0),
                        4 => (d.rqueue, d.wqueue) = (word(0), word(1)),
                        6 => d.shutdown = val.first().copied().unwrap_or(0) as u32,
                        _ => {}
                    }
                    attrs = attrs.get((alen + 3) & !3..).unwrap_or(&[]);
                }
                out.insert(ino, d);
            }
            let step = (len + 3) & !3;
            msg = msg.get(step..).unwrap_or(&[]);
        }
    }
}

/// What a restored instance's Runtime API connection is made again as: a
/// unix stream socket the restorer connects to the name of what it waits
/// for (reads, writes and epoll work on it as on the TCP connection it
/// replaces).
fn reconnecting_socket(waiting: thaw_sandbox::runtime_api::Waiting) -> SavedSocket {
    #[allow(clippy::cast_possible_truncation)] // AF_UNIX is 1
    let mut addr = (libc::AF_UNIX as u16).to_ne_bytes().to_vec();
    addr.push(0);
    addr.extend_from_slice(waiting.reconnect_name());
    SavedSocket {
        family: libc::AF_UNIX as u32,
        ty: libc::SOCK_STREAM as u32,
        protocol: 0,
        addr,
        backlog: None,
        options: SOCK_OPT_CONNECT,
        pair: None,
        shutdown: 0,
        queued: Blob::default(),
    }
}

/// Whether a snapshot's descriptors hold the connection to remake.
pub(crate) fn kept_connection(fds: &[SavedFd]) -> bool {
    fds.iter()
        .any(|f| matches!(&f.kind, FdKind::Socket(s) if s.options & SOCK_OPT_CONNECT != 0))
}

pub(super) fn plan(
    fd: i32,
    s: &SavedSocket,
    p: &mut r::PlanFd,
    cx: &mut PlanCx,
) -> Result<(), StateError> {
    p.kind = r::FD_SOCKET;
    (p.arg, p.arg2) = (s.family, s.ty);
    p.a = s.protocol as u64
        | (s.options as u64) << 8
        | (s.shutdown as u64) << 16
        | s.backlog.map_or(0, |b| (b as u64 + 1) << 32);
    if let Some(peer) = &s.pair {
        p.kind = r::FD_SOCKETPAIR;
        let other = cx.index_of(*peer)?;
        if usize::try_from(other).is_ok_and(|o| o < cx.plan.fds.len()) {
            p.reference = other;
        }
    } else if !s.addr.is_empty() {
        (p.path_off, p.path_len) = (cx.plan.add_bytes(&s.addr), plan_len(s.addr.len())?);
    }
    cx.content(fd, &s.queued, p)
}
