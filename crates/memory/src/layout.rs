//! Where each region's saved pages sit in the image file.
use crate::error::{MemoryError, Result};
use serde::{Deserialize, Serialize};
use thaw_error::fail;

pub const PAGE_SIZE: u64 = 4096;

/// `len` bytes of pages from `addr` (where the code also handles mappings as
/// `start..end` ranges, this keeps the two apart). Stored as the pair
/// `[addr, len]`, as the working-set and write-set files always had it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "(u64, u64)", into = "(u64, u64)")]
pub struct PageSpan {
    pub addr: u64,
    pub len: u64,
}

impl From<(u64, u64)> for PageSpan {
    fn from((addr, len): (u64, u64)) -> Self {
        PageSpan { addr, len }
    }
}

impl From<PageSpan> for (u64, u64) {
    fn from(s: PageSpan) -> Self {
        (s.addr, s.len)
    }
}

impl PageSpan {
    /// The end address, if the span is page aligned, not empty and does not
    /// overflow (a span read from a file is checked with this).
    pub fn checked_end(&self) -> Option<u64> {
        let end = self.addr.checked_add(self.len)?;
        let aligned = self.addr.is_multiple_of(PAGE_SIZE) && self.len.is_multiple_of(PAGE_SIZE);
        (aligned && self.len > 0).then_some(end)
    }

    /// Adds the page at `addr` to sorted `spans`: extends the last span when
    /// it ends there and `join` allows it, else starts a new one.
    pub fn push_page(spans: &mut Vec<PageSpan>, addr: u64, join: impl Fn(&PageSpan) -> bool) {
        match spans.last_mut() {
            Some(s) if s.addr + s.len == addr && join(s) => s.len += PAGE_SIZE,
            _ => spans.push(PageSpan {
                addr,
                len: PAGE_SIZE,
            }),
        }
    }
}

/// Contiguous saved pages of one region, stored contiguously in the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
    pub addr: u64,
    pub len: u64,
    pub file_off: u64,
}

/// One mapping's worth of memory. `anonymous` regions start as zero pages
/// where no run covers them; file-backed ones start as their file's contents,
/// so only their privately modified pages are in runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Region {
    pub start: u64,
    pub end: u64,
    pub anonymous: bool,
    pub runs: Vec<Run>,
}

impl Region {
    pub fn len(&self) -> u64 {
        self.end - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }

    pub fn saved_bytes(&self) -> u64 {
        self.runs.iter().map(|r| r.len).sum()
    }

    /// The image offset holding the page at `addr`, if that page was saved.
    pub fn image_offset(&self, addr: u64) -> Option<u64> {
        let i = self.runs.partition_point(|r| r.addr + r.len <= addr);
        let r = self.runs.get(i)?;
        (r.addr <= addr).then(|| r.file_off + (addr - r.addr))
    }
}

/// All regions of a memory image, sorted by address.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryLayout {
    pub regions: Vec<Region>,
    /// Size of the image file the runs point into.
    pub image_len: u64,
}

impl MemoryLayout {
    /// Checks what a snapshot file could get wrong: alignment, order, overlap,
    /// runs inside their region and inside the image.
    pub fn validate(&self) -> Result<()> {
        let mut prev_end = 0u64;
        for (i, r) in self.regions.iter().enumerate() {
            if r.start % PAGE_SIZE != 0 || r.end % PAGE_SIZE != 0 || r.end <= r.start {
                fail!(
                    MemoryError::Layout,
                    "region {i} [{:#x}, {:#x}) is empty or not page aligned",
                    r.start,
                    r.end
                );
            }
            if r.start < prev_end {
                fail!(
                    MemoryError::Layout,
                    "region {i} at {:#x} overlaps or is out of order",
                    r.start
                );
            }
            prev_end = r.end;
            let mut run_end = r.start;
            for run in &r.runs {
                let bad_align = run.addr % PAGE_SIZE != 0
                    || run.len % PAGE_SIZE != 0
                    || run.file_off % PAGE_SIZE != 0;
                if bad_align || run.len == 0 {
                    fail!(
                        MemoryError::Layout,
                        "region {i}: run at {:#x} is empty or not page aligned",
                        run.addr
                    );
                }
                let end = run.addr.checked_add(run.len);
                if run.addr < run_end || end.is_none_or(|e| e > r.end) {
                    fail!(
                        MemoryError::Layout,
                        "region {i}: run at {:#x} is outside the region or out of order",
                        run.addr
                    );
                }
                run_end = run.addr + run.len;
                if run
                    .file_off
                    .checked_add(run.len)
                    .is_none_or(|e| e > self.image_len)
                {
                    fail!(
                        MemoryError::Layout,
                        "region {i}: run at {:#x} points past the end of the image",
                        run.addr
                    );
                }
            }
        }
        Ok(())
    }

    /// The region containing `addr`.
    pub fn region_of(&self, addr: u64) -> Option<&Region> {
        let i = self.regions.partition_point(|r| r.end <= addr);
        self.regions.get(i).filter(|r| r.start <= addr)
    }

    pub fn saved_bytes(&self) -> u64 {
        self.regions.iter().map(Region::saved_bytes).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> MemoryLayout {
        MemoryLayout {
            regions: vec![
                Region {
                    start: 0x1000,
                    end: 0x5000,
                    anonymous: true,
                    runs: vec![
                        Run {
                            addr: 0x1000,
                            len: 0x1000,
                            file_off: 0,
                        },
                        Run {
                            addr: 0x3000,
                            len: 0x2000,
                            file_off: 0x1000,
                        },
                    ],
                },
                Region {
                    start: 0x9000,
                    end: 0xa000,
                    anonymous: false,
                    runs: vec![],
                },
            ],
            image_len: 0x3000,
        }
    }

    #[test]
    fn lookups_find_saved_pages_only() {
        let l = layout();
        l.validate().unwrap();
        let r = l.region_of(0x3500).unwrap();
        assert_eq!(r.image_offset(0x1000), Some(0));
        assert_eq!(r.image_offset(0x2000), None);
        assert_eq!(r.image_offset(0x4000), Some(0x2000));
        assert!(l.region_of(0x6000).is_none());
        assert!(l.region_of(0x9fff).is_some());
        assert_eq!(l.saved_bytes(), 0x3000);
    }

    #[test]
    fn validate_rejects_bad_layouts() {
        let mut l = layout();
        l.image_len = 0x2000;
        assert!(
            matches!(l.validate(), Err(MemoryError::Layout(_))),
            "run past the image"
        );
        let mut l = layout();
        l.regions[0].runs[1].addr = 0x4000;
        assert!(
            matches!(l.validate(), Err(MemoryError::Layout(_))),
            "run past the region"
        );
        let mut l = layout();
        l.regions.swap(0, 1);
        assert!(
            matches!(l.validate(), Err(MemoryError::Layout(_))),
            "unsorted regions"
        );
        let mut l = layout();
        l.regions[0].runs[0].file_off = 7;
        assert!(
            matches!(l.validate(), Err(MemoryError::Layout(_))),
            "unaligned"
        );
        let mut l = layout();
        l.regions[0].runs[1].len = u64::MAX - 0xfff;
        assert!(
            matches!(l.validate(), Err(MemoryError::Layout(_))),
            "overflow"
        );
    }
}
