//! An eventfd: made again with its count and semaphore mode.
//!
//! Its record is `FdKind::EventFd` (`crates/snapshot-format/src/fds/mod.rs`),
//! its check `eventfd.rs` beside it; the restorer's `make_fd`
//! (`crates/restorer/src/restorer.c`) rebuilds it.
use super::{Kind, Open};
use thaw_restorer as r;
use thaw_snapshot_format::FdKind;

pub(super) fn capture(o: &Open) -> Kind {
    Ok(FdKind::EventFd {
        count: o.info.hex("eventfd-count")?,
        semaphore: o.info.get("eventfd-semaphore") == Some("1"),
    })
}

pub(super) fn plan(count: u64, semaphore: bool, p: &mut r::PlanFd) {
    p.kind = r::FD_EVENTFD;
    p.a = count;
    p.arg = u32::from(semaphore);
}
