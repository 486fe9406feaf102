//! A signalfd: made again with its signal mask.
//!
//! Its record is `FdKind::SignalFd` (`crates/snapshot-format/src/fds/mod.rs`,
//! no check: any mask is valid); the restorer's `make_fd`
//! (`crates/restorer/src/restorer.c`) rebuilds it.
use super::{Kind, Open};
use thaw_restorer as r;
use thaw_snapshot_format::FdKind;

pub(super) fn capture(o: &Open) -> Kind {
    Ok(FdKind::SignalFd {
        mask: o.info.hex("sigmask")?,
    })
}

pub(super) fn plan(mask: u64, p: &mut r::PlanFd) {
    p.kind = r::FD_SIGNALFD;
    p.a = mask;
}
