//! uffd: anonymous memory left empty and served on fault by the page server.
use crate::Result;
use crate::{Fill, MemoryPlan, Strategy, StrategyKind, Target};
use thaw_memory::Region;

pub(crate) struct Uffd;

/// Anonymous regions lazy; file-backed ones (userfaultfd's missing mode does
/// not cover them) copy their few private pages.
pub(crate) fn fill(r: &Region) -> Fill {
    if r.anonymous {
        Fill::Lazy
    } else {
        Fill::Copy
    }
}

/// uffd's plan (REAP's too, and TOSS's fallback).
pub(crate) fn plan(t: &Target<'_>) -> MemoryPlan {
    MemoryPlan::by_fill(t.layout, fill, |_, _, _| {})
}

impl Strategy for Uffd {
    fn kind(&self) -> StrategyKind {
        StrategyKind::Uffd
    }
    fn streams(&self) -> bool {
        true
    }
    fn plan(&mut self, t: &Target<'_>) -> Result<MemoryPlan> {
        Ok(plan(t))
    }
}
