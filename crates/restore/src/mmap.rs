//! mmap: the image mapped privately; the kernel faults pages in on use.
use crate::{Fill, MemoryPlan, Strategy, StrategyKind, Target};
use anyhow::Result;

pub(crate) struct Mmap;

impl Strategy for Mmap {
    fn kind(&self) -> StrategyKind {
        StrategyKind::Mmap
    }
    fn plan(&mut self, t: &Target<'_>) -> Result<MemoryPlan> {
        Ok(MemoryPlan::by_fill(t.layout, |_| Fill::Map, |_, _, _| {}))
    }
}
