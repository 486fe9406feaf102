//! Snapshots between tiers, as the keep-alive policy says.
//!
//! The daemon keeps snapshots on two tiers named in its configuration
//! (`[snapshot_tiers]`: `fast`, tmpfs by default, and `slow`, the disk by
//! default; `slow` may be any other configured tier, the remote one
//! included). The pool's policy (`thaw_policy::Engine`) sees a snapshot on
//! the fast tier as its "disk" level and one on the slow tier as its
//! "network" level (see `instances::level_of`). When it demotes or promotes one,
//! the pool records where the snapshot should be and names the function to
//! the mover: one thread per daemon that carries the move out off the
//! request path, with the journaled copy of `thaw_tiers::moves` (under the
//! store's deploy lock, with an atomic publish), then switches the function's
//! restores to the new copy (once no restore is opening the old one, waiting
//! at most `limits.switch_wait_ms`, else the move is given up and the copy
//! removed) and removes the old one. The whole move holds the function's
//! move lock; only the switch (and the removal of the old copy) holds its
//! deploy lock too, and a move whose version a deploy replaced meanwhile is
//! given up. A deploy of the same function so waits only for a switch, a
//! delete for the whole move (a delete then a redeploy would reuse the
//! snapshot's name while the copy still writes it): each at most
//! `limits.lock_wait_ms`, then 503 `busy`. Lookups, invocations and
//! prewarms wait for neither.
//! A snapshot on a remote tier is restored by streaming it
//! (`thaw_tiers::stream`), as `thaw invoke --tier remote` does.
use std::path::Path;
use std::sync::{mpsc, Arc, Weak};
use thaw_tiers::moves::{self, Place};
use thaw_tiers::{Kind, TiersConfig};

use crate::app::App;
use crate::instances::{FnVersion, Placed};
use crate::stored::{RemoteClient, RemoteCopy, Stored};

/// Why a snapshot could not be found, copied or removed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("tier {0} is remote but not this daemon's slow snapshot tier")]
    NotOurRemote(String),
    #[error("{sname} is not on {tier} after its copy")]
    CopyMissing { sname: String, tier: String },
    #[error("the copy of {sname} on {tier}: {}", thaw_error::chain(&**cause))]
    CopyUnreadable {
        sname: String,
        tier: String,
        cause: thaw_error::BoxError,
    },
    #[error("restores kept opening {sname} on {tier} past {waited:?}: the move is given up")]
    RestoresHoldIt {
        sname: String,
        tier: String,
        waited: std::time::Duration,
    },
    #[error("{sname} was replaced by a newer version or deleted while it was copied to {tier}: the move is given up")]
    Superseded { sname: String, tier: String },
    /// The tier configuration or a store failed.
    #[error("{}", thaw_error::chain(&**.0))]
    Store(thaw_error::BoxError),
}

/// The tier configuration's and the stores' own errors, as `Store`.
macro_rules! store_error_from {
    ($($t:ty),*) => {$(
        impl From<$t> for Error {
            fn from(e: $t) -> Error {
                Error::Store(e.into())
            }
        }
    )*};
}
store_error_from!(
    thaw_tiers::TiersError,
    thaw_store::StoreError,
    thaw_store::PathError
);

pub type Result<T> = std::result::Result<T, Error>;

/// The store's name for a version's snapshot: `NAME-vN-ROOTHASH`, and
/// `-NODE` on a daemon sharing snapshots: local tiers live under the
/// daemon's own state home, but the nodes' remote tier is one bucket, where
/// each node's own snapshots (placed there by its policy) need names of
/// their own.
pub fn snapshot_name(app: &App, name: &str, version: u64) -> String {
    let root = &app.worker.root.hash[..16];
    match &app.node {
        Some(node) => format!("{name}-v{version}-{root}-{node}"),
        None => format!("{name}-v{version}-{root}"),
    }
}

/// Whether `tier` is the daemon's remote snapshot tier.
pub fn is_remote(app: &App, tier: &str) -> bool {
    app.remote.as_ref().is_some_and(|(name, _)| name == tier)
}

/// The local tier `tier` (a deploy's checkpoint goes onto one).
pub fn local_tier(app: &App, tier: &str) -> Result<thaw_store::Tier> {
    let cfg = TiersConfig::load(&app.cfg.home)?;
    Ok(moves::local_store(&app.cfg.home, cfg.get(tier)?)?)
}

/// Where snapshots of tier `tier` are, for a move.
fn place<'a>(home: &Path, remote: &'a RemoteClient, tier: &str) -> Result<Place<'a>> {
    let cfg = TiersConfig::load(home)?;
    let t = cfg.get(tier)?;
    if t.kind == Kind::Remote {
        let store = remote
            .as_ref()
            .filter(|(name, _)| name == tier)
            .map(|(_, s)| s.as_ref())
            .ok_or_else(|| Error::NotOurRemote(tier.to_string()))?;
        return Ok(Place::Remote {
            tier: tier.to_string(),
            store,
        });
    }
    Ok(Place::Local {
        tier: tier.to_string(),
        store: moves::local_store(home, t)?,
    })
}

/// Finishes or rolls back moves a killed daemon left half done.
pub fn recover_moves(home: &Path, remote: &RemoteClient) -> Result<()> {
    for line in moves::recover(home, &|t| place(home, remote, t))? {
        tracing::warn!("interrupted snapshot move: {line}");
    }
    Ok(())
}

/// The snapshot `sname` on `tier`, if it holds a committed one.
fn find(app: &App, tier: &str, sname: &str) -> Result<Option<Stored>> {
    Ok(match place(&app.cfg.home, &app.remote, tier)? {
        Place::Local { store, .. } => store.open_current(sname)?.map(Stored::Local),
        p @ Place::Remote { .. } => moves::holds(&p, sname)?.then(|| {
            Stored::Remote(Arc::new(RemoteCopy {
                store: app.remote.as_ref().expect("place checked it").1.clone(),
                home: app.cfg.home.clone(),
                name: sname.to_string(),
                keep: None,
            }))
        }),
    })
}

/// Removes snapshot `sname` from `tier` (nothing there is fine).
pub fn remove_copy(app: &App, tier: &str, sname: &str) -> Result<()> {
    match place(&app.cfg.home, &app.remote, tier)? {
        Place::Local { store, .. } => thaw_store::secure::remove_tree(&store.function_dir(sname))?,
        // the store's delete checks for the commit record itself
        p @ Place::Remote { .. } => moves::delete_snapshot(&p, sname)?,
    }
    Ok(())
}

/// Names of the snapshots on `tier` that `keep` selects (local: every
/// snapshot directory, published or not; remote: committed snapshots).
pub fn snapshots_on(app: &App, tier: &str, keep: &dyn Fn(&str) -> bool) -> Result<Vec<String>> {
    let names = match place(&app.cfg.home, &app.remote, tier)? {
        Place::Local { store, .. } => match std::fs::read_dir(&store.path) {
            Ok(rd) => rd
                .flatten()
                .map(|e| e.file_name().to_string_lossy().to_string())
                .collect(),
            Err(_) => Vec::new(),
        },
        p @ Place::Remote { .. } => moves::list(&p)?,
    };
    Ok(names.into_iter().filter(|n| keep(n)).collect())
}

/// Where version `version` of `name` has its snapshot: the fastest tier
/// holding it. A copy on a slower tier too (a move cut short between its
/// switch and the removal of the source) is removed.
pub fn locate(app: &App, name: &str, version: u64) -> Result<Option<Placed>> {
    let sname = snapshot_name(app, name, version);
    let mut found: Option<Placed> = None;
    for t in app.cfg.snapshot_tiers.names() {
        let Some(stored) = find(app, t, &sname)? else {
            continue;
        };
        if found.is_some() {
            tracing::warn!(function = %name, tier = t, "removing a second copy of the snapshot");
            drop(stored);
            remove_copy(app, t, &sname)?;
        } else {
            found = Some(Placed {
                tier: t.to_string(),
                stored,
            });
        }
    }
    Ok(found)
}

/// Moves `v`'s snapshot to `target` (no-op when it is there); returns the
/// (from, to) tiers of a move made.
pub fn move_to(app: &App, v: &FnVersion, target: &str) -> Result<Option<(String, String)>> {
    move_to_pausing(app, v, target, &|| {})
}

/// [`move_to`], calling `copied` once the copy is whole on `target` and
/// before the switch: the function's deploys are not held up meanwhile (a
/// test makes a transfer as long as it needs with it).
#[doc(hidden)]
pub fn move_to_pausing(
    app: &App,
    v: &FnVersion,
    target: &str,
    copied: &dyn Fn(),
) -> Result<Option<(String, String)>> {
    let name = &v.rec.name;
    let moves = app.move_lock(name);
    let _moving = moves.blocking_lock();
    let Some(cur) = v.placed() else {
        return Ok(None);
    };
    // the copy shared across nodes stays where it is: the node's own copy
    // is made from the first stream of it that arrives whole
    let shared = matches!(&cur.stored, Stored::Remote(c) if c.is_shared());
    if cur.tier == target || shared {
        return Ok(None);
    }
    let sname = snapshot_name(app, name, v.rec.version);
    let stored = copy_to(app, &sname, &cur.tier, target)?;
    copied();
    let deploys = app.deploy_lock(name);
    let _switching = deploys.blocking_lock();
    // a deploy replaced the version meanwhile: its snapshot stays where
    // the version (if still kept) has it
    if !app.function(name).is_some_and(|f| std::ptr::eq(&*f, v)) {
        drop(stored);
        remove_copy(app, target, &sname)?;
        return Err(Error::Superseded {
            sname,
            tier: target.to_string(),
        });
    }
    // the switch waits (bounded) for restores still opening the old copy
    let new = Placed {
        tier: target.to_string(),
        stored,
    };
    let wait = std::time::Duration::from_millis(app.cfg.limits.switch_wait_ms);
    match v.switch_placed(new, wait) {
        Ok(old) => drop(old),
        Err(waited) => {
            remove_copy(app, target, &sname)?;
            return Err(Error::RestoresHoldIt {
                sname,
                tier: cur.tier,
                waited,
            });
        }
    }
    // instances restored from the old copy keep their mappings of it
    remove_copy(app, &cur.tier, &sname)?;
    Ok(Some((cur.tier, target.to_string())))
}

/// Copies snapshot `sname` from tier `from` to `target` (journaled and
/// verified) and opens the copy; the source stays.
pub fn copy_to(app: &App, sname: &str, from: &str, target: &str) -> Result<Stored> {
    let home = &app.cfg.home;
    let (src, dst) = (
        place(home, &app.remote, from)?,
        place(home, &app.remote, target)?,
    );
    moves::copy_snapshot(home, sname, &src, &dst)?;
    let stored = find(app, target, sname)?.ok_or_else(|| Error::CopyMissing {
        sname: sname.to_string(),
        tier: target.to_string(),
    })?;
    if let Stored::Local(snap) = &stored {
        snap.open_image().map_err(|cause| Error::CopyUnreadable {
            sname: sname.to_string(),
            tier: target.to_string(),
            cause: cause.into(),
        })?;
    }
    Ok(stored)
}

/// Makes `name`'s snapshot be where the policy wants it, then tells the
/// policy its transfers for `name` are done.
fn reconcile(app: &Arc<App>, name: &str) {
    let _busy = app.mover_busy.lock().unwrap_or_else(|p| p.into_inner());
    if app.draining.load(std::sync::atomic::Ordering::SeqCst) {
        return;
    }
    if let (Some(v), Some(up)) = (app.function(name), app.instances.wants_fast(name)) {
        let tiers = &app.cfg.snapshot_tiers;
        let target = if up { &tiers.fast } else { &tiers.slow };
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
    app.instances.transfers_done(name);
}

/// Keeps the remote tier's connections open (when the slow tier is
/// remote): a stream's first round then opens none. Renewed inside the
/// client's idle timeout; ends when the daemon is dropped.
pub fn spawn_warmer(app: Weak<App>) -> std::io::Result<()> {
    let every = thaw_tiers::objects::POOL_IDLE / 2;
    std::thread::Builder::new()
        .name("thaw-remote-warm".into())
        .spawn(move || loop {
            {
                let Some(app) = app.upgrade() else { return };
                let Some((tier, store)) = &app.remote else {
                    return;
                };
                if let Err(e) = store.warm(thaw_tiers::stream::FIRST_ROUND) {
                    tracing::debug!(tier = %tier, "opening connections to the remote tier: {e:#}");
                }
            }
            std::thread::sleep(every);
        })?;
    Ok(())
}

/// Starts the mover: it ends when the daemon is dropped (the pool's sender
/// goes with it).
pub fn spawn_mover(app: Weak<App>, names: mpsc::Receiver<String>) -> std::io::Result<()> {
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
