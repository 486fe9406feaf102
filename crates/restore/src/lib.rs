//! Restore strategies: how a snapshot's saved memory comes back.
//!
//! A strategy is one object per restore ([`strategy`]) whose
//! phases the sandbox's restore path calls in order:
//!
//! 1. [`Strategy::prepare`]: before the sandbox exists (it is built
//!    meanwhile): checks, and reads that overlap the build (REAP's one
//!    O_DIRECT read of its working set, the write set of mmap and dax,
//!    TOSS's tier files);
//! 2. [`Strategy::plan`]: the memory part of the restorer's plan, i.e. what
//!    it maps, copies, populates or leaves to the page server;
//! 3. [`Strategy::serve`]: when the plan left regions lazy, the restorer's
//!    userfaultfd before resume: install a prefetch, choose whether the page
//!    server records the faults it serves;
//! 4. [`Strategy::after_first_response`]: once the first invocation has
//!    answered: record a working set or a write set, check drift.
//!
//! [`Strategy::report`] gives the strategy's figures and warnings; what a
//! strategy can do ([`Strategy::streams`], [`Strategy::records_working_set`],
//! [`Strategy::needs`]) is asked of its object too, so the daemon and the
//! benchmarks decide nothing by a strategy's name. Adding a strategy is a
//! new file here plus its line in [`strategy`] (the registration), and its
//! variant in [`StrategyKind`] (crate `thaw-strategy-kind`, where the policy
//! can name it).

mod dax;
mod eager;
mod mmap;
mod reap;
mod tiered;
mod uffd;
mod writes;

use serde::{Deserialize, Serialize};
use std::fs::File;
use std::os::fd::{BorrowedFd, RawFd};
use std::path::Path;
use std::sync::Arc;
use thaw_memory::{BoxError, MemoryLayout, PageServer, PageSource, Region};
use thaw_restorer as r;

pub use thaw_strategy_kind::{StartStrategy, StrategyKind, UnknownStrategy};

/// The strategies whose objects answer `can` with true (what a caller may
/// use for a purpose, asked of the strategies rather than listed by name).
pub fn kinds_where(can: impl Fn(&dyn Strategy) -> bool) -> impl Iterator<Item = StrategyKind> {
    StrategyKind::ALL
        .into_iter()
        .filter(move |&k| can(strategy(k).as_ref()))
}

/// The names of `kinds`, comma-separated, for messages.
pub fn names_of(kinds: impl Iterator<Item = StrategyKind>) -> String {
    kinds.map(StrategyKind::name).collect::<Vec<_>>().join(", ")
}

/// A new strategy object for one restore of `kind` (the registration).
pub fn strategy(kind: StrategyKind) -> Box<dyn Strategy> {
    match kind {
        StrategyKind::Eager => Box::new(eager::Eager),
        StrategyKind::Mmap => Box::<mmap::Mmap>::default(),
        StrategyKind::Uffd => Box::new(uffd::Uffd),
        StrategyKind::Reap => Box::<reap::Reap>::default(),
        StrategyKind::Dax => Box::<dax::Dax>::default(),
        StrategyKind::Tiered => Box::<tiered::Tiered>::default(),
    }
}

/// Why a strategy could not prepare, plan or serve a restore.
#[derive(Debug, thiserror::Error)]
pub enum StrategyError {
    /// the snapshot lacks what this strategy needs (a byte-addressable
    /// tier, a tier layout, a usable working set for a streamed restore)
    #[error("{0}")]
    Unsuitable(String),
    /// its derived files or memory layout
    #[error(transparent)]
    Memory(#[from] thaw_memory::MemoryError),
    #[error(transparent)]
    Path(#[from] thaw_store::PathError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// the step that failed, with its cause
    #[error(transparent)]
    Other(#[from] thaw_error::Context),
}

type Result<T, E = StrategyError> = std::result::Result<T, E>;

/// How one region is filled at restore time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fill {
    /// Read the saved pages into fresh memory before the runtime resumes.
    Copy,
    /// Map the image file privately; the kernel faults pages in from the page cache.
    Map,
    /// Leave the region empty and serve its faults from a userfaultfd page server.
    Lazy,
    /// Map the image file and build the page tables before resume (zero copy,
    /// no run-time faults for pages only read; writes copy-on-write).
    MapPopulate,
}

/// The descriptor the memory image sits at inside the restorer; a plan's
/// [`MemoryPlan::extra_fds`] follow it in order.
pub const IMAGE_FD: RawFd = r::PLAN_FD_BASE;

/// Waits for parts of an image that is still arriving (the remote tier's
/// streamed restore), each as late as it can.
pub trait Arriving: Send + Sync {
    /// The image pages the restorer copies before resume (file-backed
    /// regions' private pages): waited for before the plan is sent.
    fn copied_pages(&self) -> Result<(), BoxError>;
    /// The REAP working set's files beside the snapshot: waited for by the
    /// working-set reader, while the sandbox is being built.
    fn working_set(&self) -> Result<(), BoxError>;
}

/// A streamed restore's inputs (made by the remote tier's stream).
pub struct Streamed {
    /// the local file the image is arriving in
    pub image: File,
    /// serves lazily restored pages, waiting for those not there yet
    pub source: Arc<dyn PageSource>,
    pub arriving: Arc<dyn Arriving>,
}

/// The snapshot being restored, as the strategies see it.
pub struct Target<'a> {
    /// the snapshot's directory (derived files live beside it)
    pub dir: &'a Path,
    /// identifies the snapshot's exact contents, for derived files
    pub key: &'a str,
    pub layout: &'a Arc<MemoryLayout>,
    /// protection of each region's mapping (parallel to `layout.regions`)
    pub prots: &'a [u32],
    /// the verified image
    pub image: &'a File,
    /// REAP: share of the working set that may fault after a prefetch
    /// before the next cold start re-records it
    pub drift_share: f64,
    /// set when the image is still arriving (never record from it)
    pub arriving: Option<Arc<dyn Arriving>>,
}

/// The memory part of the restorer's plan.
#[derive(Debug, Default)]
pub struct MemoryPlan {
    /// one per region of the layout, in order
    pub regions: Vec<RegionPlan>,
    pub runs: Vec<r::PlanRun>,
    /// files the runs read besides the image, at `IMAGE_FD + 1`, `+ 2`, ...
    pub extra_fds: Vec<RawFd>,
    /// bytes the restorer copies before resume
    pub copied_bytes: u64,
    /// bytes mapped from image files (faulted in by the kernel on use)
    pub mapped_bytes: u64,
    /// bytes left to the page server
    pub lazy_bytes: u64,
    /// bytes of mapped image copied on write before resume
    /// (`FILL_POPULATE_WRITE`: a recorded write set)
    pub populated_bytes: u64,
}

/// One region's part of a [`MemoryPlan`].
#[derive(Debug, Clone, Copy, Default)]
pub struct RegionPlan {
    /// `r::VMA_LAZY` and `r::VMA_POPULATE`
    pub flags: u32,
    pub first_run: usize,
    pub n_runs: usize,
}

impl MemoryPlan {
    /// Some region is left to the page server.
    pub fn lazy(&self) -> bool {
        self.regions.iter().any(|r| r.flags & r::VMA_LAZY != 0)
    }

    /// Plans every region of `layout` by `fill` from the image; `extra` may
    /// append runs to a region after its own (a write set).
    pub fn by_fill(
        layout: &MemoryLayout,
        fill: impl Fn(&Region) -> Fill,
        mut extra: impl FnMut(usize, &Region, &mut Vec<r::PlanRun>),
    ) -> MemoryPlan {
        let mut p = MemoryPlan::default();
        for (i, region) in layout.regions.iter().enumerate() {
            let mut fill = fill(region);
            // userfaultfd's missing mode covers anonymous memory only
            if fill == Fill::Lazy && !region.anonymous {
                fill = Fill::Copy;
            }
            let mut flags = 0;
            if fill == Fill::MapPopulate && !region.anonymous {
                flags |= r::VMA_POPULATE;
            }
            let first_run = p.runs.len();
            if fill == Fill::Lazy {
                flags |= r::VMA_LAZY;
                p.lazy_bytes += region.saved_bytes();
            } else {
                for run in &region.runs {
                    p.runs.push(r::PlanRun {
                        addr: run.addr,
                        len: run.len,
                        img_off: run.file_off,
                        img_fd: IMAGE_FD,
                        fill: match fill {
                            Fill::Map => r::FILL_MAP,
                            Fill::MapPopulate => r::FILL_MAP_POPULATE,
                            _ => r::FILL_COPY,
                        },
                    });
                    if matches!(fill, Fill::Map | Fill::MapPopulate) {
                        p.mapped_bytes += run.len;
                    } else {
                        p.copied_bytes += run.len;
                    }
                }
            }
            let own = p.runs.len();
            extra(i, region, &mut p.runs);
            p.populated_bytes += p.runs[own..]
                .iter()
                .filter(|r| r.fill == r::FILL_POPULATE_WRITE)
                .map(|r| r.len)
                .sum::<u64>();
            p.regions.push(RegionPlan {
                flags,
                first_run,
                n_runs: p.runs.len() - first_run,
            });
        }
        p
    }
}

/// What a strategy needs beyond a verified snapshot ([`Strategy::needs`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Requirement {
    pub needs: Need,
    /// the strategy that restores the same way without it
    pub otherwise: StrategyKind,
}

/// See [`Requirement`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// the snapshot on a byte-addressable tier (DRAM, pmem), to map its
    /// image in place
    ByteAddressableTier,
    /// a TOSS tier layout, made by profiling the snapshot (`thaw split`)
    TierLayout,
}

impl std::fmt::Display for Need {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Need::ByteAddressableTier => {
                "the snapshot on a byte-addressable tier (DRAM or pmem), to map its image in place"
            }
            Need::TierLayout => "a TOSS tier layout, made by profiling the snapshot (thaw split)",
        })
    }
}

/// What [`Strategy::serve`] asks of the page server.
#[derive(Debug, Clone, Copy, Default)]
pub struct Serve {
    /// log the address of every fault served (REAP's recording restore)
    pub record: bool,
}

/// The restored runtime, for [`Strategy::after_first_response`].
pub struct Runtime<'a> {
    /// the runtime's pid as the worker sees it
    pub pid: i32,
    /// the page server, when the restore left regions lazy
    pub pager: Option<&'a PageServer>,
}

/// REAP's mode for one restore.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WsMode {
    /// not a REAP restore (`""` on the wire)
    #[default]
    #[serde(rename = "")]
    None,
    /// no usable working set: this restore records one
    Record,
    /// the recorded working set was installed before resume
    Prefetch,
}

impl std::fmt::Display for WsMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WsMode::None => "",
            WsMode::Record => "record",
            WsMode::Prefetch => "prefetch",
        })
    }
}

/// A strategy's figures for one restore (zero where they do not apply) and
/// its warnings. Flattened into the sandbox's restore report: the field
/// names are the JSON's.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StrategyReport {
    /// REAP: record or prefetch
    pub ws_mode: WsMode,
    /// REAP: pages in the working set installed before resume
    pub ws_pages: u64,
    /// REAP: bytes of working set read (one read)
    pub ws_bytes: u64,
    /// REAP: installing the working set before resume (on the critical path)
    pub prefetch_ms: f64,
    /// REAP: reading the working set (overlapped with building the sandbox)
    pub ws_read_ms: f64,
    /// REAP: waiting for that read after the restorer reported (the part
    /// the sandbox build did not hide; on the critical path)
    #[serde(default)]
    pub ws_wait_ms: f64,
    /// REAP: why a recorded working set could not be used (restore fell back to recording)
    pub ws_warning: String,
    /// mmap, dax and tiered: pages copied before resume because the first
    /// invocation of an earlier clone wrote them (0: none recorded yet;
    /// this restore records)
    pub write_set_pages: u64,
    /// TOSS: share of saved memory on the slow tier
    pub slow_tier_share: f64,
    /// TOSS: the tier the slow file is on ("" for layouts that do not say)
    #[serde(default)]
    pub slow_tier: String,
    /// TOSS: the slow file is on byte-addressable memory and mapped in
    /// place; else its pages fault in from a block device
    #[serde(default)]
    pub slow_in_place: bool,
    /// TOSS: why the tier layout could not be used (restore fell back to uffd)
    pub tier_warning: String,
    /// every warning of this restore, in order (also logged with `tracing`)
    #[serde(default)]
    pub warnings: Vec<String>,
}

impl StrategyReport {
    /// Logs `w` and keeps it in the report.
    pub fn warn(&mut self, w: String) {
        tracing::warn!("{w}");
        self.warnings.push(w);
    }
}

/// What a strategy did once the first invocation answered.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct FirstResponse {
    /// REAP: pages recorded into a new working set (record mode)
    pub recorded_pages: u64,
    /// REAP: faults served after the prefetch (prefetch mode)
    pub faults_after_prefetch: u64,
    /// REAP: those faults exceeded the drift share: the next restore re-records
    pub drift: bool,
    /// mmap and dax: pages recorded into a new write set
    pub write_set_pages: u64,
    /// what went wrong (also logged with `tracing`); the restore itself stands
    pub warnings: Vec<String>,
}

impl FirstResponse {
    fn warn(&mut self, w: String) {
        tracing::warn!("{w}");
        self.warnings.push(w);
    }
}

/// One restore strategy, one object per restore. See the crate docs for
/// the order of the phases; only [`Strategy::kind`] and [`Strategy::plan`]
/// have no default.
pub trait Strategy: Send {
    /// The strategy this restore runs as (a tiered restore whose layout is
    /// unusable runs, and reports, as uffd).
    fn kind(&self) -> StrategyKind;

    /// The image may still be arriving while this strategy restores it.
    fn streams(&self) -> bool {
        false
    }

    /// The first invocation of a restore records what later restores
    /// prefetch (REAP's working set), and restores are markedly slower
    /// until one has: a caller with a sample invocation at hand (a deploy)
    /// may make that restore itself, so its users' first restores prefetch.
    fn records_working_set(&self) -> bool {
        false
    }

    /// What this strategy needs beyond a verified snapshot, if anything
    /// (without it, a restore fails or falls back: see the strategy), and
    /// the strategy that restores the same way without it.
    fn needs(&self) -> Option<Requirement> {
        None
    }

    /// Phase 1, before the sandbox is built: checks and early reads.
    fn prepare(&mut self, _t: &Target<'_>) -> Result<()> {
        Ok(())
    }

    /// Phase 2: the memory part of the restorer's plan.
    fn plan(&mut self, t: &Target<'_>) -> Result<MemoryPlan>;

    /// Phase 3, only when the plan left regions lazy: the restorer's
    /// userfaultfd, before resume and before the page server starts.
    fn serve(&mut self, _t: &Target<'_>, _uffd: BorrowedFd<'_>) -> Result<Serve> {
        Ok(Serve::default())
    }

    /// Phase 4, once, after the first invocation answered. Failures are
    /// warnings: the restored instance is fine either way.
    fn after_first_response(&mut self, _rt: &Runtime<'_>) -> FirstResponse {
        FirstResponse::default()
    }

    /// This restore's figures and warnings so far.
    fn report(&self) -> StrategyReport {
        StrategyReport::default()
    }
}

fn ms_since(t: std::time::Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}
