//! Write sets, shared by `mmap`, `dax` and `tiered`: the snapshot pages the first
//! response of an earlier restore wrote. Copied before resume with one
//! `MADV_POPULATE_WRITE` per range (a run of `FILL_POPULATE_WRITE`), they
//! cost about a third of what the runtime pays writing them after resume,
//! a read fault and a copy-on-write fault each. With none recorded yet, the
//! first response records one.
use crate::{FirstResponse, Runtime, StrategyReport, Target};
use std::path::PathBuf;
use thaw_memory::write_set::{self, WriteSet};
use thaw_memory::{pagemap, PageSpan, Region};
use thaw_restorer as r;

#[derive(Default)]
pub(crate) struct Writes {
    set: Option<WriteSet>,
    /// no usable write set: the first response records one here
    record: Option<Record>,
}

struct Record {
    dir: PathBuf,
    key: String,
    /// every mapping, sorted
    regions: Vec<std::ops::Range<u64>>,
}

impl Writes {
    /// The write set recorded for `t`'s snapshot; a missing, stale or
    /// corrupt one is recorded anew (a warning in `rep` says why).
    pub(crate) fn load(t: &Target<'_>, rep: &mut StrategyReport) -> Writes {
        let set = match write_set::load(t.dir, t.key, t.layout) {
            Ok(ws) => ws,
            Err(e) => {
                rep.warn(format!(
                    "{}; recording a new write set",
                    thaw_error::chain(&e)
                ));
                None
            }
        };
        rep.write_set_pages = set.as_ref().map_or(0, WriteSet::pages);
        // a streamed image may still lack pages: never record from it
        let record = (set.is_none() && t.arriving.is_none()).then(|| Record {
            dir: t.dir.to_owned(),
            key: t.key.to_owned(),
            regions: t.layout.regions.iter().map(|r| r.start..r.end).collect(),
        });
        Writes { set, record }
    }

    /// For [`crate::MemoryPlan::by_fill`]: appends to each writable region
    /// a `FILL_POPULATE_WRITE` run per write-set range inside it.
    pub(crate) fn runs<'a>(
        &'a self,
        t: &'a Target<'_>,
    ) -> impl FnMut(usize, &Region, &mut Vec<r::PlanRun>) + 'a {
        let mut writes = self.set.as_ref().map(|w| w.ranges.iter().peekable());
        move |i, region, runs| {
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
        }
    }

    /// Records which snapshot pages the runtime has written by now (present
    /// and no longer the file's page: copied on write), if this restore
    /// records.
    pub(crate) fn record(&mut self, rt: &Runtime<'_>) -> FirstResponse {
        let mut out = FirstResponse::default();
        let Some(Record { dir, key, regions }) = self.record.take() else {
            return out;
        };
        let res = (|| -> Result<u64, thaw_memory::MemoryError> {
            let pm = pagemap::open(rt.pid)?;
            let mut pages = Vec::new();
            let mut entries = Vec::new();
            for m in &regions {
                pagemap::read(&pm, m.start, m.end, &mut entries)?;
                for (i, e) in entries.iter().enumerate() {
                    if e & pagemap::PRESENT != 0 && e & pagemap::FILE == 0 {
                        pages.push(m.start + i as u64 * thaw_memory::PAGE_SIZE);
                    }
                }
            }
            Ok(write_set::record(&dir, &key, &regions, pages)?.pages())
        })();
        match res {
            Ok(n) => out.write_set_pages = n,
            Err(e) => out.warn(format!(
                "recording the write set failed: {}",
                thaw_error::chain(&e)
            )),
        }
        out
    }
}
