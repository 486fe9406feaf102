//! The runtime's open descriptors as part of a snapshot, one file per kind
//! holding its capture and its part of the restorer's plan; its record and
//! that record's checks are `thaw-snapshot-format`'s, one file per kind in
//! `crates/snapshot-format/src/fds/` (a dup, captured and planned here,
//! is checked in that directory's `mod.rs`).
//!
//! At checkpoint the worker (root, the process frozen) takes a duplicate of
//! each descriptor with `pidfd_getfd` and reads what `/proc/PID/fdinfo`
//! does not say (a pipe's unread bytes, a memfd's data, a socket's family,
//! address, peer and queue: see each kind). Contents go into the memory
//! image after the pages. The restorer recreates everything inside the new
//! sandbox ([`to_plan`]). What cannot come back is a [`Refusal`] naming
//! the descriptor.
mod epoll;
mod eventfd;
mod file;
mod memfd;
mod pipe;
mod signalfd;
mod socket;
mod sys;
mod timerfd;

use crate::checkpoint::Refusal;
use crate::error::Result;
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use sys::{kcmp, open_root, pidfd_getfd, pidfd_open, KCMP_FILE};
use thaw_error::ResultExt;
use thaw_restorer as r;
use thaw_snapshot_format::{Blob, FdKind, SavedFd, StateError, MAX_FDS};

pub(crate) use socket::kept_connection;
pub(crate) use sys::open_in_root;

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

type Kind = std::result::Result<FdKind, String>;

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
    let mut unix: Option<HashMap<u32, socket::UnixDiag>> = None;
    let mut pipes: HashMap<String, i32> = HashMap::new();
    let root = open_root(pid)?;
    for i in 0..open.len() {
        let o = &open[i];
        let refuse = |why: String| Refusal::new("descriptor", format!("fd {}: {why}", o.fd));
        // the same open file as an earlier descriptor: a dup of it
        if let Some(of) = open[..i].iter().find(|p| {
            p.link == o.link && u64::try_from(o.fd).is_ok_and(|b| kcmp(pid, KCMP_FILE, p.fd, b))
        }) {
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
            pipe::capture(o, &mut pipes, &mut append)
        } else if o.link.starts_with("socket:") {
            if unix.is_none() {
                unix = Some(socket::unix_diag(pid)?);
            }
            let unix = unix.as_ref().expect("just made");
            socket::capture(o, &open, unix, &mut append, runtime_api)
        } else if let Some(anon) = o.link.strip_prefix("anon_inode:") {
            anon_inode(pid, o, anon, &open)
        } else if let Some(name) = o
            .link
            .strip_prefix("/memfd:")
            .and_then(|n| n.strip_suffix(" (deleted)"))
        {
            memfd::capture(o, name, &mut append)
        } else if o.link.ends_with(" (deleted)") {
            Err(format!("{}, a deleted file", o.link))
        } else if o.link.starts_with('/') && pipe::is_fifo(&o.dup) {
            pipe::capture_fifo(o, &root, &mut pipes, &mut append)
        } else if o.link.starts_with('/') {
            file::capture(o, &root)
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
    out.refusals.extend(epoll::refusals(&out.fds));
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

    /// A hexadecimal field (an eventfd's count, a signalfd's mask).
    fn hex(&self, key: &str) -> std::result::Result<u64, String> {
        let v = self.get(key).ok_or(format!("no {key} in its fdinfo"))?;
        u64::from_str_radix(v.trim(), 16).map_err(|_| format!("fdinfo {key}: {v}"))
    }
}

fn anon_inode(pid: i32, o: &Open, anon: &str, open: &[Open]) -> Kind {
    match anon {
        "[eventfd]" => eventfd::capture(o),
        "[signalfd]" => signalfd::capture(o),
        "[timerfd]" => timerfd::capture(o),
        "[eventpoll]" => epoll::capture(pid, o, open),
        other => Err(format!(
            "{}, which a snapshot cannot keep",
            other.trim_matches(|c| c == '[' || c == ']')
        )),
    }
}

/// `bytes` stored in the image through `append`: where they landed.
fn stored(append: &mut Append<'_>, bytes: &[u8]) -> std::result::Result<Blob, String> {
    Ok(Blob {
        image_off: append(bytes).map_err(|e| e.to_string())?,
        len: bytes.len() as u64,
    })
}

/// The descriptor table being built: records' indexes by number, and the
/// plan that holds strings, addresses and epoll watches.
struct PlanCx<'a> {
    index: HashMap<i32, i32>,
    image_len: u64,
    plan: &'a mut r::Plan,
}

/// Position `i` of the descriptor table as a plan's `i32` reference.
fn table_index(i: usize) -> Result<i32, StateError> {
    i32::try_from(i).map_err(|_| StateError::Corrupt(format!("{i} descriptors are too many")))
}

/// A path's or address's length as a plan record's `u32`.
fn plan_len(n: usize) -> Result<u32, StateError> {
    u32::try_from(n).map_err(|_| StateError::Corrupt(format!("a path of {n} bytes")))
}

impl PlanCx<'_> {
    /// The table index of descriptor `fd`'s record.
    fn index_of(&self, fd: i32) -> Result<i32, StateError> {
        self.index
            .get(&fd)
            .copied()
            .ok_or_else(|| StateError::Corrupt(format!("descriptor {fd} has no record")))
    }

    /// Descriptor `fd`'s content `b`, which must lie inside the image.
    fn content(&self, fd: i32, b: &Blob, p: &mut r::PlanFd) -> Result<(), StateError> {
        if b.image_off
            .checked_add(b.len)
            .is_none_or(|e| e > self.image_len)
        {
            return Err(StateError::Corrupt(format!(
                "descriptor {fd}: its content lies outside the image"
            )));
        }
        (p.img_off, p.img_len) = (b.image_off, b.len);
        Ok(())
    }
}

/// The restorer's descriptor table for `fds` (paths and addresses into the
/// plan's strings). `image_len`: the memory image's length, which every
/// content must lie inside.
pub fn to_plan(fds: &[SavedFd], image_len: u64, plan: &mut r::Plan) -> Result<(), StateError> {
    let index = fds
        .iter()
        .enumerate()
        .map(|(i, f)| Ok((f.fd, table_index(i)?)))
        .collect::<Result<_, StateError>>()?;
    let mut cx = PlanCx {
        index,
        image_len,
        plan,
    };
    for f in fds {
        let mut p = r::PlanFd {
            fd: f.fd,
            flags: f.flags,
            reference: -1,
            path_off: -1,
            ..r::PlanFd::default()
        };
        match &f.kind {
            FdKind::Dup { of } => {
                p.kind = r::FD_DUP;
                p.reference = cx.index_of(*of)?;
            }
            FdKind::File { path, pos } => file::plan(path, *pos, &mut p, &mut cx)?,
            FdKind::Pipe {
                first,
                read,
                size,
                fifo,
                unread,
            } => pipe::plan(f.fd, (*first, *read, *size), fifo, unread, &mut p, &mut cx)?,
            FdKind::EventFd { count, semaphore } => eventfd::plan(*count, *semaphore, &mut p),
            FdKind::Epoll { watches } => {
                let at = table_index(cx.plan.fds.len())?;
                epoll::plan(watches, at, &mut p, cx.plan)
            }
            FdKind::TimerFd {
                clock,
                value_ns,
                interval_ns,
                ticks,
            } => timerfd::plan(*clock, (*value_ns, *interval_ns, *ticks), &mut p),
            FdKind::SignalFd { mask } => signalfd::plan(*mask, &mut p),
            FdKind::Memfd {
                name,
                pos,
                size,
                seals,
                data,
            } => memfd::plan(f.fd, name, (*pos, *size, *seals), data, &mut p, &mut cx)?,
            FdKind::Socket(s) => socket::plan(f.fd, s, &mut p, &mut cx)?,
        }
        cx.plan.fds.push(p);
    }
    Ok(())
}
