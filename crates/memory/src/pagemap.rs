//! Reading `/proc/PID/pagemap`: one 64-bit entry per virtual page.
use crate::error::Result;
use crate::PAGE_SIZE;
use std::fs::File;
use std::os::unix::fs::FileExt;
use thaw_error::ResultExt;

/// The page is in RAM.
pub const PRESENT: u64 = 1 << 63;
/// The page is swapped out.
pub const SWAPPED: u64 = 1 << 62;
/// The page frame number of a present page (0 without CAP_SYS_ADMIN).
pub const PFN: u64 = (1 << 55) - 1;
/// The page is a file (page-cache) page or shared anonymous memory; a
/// present private page without it was copied on write.
pub const FILE: u64 = 1 << 61;

/// Opens the pagemap of `pid`.
pub fn open(pid: i32) -> Result<File> {
    Ok(File::open(format!("/proc/{pid}/pagemap"))
        .with_context(|| format!("opening the pagemap of {pid}"))?)
}

/// The entries for the pages of `[start, end)`, into `out` (reused between calls).
pub fn read(pagemap: &File, start: u64, end: u64, out: &mut Vec<u64>) -> Result<()> {
    let n = ((end - start) / PAGE_SIZE) as usize;
    let mut raw = vec![0u8; n * 8];
    pagemap
        .read_exact_at(&mut raw, start / PAGE_SIZE * 8)
        .context("reading pagemap")?;
    out.clear();
    out.extend(
        raw.chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))),
    );
    Ok(())
}
