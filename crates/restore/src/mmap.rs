//! mmap: the image mapped privately; the kernel faults pages in on use.
//! Only the pages an earlier clone's first response wrote (its write set,
//! [`crate::writes`]) are copied before resume, with one
//! `MADV_POPULATE_WRITE` per range instead of a read fault and a
//! copy-on-write fault each; the plan counts them as `populated_bytes`.
use crate::writes::Writes;
use crate::Result;
use crate::{
    Fill, FirstResponse, MemoryPlan, Runtime, Strategy, StrategyKind, StrategyReport, Target,
};

#[derive(Default)]
pub(crate) struct Mmap {
    writes: Writes,
    rep: StrategyReport,
}

impl Strategy for Mmap {
    fn kind(&self) -> StrategyKind {
        StrategyKind::Mmap
    }

    fn prepare(&mut self, t: &Target<'_>) -> Result<()> {
        self.writes = Writes::load(t, &mut self.rep);
        Ok(())
    }

    fn plan(&mut self, t: &Target<'_>) -> Result<MemoryPlan> {
        Ok(MemoryPlan::by_fill(
            t.layout,
            |_| Fill::Map,
            self.writes.runs(t),
        ))
    }

    fn after_first_response(&mut self, rt: &Runtime<'_>) -> FirstResponse {
        self.writes.record(rt)
    }

    fn report(&self) -> StrategyReport {
        self.rep.clone()
    }
}
