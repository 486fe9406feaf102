//! Memory images and the mechanisms that bring them back.
//!
//! This crate sees regions of memory and where their contents live in an
//! image file; it knows nothing of sandboxes or tiers. The restore
//! strategies (`thaw-restore`) build on it: working sets, write sets, TOSS
//! tier files, the userfaultfd [`PageServer`], pagemap reads, and the page
//! cache of the files a runtime maps in large folios ([`huge_cache`]).

pub mod error;
pub mod huge_cache;
mod layout;
mod page_server;
pub mod pagemap;
pub mod tiering;
pub mod uffd;
pub mod width;
pub mod working_set;
pub mod write_set;

pub use error::MemoryError;
pub use layout::{MemoryLayout, PageSpan, Region, Run, PAGE_SIZE};
pub use page_server::{FaultStats, ImageSource, PageServer, PageSource, ServeError};
pub use thaw_error::BoxError;
pub use width::{usize_of, PAGE_LEN};

/// Writes a file that derives from a snapshot (working set, tier files):
/// temp name (0600), fsync, rename, fsync the directory. Readers see the old
/// file or the new one, whole.
pub(crate) fn write_atomic(path: &std::path::Path, data: &[u8]) -> error::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    use thaw_error::ResultExt;
    // pid alone is not unique: two threads of one worker may write the same
    // derived file at once, and each needs its own temporary.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let seq = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = path.with_extension(format!("tmp-{}-{seq}", std::process::id()));
    // private like the snapshot it derives from
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)
        .with_context(|| format!("creating {}", tmp.display()))?;
    f.write_all(data)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming {}", path.display()))?;
    if let Some(d) = path.parent() {
        std::fs::File::open(d)?.sync_all()?;
    }
    Ok(())
}
