//! dax: the image mapped in place with its page tables built before resume
//! (zero copy, no faults for pages only read); the pages the first
//! invocation of an earlier clone wrote are copied before resume, so they do
//! not copy-on-write one fault at a time. Byte-addressable tiers only.
use crate::{
    Fill, FirstResponse, MemoryPlan, Runtime, Strategy, StrategyKind, StrategyReport, Target,
};
use anyhow::{bail, Result};
use std::path::PathBuf;
use thaw_memory::write_set::{self, WriteSet};
use thaw_memory::{pagemap, PageSpan};
use thaw_restorer as r;

#[derive(Default)]
pub(crate) struct Dax {
    write_set: Option<WriteSet>,
    /// no usable write set: the first response records one here
    record: Option<Record>,
    rep: StrategyReport,
}

struct Record {
    dir: PathBuf,
    key: String,
    /// (start, end) of every mapping, sorted
    regions: Vec<std::ops::Range<u64>>,
}

impl Strategy for Dax {
    fn kind(&self) -> StrategyKind {
        StrategyKind::Dax
    }

    fn prepare(&mut self, t: &Target<'_>) -> Result<()> {
        if !thaw_store::secure::on_dram(t.dir)? {
            bail!(
                "the dax strategy maps the image in place and needs a byte-addressable tier (DRAM/pmem); snapshot {} is on a block device",
                t.dir.display()
            );
        }
        match write_set::load(t.dir, t.key, t.layout) {
            Ok(ws) => self.write_set = ws,
            Err(e) => self
                .rep
                .warn(format!("{e:#}; recording a new dax write set")),
        }
        self.rep.write_set_pages = self.write_set.as_ref().map_or(0, WriteSet::pages);
        if self.write_set.is_none() {
            self.record = Some(Record {
                dir: t.dir.to_owned(),
                key: t.key.to_owned(),
                regions: t.layout.regions.iter().map(|r| r.start..r.end).collect(),
            });
        }
        Ok(())
    }

    fn plan(&mut self, t: &Target<'_>) -> Result<MemoryPlan> {
        let mut writes = self.write_set.as_ref().map(|w| w.ranges.iter().peekable());
        Ok(MemoryPlan::by_fill(
            t.layout,
            |_| Fill::MapPopulate,
            |i, region, runs| {
                let Some(wr) = writes.as_mut() else { return };
                let writable = t
                    .prots
                    .get(i)
                    .is_some_and(|p| p & libc::PROT_WRITE as u32 != 0);
                while let Some(&PageSpan { addr: a, len }) = wr.next_if(|w| w.addr < region.end) {
                    if writable && a >= region.start {
                        runs.push(r::PlanRun {
                            addr: a,
                            len,
                            img_off: 0,
                            img_fd: -1,
                            fill: r::FILL_POPULATE_WRITE,
                        });
                    }
                }
            },
        ))
    }

    /// Records which snapshot pages the runtime has written by now (present
    /// and no longer the file's page: copied on write).
    fn after_first_response(&mut self, rt: &Runtime<'_>) -> FirstResponse {
        let mut out = FirstResponse::default();
        let Some(Record { dir, key, regions }) = self.record.take() else {
            return out;
        };
        let res = (|| -> Result<u64> {
            let pm = pagemap::open(rt.pid)?;
            let mut pages = Vec::new();
            let mut entries = Vec::new();
            for r in &regions {
                pagemap::read(&pm, r.start, r.end, &mut entries)?;
                for (i, e) in entries.iter().enumerate() {
                    if e & pagemap::PRESENT != 0 && e & pagemap::FILE == 0 {
                        pages.push(r.start + i as u64 * thaw_memory::PAGE_SIZE);
                    }
                }
            }
            Ok(write_set::record(&dir, &key, &regions, pages)?.pages())
        })();
        match res {
            Ok(n) => out.write_set_pages = n,
            Err(e) => out.warn(format!("recording the dax write set failed: {e:#}")),
        }
        out
    }

    fn report(&self) -> StrategyReport {
        self.rep.clone()
    }
}
