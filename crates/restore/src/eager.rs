//! eager: every saved page copied before resume.
use crate::Result;
use crate::{Fill, MemoryPlan, Strategy, StrategyKind, Target};

pub(crate) struct Eager;

impl Strategy for Eager {
    fn kind(&self) -> StrategyKind {
        StrategyKind::Eager
    }
    fn plan(&mut self, t: &Target<'_>) -> Result<MemoryPlan> {
        Ok(MemoryPlan::by_fill(t.layout, |_| Fill::Copy, |_, _, _| {}))
    }
}
