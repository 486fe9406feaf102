//! TOSS-style tiering: split one snapshot's pages between a fast (DRAM) file
//! and a slow-tier file by how often each page was accessed, using the TOSS
//! memory-cost model, and describe the split in a layout file.
//!
//! Cost of a placement = slowdown x (fast MiB x fast price + slow MiB x slow
//! price), prices relative to the slow tier (fast = `price_ratio`, slow = 1).
//! Slowdown is estimated from the profile: a page on the slow tier costs
//! `slow_fault_us - fast_fault_us` more each time an invocation first touches
//! it, and a page profiled as touched in k of E epochs is touched by an
//! invocation with probability k/E.
use crate::layout::{MemoryLayout, PAGE_SIZE};
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File};
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

pub const TIERS_FILE: &str = "tiers.json";
pub const FAST_FILE: &str = "fast.img";
pub const SLOW_FILE: &str = "slow.img";
const FORMAT: u32 = 1;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CostParams {
    /// fast-tier price per MiB relative to the slow tier's (TOSS: 2.5)
    pub price_ratio: f64,
    /// extra cost of first touching a slow-tier page vs a fast-tier one, in microseconds
    pub slow_fault_us: f64,
    pub fast_fault_us: f64,
    /// the function's cold invocation time with everything on the fast tier
    pub base_ms: f64,
    /// bound on the estimated slowdown (TOSS's optional threshold); infinity
    /// gives the plain minimum-cost placement
    pub max_slowdown: f64,
}

impl Default for CostParams {
    fn default() -> Self {
        // fault costs from DESIGN.md's measured floors: cached minor fault
        // 0.26 us, cold random 4 KiB read from the disk 61 us
        CostParams {
            price_ratio: 2.5,
            slow_fault_us: 61.0,
            fast_fault_us: 0.26,
            base_ms: 10.0,
            max_slowdown: 1.10,
        }
    }
}

/// Page access counts from profiling: page address -> epochs that touched it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct AccessProfile {
    pub epochs: u32,
    pub counts: BTreeMap<u64, u32>,
    /// The same counts per class of invocation (an input size); slowdown is
    /// estimated per class and the worst one counts, so a bound holds for
    /// short invocations too. Empty: one class, `CostParams::base_ms`.
    pub classes: Vec<ProfileClass>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ProfileClass {
    pub name: String,
    pub epochs: u32,
    pub counts: HashMap<u64, u32>,
    /// cold invocation time of this class with everything on the fast tier (ms)
    pub base_ms: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TierKind {
    Fast,
    Slow,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TierRun {
    pub addr: u64,
    pub len: u64,
    pub tier: TierKind,
    pub off: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TierFile {
    pub path: PathBuf,
    pub len: u64,
    pub crc32: u32,
}

/// The layout file (`tiers.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TierLayout {
    pub format: u32,
    pub snapshot_key: String,
    pub fast: TierFile,
    pub slow: TierFile,
    pub runs: Vec<TierRun>,
    pub slow_share: f64,
    pub est_slowdown: f64,
    pub cost: f64,
    pub cost_all_fast: f64,
    pub params: CostParams,
    pub bins: Vec<BinDecision>,
}

/// One bin of pages with equal access count, and where the model put it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BinDecision {
    pub accesses: u32,
    pub pages: u64,
    pub slow: bool,
}

/// The outcome of [`place`].
pub struct Placement {
    pub tier: HashMap<u64, TierKind>,
    pub bins: Vec<BinDecision>,
    pub est_slowdown: f64,
    pub cost: f64,
    pub cost_all_fast: f64,
}

/// Decides, per saved page, fast or slow. Untouched pages go slow (free by
/// the model). Touched pages are binned by access count; as in TOSS, bins
/// whose move alone lowers the cost are candidates, taken in order of
/// slowdown per MiB saved while the total cost keeps falling and the
/// slowdown stays within `max_slowdown`.
pub fn place(layout: &MemoryLayout, profile: &AccessProfile, p: &CostParams) -> Placement {
    let mut bins: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for r in &layout.regions {
        for run in &r.runs {
            for a in (run.addr..run.addr + run.len).step_by(PAGE_SIZE as usize) {
                let c = profile.counts.get(&a).copied().unwrap_or(0);
                bins.entry(c).or_default().push(a);
            }
        }
    }
    let mib = |pages: u64| pages as f64 * PAGE_SIZE as f64 / (1 << 20) as f64;
    let total: u64 = bins.values().map(|v| v.len() as u64).sum();
    let penalty_ms = (p.slow_fault_us - p.fast_fault_us).max(0.0) / 1000.0;
    // per class: (epochs, counts, base); one class from the totals when none given
    let single = [ProfileClass {
        name: String::new(),
        epochs: profile.epochs,
        counts: HashMap::new(),
        base_ms: p.base_ms,
    }];
    let classes: &[ProfileClass] = if profile.classes.is_empty() {
        &single
    } else {
        &profile.classes
    };
    let count_in = |c: &ProfileClass, a: u64| -> f64 {
        let n = if profile.classes.is_empty() {
            profile.counts.get(&a).copied()
        } else {
            c.counts.get(&a).copied()
        };
        n.unwrap_or(0) as f64 / c.epochs.max(1) as f64
    };
    // extra milliseconds per class if a bin moves to the slow tier
    let bin_extra: BTreeMap<u32, Vec<f64>> = bins
        .iter()
        .map(|(&cnt, pages)| {
            (
                cnt,
                classes
                    .iter()
                    .map(|c| pages.iter().map(|&a| count_in(c, a)).sum::<f64>() * penalty_ms)
                    .collect(),
            )
        })
        .collect();
    let slowdown_of = |extra: &[f64]| {
        classes
            .iter()
            .zip(extra)
            .map(|(c, e)| 1.0 + e / c.base_ms.max(1e-3))
            .fold(1.0, f64::max)
    };
    let cost = |slow: u64, extra: &[f64]| {
        slowdown_of(extra) * (mib(total - slow) * p.price_ratio + mib(slow))
    };
    let zero = vec![0.0; classes.len()];
    let cost_all_fast = cost(0, &zero);
    let add = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x + y).collect::<Vec<f64>>();

    let mut slow = bins.get(&0).map(|v| v.len() as u64).unwrap_or(0);
    let mut extra = bin_extra.get(&0).cloned().unwrap_or_else(|| zero.clone());
    let candidates: Vec<u32> = bins
        .iter()
        .filter(|(&c, v)| c != 0 && cost(v.len() as u64, &bin_extra[&c]) < cost_all_fast)
        .map(|(&c, _)| c)
        .collect();
    // lower counts first: most memory per unit of slowdown
    let mut moved = std::collections::HashSet::new();
    for c in candidates {
        let (s2, e2) = (slow + bins[&c].len() as u64, add(&extra, &bin_extra[&c]));
        if cost(s2, &e2) < cost(slow, &extra) && slowdown_of(&e2) <= p.max_slowdown {
            slow = s2;
            extra = e2;
            moved.insert(c);
        }
    }
    let mut tier = HashMap::new();
    let mut decisions = Vec::new();
    for (&c, pages) in &bins {
        let to_slow = c == 0 || moved.contains(&c);
        for &a in pages {
            tier.insert(
                a,
                if to_slow {
                    TierKind::Slow
                } else {
                    TierKind::Fast
                },
            );
        }
        decisions.push(BinDecision {
            accesses: c.min(profile.epochs),
            pages: pages.len() as u64,
            slow: to_slow,
        });
    }
    Placement {
        tier,
        bins: decisions,
        est_slowdown: slowdown_of(&extra),
        cost: cost(slow, &extra),
        cost_all_fast,
    }
}

/// Writes the fast file into `snap_dir`, the slow file into `slow_dir`, and
/// `tiers.json` into `snap_dir` (last, atomically).
pub fn write(
    snap_dir: &Path,
    slow_dir: &Path,
    key: &str,
    layout: &MemoryLayout,
    image: &File,
    profile: &AccessProfile,
    params: &CostParams,
) -> Result<TierLayout> {
    let Placement {
        tier: placement,
        bins,
        est_slowdown,
        cost,
        cost_all_fast,
    } = place(layout, profile, params);
    std::os::unix::fs::DirBuilderExt::mode(fs::DirBuilder::new().recursive(true), 0o700)
        .create(slow_dir)
        .with_context(|| format!("creating {}", slow_dir.display()))?;
    let fast_path = snap_dir.join(FAST_FILE);
    let slow_path = slow_dir.join(SLOW_FILE);
    let mut fast = Vec::new();
    let mut slow = Vec::new();
    let mut runs: Vec<TierRun> = Vec::new();
    let mut page = vec![0u8; PAGE_SIZE as usize];
    for r in &layout.regions {
        for run in &r.runs {
            for (i, a) in (run.addr..run.addr + run.len)
                .step_by(PAGE_SIZE as usize)
                .enumerate()
            {
                image.read_exact_at(&mut page, run.file_off + i as u64 * PAGE_SIZE)?;
                let tier = placement.get(&a).copied().unwrap_or(TierKind::Fast);
                let buf = if tier == TierKind::Fast {
                    &mut fast
                } else {
                    &mut slow
                };
                let off = buf.len() as u64;
                buf.extend_from_slice(&page);
                match runs.last_mut() {
                    // merge neighbours of one region only: each mapping is built on its own
                    Some(last)
                        if last.tier == tier
                            && last.addr >= r.start
                            && last.addr + last.len == a
                            && last.off + last.len == off =>
                    {
                        last.len += PAGE_SIZE
                    }
                    _ => runs.push(TierRun {
                        addr: a,
                        len: PAGE_SIZE,
                        tier,
                        off,
                    }),
                }
            }
        }
    }
    crate::write_atomic(&fast_path, &fast)?;
    crate::write_atomic(&slow_path, &slow)?;
    let total = (fast.len() + slow.len()).max(1) as f64;
    let tl = TierLayout {
        format: FORMAT,
        snapshot_key: key.into(),
        fast: TierFile {
            path: fast_path,
            len: fast.len() as u64,
            crc32: crc32fast::hash(&fast),
        },
        slow: TierFile {
            path: slow_path,
            len: slow.len() as u64,
            crc32: crc32fast::hash(&slow),
        },
        runs,
        slow_share: slow.len() as f64 / total,
        est_slowdown,
        cost,
        cost_all_fast,
        params: params.clone(),
        bins,
    };
    crate::write_atomic(&snap_dir.join(TIERS_FILE), &serde_json::to_vec_pretty(&tl)?)?;
    Ok(tl)
}

/// Loads and checks `tiers.json`: right snapshot, files present with the
/// recorded lengths, and runs that cover exactly the snapshot's saved pages.
/// Ok(None) when no tiering was written. File CRCs are checked by `verify_files`.
pub fn load(snap_dir: &Path, key: &str, layout: &MemoryLayout) -> Result<Option<TierLayout>> {
    let p = snap_dir.join(TIERS_FILE);
    if !p.exists() {
        return Ok(None);
    }
    let mut raw = Vec::new();
    File::open(&p)?.take(64 << 20).read_to_end(&mut raw)?;
    let tl: TierLayout = serde_json::from_slice(&raw).context("tier layout is corrupt")?;
    if tl.format != FORMAT {
        bail!("tier layout format {} is not supported", tl.format);
    }
    if tl.snapshot_key != key {
        bail!("tier layout belongs to another snapshot (stale)");
    }
    for f in [&tl.fast, &tl.slow] {
        let len = fs::metadata(&f.path)
            .with_context(|| format!("tier file {} is missing", f.path.display()))?
            .len();
        if len != f.len {
            bail!(
                "tier file {} is {len} bytes, layout says {} (truncated?)",
                f.path.display(),
                f.len
            );
        }
    }
    // the runs must be exactly the saved pages, in order, inside their files
    let mut want = layout
        .regions
        .iter()
        .flat_map(|r| r.runs.iter())
        .flat_map(|run| (run.addr..run.addr + run.len).step_by(PAGE_SIZE as usize));
    for run in &tl.runs {
        let file_len = if run.tier == TierKind::Fast {
            tl.fast.len
        } else {
            tl.slow.len
        };
        if run.len == 0
            || run.len % PAGE_SIZE != 0
            || run.off % PAGE_SIZE != 0
            || run.off.checked_add(run.len).is_none_or(|e| e > file_len)
        {
            bail!("tier run at {:#x} is malformed", run.addr);
        }
        if layout
            .region_of(run.addr)
            .is_none_or(|r| run.addr + run.len > r.end)
        {
            bail!("tier run at {:#x} crosses a mapping boundary", run.addr);
        }
        for a in (run.addr..run.addr + run.len).step_by(PAGE_SIZE as usize) {
            if want.next() != Some(a) {
                bail!("tier layout does not match the snapshot's pages at {a:#x}");
            }
        }
    }
    if want.next().is_some() {
        bail!("tier layout leaves some of the snapshot's pages out");
    }
    Ok(Some(tl))
}

/// Checks both tier files against their CRCs.
pub fn verify_files(tl: &TierLayout) -> Result<()> {
    for f in [&tl.fast, &tl.slow] {
        let data = fs::read(&f.path)?;
        if crc32fast::hash(&data) != f.crc32 {
            bail!(
                "tier file {} checksum mismatch (corrupted)",
                f.path.display()
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{Region, Run};

    fn layout() -> MemoryLayout {
        MemoryLayout {
            regions: vec![
                Region {
                    start: 0x1000,
                    end: 0x3000,
                    anonymous: false,
                    runs: vec![Run {
                        addr: 0x1000,
                        len: 0x1000,
                        file_off: 0,
                    }],
                },
                Region {
                    start: 0x10000,
                    end: 0x20000,
                    anonymous: true,
                    runs: vec![Run {
                        addr: 0x10000,
                        len: 0x8000,
                        file_off: 0x1000,
                    }],
                },
            ],
            image_len: 0x9000,
        }
    }

    #[test]
    fn cold_pages_go_slow_hot_stay_fast_and_cost_drops() {
        let l = layout();
        let mut prof = AccessProfile {
            epochs: 4,
            ..Default::default()
        };
        prof.counts.insert(0x10000, 4); // hot
        prof.counts.insert(0x11000, 4);
        prof.counts.insert(0x12000, 1); // lukewarm
        prof.counts.insert(0x1000, 4); // a hot privately modified page of a file mapping
                                       // a short function: each slow first touch is a large share of its time
        let p = CostParams {
            base_ms: 0.05,
            ..Default::default()
        };
        let Placement {
            tier: pl,
            bins,
            est_slowdown: slowdown,
            cost,
            cost_all_fast: all_fast,
        } = place(&l, &prof, &p);
        assert_eq!(pl[&0x1000], TierKind::Fast, "hot file-private page");
        assert_eq!(pl[&0x17000], TierKind::Slow, "untouched page");
        assert_eq!(pl[&0x10000], TierKind::Fast, "hot page");
        assert!(cost < all_fast);
        assert!(slowdown >= 1.0);
        assert!(bins.iter().any(|b| b.accesses == 0 && b.slow));
        assert_eq!(
            pl[&0x12000],
            TierKind::Fast,
            "lukewarm page costs more slowdown than it saves"
        );
        // a long-running function hides the same faults: everything touched rarely goes slow
        let p2 = CostParams {
            base_ms: 1000.0,
            ..Default::default()
        };
        assert_eq!(place(&l, &prof, &p2).tier[&0x12000], TierKind::Slow);
        // ...unless the slowdown bound forbids it
        let p3 = CostParams {
            base_ms: 1.0,
            max_slowdown: 1.001,
            ..Default::default()
        };
        let pl3 = place(&l, &prof, &p3);
        assert_eq!(pl3.tier[&0x12000], TierKind::Fast);
        assert!(pl3.est_slowdown <= 1.001);
        let p4 = CostParams {
            base_ms: 1.0,
            max_slowdown: f64::INFINITY,
            ..Default::default()
        };
        assert_eq!(place(&l, &prof, &p4).tier[&0x12000], TierKind::Slow);
    }

    #[test]
    fn the_most_sensitive_class_bounds_the_slowdown() {
        let l = layout();
        // a page touched by every short invocation and no long one: across
        // all invocations it looks lukewarm, but the short ones would slow down
        let mut short = ProfileClass {
            name: "I".into(),
            epochs: 2,
            base_ms: 0.1,
            ..Default::default()
        };
        short.counts.insert(0x12000, 2);
        let long = ProfileClass {
            name: "IV".into(),
            epochs: 2,
            base_ms: 1000.0,
            ..Default::default()
        };
        let mut prof = AccessProfile {
            epochs: 4,
            classes: vec![short, long],
            ..Default::default()
        };
        prof.counts.insert(0x12000, 2);
        let pl = place(&l, &prof, &CostParams::default());
        assert_eq!(pl.tier[&0x12000], TierKind::Fast);
        assert!(pl.est_slowdown <= 1.10);
        // with only the long class it would move
        prof.classes.remove(0);
        prof.classes[0].counts.insert(0x12000, 1);
        assert_eq!(
            place(&l, &prof, &CostParams::default()).tier[&0x12000],
            TierKind::Slow
        );
    }

    #[test]
    fn files_round_trip_and_corruption_is_caught() {
        let dir = std::env::temp_dir().join(format!("thaw-tier-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let img: Vec<u8> = (0..9u8).flat_map(|i| vec![i; 4096]).collect();
        fs::write(dir.join("memory.img"), &img).unwrap();
        let f = File::open(dir.join("memory.img")).unwrap();
        let l = layout();
        let mut prof = AccessProfile {
            epochs: 2,
            ..Default::default()
        };
        prof.counts.insert(0x10000, 2);
        let p = CostParams {
            base_ms: 0.05,
            ..Default::default()
        };
        let tl = write(&dir, &dir.join("slow"), "k", &l, &f, &prof, &p).unwrap();
        assert!(tl.slow_share > 0.5, "{}", tl.slow_share);
        let got = load(&dir, "k", &l).unwrap().unwrap();
        verify_files(&got).unwrap();
        // page contents land in the right file at the right offset
        let fast = fs::read(&got.fast.path).unwrap();
        let r = got.runs.iter().find(|r| r.addr == 0x10000).unwrap();
        assert_eq!(r.tier, TierKind::Fast);
        assert_eq!(fast[r.off as usize], 1);
        assert!(load(&dir, "other", &l).is_err(), "stale");
        let mut slow = fs::read(&got.slow.path).unwrap();
        slow[5] ^= 1;
        fs::write(&got.slow.path, &slow).unwrap();
        assert!(verify_files(&got).is_err());
        fs::write(&got.slow.path, &slow[..4096]).unwrap();
        assert!(load(&dir, "k", &l).is_err(), "truncated");
        fs::write(dir.join(TIERS_FILE), b"[").unwrap();
        assert!(load(&dir, "k", &l).is_err());
    }
}
