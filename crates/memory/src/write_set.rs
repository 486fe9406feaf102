//! dax write sets: the pages a dax-restored function wrote by its first
//! response. Later dax restores copy them before resume
//! (MADV_POPULATE_WRITE), so the first invocation takes no copy-on-write
//! faults for them; everything else stays shared with the image.
use crate::error::{MemoryError, Result};
use crate::PageSpan;
use serde::{Deserialize, Serialize};
use std::io::Read;
use std::ops::Range;
use std::path::Path;
use thaw_error::{fail, ResultExt};

pub const WRITE_SET_FILE: &str = "dax-writes.json";
const FORMAT: u32 = 1;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteSet {
    pub format: u32,
    pub snapshot_key: String,
    /// page spans, sorted, not overlapping
    pub ranges: Vec<PageSpan>,
}

impl WriteSet {
    pub fn pages(&self) -> u64 {
        self.ranges.iter().map(|r| r.len).sum::<u64>() / crate::PAGE_SIZE
    }
}

/// Coalesces page addresses into ranges (never across the boundary of two
/// mappings in `regions`, sorted) and writes the set atomically.
pub fn record(
    dir: &Path,
    key: &str,
    regions: &[Range<u64>],
    mut pages: Vec<u64>,
) -> Result<WriteSet> {
    pages.sort_unstable();
    pages.dedup();
    let region_of = |a: u64| regions.partition_point(|r| r.end <= a);
    let mut ranges = Vec::new();
    for a in pages {
        PageSpan::push_page(&mut ranges, a, |s| region_of(s.addr) == region_of(a));
    }
    let ws = WriteSet {
        format: FORMAT,
        snapshot_key: key.into(),
        ranges,
    };
    crate::write_atomic(
        &dir.join(WRITE_SET_FILE),
        &serde_json::to_vec(&ws).context("encoding the write set")?,
    )?;
    Ok(ws)
}

/// The write set recorded for this snapshot: Ok(None) when there is none,
/// Err when it is there but corrupt, stale or malformed.
pub fn load(dir: &Path, key: &str, layout: &crate::MemoryLayout) -> Result<Option<WriteSet>> {
    let p = dir.join(WRITE_SET_FILE);
    if !p.exists() {
        return Ok(None);
    }
    let mut raw = Vec::new();
    std::fs::File::open(&p)?
        .take(16 << 20)
        .read_to_end(&mut raw)?;
    let ws: WriteSet = serde_json::from_slice(&raw)
        .map_err(|e| MemoryError::Corrupt(format!("dax write set is corrupt: {e}")))?;
    if ws.format != FORMAT || ws.snapshot_key != key {
        fail!(
            MemoryError::Stale,
            "dax write set belongs to another snapshot or format (stale)"
        );
    }
    let mut prev = 0;
    for s in &ws.ranges {
        let inside =
            |end: &u64| s.addr >= prev && layout.region_of(s.addr).is_some_and(|r| *end <= r.end);
        let Some(end) = s.checked_end().filter(inside) else {
            fail!(
                MemoryError::Corrupt,
                "dax write set range at {:#x} is malformed",
                s.addr
            );
        };
        prev = end;
    }
    Ok(Some(ws))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MemoryLayout, Region};

    #[test]
    fn record_load_and_reject() {
        let dir = std::env::temp_dir().join(format!("thaw-dax-ws-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let layout = MemoryLayout {
            regions: vec![Region {
                start: 0x10000,
                end: 0x20000,
                anonymous: true,
                runs: vec![],
            }],
            image_len: 0,
        };
        assert!(load(&dir, "k", &layout).unwrap().is_none());
        let regions = [0x10000..0x12000, 0x12000..0x20000];
        let ws = record(
            &dir,
            "k",
            &regions,
            vec![0x12000, 0x10000, 0x11000, 0x11000],
        )
        .unwrap();
        assert_eq!(
            ws.ranges,
            vec![(0x10000, 0x2000).into(), (0x12000, 0x1000).into()],
            "split at the mapping boundary"
        );
        let layout = MemoryLayout {
            regions: vec![
                Region {
                    start: 0x10000,
                    end: 0x12000,
                    anonymous: true,
                    runs: vec![],
                },
                Region {
                    start: 0x12000,
                    end: 0x20000,
                    anonymous: true,
                    runs: vec![],
                },
            ],
            image_len: 0,
        };
        assert_eq!(load(&dir, "k", &layout).unwrap().unwrap(), ws);
        assert!(matches!(
            load(&dir, "other", &layout),
            Err(MemoryError::Stale(_))
        ));
        record(&dir, "k", &regions, vec![0x90000]).unwrap();
        assert!(
            matches!(load(&dir, "k", &layout), Err(MemoryError::Corrupt(_))),
            "outside the regions"
        );
        std::fs::write(dir.join(WRITE_SET_FILE), b"{").unwrap();
        assert!(matches!(
            load(&dir, "k", &layout),
            Err(MemoryError::Corrupt(_))
        ));
    }
}
