//! `thaw snapshot ...`: the snapshot store from the command line.
use anyhow::{Context, Result};
use clap::Subcommand;
use std::path::{Path, PathBuf};
use thaw_output::outln;

#[derive(Subcommand)]
pub enum SnapCmd {
    /// Check a snapshot's ownership and its manifest, state and memory checksums
    /// (DIR: a version directory, or a function's directory for its published version)
    Verify { dir: PathBuf },
    /// List snapshots on a tier
    List {
        #[arg(long, default_value = "tmpfs")]
        tier: String,
    },
    /// Move a snapshot between tiers (copy, verify, switch, delete; crash-safe)
    Move {
        /// Function (or snapshot directory name)
        function: String,
        #[arg(long)]
        from: String,
        #[arg(long)]
        to: String,
    },
    /// Copy a snapshot onto another tier, keeping the source (e.g. fetch from remote to restore);
    /// what a cold start reads first travels first
    Get {
        function: String,
        #[arg(long)]
        from: String,
        #[arg(long)]
        to: String,
        /// Tiers to copy from instead, in order, when --from fails (down, slow, dropped
        /// mid-transfer, or a copy that fails verification)
        #[arg(long)]
        fallback: Option<String>,
    },
    /// The tiers holding a function's snapshot (finishing interrupted moves first)
    Where { function: String },
}

pub fn run(home: &Path, cmd: SnapCmd) -> Result<()> {
    use crate::tiers::{snapshot_transfer, snapshot_where};
    match cmd {
        SnapCmd::Verify { dir } => verify(&dir),
        SnapCmd::Move { function, from, to } => {
            snapshot_transfer(home, &function, &from, &to, false, &[])
        }
        SnapCmd::Get {
            function,
            from,
            to,
            fallback,
        } => {
            let fallback = fallback.as_deref().map(crate::split).unwrap_or_default();
            snapshot_transfer(home, &function, &from, &to, true, &fallback)
        }
        SnapCmd::Where { function } => snapshot_where(home, &function),
        SnapCmd::List { tier } => list(home, &tier),
    }
}

/// Checks a snapshot: it must be a private directory of ours (a planted tree
/// with consistent checksums is still refused), and every checksum must hold.
fn verify(dir: &Path) -> Result<()> {
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
fn list(home: &Path, tier: &str) -> Result<()> {
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
