//! The daemon's shared state: what the API's handlers, deploys, the mover
//! and nested invocations all work on.
use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, RwLock};
use thaw_worker::Worker;

use crate::config::Config;
use crate::instances::{FnVersion, Instances};
use crate::registry::Registry;
use crate::{logs, metrics, stored};

/// One function's lock (its deploys, or its snapshot moves).
pub type FnLock = Arc<tokio::sync::Mutex<()>>;

fn lock_of(locks: &Mutex<HashMap<String, FnLock>>, name: &str) -> FnLock {
    let mut locks = locks.lock().unwrap_or_else(|p| p.into_inner());
    locks.entry(name.to_string()).or_default().clone()
}

/// Everything the handlers share.
pub struct App {
    pub cfg: Config,
    pub worker: Arc<Worker>,
    pub instances: Arc<Instances>,
    pub registry: Registry,
    pub metrics: Arc<metrics::Metrics>,
    pub functions: RwLock<HashMap<String, Arc<FnVersion>>>,
    pub deploy_locks: Mutex<HashMap<String, FnLock>>,
    /// Held by the mover for a whole snapshot move of the function (copy
    /// and switch), and by a delete: a delete then a redeploy would take
    /// the snapshot's name again while the move still writes it.
    pub move_locks: Mutex<HashMap<String, FnLock>>,
    pub rings: Mutex<HashMap<String, Arc<logs::Ring>>>,
    pub draining: AtomicBool,
    /// Held by the mover for each snapshot move (a stop waits for it).
    pub mover_busy: Mutex<()>,
    /// The slow snapshot tier's client, when that tier is remote.
    pub remote: stored::RemoteClient,
    /// This node's tag in its snapshots' names, when it shares snapshots
    /// (`crate::tiering::snapshot_name`).
    pub node: Option<String>,
    /// The bridge and rule table of functions given egress, made at the
    /// first such deploy (a daemon without them sets up nothing).
    pub network: Mutex<Option<Arc<thaw_egress::Network>>>,
    /// Image roots held by imports and deploys in flight (`crate::roots`).
    pub root_pins: crate::roots::Pins,
    /// Each function's measured cold starts, for placement's estimates.
    pub calibrations: crate::calibration::Calibrations,
}

impl App {
    /// The root hash `rec`'s snapshots record: its image root's, else the
    /// runtime root's.
    pub fn root_hash(&self, rec: &crate::registry::Record) -> String {
        match &rec.root {
            Some(r) => crate::roots::function_root_hash(&r.tree, &self.worker.root.hash),
            None => self.worker.root.hash.clone(),
        }
    }

    /// One deploy, delete or snapshot switch of a function at a time (a
    /// move's copy runs without it: deploys go on meanwhile).
    pub fn deploy_lock(&self, name: &str) -> FnLock {
        lock_of(&self.deploy_locks, name)
    }

    /// One snapshot move or delete of a function at a time.
    pub fn move_lock(&self, name: &str) -> FnLock {
        lock_of(&self.move_locks, name)
    }

    /// `taking` (locks being taken) given at most `limits.lock_wait_ms`:
    /// None if it took longer, and the request should answer busy rather
    /// than wait unbounded behind a long copy or move.
    pub async fn within_lock_wait<T>(
        &self,
        taking: impl std::future::Future<Output = T>,
    ) -> Option<T> {
        let wait = std::time::Duration::from_millis(self.cfg.limits.lock_wait_ms);
        tokio::time::timeout(wait, taking).await.ok()
    }

    /// Removes the image roots no version names any more (`crate::roots::gc`).
    pub fn drop_unused_roots(&self) {
        crate::roots::gc(&self.cfg, &self.registry.dir, &self.root_pins, false);
    }

    /// The live version of a function.
    pub fn function(&self, name: &str) -> Option<Arc<FnVersion>> {
        self.functions
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }
}
