//! tiered (TOSS): each page mapped from the fast or the slow tier file its
//! profile placed it in (`thaw split`); a missing or bad layout falls back
//! to plain uffd rather than risk a wrong runtime. A slow file on
//! byte-addressable memory (pmem) is mapped in place like the fast one; on
//! a block device its pages fault in one at a time (readahead off). As for
//! `mmap`, the pages an earlier clone's first response wrote are copied
//! before resume ([`crate::writes`]).
//!
//! A file on a `noexec` mount (the DRAM tier's own tmpfs is one) cannot be
//! mapped executable: the kernel refuses `PROT_EXEC` with `EPERM`. Node.js
//! keeps V8's generated code in executable anonymous memory, so the pages
//! of executable regions whose tier file is on such a mount are copied
//! from it before resume instead of mapped (a few hundred KiB of code).
use crate::writes::Writes;
use crate::{
    uffd, FirstResponse, MemoryPlan, Need, RegionPlan, Requirement, Runtime, Strategy,
    StrategyKind, StrategyReport, Target, IMAGE_FD,
};
use crate::{Result, StrategyError};
use std::collections::HashSet;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::sync::{Mutex, OnceLock};
use thaw_memory::tiering::{self, TierKind, TierLayout};
use thaw_restorer as r;

#[derive(Default)]
pub(crate) struct Tiered {
    /// the checked layout and both files
    tiers: Option<(TierLayout, File, File)>,
    /// each file (fast, slow) may be mapped executable (its mount is not `noexec`)
    exec_ok: [bool; 2],
    writes: Writes,
    /// the layout was unusable: restore as uffd
    fell_back: bool,
    rep: StrategyReport,
}

impl Strategy for Tiered {
    fn kind(&self) -> StrategyKind {
        if self.fell_back {
            StrategyKind::Uffd
        } else {
            StrategyKind::Tiered
        }
    }

    fn needs(&self) -> Option<Requirement> {
        Some(Requirement {
            needs: Need::TierLayout,
            otherwise: StrategyKind::Uffd,
        })
    }

    fn prepare(&mut self, t: &Target<'_>) -> Result<()> {
        match load_tiers(t) {
            Ok(tiers) => {
                self.rep.slow_tier_share = tiers.0.slow_share;
                self.rep.slow_tier = tiers.0.slow_tier.clone();
                self.rep.slow_in_place = thaw_store::secure::on_dram(&tiers.0.slow.path)?;
                self.exec_ok = [maps_executable(&tiers.1)?, maps_executable(&tiers.2)?];
                self.tiers = Some(tiers);
                self.writes = Writes::load(t, &mut self.rep);
            }
            Err(e) => {
                self.fell_back = true;
                self.rep.tier_warning = thaw_error::chain(&e);
                self.rep.warn(format!(
                    "tier layout of {} unusable ({}); restoring with plain uffd",
                    t.dir.display(),
                    self.rep.tier_warning
                ));
            }
        }
        Ok(())
    }

    fn plan(&mut self, t: &Target<'_>) -> Result<MemoryPlan> {
        let Some((tl, fast, slow)) = &self.tiers else {
            return Ok(uffd::plan(t));
        };
        let (fast_fd, slow_fd) = (IMAGE_FD + 1, IMAGE_FD + 2);
        // readahead off on a block device: its slow pages are the sparse,
        // rarely touched ones (the SYSTOR'22 advice); pmem is mapped as DRAM is
        let slow_fill = if self.rep.slow_in_place {
            r::FILL_MAP
        } else {
            r::FILL_MAP_RANDOM
        };
        let mut p = MemoryPlan {
            extra_fds: vec![fast.as_raw_fd(), slow.as_raw_fd()],
            ..MemoryPlan::default()
        };
        let mut write_set = self.writes.runs(t);
        let mut runs = tl.runs.iter().peekable();
        for (i, region) in t.layout.regions.iter().enumerate() {
            let first_run = p.runs.len();
            let exec = t
                .prots
                .get(i)
                .is_some_and(|p| p & libc::PROT_EXEC as u32 != 0);
            while let Some(run) = runs.next_if(|run| run.addr < region.end) {
                let on_slow = run.tier == TierKind::Slow;
                let fill = if exec && !self.exec_ok[usize::from(on_slow)] {
                    p.copied_bytes += run.len;
                    r::FILL_COPY
                } else {
                    p.mapped_bytes += run.len;
                    if on_slow {
                        slow_fill
                    } else {
                        r::FILL_MAP
                    }
                };
                p.runs.push(r::PlanRun {
                    addr: run.addr,
                    len: run.len,
                    img_off: run.off,
                    img_fd: if on_slow { slow_fd } else { fast_fd },
                    fill,
                });
            }
            let own = p.runs.len();
            write_set(i, region, &mut p.runs);
            p.populated_bytes += p.runs[own..].iter().map(|r| r.len).sum::<u64>();
            p.regions.push(RegionPlan {
                flags: 0,
                first_run,
                n_runs: p.runs.len() - first_run,
            });
        }
        Ok(p)
    }

    fn after_first_response(&mut self, rt: &Runtime<'_>) -> FirstResponse {
        self.writes.record(rt)
    }

    fn report(&self) -> StrategyReport {
        self.rep.clone()
    }
}

/// The tier layout, checked (CRCs once per process), and both files opened.
fn load_tiers(t: &Target<'_>) -> Result<(TierLayout, File, File)> {
    let tl = tiering::load(t.dir, t.key, t.layout)?.ok_or_else(|| {
        StrategyError::Unsuitable("no tier layout (run `thaw split` first)".into())
    })?;
    let fast = File::open(&tl.fast.path)?;
    let slow = File::open(&tl.slow.path)?;
    verify_once(&[&fast, &slow], || Ok(tiering::verify_files(&tl)?))?;
    Ok((tl, fast, slow))
}

/// Runs `verify` (a checksum over the tier files) the first time this
/// process uses those files, and again whenever one changed: keyed by
/// device, inode, size and ctime (unlike mtime, ctime cannot be set back).
/// A full hash on every restore would read every page and defeat lazy restore.
fn verify_once(files: &[&File], verify: impl FnOnce() -> Result<()>) -> Result<()> {
    let keys = files
        .iter()
        .map(|f| file_key(f))
        .collect::<Result<Vec<_>>>()?;
    let seen = {
        let v = verified().lock().unwrap_or_else(|p| p.into_inner());
        keys.iter().all(|k| v.contains(k))
    };
    if !seen {
        verify()?;
        verified()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(keys);
    }
    Ok(())
}

/// `f` is on a mount that allows executable mappings (not `noexec`).
fn maps_executable(f: &File) -> Result<bool> {
    // SAFETY: fstatvfs fills the zeroed struct; f's descriptor is open for the call.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstatvfs(f.as_raw_fd(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    Ok(st.f_flag & libc::ST_NOEXEC == 0)
}

type FileKey = (u64, u64, u64, i64);

fn verified() -> &'static Mutex<HashSet<FileKey>> {
    static SEEN: OnceLock<Mutex<HashSet<FileKey>>> = OnceLock::new();
    SEEN.get_or_init(Default::default)
}

fn file_key(f: &File) -> Result<FileKey> {
    let m = f.metadata()?;
    Ok((
        m.dev(),
        m.ino(),
        m.size(),
        m.ctime_nsec() + m.ctime() * 1_000_000_000,
    ))
}
