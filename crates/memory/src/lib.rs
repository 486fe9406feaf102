//! Memory images and the strategies that bring them back.
//!
//! This crate sees regions of memory and where their contents live in an
//! image file; it knows nothing of processes or tiers. A sandbox (or, later, a
//! microVM backend) turns a strategy's per-region [`Fill`] decisions into
//! mappings, and hands lazily served regions' userfaultfd to a [`PageServer`].

mod layout;
mod page_server;
mod strategy;
pub mod tiering;
pub mod uffd;
pub mod working_set;
pub mod write_set;

pub use layout::{MemoryLayout, Region, Run, PAGE_SIZE};
pub use page_server::{FaultStats, ImageSource, PageServer, PageSource};
pub use strategy::{strategy_by_name, Fill, RestoreStrategy, STRATEGY_NAMES};

/// Writes a file that derives from a snapshot (working set, tier files):
/// temp name, fsync, rename, fsync the directory. Readers see the old file
/// or the new one, whole.
pub(crate) fn write_atomic(path: &std::path::Path, data: &[u8]) -> anyhow::Result<()> {
    use anyhow::Context;
    use std::io::Write;
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    let mut f =
        std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    f.write_all(data)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming {}", path.display()))?;
    if let Some(d) = path.parent() {
        std::fs::File::open(d)?.sync_all()?;
    }
    Ok(())
}
