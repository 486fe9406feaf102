//! Large shared libraries in page-sized pieces of 2 MiB.
//!
//! A read fault on a file mapping maps, in one go, what the page cache
//! holds around the faulting page: for 4 KiB folios the aligned 64 KiB
//! window (fault-around, 16 page-table entries), for a 2 MiB folio that
//! sits 2 MiB-aligned in both the file and the mapping one PMD entry for
//! all of it. On this VM a fault-around costs 2.5-4 us and Node.js's first
//! answer after a restore took about 120 of them on `libnode.so`'s code
//! alone; with the library's page cache in 2 MiB folios the same code
//! comes in with one fault per 2 MiB (a probe: 256 windows of 64 KiB, 641
//! us as 4 KiB folios, 13 us as 2 MiB folios).
//!
//! The kernel places file mappings of 2 MiB or more 2 MiB-aligned (ext4's
//! `thp_get_unmapped_area`), so a runtime's large libraries are aligned as
//! a PMD needs in every snapshot; what varies is the page cache. Read
//! through ordinary faults, a file ends up in small folios; read through a
//! mapping marked `MADV_HUGEPAGE`, the kernel's readahead allocates 2 MiB
//! folios (on file systems with large folios: ext4, xfs, tmpfs with
//! `huge=`). [`ensure`] checks a file's page cache and, when its spans are
//! not in 2 MiB folios, drops the file's unmapped cached pages
//! (`POSIX_FADV_DONTNEED`) and reads the spans again that way. Pages some
//! process still maps stay as they are.
use crate::error::Result;
use crate::{usize_of, PAGE_SIZE};
use std::fs::File;
use std::ops::Range;
use std::os::fd::AsRawFd;
use thaw_error::ResultExt;

/// The size of a PMD mapping (and of the folios it needs).
pub const HUGE: u64 = 2 << 20;

/// The 2 MiB-aligned file spans a mapping of `[start, end)` at file offset
/// `file_off` can map with one PMD each: whole 2 MiB pieces of the mapping
/// whose address and file offset are both 2 MiB-aligned (none when the two
/// are not congruent modulo 2 MiB).
pub fn pmd_spans(start: u64, end: u64, file_off: u64) -> Option<Range<u64>> {
    if start % HUGE != file_off % HUGE || end <= start {
        return None;
    }
    let first = start.div_ceil(HUGE) * HUGE;
    let last = end / HUGE * HUGE;
    (first < last).then(|| file_off + (first - start)..file_off + (last - start))
}

/// What [`ensure`] found and did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Outcome {
    /// 2 MiB pieces asked for
    pub pieces: u64,
    /// of those, in 2 MiB folios at the end
    pub huge: u64,
    /// pages sampled (the first of every 2 MiB of the file) found in 4 KiB
    /// folios at the end (0 when the page flags cannot be read)
    pub small: u64,
    /// the page cache was dropped and read again
    pub reread: bool,
}

/// Makes sure the page cache of `file` holds `spans` (2 MiB-aligned file
/// ranges, as [`pmd_spans`] gives) in 2 MiB folios and the rest of it in
/// large ones: checks, and when some piece is not, or a sampled page is in
/// a 4 KiB folio, drops the file's unmapped cached pages and reads the file
/// again through a `MADV_HUGEPAGE` mapping. Outside a PMD, a fault-around
/// over large folios maps its 16 pages in batches: 2.4 times cheaper here
/// than over 4 KiB ones (a probe: 262 against 641 us for 256 windows).
/// Best effort: a file system without large folios leaves `huge` short of
/// `pieces` and `small` above 0; anything but a regular file is left alone.
pub fn ensure(file: &File, spans: &[Range<u64>]) -> Result<Outcome> {
    let meta = file.metadata().context("reading the file's size")?;
    if !meta.is_file() {
        return Ok(Outcome::default());
    }
    let len = meta.len();
    let spans: Vec<Range<u64>> = spans
        .iter()
        .filter(|s| s.start % HUGE == 0 && s.end % HUGE == 0 && s.end <= len.div_ceil(HUGE) * HUGE)
        .cloned()
        .collect();
    let pieces = spans.iter().map(|s| (s.end - s.start) / HUGE).sum();
    let mut out = Outcome {
        pieces,
        ..Outcome::default()
    };
    if len == 0 {
        return Ok(out);
    }
    (out.huge, out.small) = check(file, len, &spans)?;
    if out.huge < pieces || out.small > 0 {
        // SAFETY: fadvise on a descriptor we own; it only drops clean,
        // unmapped page-cache pages of this file.
        let r = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        if r != 0 {
            Err(std::io::Error::from_raw_os_error(r))
                .context("dropping the file's cached pages")?;
        }
        out.reread = true;
        (out.huge, out.small) = check(file, len, &spans)?;
    }
    Ok(out)
}

/// Maps `file` privately and read-only at a 2 MiB-aligned address with
/// `MADV_HUGEPAGE` and reads the first byte of every 2 MiB of it (what is
/// not cached is read in 2 MiB folios, smaller at the end of the file).
/// Counts the pieces of `spans` mapped whole by that one read (the page
/// 1 MiB in is present only under a PMD, beyond any fault-around window),
/// and the pages read that are in 4 KiB folios (`/proc/kpageflags`).
fn check(file: &File, len: u64, spans: &[Range<u64>]) -> Result<(u64, u64)> {
    let m = Reservation::huge(len).context("reserving address space")?;
    let base = m
        .map_huge(file, len, libc::PROT_READ, libc::MAP_PRIVATE)
        .context("mapping the file")?;
    let (pm, flags) = proc_files()?;
    let mut entries = Vec::new();
    let mut entry = |addr: u64| -> Result<u64> {
        crate::pagemap::read(pm, addr, addr + PAGE_SIZE, &mut entries)?;
        Ok(entries.first().copied().unwrap_or(0))
    };
    let mut small = 0;
    for off in (0..len).step_by(usize_of(HUGE)) {
        // SAFETY: inside the file's mapping (off < len), readable; a
        // volatile read so that it happens.
        unsafe { std::ptr::read_volatile((base + off) as *const u8) };
        let pfn = entry(base + off)? & crate::pagemap::PFN;
        if let (Some(f), true) = (flags, pfn != 0) {
            use std::os::unix::fs::FileExt;
            let mut raw = [0u8; 8];
            f.read_exact_at(&mut raw, pfn * 8)
                .context("reading /proc/kpageflags")?;
            if u64::from_le_bytes(raw) & (KPF_COMPOUND_HEAD | KPF_COMPOUND_TAIL) == 0 {
                small += 1;
            }
        }
    }
    let mut huge = 0;
    for s in spans {
        for off in (s.start..s.end.min(len)).step_by(usize_of(HUGE)) {
            let probe = off + HUGE / 2;
            if probe < len && entry(base + probe)? & crate::pagemap::PRESENT != 0 {
                huge += 1;
            }
        }
    }
    Ok((huge, small))
}

/// This process's pagemap and, when it may read it, `/proc/kpageflags`
/// (the page flags need CAP_SYS_ADMIN, as the frame numbers in pagemap
/// do), opened once per process: an open of `/proc/PID/pagemap` waits for
/// the process's mm, which the worker's sandbox builds hold while they
/// clone.
fn proc_files() -> Result<(&'static File, Option<&'static File>)> {
    static FILES: std::sync::OnceLock<(File, Option<File>)> = std::sync::OnceLock::new();
    if let Some((pm, flags)) = FILES.get() {
        return Ok((pm, flags.as_ref()));
    }
    let pm = crate::pagemap::open(std::process::id().cast_signed())?;
    let (pm, flags) = FILES.get_or_init(|| (pm, File::open("/proc/kpageflags").ok()));
    Ok((pm, flags.as_ref()))
}

/// `/proc/kpageflags`: the page is the head or a tail of a large folio.
const KPF_COMPOUND_HEAD: u64 = 1 << 15;
const KPF_COMPOUND_TAIL: u64 = 1 << 16;

/// Address space reserved (`PROT_NONE`), unmapped on drop with whatever
/// was mapped over it (`MAP_FIXED`) by its owner.
pub struct Reservation {
    addr: u64,
    len: u64,
}

impl Reservation {
    /// Reserves `len` bytes at an address the kernel picks.
    pub fn new(len: u64) -> std::io::Result<Reservation> {
        // SAFETY: a fresh anonymous reservation at an address the kernel picks.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                usize_of(len),
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Reservation {
            addr: p as u64,
            len,
        })
    }

    /// Room for [`Reservation::map_huge`] of `len` bytes.
    pub fn huge(len: u64) -> std::io::Result<Reservation> {
        Reservation::new(len.div_ceil(HUGE) * HUGE + HUGE)
    }

    /// The first 2 MiB-aligned address in it (a reservation of `n + HUGE`
    /// bytes holds `n` bytes from there).
    pub fn huge_aligned(&self) -> u64 {
        self.addr.div_ceil(HUGE) * HUGE
    }

    /// Maps `len` bytes of `file` from offset 0 at the reservation's first
    /// 2 MiB-aligned address, with `prot` and `share` (`MAP_PRIVATE` or
    /// `MAP_SHARED`), marked `MADV_HUGEPAGE` (a hint: a failure only loses
    /// large folios); the mapping goes with the reservation. Returns its
    /// address.
    pub fn map_huge(&self, file: &File, len: u64, prot: i32, share: i32) -> std::io::Result<u64> {
        let base = self.huge_aligned();
        if base + len.div_ceil(HUGE) * HUGE > self.addr + self.len {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the reservation is too small for the mapping",
            ));
        }
        // SAFETY: MAP_FIXED inside our own reservation (checked above):
        // nothing else in this process uses those addresses.
        let p = unsafe {
            libc::mmap(
                base as *mut libc::c_void,
                usize_of(len),
                prot,
                share | libc::MAP_FIXED,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: advice on the mapping just made.
        unsafe { libc::madvise(p, usize_of(len), libc::MADV_HUGEPAGE) };
        Ok(base)
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        // SAFETY: our own reservation; nothing refers into it any more.
        unsafe { libc::munmap(self.addr as *mut libc::c_void, usize_of(self.len)) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PAGE_LEN;

    #[test]
    fn spans_need_congruent_whole_pieces() {
        let m = 1 << 20;
        // libnode's text: base 2 MiB-aligned, the segment at 0x892000
        let base = 0x7f00_0000_0000;
        assert_eq!(
            pmd_spans(base + 0x892000, base + 0x244c000, 0x892000),
            Some(0xa00000..0x2400000)
        );
        assert_eq!(pmd_spans(base + 0x1000, base + 0x800000, 0x2000), None);
        assert_eq!(pmd_spans(base, base + 3 * m, 0), Some(0..HUGE));
        assert_eq!(pmd_spans(base + m, base + 3 * m, m), None, "no whole piece");
        assert_eq!(pmd_spans(base, base, 0), None);
    }

    /// Drops `f`'s cached pages and reads them again in 4 KiB folios: one
    /// page after the other with readahead off.
    fn small_folios(f: &File, len: u64) {
        use std::os::unix::fs::FileExt;
        // SAFETY: advice on our own descriptor.
        unsafe {
            libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED);
            libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM);
        }
        let mut page = [0u8; PAGE_LEN];
        for off in (0..len).step_by(PAGE_LEN) {
            f.read_at(&mut page, off).unwrap();
        }
    }

    #[test]
    fn a_file_in_small_folios_is_read_again_in_2_mib_ones() {
        use std::io::Write;
        let dir = std::env::temp_dir().join(format!("thaw-huge-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("lib.so");
        let len = 3 * HUGE + 5 * PAGE_SIZE;
        let mut f = File::create(&path).unwrap();
        let data: Vec<u8> = (0..len)
            .map(|i| u8::try_from(i * 7 % 251).unwrap())
            .collect();
        f.write_all(&data).unwrap();
        f.sync_all().unwrap();
        drop(f);
        let f = File::open(&path).unwrap();
        small_folios(&f, len);
        let spans = [0..HUGE, 2 * HUGE..3 * HUGE];
        let first = ensure(&f, &spans).unwrap();
        assert_eq!(first.pieces, 2);
        assert!(first.reread, "small folios are read again: {first:?}");
        assert_eq!(first.small, 0, "read again in large folios: {first:?}");
        assert_eq!(
            first.huge, 2,
            "the file system of {} gives no 2 MiB folios (large folios: ext4 on Linux 6.16 or later, xfs, tmpfs with huge=): {first:?}",
            dir.display()
        );
        let again = ensure(&f, &spans).unwrap();
        assert_eq!(
            again,
            Outcome {
                pieces: 2,
                huge: 2,
                small: 0,
                reread: false
            },
            "already in 2 MiB folios: nothing read again"
        );
        // the contents are the file's
        let mut back = Vec::new();
        std::io::Read::read_to_end(&mut File::open(&path).unwrap(), &mut back).unwrap();
        assert!(back == data);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
