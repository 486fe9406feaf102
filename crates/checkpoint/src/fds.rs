//! The runtime's open descriptors as part of a snapshot.
//!
//! At checkpoint the worker (root, the process frozen) takes a duplicate of
//! each descriptor with `pidfd_getfd` and reads what `/proc/PID/fdinfo`
//! does not say: a pipe's unread bytes (`tee`, which does not consume
//! them), a memfd's data, a socket's family, type, address and queue
//! (`MSG_PEEK`), a unix socket's peer (`sock_diag` in the sandbox's network
//! namespace). Contents go into the memory image after the pages. An
//! established TCP or connected UDP socket is shut down (the live instance
//! sees its connection closed too); the TCP one comes back as a connection
//! its peer closed (`SOCK_OPT_DROPPED`: end of file, `EPIPE`), the UDP one
//! unconnected. The
//! restorer recreates everything inside the new sandbox ([`to_plan`]).
//! What cannot come back is a [`Refusal`] naming the descriptor.
use crate::checkpoint::Refusal;
use crate::error::Result;
use std::collections::HashMap;
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use thaw_error::{fail, ResultExt};
use thaw_restorer as r;
use thaw_sandbox::HostError;
use thaw_snapshot_format::{check_abs_path, Blob, EpollWatch, FdKind, SavedFd, SavedSocket};
use thaw_snapshot_format::{
    StateError, CLOCKS, MAX_FDS, MAX_PIPE_SIZE, SOCK_OPT_CONNECT, SOCK_OPT_DROPPED,
    SOCK_OPT_REUSEADDR, SOCK_OPT_REUSEPORT, SOCK_OPT_V6ONLY,
};

/// The devices of the sandbox's /dev.
const DEVICES: [&str; 4] = ["/dev/null", "/dev/zero", "/dev/random", "/dev/urandom"];
const SO_DOMAIN: libc::c_int = 39;
const SO_PROTOCOL: libc::c_int = 38;
const SO_REUSEPORT: libc::c_int = 15;
const KCMP_FILE: libc::c_long = 0;
const KCMP_EPOLL_TFD: libc::c_long = 7;

/// What [`capture`] found: the descriptors a snapshot keeps and what stops it.
#[derive(Default)]
pub struct Capture {
    pub fds: Vec<SavedFd>,
    pub refusals: Vec<Refusal>,
}

/// Where contents go while capturing: appends bytes to the image and
/// returns their offset. Without one, nothing is read or shut down (the
/// look before the freeze).
pub type Append<'a> = &'a mut dyn FnMut(&[u8]) -> Result<u64, thaw_store::StoreError>;

/// One descriptor of the runtime, as first seen.
struct Open {
    fd: i32,
    link: String,
    info: FdInfo,
    dup: OwnedFd,
}

/// Captures runtime `pid`'s descriptors besides 0-3. With `append`, contents are saved and connected
/// network sockets shut down; the process must then be frozen.
/// `runtime_api`: a custom runtime's Runtime API connection whose call
/// waits, kept live (see `runtime_api`).
pub fn capture(
    pid: i32,
    mut append: Option<Append<'_>>,
    runtime_api: Option<thaw_sandbox::runtime_api::PendingConn>,
) -> Result<Capture> {
    let mut out = Capture::default();
    let mut numbers: Vec<i32> = std::fs::read_dir(format!("/proc/{pid}/fd"))?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|fd| *fd > 3)
        .collect();
    numbers.sort();
    if numbers.is_empty() {
        return Ok(out);
    }
    if numbers.len() > MAX_FDS {
        out.refusals.push(Refusal::new(
            "descriptor",
            format!(
                "{} open descriptors; a snapshot keeps at most {MAX_FDS}",
                numbers.len()
            ),
        ));
        return Ok(out);
    }
    let pidfd = pidfd_open(pid)?;
    let mut open = Vec::new();
    for fd in numbers {
        // closed since the listing (the runtime may still run): skip
        let Ok(link) = std::fs::read_link(format!("/proc/{pid}/fd/{fd}")) else {
            continue;
        };
        let Ok(info) = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")) else {
            continue;
        };
        let dup = pidfd_getfd(&pidfd, fd).with_context(|| format!("taking a copy of fd {fd}"))?;
        open.push(Open {
            fd,
            link: link.to_string_lossy().into_owned(),
            info: FdInfo::parse(&info).with_context(|| format!("fdinfo of fd {fd}"))?,
            dup,
        });
    }
    let mut unix: Option<HashMap<u32, UnixDiag>> = None;
    let mut pipes: HashMap<String, i32> = HashMap::new();
    let root = open_root(pid)?;
    for i in 0..open.len() {
        let o = &open[i];
        let refuse = |why: String| Refusal::new("descriptor", format!("fd {}: {why}", o.fd));
        // the same open file as an earlier descriptor: a dup of it
        if let Some(of) = open[..i]
            .iter()
            .find(|p| p.link == o.link && kcmp(pid, KCMP_FILE, p.fd, o.fd as u64))
        {
            let of = match out.fds.iter().find(|s| s.fd == of.fd) {
                Some(SavedFd {
                    kind: FdKind::Dup { of },
                    ..
                }) => *of,
                _ => of.fd,
            };
            out.fds.push(SavedFd {
                fd: o.fd,
                flags: o.info.flags,
                kind: FdKind::Dup { of },
            });
            continue;
        }
        let kind = if o.link.starts_with("pipe:") {
            pipe(o, &mut pipes, &mut append)
        } else if o.link.starts_with("socket:") {
            if unix.is_none() {
                unix = Some(unix_diag(pid)?);
            }
            let unix = unix.as_ref().expect("just made");
            socket(o, &open, unix, &mut append, runtime_api)
        } else if let Some(anon) = o.link.strip_prefix("anon_inode:") {
            anon_inode(pid, o, anon, &open)
        } else if let Some(name) = o
            .link
            .strip_prefix("/memfd:")
            .and_then(|n| n.strip_suffix(" (deleted)"))
        {
            memfd(o, name, &mut append)
        } else if o.link.ends_with(" (deleted)") {
            Err(format!("{}, a deleted file", o.link))
        } else if o.link.starts_with('/') && is_fifo(&o.dup) {
            fifo(o, &root, &mut pipes, &mut append)
        } else if o.link.starts_with('/') {
            file(o, &root)
        } else {
            Err(format!("{}, which a snapshot cannot keep", o.link))
        };
        match kind {
            Ok(kind) => out.fds.push(SavedFd {
                fd: o.fd,
                flags: o.info.flags,
                kind,
            }),
            Err(why) => out.refusals.push(refuse(why)),
        }
    }
    // an epoll watch of a descriptor that is refused is refused with it
    let kept: Vec<i32> = out.fds.iter().map(|f| f.fd).collect();
    for f in &out.fds {
        if let FdKind::Epoll { watches } = &f.kind {
            for w in watches.iter().filter(|w| w.fd > 3 && !kept.contains(&w.fd)) {
                out.refusals.push(Refusal::new(
                    "descriptor",
                    format!(
                        "fd {}: an epoll watch of fd {}, which is refused",
                        f.fd, w.fd
                    ),
                ));
            }
        }
    }
    Ok(out)
}

/// What /proc/PID/fdinfo/N says: position, flags and the kind's lines.
#[derive(Debug, Default)]
struct FdInfo {
    pos: u64,
    flags: u32,
    lines: Vec<(String, String)>,
}

impl FdInfo {
    fn parse(text: &str) -> Result<FdInfo> {
        let mut info = FdInfo::default();
        for line in text.lines() {
            let Some((k, v)) = line.split_once(':') else {
                continue;
            };
            let v = v.trim();
            match k {
                "pos" => info.pos = v.parse().context("pos")?,
                "flags" => info.flags = u32::from_str_radix(v, 8).context("flags")?,
                _ => info.lines.push((k.to_string(), v.to_string())),
            }
        }
        Ok(info)
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.lines
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

fn pipe(o: &Open, pipes: &mut HashMap<String, i32>, append: &mut Option<Append<'_>>) -> Kind {
    let access = o.info.flags & libc::O_ACCMODE as u32;
    if access == libc::O_RDWR as u32 {
        return Err("a pipe opened for both reading and writing".into());
    }
    if o.info.flags & libc::O_DIRECT as u32 != 0 {
        return Err("a pipe in packet mode (O_DIRECT)".into());
    }
    let read = access == libc::O_RDONLY as u32;
    // SAFETY: fcntl on a descriptor we own.
    let size = unsafe { libc::fcntl(o.dup.as_raw_fd(), libc::F_GETPIPE_SZ) };
    if size < 0 || size as u32 > MAX_PIPE_SIZE {
        return Err(format!("a pipe of {size} bytes"));
    }
    let key = format!("{}:{read}", o.link);
    if pipes.contains_key(&key) {
        return Err("a second open of the same end of a pipe".into());
    }
    pipes.insert(key, o.fd);
    let other = pipes.get(&format!("{}:{}", o.link, !read)).copied();
    let mut unread = Blob::default();
    // the read end's record carries the unread bytes
    if read {
        let n = ioctl_int(&o.dup, libc::FIONREAD).map_err(|e| format!("FIONREAD: {e}"))?;
        if let (Some(append), true) = (append.as_mut(), n > 0) {
            let bytes = tee_all(&o.dup, n as usize, size as usize).map_err(|e| e.to_string())?;
            unread = Blob {
                image_off: append(&bytes).map_err(|e| e.to_string())?,
                len: bytes.len() as u64,
            };
        }
    }
    Ok(FdKind::Pipe {
        first: other.unwrap_or(o.fd),
        read,
        size: size as u32,
        fifo: None,
        unread,
    })
}

type Kind = std::result::Result<FdKind, String>;

fn is_fifo(fd: &OwnedFd) -> bool {
    fstat(fd).is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFIFO)
}

/// A FIFO of /tmp or /dev/shm, opened by its path: each descriptor is
/// reopened by that path; the first carries the size and the unread bytes
/// (read through an open of our own, whichever ends the runtime holds).
fn fifo(
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
    // SAFETY: fcntl on a descriptor we own.
    let size = unsafe { libc::fcntl(o.dup.as_raw_fd(), libc::F_GETPIPE_SZ) };
    if size < 0 || size as u32 > MAX_PIPE_SIZE {
        return Err(format!("a FIFO of {size} bytes"));
    }
    let key = format!("fifo:{path}");
    let first = *pipes.entry(key).or_insert(o.fd);
    let mut unread = Blob::default();
    if first == o.fd {
        let n = ioctl_int(&there, libc::FIONREAD).map_err(|e| format!("FIONREAD: {e}"))?;
        if let (Some(append), true) = (append.as_mut(), n > 0) {
            let bytes = tee_all(&there, n as usize, size as usize).map_err(|e| e.to_string())?;
            unread = Blob {
                image_off: append(&bytes).map_err(|e| e.to_string())?,
                len: bytes.len() as u64,
            };
        }
    }
    Ok(FdKind::Pipe {
        first,
        read: o.info.flags & libc::O_ACCMODE as u32 != libc::O_WRONLY as u32,
        size: size as u32,
        fifo: Some(path.clone()),
        unread,
    })
}

/// `n` unread bytes of the pipe `src`, copied without consuming them.
fn tee_all(src: &OwnedFd, n: usize, size: usize) -> Result<Vec<u8>> {
    let (rd, wr) = make_pipe()?;
    // SAFETY: fcntl on our own pipe.
    if unsafe {
        libc::fcntl(
            wr.as_raw_fd(),
            libc::F_SETPIPE_SZ,
            size.max(n) as libc::c_int,
        )
    } < 0
    {
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
    if got as usize != n {
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

fn anon_inode(pid: i32, o: &Open, anon: &str, open: &[Open]) -> Kind {
    let hex = |k: &str| -> std::result::Result<u64, String> {
        let v = o.info.get(k).ok_or(format!("no {k} in its fdinfo"))?;
        u64::from_str_radix(v.trim(), 16).map_err(|_| format!("fdinfo {k}: {v}"))
    };
    match anon {
        "[eventfd]" => Ok(FdKind::EventFd {
            count: hex("eventfd-count")?,
            semaphore: o.info.get("eventfd-semaphore") == Some("1"),
        }),
        "[signalfd]" => Ok(FdKind::SignalFd {
            mask: hex("sigmask")?,
        }),
        "[timerfd]" => timerfd(o),
        "[eventpoll]" => {
            let mut watches = Vec::new();
            for (k, v) in &o.info.lines {
                if k != "tfd" {
                    continue;
                }
                // "       5 events:       19 data:                5  pos:0 ino:.. sdev:.."
                let w: Vec<&str> = v.split_whitespace().collect();
                let parse = || -> Option<EpollWatch> {
                    Some(EpollWatch {
                        fd: w.first()?.parse().ok()?,
                        events: u32::from_str_radix(w.get(2)?, 16).ok()?,
                        data: u64::from_str_radix(w.get(4)?, 16).ok()?,
                    })
                };
                let watch = parse().ok_or(format!("an epoll watch line {v:?}"))?;
                let target = open.iter().find(|t| t.fd == watch.fd);
                if (0..=2).contains(&watch.fd) {
                    // stdio: reconnected to the new sandbox's, watched there
                } else if watch.fd == 3 {
                    return Err("an epoll watch of the control socket (fd 3)".into());
                } else if target.is_none() || !kcmp_epoll(pid, o.fd, watch.fd) {
                    return Err(format!(
                        "an epoll watch of fd {}, whose file is no longer open at that number",
                        watch.fd
                    ));
                } else if target.is_some_and(|t| t.link == "anon_inode:[eventpoll]") {
                    return Err(format!("an epoll watch of another epoll (fd {})", watch.fd));
                }
                if watches.iter().any(|x: &EpollWatch| x.fd == watch.fd) {
                    return Err(format!("two epoll watches of fd {}", watch.fd));
                }
                watches.push(watch);
            }
            Ok(FdKind::Epoll { watches })
        }
        other => Err(format!(
            "{}, which a snapshot cannot keep",
            other.trim_matches(|c| c == '[' || c == ']')
        )),
    }
}

fn timerfd(o: &Open) -> Kind {
    let get = |k: &str| o.info.get(k).ok_or(format!("no {k} in its fdinfo"));
    let clock: u32 = get("clockid")?.parse().map_err(|_| "clockid")?;
    if !CLOCKS.contains(&clock) {
        return Err(format!("a timerfd on clock {clock}"));
    }
    let pair = |k: &str| -> std::result::Result<u64, String> {
        let v = get(k)?;
        let (s, ns) = v
            .trim_matches(|c| c == '(' || c == ')')
            .split_once(',')
            .ok_or(format!("fdinfo {k}: {v}"))?;
        let s: u64 = s.trim().parse().map_err(|_| format!("fdinfo {k}: {v}"))?;
        let ns: u64 = ns.trim().parse().map_err(|_| format!("fdinfo {k}: {v}"))?;
        Ok(s.saturating_mul(1_000_000_000).saturating_add(ns))
    };
    Ok(FdKind::TimerFd {
        clock,
        value_ns: pair("it_value")?,
        interval_ns: pair("it_interval")?,
        ticks: get("ticks")?.parse().map_err(|_| "ticks")?,
    })
}

fn memfd(o: &Open, name: &str, append: &mut Option<Append<'_>>) -> Kind {
    let st = fstat(&o.dup).map_err(|e| e.to_string())?;
    // SAFETY: fcntl on a descriptor we own.
    let seals = unsafe { libc::fcntl(o.dup.as_raw_fd(), libc::F_GET_SEALS) };
    if seals < 0 || st.st_mode & libc::S_IFMT != libc::S_IFREG || st.st_nlink != 0 {
        return Err(format!("/memfd:{name}, which is not a memfd"));
    }
    let size = st.st_size as u64;
    let mut data = Blob::default();
    if let (Some(append), true) = (append.as_mut(), size > 0) {
        let mut buf = vec![0u8; size as usize];
        let f = std::fs::File::from(o.dup.try_clone().map_err(|e| e.to_string())?);
        std::os::unix::fs::FileExt::read_exact_at(&f, &mut buf, 0)
            .map_err(|e| format!("reading the memfd: {e}"))?;
        data = Blob {
            image_off: append(&buf).map_err(|e| e.to_string())?,
            len: size,
        };
    }
    Ok(FdKind::Memfd {
        name: name.to_string(),
        pos: o.info.pos,
        size,
        seals: seals as u32,
        data,
    })
}

/// A path as the runtime sees it: the same file (or device) must be there
/// in its root, reached without a symbolic link.
fn file(o: &Open, root: &OwnedFd) -> Kind {
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

/// A unix socket as `sock_diag` reports it.
#[derive(Debug, Clone, Copy, Default)]
struct UnixDiag {
    peer: u32,
    /// listening: pending connections and the backlog
    rqueue: u32,
    wqueue: u32,
    shutdown: u32,
}

fn socket(
    o: &Open,
    open: &[Open],
    unix: &HashMap<u32, UnixDiag>,
    append: &mut Option<Append<'_>>,
    runtime_api: Option<thaw_sandbox::runtime_api::PendingConn>,
) -> Kind {
    let fd = &o.dup;
    let opt = |level, name| getsockopt_int(fd, level, name).map_err(|e| e.to_string());
    let family = opt(libc::SOL_SOCKET, SO_DOMAIN)? as u32;
    let ty = opt(libc::SOL_SOCKET, libc::SO_TYPE)? as u32;
    let protocol = opt(libc::SOL_SOCKET, SO_PROTOCOL)? as u32;
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
    match family as i32 {
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
                if let (Some(append), true) = (append.as_mut(), n > 0) {
                    let bytes = peek(fd, n as usize)?;
                    s.queued = Blob {
                        image_off: append(&bytes).map_err(|e| e.to_string())?,
                        len: bytes.len() as u64,
                    };
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
    if got != n as isize {
        return Err(format!("peeked {got} of {n} queued bytes"));
    }
    Ok(buf)
}

/// Every unix socket of runtime `pid`'s network namespace: peer, queues,
/// shutdown (`sock_diag`, asked from a thread that joins that namespace).
fn unix_diag(pid: i32) -> Result<HashMap<u32, UnixDiag>> {
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
    req.extend_from_slice(&((libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16).to_ne_bytes());
    req.extend_from_slice(&1u32.to_ne_bytes());
    req.extend_from_slice(&0u32.to_ne_bytes());
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
        if n < 0 {
            fail!(
                HostError::Failed,
                "sock_diag reply: {}",
                std::io::Error::last_os_error()
            );
        }
        let mut msg = &buf[..n as usize];
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

fn pidfd_open(pid: i32) -> Result<OwnedFd> {
    // SAFETY: pidfd_open with a pid and no flags.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        fail!(
            HostError::Failed,
            "pidfd_open({pid}): {}",
            std::io::Error::last_os_error()
        );
    }
    // SAFETY: a descriptor just returned to us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

fn pidfd_getfd(pidfd: &OwnedFd, fd: i32) -> Result<OwnedFd> {
    // SAFETY: pidfd_getfd on a pidfd we hold; the result is a new descriptor.
    let got = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
    if got < 0 {
        fail!(
            HostError::Failed,
            "pidfd_getfd: {}",
            std::io::Error::last_os_error()
        );
    }
    // SAFETY: a descriptor just returned to us.
    Ok(unsafe { OwnedFd::from_raw_fd(got as RawFd) })
}

/// kcmp of two things of `pid`: true when they are the same.
fn kcmp(pid: i32, ty: libc::c_long, a: i32, b: u64) -> bool {
    // SAFETY: kcmp only compares kernel objects; `b` is a number or a
    // pointer to a slot we own, per `ty`.
    unsafe { libc::syscall(libc::SYS_kcmp, pid, pid, ty, a, b) == 0 }
}

/// Whether epoll `epfd`'s watch of `tfd` is of the file open at `tfd` now.
fn kcmp_epoll(pid: i32, epfd: i32, tfd: i32) -> bool {
    let slot: [u32; 3] = [epfd as u32, tfd as u32, 0];
    kcmp(pid, KCMP_EPOLL_TFD, tfd, slot.as_ptr() as u64)
}

fn fstat(fd: &OwnedFd) -> std::io::Result<libc::stat> {
    // SAFETY: a zeroed stat is a valid out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat fills `st`.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(st)
}

fn ioctl_int(fd: &OwnedFd, req: libc::Ioctl) -> std::io::Result<libc::c_int> {
    let mut n: libc::c_int = 0;
    // SAFETY: the ioctl writes one int.
    if unsafe { libc::ioctl(fd.as_raw_fd(), req, &mut n) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(n)
}

fn getsockopt_int(fd: &OwnedFd, level: libc::c_int, name: libc::c_int) -> std::io::Result<i32> {
    let mut v: libc::c_int = 0;
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
fn sockname(fd: &OwnedFd, peer: bool) -> std::io::Result<Vec<u8>> {
    let mut buf = [0u8; 128];
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

fn open_root(pid: i32) -> Result<OwnedFd> {
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
        flags: (flags | libc::O_CLOEXEC) as u64,
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
    // SAFETY: just returned to us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// What a restored instance's Runtime API connection is made again as: a
/// unix stream socket the restorer connects to the name of what it waits
/// for (reads, writes and epoll work on it as on the TCP connection it
/// replaces).
fn reconnecting_socket(waiting: thaw_sandbox::runtime_api::Waiting) -> SavedSocket {
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

/// The restorer's descriptor table for `fds` (paths and addresses into the
/// plan's strings). `image_len`: the memory image's length, which every
/// content must lie inside.
pub fn to_plan(fds: &[SavedFd], image_len: u64, plan: &mut r::Plan) -> Result<(), StateError> {
    let index: HashMap<i32, i32> = fds
        .iter()
        .enumerate()
        .map(|(i, f)| (f.fd, i as i32))
        .collect();
    let idx = |fd: &i32| -> Result<i32, StateError> {
        index
            .get(fd)
            .copied()
            .ok_or_else(|| StateError::Corrupt(format!("descriptor {fd} has no record")))
    };
    for f in fds {
        let mut p = r::PlanFd {
            fd: f.fd,
            flags: f.flags,
            reference: -1,
            path_off: -1,
            ..r::PlanFd::default()
        };
        let content = |b: &Blob, p: &mut r::PlanFd| -> Result<(), StateError> {
            if b.image_off.checked_add(b.len).is_none_or(|e| e > image_len) {
                fail!(
                    StateError::Corrupt,
                    "descriptor {}: its content lies outside the image",
                    f.fd
                );
            }
            (p.img_off, p.img_len) = (b.image_off, b.len);
            Ok(())
        };
        match &f.kind {
            FdKind::Dup { of } => {
                p.kind = r::FD_DUP;
                p.reference = idx(of)?;
            }
            FdKind::File { path, pos } => {
                p.kind = r::FD_FILE;
                (p.path_off, p.path_len) = (plan.add_string(path), path.len() as u32);
                p.a = *pos;
            }
            FdKind::Pipe {
                first,
                read,
                size,
                fifo,
                unread,
            } => {
                p.kind = r::FD_PIPE;
                if let Some(path) = fifo {
                    (p.path_off, p.path_len) = (plan.add_string(path), path.len() as u32);
                }
                p.reference = if *first == f.fd { -1 } else { idx(first)? };
                p.arg = *size;
                p.arg2 = u32::from(*read);
                content(unread, &mut p)?;
            }
            FdKind::EventFd { count, semaphore } => {
                p.kind = r::FD_EVENTFD;
                p.a = *count;
                p.arg = u32::from(*semaphore);
            }
            FdKind::Epoll { watches } => {
                p.kind = r::FD_EPOLL;
                for w in watches {
                    plan.watches.push(r::PlanWatch {
                        epoll: plan.fds.len() as i32,
                        fd: w.fd,
                        events: w.events,
                        reserved: 0,
                        data: w.data,
                    });
                }
            }
            FdKind::TimerFd {
                clock,
                value_ns,
                interval_ns,
                ticks,
            } => {
                p.kind = r::FD_TIMERFD;
                p.arg = *clock;
                (p.a, p.b, p.c) = (*value_ns, *interval_ns, *ticks);
            }
            FdKind::SignalFd { mask } => {
                p.kind = r::FD_SIGNALFD;
                p.a = *mask;
            }
            FdKind::Memfd {
                name,
                pos,
                size,
                seals,
                data,
            } => {
                p.kind = r::FD_MEMFD;
                (p.path_off, p.path_len) = (plan.add_string(name), name.len() as u32);
                (p.a, p.b, p.arg) = (*pos, *size, *seals);
                content(data, &mut p)?;
            }
            FdKind::Socket(s) => {
                p.kind = r::FD_SOCKET;
                (p.arg, p.arg2) = (s.family, s.ty);
                p.a = s.protocol as u64
                    | (s.options as u64) << 8
                    | (s.shutdown as u64) << 16
                    | s.backlog.map_or(0, |b| (b as u64 + 1) << 32);
                if let Some(peer) = &s.pair {
                    p.kind = r::FD_SOCKETPAIR;
                    let other = idx(peer)?;
                    if other < plan.fds.len() as i32 {
                        p.reference = other;
                    }
                } else if !s.addr.is_empty() {
                    (p.path_off, p.path_len) = (plan.add_bytes(&s.addr), s.addr.len() as u32);
                }
                content(&s.queued, &mut p)?;
            }
        }
        plan.fds.push(p);
    }
    Ok(())
}
