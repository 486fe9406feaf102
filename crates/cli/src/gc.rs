//! `thaw gc`: remove what dead workers left behind.
use anyhow::Result;
use std::path::Path;
use thaw_output::outln;

/// Crash cleanup (the worker start already ran it once; a second pass
/// catches anything a dying sandbox was still holding); prints what was removed.
pub fn run(home: &Path) -> Result<()> {
    let w = crate::worker(home)?;
    let mut removed = w.cleaned_at_start.clone();
    removed.extend(w.gc()?);
    for p in &removed {
        outln!("removed {}", p.display());
    }
    outln!("gc: removed {} leftover(s) of dead workers", removed.len());
    Ok(())
}
