//! `thaw gc` and `thaw snapshot list`: the snapshot store from the command line
//! (and the benchmarks of reading it).
use anyhow::{Context, Result};
use std::path::Path;
use thaw_output::outln;

/// Crash cleanup (the worker start already ran it once; a second pass
/// catches anything a dying sandbox was still holding); prints what was removed.
pub fn gc(w: &thaw_worker::Worker) -> Result<()> {
    let mut removed = w.cleaned_at_start.clone();
    removed.extend(w.gc()?);
    for p in &removed {
        outln!("removed {}", p.display());
    }
    outln!("gc: removed {} leftover(s) of dead workers", removed.len());
    Ok(())
}

/// Checks a snapshot: it must be a private directory of ours (a planted tree
/// with consistent checksums is still refused), and every checksum must hold.
pub fn verify(dir: &Path) -> Result<()> {
    let snap = match (dir.parent(), dir.file_name()) {
        (Some(tier_path), Some(name)) if dir.join("current").is_symlink() => {
            let tier = thaw_store::Tier {
                name: "given",
                path: tier_path.to_owned(),
                emulated: false,
                description: "directory given on the command line",
            };
            tier.open_current(&name.to_string_lossy())?
                .with_context(|| format!("{}: no published version", dir.display()))?
        }
        _ => thaw_store::Snapshot::open(dir)?,
    };
    thaw_store::secure::check_private_dir(&snap.dir)?;
    snap.load_state()?;
    snap.verify_memory()?;
    outln!(
        "ok: {} ({} bytes of memory image)",
        snap.dir.display(),
        snap.manifest.memory.len
    );
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

/// `thaw bench store`: prints the table, and writes it to `markdown` if given.
pub fn bench(
    w: &thaw_worker::Worker,
    functions: &[String],
    runs: usize,
    markdown: Option<std::path::PathBuf>,
) -> Result<()> {
    let rows = thaw_bench::store::run(w, functions, runs)?;
    emit(&thaw_bench::store::markdown(&rows, runs), markdown)
}

/// `thaw bench state-decode`: prints the table, and writes it to `markdown` if given.
pub fn bench_state_decode(
    w: &thaw_worker::Worker,
    functions: &[String],
    runs: usize,
    markdown: Option<std::path::PathBuf>,
) -> Result<()> {
    let rows = thaw_bench::state_decode::run(w, functions, runs)?;
    emit(&thaw_bench::state_decode::markdown(&rows, runs), markdown)
}

/// Prints a benchmark's table, and writes it to `markdown` if given.
fn emit(md: &str, markdown: Option<std::path::PathBuf>) -> Result<()> {
    outln!("{md}");
    if let Some(p) = markdown {
        std::fs::write(&p, md).with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}
