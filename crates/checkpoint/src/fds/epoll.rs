//! An epoll instance: made again with each watch (events and data) of the
//! descriptors it watched, which must be kept too.
//!
//! Its record (`FdKind::Epoll` of `EpollWatch`es) and check:
//! `crates/snapshot-format/src/fds/epoll.rs`; the restorer's `make_fd`
//! (`crates/restorer/src/restorer.c`) rebuilds it.
use super::sys::kcmp_epoll;
use super::{Kind, Open};
use crate::checkpoint::Refusal;
use thaw_restorer as r;
use thaw_snapshot_format::{EpollWatch, FdKind, SavedFd};

pub(super) fn capture(pid: i32, o: &Open, open: &[Open]) -> Kind {
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

/// An epoll watch of a descriptor that is refused is refused with it.
pub(super) fn refusals(kept: &[SavedFd]) -> Vec<Refusal> {
    let numbers: Vec<i32> = kept.iter().map(|f| f.fd).collect();
    let mut out = Vec::new();
    for f in kept {
        if let FdKind::Epoll { watches } = &f.kind {
            for w in watches
                .iter()
                .filter(|w| w.fd > 3 && !numbers.contains(&w.fd))
            {
                out.push(Refusal::new(
                    "descriptor",
                    format!(
                        "fd {}: an epoll watch of fd {}, which is refused",
                        f.fd, w.fd
                    ),
                ));
            }
        }
    }
    out
}

/// The watches go to the plan's watch table, after the instance's record
/// (number `epoll` in the descriptor table).
pub(super) fn plan(watches: &[EpollWatch], epoll: i32, p: &mut r::PlanFd, plan: &mut r::Plan) {
    p.kind = r::FD_EPOLL;
    for w in watches {
        plan.watches.push(r::PlanWatch {
            epoll,
            fd: w.fd,
            events: w.events,
            reserved: 0,
            data: w.data,
        });
    }
}
