//! A timerfd: armed again on its clock with the time it had left, its
//! interval, and the expirations not read yet.
//!
//! Its record is `FdKind::TimerFd` (`crates/snapshot-format/src/fds/mod.rs`),
//! its check `timerfd.rs` beside it; the restorer's `make_fd`
//! (`crates/restorer/src/restorer.c`) rebuilds it.
use super::{Kind, Open};
use thaw_restorer as r;
use thaw_snapshot_format::{FdKind, CLOCKS};

pub(super) fn capture(o: &Open) -> Kind {
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

pub(super) fn plan(clock: u32, (value_ns, interval_ns, ticks): (u64, u64, u64), p: &mut r::PlanFd) {
    p.kind = r::FD_TIMERFD;
    p.arg = clock;
    (p.a, p.b, p.c) = (value_ns, interval_ns, ticks);
}
