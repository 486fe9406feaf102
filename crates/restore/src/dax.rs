//! dax: the image mapped in place with its page tables built before resume
//! (zero copy, no faults for pages only read); the pages the first
//! invocation of an earlier clone wrote are copied before resume
//! ([`crate::writes`]). Byte-addressable tiers only.
use crate::writes::Writes;
use crate::{
    Fill, FirstResponse, MemoryPlan, Need, Requirement, Runtime, Strategy, StrategyKind,
    StrategyReport, Target,
};
use crate::{Result, StrategyError};
use thaw_error::fail;

#[derive(Default)]
pub(crate) struct Dax {
    writes: Writes,
    rep: StrategyReport,
}

impl Strategy for Dax {
    fn kind(&self) -> StrategyKind {
        StrategyKind::Dax
    }

    fn needs(&self) -> Option<Requirement> {
        Some(Requirement {
            needs: Need::ByteAddressableTier,
            otherwise: StrategyKind::Mmap,
        })
    }

    fn prepare(&mut self, t: &Target<'_>) -> Result<()> {
        if !thaw_store::secure::on_dram(t.dir)? {
            fail!(StrategyError::Unsuitable,
                "the dax strategy maps the image in place and needs a byte-addressable tier (DRAM/pmem); snapshot {} is on a block device",
                t.dir.display()
            );
        }
        self.writes = Writes::load(t, &mut self.rep);
        Ok(())
    }

    fn plan(&mut self, t: &Target<'_>) -> Result<MemoryPlan> {
        Ok(MemoryPlan::by_fill(
            t.layout,
            |_| Fill::MapPopulate,
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
