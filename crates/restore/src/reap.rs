//! REAP: uffd, plus the working set recorded at the first invocation of an
//! earlier restore, read in one O_DIRECT read while the sandbox is built and
//! installed before resume.
use crate::{
    ms_since, uffd, Fill, FirstResponse, MemoryPlan, Runtime, Serve, Strategy, StrategyKind,
    StrategyReport, Target, WsMode,
};
use crate::{Result, StrategyError};
use std::fs::File;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;
use thaw_error::{fail, ResultExt};
use thaw_memory::working_set::{self, WorkingSet};
use thaw_memory::{MemoryLayout, PageSpan};
use thaw_store::will_need_spans;

fn reap_fill(r: &thaw_memory::Region) -> Fill {
    if r.anonymous {
        Fill::Lazy
    } else {
        Fill::Map
    }
}

/// Asks the page cache for the image pages of file mappings the runtime
/// will fault in: those the recording restore touched, or all of them when
/// none were recorded. On a block tier the device reads them while the
/// sandbox is built; a page never asked for is still read on its fault.
fn hint_file_pages(image: &File, layout: &MemoryLayout, touched: Option<&[PageSpan]>) {
    let mut spans: Vec<(u64, u64)> = match touched {
        Some(runs) => runs
            .iter()
            .filter_map(|s| {
                let off = layout
                    .region_of(s.addr)
                    .and_then(|r| r.image_offset(s.addr))?;
                Some((off, s.len))
            })
            .collect(),
        None => {
            let file_runs = layout.regions.iter().filter(|r| !r.anonymous);
            let runs = file_runs.flat_map(|r| &r.runs);
            runs.map(|run| (run.file_off, run.len)).collect()
        }
    };
    spans.sort_unstable();
    will_need_spans(image, spans);
}

/// Whether `f` lives on a block device that reports itself rotational
/// (sysfs `queue/rotational`); false for tmpfs and anything unknown.
fn on_rotational_device(f: &File) -> bool {
    use std::os::unix::fs::MetadataExt;
    f.metadata()
        .ok()
        .and_then(|m| thaw_store::block_device_dir(m.dev()))
        .and_then(|d| std::fs::read_to_string(d.join("queue/rotational")).ok())
        .is_some_and(|v| v.trim() == "1")
}

#[derive(Default)]
pub(crate) struct Reap {
    loader: Option<JoinHandle<Result<Option<WorkingSet>, thaw_memory::MemoryError>>>,
    /// set by `serve`: what the first response records or checks
    after: Option<After>,
    rep: StrategyReport,
}

struct After {
    dir: PathBuf,
    key: String,
    layout: Arc<MemoryLayout>,
    image: File,
    drift_share: f64,
    /// when this restore found no usable working set (it records one)
    found_none_at: std::time::SystemTime,
}

impl Strategy for Reap {
    fn kind(&self) -> StrategyKind {
        StrategyKind::Reap
    }

    fn streams(&self) -> bool {
        true
    }

    fn records_working_set(&self) -> bool {
        true
    }

    fn prepare(&mut self, t: &Target<'_>) -> Result<()> {
        let (dir, key, layout) = (t.dir.to_owned(), t.key.to_owned(), t.layout.clone());
        let arriving = t.arriving.clone();
        let image = t.image.try_clone()?;
        self.loader = Some(std::thread::spawn(move || {
            if let Some(a) = arriving {
                a.working_set()
                    .context("waiting for the working set to arrive")?;
                return working_set::load(&dir, &key, &layout, |_| {});
            }
            // On a seeking device, scattered reads of just the touched pages
            // cost more than reading whole runs in a few large requests.
            let seeks = on_rotational_device(&image);
            let mut hinted = false;
            let ws = working_set::load(&dir, &key, &layout, |i| {
                let touched = i.file_runs.as_deref().filter(|_| !seeks);
                hint_file_pages(&image, &layout, touched);
                hinted = true;
            });
            if !hinted {
                hint_file_pages(&image, &layout, None);
            }
            ws
        }));
        Ok(())
    }

    fn plan(&mut self, t: &Target<'_>) -> Result<MemoryPlan> {
        // Anonymous memory is the working set's (prefetched, the rest
        // served on fault). The private pages of file mappings are outside
        // userfaultfd's reach: mapped from the image rather than copied
        // before resume, so the runtime faults in only those it touches,
        // from a page cache the working-set reader asks to be filled early
        // (`hint_file_pages`). An image still arriving has holes a mapping
        // would read as zeros: that one is copied once its pages are there.
        if t.arriving.is_some() {
            return Ok(uffd::plan(t));
        }
        Ok(MemoryPlan::by_fill(t.layout, reap_fill, |_, _, _| {}))
    }

    fn serve(&mut self, t: &Target<'_>, uffd: BorrowedFd<'_>) -> Result<Serve> {
        let loader = self.loader.take().ok_or_else(|| {
            StrategyError::Unsuitable("REAP served before it was prepared".into())
        })?;
        let waited = Instant::now();
        let ws = loader
            .join()
            .map_err(|_| StrategyError::Unsuitable("the working-set reader panicked".into()))?;
        self.rep.ws_wait_ms = ms_since(waited);
        let started = Instant::now();
        let ws = ws.and_then(|ws| match ws {
            Some(ws) => ws.install(uffd.as_raw_fd()).map(|_| Some(ws)),
            None => Ok(None),
        });
        let record = match ws {
            Ok(Some(ws)) => {
                self.rep.ws_mode = WsMode::Prefetch;
                self.rep.ws_pages = ws.index.pages();
                self.rep.ws_bytes = ws.index.ws_len;
                // reading overlapped the sandbox set-up: report both
                self.rep.prefetch_ms = ms_since(started);
                self.rep.ws_read_ms = ws.load_ns as f64 / 1e6;
                false
            }
            Ok(None) | Err(_) if t.arriving.is_some() => {
                let why = ws
                    .err()
                    .map_or("none was recorded".into(), |e| thaw_error::chain(&e));
                fail!(
                    StrategyError::Unsuitable,
                    "a streamed REAP restore needs a usable working set: {why}"
                );
            }
            Ok(None) | Err(_) => {
                if let Err(e) = ws {
                    self.rep.ws_warning = thaw_error::chain(&e);
                    self.rep.warn(format!(
                        "working set of {} unusable ({}); restoring with plain uffd and recording a new one",
                        t.dir.display(),
                        self.rep.ws_warning
                    ));
                }
                self.rep.ws_mode = WsMode::Record;
                true
            }
        };
        self.after = Some(After {
            dir: t.dir.to_owned(),
            key: t.key.to_owned(),
            layout: t.layout.clone(),
            image: t.image.try_clone()?,
            drift_share: t.drift_share,
            found_none_at: std::time::SystemTime::now(),
        });
        Ok(Serve { record })
    }

    fn after_first_response(&mut self, rt: &Runtime<'_>) -> FirstResponse {
        let mut out = FirstResponse::default();
        let (Some(st), Some(pager)) = (self.after.take(), rt.pager) else {
            return out;
        };
        // of restores that started together without one (a burst right
        // after a deploy), the first to answer records the working set and
        // the others leave it be: each would read, hash and write it again
        let recorded_meanwhile = || {
            std::fs::metadata(st.dir.join(working_set::WS_INDEX))
                .and_then(|m| m.modified())
                .is_ok_and(|m| m >= st.found_none_at)
        };
        if self.rep.ws_mode == WsMode::Record && !recorded_meanwhile() {
            let faults = pager.recorded();
            // the file pages it touched: what later restores ask for early
            let touched = working_set::touched_file_runs(rt.pid, &st.layout);
            if let Err(e) = &touched {
                out.warn(format!(
                    "reading the touched file pages failed: {}",
                    thaw_error::chain(e)
                ));
            }
            let touched = touched.ok();
            match working_set::record(&st.dir, &st.key, &st.layout, &st.image, &faults, touched) {
                Ok(idx) => out.recorded_pages = idx.pages(),
                Err(e) => out.warn(format!(
                    "recording the working set failed: {}",
                    thaw_error::chain(&e)
                )),
            }
        } else if self.rep.ws_mode == WsMode::Prefetch {
            out.faults_after_prefetch = pager.stats.faults();
            if out.faults_after_prefetch as f64 > st.drift_share * self.rep.ws_pages as f64 {
                out.drift = true;
                let _ = std::fs::write(st.dir.join(working_set::WS_STALE), b"");
            }
        }
        out
    }

    fn report(&self) -> StrategyReport {
        self.rep.clone()
    }
}
