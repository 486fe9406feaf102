//! TOSS-style tiering: split one snapshot's pages between a fast (DRAM) file
//! and a slow-tier file as the TOSS memory-cost model places them
//! ([`thaw_policy::toss`], pure), and describe the split in a layout file.
use crate::error::{MemoryError, Result};
use crate::layout::{MemoryLayout, PAGE_SIZE};
use crate::PAGE_LEN;
use serde::{Deserialize, Serialize};
use std::fs::{self, File};
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use thaw_error::{fail, ResultExt};
pub use thaw_policy::toss::{
    place, AccessProfile, BinDecision, CostParams, Placement, ProfileClass, TierKind,
    DECLARED_MAP_US,
};

pub const TIERS_FILE: &str = "tiers.json";
pub const FAST_FILE: &str = "fast.img";
pub const SLOW_FILE: &str = "slow.img";
const FORMAT: u32 = 1;

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
    /// the tier the slow file is on (its configured name; "" in older layouts)
    #[serde(default)]
    pub slow_tier: String,
    pub fast: TierFile,
    pub slow: TierFile,
    pub runs: Vec<TierRun>,
    pub slow_share: f64,
    pub est_slowdown: f64,
    pub cost: f64,
    pub cost_all_fast: f64,
    pub params: CostParams,
    pub bins: Vec<BinDecision>,
    /// mappings the split adds to a one-file restore's
    #[serde(default)]
    pub extra_mappings: u64,
}

/// The address of every saved page of `layout`, region by region, in order.
fn saved_pages(layout: &MemoryLayout) -> Vec<Vec<u64>> {
    let pages = |run: &crate::layout::Run| (run.addr..run.addr + run.len).step_by(PAGE_LEN);
    layout
        .regions
        .iter()
        .map(|r| r.runs.iter().flat_map(pages).collect())
        .collect()
}

/// Writes the fast file into `snap_dir`, the slow file into `slow_dir` (on
/// the tier named `slow_tier`), and `tiers.json` into `snap_dir` (last,
/// atomically).
#[allow(clippy::too_many_arguments)]
pub fn write(
    snap_dir: &Path,
    slow_dir: &Path,
    slow_tier: &str,
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
        extra_mappings,
    } = place(&saved_pages(layout), profile, params);
    std::os::unix::fs::DirBuilderExt::mode(fs::DirBuilder::new().recursive(true), 0o700)
        .create(slow_dir)
        .with_context(|| format!("creating {}", slow_dir.display()))?;
    let fast_path = snap_dir.join(FAST_FILE);
    let slow_path = slow_dir.join(SLOW_FILE);
    let mut fast = Vec::new();
    let mut slow = Vec::new();
    let mut runs: Vec<TierRun> = Vec::new();
    let mut page = vec![0u8; PAGE_LEN];
    for r in &layout.regions {
        for run in &r.runs {
            for (i, a) in (run.addr..run.addr + run.len).step_by(PAGE_LEN).enumerate() {
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
        slow_tier: slow_tier.into(),
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
        extra_mappings,
    };
    crate::write_atomic(
        &snap_dir.join(TIERS_FILE),
        &serde_json::to_vec_pretty(&tl).context("encoding the tier layout")?,
    )?;
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
    let tl: TierLayout = serde_json::from_slice(&raw)
        .map_err(|e| MemoryError::Corrupt(format!("tier layout is corrupt: {e}")))?;
    if tl.format != FORMAT {
        fail!(
            MemoryError::Stale,
            "tier layout format {} is not supported",
            tl.format
        );
    }
    if tl.snapshot_key != key {
        fail!(
            MemoryError::Stale,
            "tier layout belongs to another snapshot (stale)"
        );
    }
    for f in [&tl.fast, &tl.slow] {
        let len = fs::metadata(&f.path)
            .with_context(|| format!("tier file {} is missing", f.path.display()))?
            .len();
        if len != f.len {
            fail!(
                MemoryError::Corrupt,
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
        .flat_map(|run| (run.addr..run.addr + run.len).step_by(PAGE_LEN));
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
            fail!(
                MemoryError::Corrupt,
                "tier run at {:#x} is malformed",
                run.addr
            );
        }
        if layout
            .region_of(run.addr)
            .is_none_or(|r| run.addr + run.len > r.end)
        {
            fail!(
                MemoryError::Corrupt,
                "tier run at {:#x} crosses a mapping boundary",
                run.addr
            );
        }
        for a in (run.addr..run.addr + run.len).step_by(PAGE_LEN) {
            if want.next() != Some(a) {
                fail!(
                    MemoryError::Corrupt,
                    "tier layout does not match the snapshot's pages at {a:#x}"
                );
            }
        }
    }
    if want.next().is_some() {
        fail!(
            MemoryError::Corrupt,
            "tier layout leaves some of the snapshot's pages out"
        );
    }
    Ok(Some(tl))
}

/// Checks both tier files against their CRCs.
pub fn verify_files(tl: &TierLayout) -> Result<()> {
    for f in [&tl.fast, &tl.slow] {
        let data = fs::read(&f.path)?;
        if crc32fast::hash(&data) != f.crc32 {
            fail!(
                MemoryError::Corrupt,
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
    use crate::usize_of;

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
        let tl = write(&dir, &dir.join("slow"), "pmem", "k", &l, &f, &prof, &p).unwrap();
        assert!(tl.slow_share > 0.5, "{}", tl.slow_share);
        let got = load(&dir, "k", &l).unwrap().unwrap();
        verify_files(&got).unwrap();
        assert_eq!(got.slow_tier, "pmem");
        // page contents land in the right file at the right offset
        let fast = fs::read(&got.fast.path).unwrap();
        let r = got.runs.iter().find(|r| r.addr == 0x10000).unwrap();
        assert_eq!(r.tier, TierKind::Fast);
        assert_eq!(fast[usize_of(r.off)], 1);
        assert!(
            matches!(load(&dir, "other", &l), Err(MemoryError::Stale(_))),
            "stale"
        );
        let mut slow = fs::read(&got.slow.path).unwrap();
        slow[5] ^= 1;
        fs::write(&got.slow.path, &slow).unwrap();
        assert!(matches!(verify_files(&got), Err(MemoryError::Corrupt(_))));
        fs::write(&got.slow.path, &slow[..4096]).unwrap();
        assert!(
            matches!(load(&dir, "k", &l), Err(MemoryError::Corrupt(_))),
            "truncated"
        );
        fs::write(dir.join(TIERS_FILE), b"[").unwrap();
        assert!(matches!(load(&dir, "k", &l), Err(MemoryError::Corrupt(_))));
    }
}
