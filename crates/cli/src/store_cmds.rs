//! `thaw gc` and `thaw snapshot list`: the snapshot store from the command line.
use anyhow::Result;
use std::path::Path;
use thaw_output::outln;

/// Crash cleanup (also run at every worker start); prints what it removed.
pub fn gc(w: &thaw_worker::Worker) -> Result<()> {
    let removed = w.gc()?;
    for p in &removed {
        outln!("removed {}", p.display());
    }
    outln!("gc: removed {} leftover(s) of dead workers", removed.len());
    Ok(())
}

/// The published snapshot of every function on a tier.
pub fn list(home: &Path, tier: &str) -> Result<()> {
    let t = thaw_store::Tier::by_name(tier, home)?;
    let all = t.list()?;
    if all.is_empty() {
        outln!("no snapshots on {tier} ({})", t.path.display());
    }
    for (name, snap) in all {
        match snap {
            Ok(s) => outln!(
                "{}\t{}\t{} MiB",
                s.manifest.function,
                s.dir.display(),
                s.manifest.memory.len >> 20
            ),
            Err(err) => outln!("BROKEN\t{}\t{err:#}", t.function_dir(&name).display()),
        }
    }
    Ok(())
}
