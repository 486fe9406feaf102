//! REAP working sets: the pages a restored function touched in its first
//! invocation, recorded once and prefetched in one read on later restores.
//!
//! Two files beside the snapshot: `ws.img` (the recorded pages' contents,
//! contiguous, in address order) and `ws.json` (the index: which snapshot it
//! belongs to, runs of pages, a CRC of `ws.img`). Both are written under
//! temporary names and renamed; the index goes last, so a crash leaves either
//! the old pair, or a new image the old index's CRC rejects.
use crate::error::{MemoryError, Result};
use crate::layout::{MemoryLayout, PageSpan, PAGE_SIZE};
use crate::uffd;
use crate::{usize_of, PAGE_LEN};
use serde::{Deserialize, Serialize};
use std::fs::{self, File, OpenOptions};
use std::io::Read;
use std::os::fd::RawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::time::Instant;
use thaw_error::{fail, ResultExt};

pub const WS_IMAGE: &str = "ws.img";
pub const WS_INDEX: &str = "ws.json";
/// Marker written when a prefetched restore drifted: re-record next time.
pub const WS_STALE: &str = "ws.stale";
const WS_FORMAT: u32 = 1;
const MAX_INDEX_BYTES: u64 = 16 << 20;

/// Contiguous recorded pages and where they sit in `ws.img`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WsRun {
    pub addr: u64,
    pub len: u64,
    pub ws_off: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WsIndex {
    pub format: u32,
    /// Identity of the snapshot this was recorded from.
    pub snapshot_key: String,
    pub ws_len: u64,
    pub ws_crc32: u32,
    /// Pages with saved contents, sorted and coalesced.
    pub runs: Vec<WsRun>,
    /// Touched pages the snapshot holds no contents for (zero pages).
    pub zero_runs: Vec<PageSpan>,
    /// Saved private pages of file mappings the first invocation touched:
    /// mapped from the image, outside userfaultfd's reach, so a restore asks
    /// the page cache for them early. `None`: not recorded (an older
    /// index); all of them are asked for.
    #[serde(default)]
    pub file_runs: Option<Vec<PageSpan>>,
}

impl WsIndex {
    pub fn pages(&self) -> u64 {
        (self.runs.iter().map(|r| r.len).sum::<u64>()
            + self.zero_runs.iter().map(|z| z.len).sum::<u64>())
            / PAGE_SIZE
    }
}

/// Writes the working set of `faults` (page addresses in fault order) for the
/// snapshot in `dir`, reading contents from its `image`; `file_runs` are the
/// file mappings' saved pages touched (see [`touched_file_runs`]).
pub fn record(
    dir: &Path,
    key: &str,
    layout: &MemoryLayout,
    image: &File,
    faults: &[u64],
    file_runs: Option<Vec<PageSpan>>,
) -> Result<WsIndex> {
    let mut pages: Vec<u64> = faults.iter().map(|a| a & !(PAGE_SIZE - 1)).collect();
    pages.sort_unstable();
    pages.dedup();
    let mut data = Vec::with_capacity(pages.len() * PAGE_LEN);
    let mut runs: Vec<WsRun> = Vec::new();
    let mut zero_runs = Vec::new();
    let mut page = vec![0u8; PAGE_LEN];
    for &a in &pages {
        let Some(region) = layout.region_of(a).filter(|r| r.anonymous) else {
            fail!(
                MemoryError::Outside,
                "recorded fault at {a:#x} is outside the lazily served regions"
            );
        };
        match region.image_offset(a) {
            Some(off) => {
                image
                    .read_exact_at(&mut page, off)
                    .context("reading the memory image")?;
                let ws_off = data.len() as u64;
                data.extend_from_slice(&page);
                // runs stay inside one region (two regions may be adjacent)
                match runs.last_mut() {
                    Some(r) if r.addr + r.len == a && r.addr >= region.start => r.len += PAGE_SIZE,
                    _ => runs.push(WsRun {
                        addr: a,
                        len: PAGE_SIZE,
                        ws_off,
                    }),
                }
            }
            None => PageSpan::push_page(&mut zero_runs, a, |z| z.addr >= region.start),
        }
    }
    let index = WsIndex {
        format: WS_FORMAT,
        snapshot_key: key.to_string(),
        ws_len: data.len() as u64,
        ws_crc32: crc32fast::hash(&data),
        runs,
        zero_runs,
        file_runs,
    };
    crate::write_atomic(&dir.join(WS_IMAGE), &data)?;
    crate::write_atomic(
        &dir.join(WS_INDEX),
        &serde_json::to_vec(&index).context("encoding the working-set index")?,
    )?;
    let _ = fs::remove_file(dir.join(WS_STALE));
    Ok(index)
}

/// The saved pages of `layout`'s file mappings that process `pid` has in
/// its page tables (it touched them), coalesced.
pub fn touched_file_runs(pid: i32, layout: &MemoryLayout) -> Result<Vec<PageSpan>> {
    let pm = crate::pagemap::open(pid)?;
    let mut out: Vec<PageSpan> = Vec::new();
    let mut entries = Vec::new();
    for run in layout
        .regions
        .iter()
        .filter(|r| !r.anonymous)
        .flat_map(|r| &r.runs)
    {
        crate::pagemap::read(&pm, run.addr, run.addr + run.len, &mut entries)?;
        for (i, e) in entries.iter().enumerate() {
            if e & crate::pagemap::PRESENT == 0 {
                continue;
            }
            let a = run.addr + i as u64 * PAGE_SIZE;
            // coalesced within a run only: each stays contiguous in the image
            PageSpan::push_page(&mut out, a, |s| s.addr >= run.addr);
        }
    }
    Ok(out)
}

/// Whether a usable working set exists: Ok(None) when none was recorded or a
/// drift marked it stale (record again), Err when it is there but bad.
/// `on_index` sees the checked index before the pages are read.
pub fn load(
    dir: &Path,
    key: &str,
    layout: &MemoryLayout,
    on_index: impl FnOnce(&WsIndex),
) -> Result<Option<WorkingSet>> {
    let ipath = dir.join(WS_INDEX);
    if !ipath.exists() || dir.join(WS_STALE).exists() {
        return Ok(None);
    }
    let t = Instant::now();
    let mut raw = Vec::new();
    File::open(&ipath)?
        .take(MAX_INDEX_BYTES + 1)
        .read_to_end(&mut raw)?;
    if raw.len() as u64 > MAX_INDEX_BYTES {
        fail!(
            MemoryError::Corrupt,
            "working-set index is implausibly large"
        );
    }
    let index: WsIndex = serde_json::from_slice(&raw)
        .map_err(|e| MemoryError::Corrupt(format!("working-set index is corrupt: {e}")))?;
    if index.format != WS_FORMAT {
        fail!(
            MemoryError::Stale,
            "working-set index format {} is not supported",
            index.format
        );
    }
    if index.snapshot_key != key {
        fail!(
            MemoryError::Stale,
            "working set was recorded from another snapshot (stale)"
        );
    }
    validate(&index, layout)?;
    on_index(&index);
    let data = read_direct(&dir.join(WS_IMAGE), index.ws_len)?;
    if crc32fast::hash(data.as_slice()) != index.ws_crc32 {
        fail!(
            MemoryError::Corrupt,
            "working-set image checksum mismatch (corrupted)"
        );
    }
    Ok(Some(WorkingSet {
        index,
        data,
        load_ns: t.elapsed().as_nanos().try_into().unwrap_or(u64::MAX),
    }))
}

fn validate(index: &WsIndex, layout: &MemoryLayout) -> Result<()> {
    let mut prev = 0u64;
    let mut expect_off = 0u64;
    for r in &index.runs {
        if r.addr % PAGE_SIZE != 0
            || r.len % PAGE_SIZE != 0
            || r.len == 0
            || r.addr < prev
            || r.ws_off != expect_off
        {
            fail!(
                MemoryError::Corrupt,
                "working-set run at {:#x} is malformed",
                r.addr
            );
        }
        let Some(end) = r.addr.checked_add(r.len) else {
            fail!(
                MemoryError::Corrupt,
                "working-set run at {:#x} overflows",
                r.addr
            );
        };
        match layout.region_of(r.addr) {
            Some(reg) if reg.anonymous && end <= reg.end => {}
            _ => fail!(
                MemoryError::Corrupt,
                "working-set run at {:#x} is outside the lazily served regions",
                r.addr
            ),
        }
        prev = end;
        expect_off += r.len;
    }
    if expect_off != index.ws_len {
        fail!(
            MemoryError::Corrupt,
            "working-set index covers {expect_off} bytes, image is {}",
            index.ws_len
        );
    }
    for z in &index.zero_runs {
        let inside = |end: &u64| {
            layout
                .region_of(z.addr)
                .is_some_and(|reg| reg.anonymous && *end <= reg.end)
        };
        if z.checked_end().filter(inside).is_none() {
            fail!(
                MemoryError::Corrupt,
                "working-set zero run at {:#x} is malformed",
                z.addr
            );
        }
    }
    for f in index.file_runs.iter().flatten() {
        let inside = |end: &u64| {
            layout
                .region_of(f.addr)
                .is_some_and(|reg| !reg.anonymous && *end <= reg.end)
        };
        if f.checked_end().filter(inside).is_none() {
            fail!(
                MemoryError::Corrupt,
                "working-set file run at {:#x} is malformed",
                f.addr
            );
        }
    }
    Ok(())
}

/// Reads a whole file with one O_DIRECT read into page-aligned memory (the
/// page cache is bypassed, as REAP does; tmpfs falls back to a buffered read).
fn read_direct(path: &Path, len: u64) -> Result<AlignedBuf> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .or_else(|_| File::open(path))
        .with_context(|| format!("opening {}", path.display()))?;
    if f.metadata()?.len() != len {
        fail!(
            MemoryError::Corrupt,
            "working-set image is {} bytes, index says {len}",
            f.metadata()?.len()
        );
    }
    let mut buf = AlignedBuf::new(usize_of(len))?;
    let mut got = 0usize;
    while got < usize_of(len) {
        let n = f.read_at(&mut buf.as_mut_slice()[got..], got as u64)?;
        if n == 0 {
            fail!(MemoryError::Corrupt, "working-set image ended early");
        }
        got += n;
    }
    Ok(buf)
}

/// A loaded working set, ready to install.
pub struct WorkingSet {
    pub index: WsIndex,
    data: AlignedBuf,
    /// time to read and check it
    pub load_ns: u64,
}

impl WorkingSet {
    /// Installs every recorded page into the (stopped) process behind `uffd`:
    /// one UFFDIO_COPY per run without waking, zero pages likewise, then a
    /// single wake over everything.
    pub fn install(&self, uffd: RawFd) -> Result<u64> {
        let t = Instant::now();
        let base = self.data.as_slice().as_ptr() as u64;
        let (mut lo, mut hi) = (u64::MAX, 0u64);
        for r in &self.index.runs {
            uffd::copy(uffd, r.addr, base + r.ws_off, r.len, true)?;
            lo = lo.min(r.addr);
            hi = hi.max(r.addr + r.len);
        }
        for z in &self.index.zero_runs {
            uffd::zeropage(uffd, z.addr, z.len, true)?;
            lo = lo.min(z.addr);
            hi = hi.max(z.addr + z.len);
        }
        if hi > lo {
            uffd::wake(uffd, lo, hi - lo)?;
        }
        Ok(t.elapsed().as_nanos().try_into().unwrap_or(u64::MAX))
    }
}

/// Page-aligned anonymous memory (O_DIRECT needs aligned buffers).
struct AlignedBuf {
    ptr: *mut u8,
    len: usize,
    map_len: usize,
}

// SAFETY: the buffer is plain memory owned by this struct.
unsafe impl Send for AlignedBuf {}

impl AlignedBuf {
    fn new(len: usize) -> Result<Self> {
        let map_len = len.max(1).div_ceil(PAGE_LEN) * PAGE_LEN;
        // SAFETY: a fresh private anonymous mapping; checked for failure.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            fail!(
                MemoryError::Corrupt,
                "allocating {len} bytes: {}",
                std::io::Error::last_os_error()
            );
        }
        Ok(AlignedBuf {
            ptr: p.cast(),
            len,
            map_len,
        })
    }

    fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is valid for len bytes for the life of self.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and we hold &mut self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping made in new().
        unsafe { libc::munmap(self.ptr.cast(), self.map_len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{Region, Run};

    fn setup(tag: &str) -> (std::path::PathBuf, MemoryLayout, File) {
        let dir = std::env::temp_dir().join(format!("thaw-ws-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let img: Vec<u8> = (0..4u8).flat_map(|i| vec![i + 1; 4096]).collect();
        fs::write(dir.join("memory.img"), &img).unwrap();
        let layout = MemoryLayout {
            regions: vec![Region {
                start: 0x10000,
                end: 0x20000,
                anonymous: true,
                runs: vec![Run {
                    addr: 0x10000,
                    len: 0x4000,
                    file_off: 0,
                }],
            }],
            image_len: 0x4000,
        };
        let f = File::open(dir.join("memory.img")).unwrap();
        (dir, layout, f)
    }

    #[test]
    fn record_coalesces_and_load_round_trips() {
        let (dir, layout, img) = setup("rt");
        let idx = record(
            &dir,
            "k1",
            &layout,
            &img,
            &[0x12000, 0x10000, 0x11000, 0x10010, 0x15000],
            None,
        )
        .unwrap();
        assert_eq!(
            idx.runs,
            vec![WsRun {
                addr: 0x10000,
                len: 0x3000,
                ws_off: 0
            }]
        );
        assert_eq!(idx.zero_runs, vec![(0x15000, 0x1000).into()]);
        assert_eq!(idx.pages(), 4);
        let ws = load(&dir, "k1", &layout, |_| {}).unwrap().unwrap();
        assert_eq!(ws.data.as_slice()[4096], 2, "second page's contents");
        assert!(
            matches!(
                load(&dir, "other", &layout, |_| {}),
                Err(MemoryError::Stale(_))
            ),
            "stale: another snapshot"
        );
        fs::write(dir.join(WS_STALE), b"").unwrap();
        assert!(
            load(&dir, "k1", &layout, |_| {}).unwrap().is_none(),
            "drifted: re-record"
        );
    }

    #[test]
    fn runs_end_where_adjacent_regions_meet() {
        // two regions back to back (a JVM's thread stacks are): a run that
        // crossed from one into the next would not validate at load
        let (dir, mut layout, img) = setup("adjacent");
        layout.regions[0].end = 0x12000;
        layout.regions[0].runs[0].len = 0x2000;
        layout.regions.push(Region {
            start: 0x12000,
            end: 0x20000,
            anonymous: true,
            runs: vec![Run {
                addr: 0x12000,
                len: 0x2000,
                file_off: 0x2000,
            }],
        });
        let faults = [0x10000, 0x11000, 0x12000, 0x13000, 0x14000, 0x15000];
        let idx = record(&dir, "k", &layout, &img, &faults, None).unwrap();
        let runs: Vec<(u64, u64)> = idx.runs.iter().map(|r| (r.addr, r.len)).collect();
        assert_eq!(runs, vec![(0x10000, 0x2000), (0x12000, 0x2000)]);
        assert!(load(&dir, "k", &layout, |_| {}).unwrap().is_some());
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn corruption_is_detected() {
        let (dir, layout, img) = setup("bad");
        assert!(
            load(&dir, "k", &layout, |_| {}).unwrap().is_none(),
            "missing is not an error"
        );
        record(&dir, "k", &layout, &img, &[0x10000, 0x11000], None).unwrap();
        let mut d = fs::read(dir.join(WS_IMAGE)).unwrap();
        d[100] ^= 1;
        fs::write(dir.join(WS_IMAGE), &d).unwrap();
        assert!(matches!(
            load(&dir, "k", &layout, |_| {}),
            Err(MemoryError::Corrupt(_))
        ));
        fs::write(dir.join(WS_IMAGE), &d[..4096]).unwrap();
        assert!(
            matches!(
                load(&dir, "k", &layout, |_| {}),
                Err(MemoryError::Corrupt(_))
            ),
            "truncated"
        );
        fs::write(dir.join(WS_INDEX), b"{").unwrap();
        assert!(
            matches!(
                load(&dir, "k", &layout, |_| {}),
                Err(MemoryError::Corrupt(_))
            ),
            "garbage index"
        );
        // a run outside the regions is refused
        let mut idx = record(&dir, "k", &layout, &img, &[0x10000], None).unwrap();
        idx.runs[0].addr = 0x90000;
        fs::write(dir.join(WS_INDEX), serde_json::to_vec(&idx).unwrap()).unwrap();
        assert!(matches!(
            load(&dir, "k", &layout, |_| {}),
            Err(MemoryError::Corrupt(_))
        ));
        assert!(
            matches!(
                record(&dir, "k", &layout, &img, &[0x90000], None),
                Err(MemoryError::Outside(_))
            ),
            "fault outside regions"
        );
    }

    #[test]
    fn file_runs_round_trip_and_are_checked() {
        let (dir, mut layout, img) = setup("file");
        layout.regions.push(Region {
            start: 0x30000,
            end: 0x34000,
            anonymous: false,
            runs: vec![],
        });
        let runs: Vec<PageSpan> = vec![(0x31000, 0x2000).into()];
        record(&dir, "k", &layout, &img, &[0x10000], Some(runs.clone())).unwrap();
        let mut seen = None;
        load(&dir, "k", &layout, |i| seen = i.file_runs.clone())
            .unwrap()
            .unwrap();
        assert_eq!(seen, Some(runs));
        // an older index without them loads, and says so
        record(&dir, "k", &layout, &img, &[0x10000], None).unwrap();
        let mut seen = Some(vec![]);
        load(&dir, "k", &layout, |i| seen = i.file_runs.clone()).unwrap();
        assert_eq!(seen, None);
        // a file run over anonymous memory, or past its mapping, is refused
        for bad in [(0x10000, 0x1000), (0x33000, 0x2000), (0x30800, 0x1000)] {
            record(&dir, "k", &layout, &img, &[0x10000], Some(vec![bad.into()])).unwrap();
            assert!(
                matches!(
                    load(&dir, "k", &layout, |_| {}),
                    Err(MemoryError::Corrupt(_))
                ),
                "{bad:x?}"
            );
        }
    }
}
