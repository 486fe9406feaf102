//! Snapshots between tiers, as the keep-alive policy says.
//!
//! The pool's policy (`thaw_policy::Engine`) sees a function's snapshot on
//! tmpfs as its "disk" level and one on the disk tier as its "network"
//! level (see `pool::level_of`). When it demotes or promotes one, the pool
//! records where the snapshot should be and names the function to the
//! mover: one thread per daemon that carries the move out off the request
//! path, with issue 13's journaled copy (`thaw_tiers::moves`, the store's
//! deploy lock and atomic publish), then switches the function's restores
//! to the new copy and removes the old one. Deploys and deletes of the same
//! function wait for it (the daemon's per-function deploy lock).
use anyhow::{Context, Result};
use std::path::Path;
use std::sync::{mpsc, Arc, Weak};
use thaw_tiers::moves::{self, Place};

use crate::deploy::snapshot_name;
use crate::pool::{FnVersion, Placed};
use crate::App;

/// The snapshot tiers the daemon uses, fastest first.
pub const TIERS: [&str; 2] = ["tmpfs", "disk"];

fn place<'a>(home: &Path, tier: &str) -> Result<Place<'a>> {
    Ok(Place::Local {
        tier: tier.to_string(),
        store: thaw_store::Tier::by_name(tier, home)?,
    })
}

/// Finishes or rolls back moves a killed daemon left half done.
pub fn recover_moves(home: &Path) -> Result<()> {
    for line in moves::recover(home, &|t| place(home, t))? {
        tracing::warn!("interrupted snapshot move: {line}");
    }
    Ok(())
}

/// Where version `version` of `name` has its snapshot: the fastest tier
/// holding it. A copy on a slower tier too (a move cut short between its
/// switch and the removal of the source) is removed.
pub fn locate(app: &App, name: &str, version: u64) -> Result<Option<Placed>> {
    let sname = snapshot_name(app, name, version);
    let mut found: Option<Placed> = None;
    for t in TIERS {
        let store = app.worker.tier(t)?;
        let Some(snap) = store.open_current(&sname)? else {
            continue;
        };
        if found.is_some() {
            tracing::warn!(function = %name, tier = t, "removing a second copy of the snapshot");
            drop(snap);
            thaw_store::secure::remove_tree(&store.function_dir(&sname))?;
        } else {
            found = Some(Placed {
                tier: t.to_string(),
                snap,
            });
        }
    }
    Ok(found)
}

/// Moves `v`'s snapshot to `target` (no-op when it is there); returns the
/// (from, to) tiers of a move made.
pub fn move_to(app: &App, v: &FnVersion, target: &str) -> Result<Option<(String, String)>> {
    let Some(cur) = v.placed() else {
        return Ok(None);
    };
    if cur.tier == target {
        return Ok(None);
    }
    let sname = snapshot_name(app, &v.rec.name, v.rec.version);
    let snap = copy_to(app, &sname, &cur.tier, target)?;
    let old = {
        // taking the write lock waits for restores still opening the old copy
        let mut placed = v.placed.write().unwrap_or_else(|p| p.into_inner());
        placed.replace(Placed {
            tier: target.to_string(),
            snap,
        })
    };
    drop(old);
    // instances restored from the old copy keep their mappings of it
    let from_store = app.worker.tier(&cur.tier)?;
    thaw_store::secure::remove_tree(&from_store.function_dir(&sname))?;
    Ok(Some((cur.tier, target.to_string())))
}

/// Copies snapshot `sname` from tier `from` to `target` (journaled) and
/// opens the verified copy; the source stays.
pub fn copy_to(app: &App, sname: &str, from: &str, target: &str) -> Result<thaw_store::Snapshot> {
    let home = &app.cfg.home;
    moves::copy_snapshot(home, sname, &place(home, from)?, &place(home, target)?)?;
    let snap = app
        .worker
        .tier(target)?
        .open_current(sname)?
        .with_context(|| format!("{sname} is not on {target} after its copy"))?;
    snap.open_image()
        .with_context(|| format!("the copy of {sname} on {target}"))?;
    Ok(snap)
}

/// Makes `name`'s snapshot be where the policy wants it, then tells the
/// policy its transfers for `name` are done.
fn reconcile(app: &Arc<App>, name: &str) {
    let _busy = app.mover_busy.lock().unwrap_or_else(|p| p.into_inner());
    if app.draining.load(std::sync::atomic::Ordering::SeqCst) {
        return;
    }
    let lock = crate::deploy::deploy_lock(app, name);
    let guard = lock.blocking_lock();
    let v = app
        .functions
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .get(name)
        .cloned();
    if let (Some(v), Some(up)) = (v, app.pool.wants_tmpfs(name)) {
        let target = if up { "tmpfs" } else { "disk" };
        match move_to(app, &v, target) {
            Ok(Some((from, to))) => {
                tracing::info!(function = %name, %from, %to, "moved the snapshot");
                app.metrics
                    .moves
                    .get_or_create(&crate::metrics::MoveLabels { from, to })
                    .inc();
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(function = %name, "moving the snapshot to {target}: {e:#}")
            }
        }
    }
    drop(guard);
    app.pool.transfers_done(name);
}

/// Starts the mover: it ends when the daemon is dropped (the pool's sender
/// goes with it).
pub fn spawn_mover(app: Weak<App>, names: mpsc::Receiver<String>) -> Result<()> {
    std::thread::Builder::new()
        .name("thaw-mover".into())
        .spawn(move || {
            while let Ok(name) = names.recv() {
                let Some(app) = app.upgrade() else { return };
                reconcile(&app, &name);
            }
        })?;
    Ok(())
}
