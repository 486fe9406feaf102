//! The instance pool. Each instance is a live sandbox owned by one
//! long-lived thread (the sandbox's PDEATHSIG follows the thread that made
//! it), serving one invocation at a time. A request takes an idle warm
//! instance, else a new one restored from the function's snapshot, else
//! (no snapshot) booted. Which idle instances stay in RAM and which are
//! given up is decided by `thaw_policy::Engine` on the real clock, exactly
//! as the simulator drives it on virtual time.
//!
//! This file holds the pool's state and the policy's actions; `versions`
//! the deployed versions and their snapshots' places, `memory` the budget,
//! `acquire` the scheduling of requests onto instances, `thread` the
//! instance's own thread. (`thaw_sandbox::SandboxPool` is another thing:
//! sandboxes made ahead of restores.)
use std::collections::{HashMap, VecDeque};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};
use thaw_policy::{Action, Engine, FnId, InstanceId, Policy, XferId};
use thaw_worker::Worker;
use tokio::sync::oneshot;

use crate::config::SnapshotTiers;
use crate::metrics::Metrics;

mod acquire;
mod deployed;
mod job;
mod limits;
mod memory;
mod start;
mod thread;
mod usage;
mod versions;

pub use deployed::{FnVersion, Placed, SandboxesAhead};
pub use job::{Created, JobDone};
pub use memory::Reservation;
pub use start::{level_of, predicted, Mode, StartType};
pub use usage::FunctionUsage;

use job::Job;
use usage::Measured;

/// Why the pool could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum InstancesError {
    #[error(transparent)]
    Policy(#[from] thaw_policy::PolicyError),
    #[error(transparent)]
    Tiers(#[from] thaw_tiers::TiersError),
}

/// Why no instance was given (`outcome::refused` says it to the caller).
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    #[error("every instance is busy and the queue is full")]
    QueueFull,
    #[error("the instance memory budget is exhausted")]
    Memory,
    #[error("the daemon is shutting down")]
    Draining,
    /// redeployed or deleted while the request waited
    #[error("redeployed or deleted while the request waited")]
    Replaced,
    #[error("at the instance cap")]
    AtCap,
    /// the node holds its most instances (the cap)
    #[error("the node holds its most instances ({0})")]
    NodeFull(u32),
    #[error("starting an instance failed: {0}")]
    Failed(String),
    #[error("no instance became free in time")]
    Waited,
}

struct Instance {
    policy_id: InstanceId,
    name: String,
    version: u64,
    tx: mpsc::Sender<Job>,
}

#[derive(Default)]
struct FnState {
    /// instances in any state (starting, busy, idle)
    live: u32,
    idle: u32,
    waiters: VecDeque<oneshot::Sender<()>>,
    version: u64,
}

struct State {
    engine: Engine,
    fns: HashMap<String, FnState>,
    idle: HashMap<InstanceId, Instance>,
    fn_ids: HashMap<String, FnId>,
    /// `fn_ids` backwards (ids are dense, in order of first deploy)
    fn_names: Vec<String>,
    /// Where the policy wants each function's snapshot: on the fast tier
    /// (true) or on the slow one; the mover makes it so off the request path.
    want_fast: HashMap<String, bool>,
    /// Transfers the policy issued and the mover has not finished:
    /// (function, whether it brings the snapshot up to the fast tier).
    transfers: HashMap<XferId, (String, bool)>,
    /// Requests waiting for the budget to hold one more running instance
    /// (of the function named), woken whenever RAM is given back.
    memory_waiters: VecDeque<(String, oneshot::Sender<()>)>,
    draining: bool,
}

pub struct Instances {
    state: Mutex<State>,
    worker: Arc<Worker>,
    metrics: Arc<Metrics>,
    /// the daemon's two snapshot tiers
    tiers: SnapshotTiers,
    /// their configurations, for their restore slots
    slot_tiers: Arc<HashMap<String, thaw_tiers::TierConfig>>,
    epoch: Instant,
    queue_cap: u32,
    /// the most instances the node holds (see `limits`)
    node_cap: u32,
    log_cap: u64,
    /// how long a switch of a version's snapshot waits for the restores
    /// still opening the old copy (`limits.switch_wait_ms`)
    switch_wait: Duration,
    /// instance threads alive (each owns a sandbox until it ends)
    threads: Arc<std::sync::atomic::AtomicUsize>,
    /// Function names whose snapshot placement changed (see `crate::tiering`).
    mover: Mutex<mpsc::Sender<String>>,
    /// Memory and CPU of each live instance, as its thread last read
    /// them, and the CPU of each function's ended instances.
    measured: Measured,
    /// Idle instances are charged what they were measured to hold (else
    /// their declared memory, `memory_accounting = "declared"`).
    measure_idle: bool,
    /// serves the in-sandbox SDK (set once when the daemon opens)
    pub xdt: std::sync::OnceLock<Arc<crate::xdt::XdtHost>>,
}

/// An instance leased to one request. Dropped without being released (the
/// request's future was cancelled), it gives its instance up.
pub struct Lease {
    instances: Arc<Instances>,
    inst: Option<Instance>,
    pub start: StartType,
    /// What the policy predicted: (start type, tier).
    pub predicted: (StartType, String),
    pub created: Option<Created>,
    pub queue_ms: f64,
    function: String,
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.inst.is_some() {
            let instances = self.instances.clone();
            instances.release(self, false);
        }
    }
}

impl Lease {
    pub fn instance_name(&self) -> &str {
        self.inst.as_ref().map_or("", |i| i.name.as_str())
    }
}

fn lock(m: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Instances {
    pub fn new(
        worker: Arc<Worker>,
        metrics: Arc<Metrics>,
        tiers: SnapshotTiers,
        policy: thaw_policy::Config,
        limits: &crate::config::Limits,
        measure_idle: bool,
        mover: mpsc::Sender<String>,
    ) -> Result<Instances, InstancesError> {
        let engine = Engine::new(policy)?;
        let (node_cap, bound) = limits::node_cap(limits.instances_per_node, limits::raise_nofile());
        tracing::info!(instances = node_cap, bound = %bound, "the node holds at most");
        let cfg = thaw_tiers::TiersConfig::load(&worker.home)?;
        let slot_tiers = tiers
            .names()
            .iter()
            .map(|t| Ok((t.to_string(), cfg.get(t)?.clone())))
            .collect::<Result<HashMap<_, _>, InstancesError>>()?;
        Ok(Instances {
            state: Mutex::new(State {
                engine,
                fns: HashMap::new(),
                idle: HashMap::new(),
                fn_ids: HashMap::new(),
                fn_names: Vec::new(),
                want_fast: HashMap::new(),
                transfers: HashMap::new(),
                memory_waiters: VecDeque::new(),
                draining: false,
            }),
            mover: Mutex::new(mover),
            measured: Arc::default(),
            worker,
            metrics,
            tiers,
            slot_tiers: Arc::new(slot_tiers),
            epoch: Instant::now(),
            queue_cap: limits.queue_per_function,
            node_cap,
            log_cap: limits.invocation_log_bytes,
            switch_wait: Duration::from_millis(limits.switch_wait_ms),
            threads: Arc::default(),
            measure_idle,
            xdt: std::sync::OnceLock::new(),
        })
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    /// Stops giving out instances; idle ones go.
    pub fn drain(&self) {
        let mut st = lock(&self.state);
        st.draining = true;
        let now = self.now();
        let ids: Vec<InstanceId> = st.idle.keys().copied().collect();
        for id in ids {
            let _ = st.engine.discard(now, id);
            forget_idle(&mut st, id);
        }
        for fp in st.fns.values_mut() {
            wake_all(Some(fp));
        }
        wake_memory(&mut st);
    }

    /// Waits (bounded) until every instance thread has ended, i.e. every
    /// sandbox is killed and its cgroups removed.
    pub async fn wait_for_instances(&self, limit: Duration) {
        use std::sync::atomic::Ordering;
        let t = Instant::now();
        while self.threads.load(Ordering::SeqCst) > 0 && t.elapsed() < limit {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Lets the policy expire keep-alive windows; refreshes the gauges.
    pub fn tick(&self) {
        let mut st = lock(&self.state);
        let mut out = Vec::new();
        let now = self.now();
        if let Some(x) = self.xdt.get() {
            thaw_xdt::sdk::Host::table(x.as_ref()).sweep(thaw_xdt::table::now_ms());
        }
        st.engine.advance(now, &mut out);
        self.apply(&mut st, out);
        let (mut live, mut idle) = (0, 0);
        for fp in st.fns.values() {
            live += fp.live as i64;
            idle += fp.idle as i64;
        }
        let g = |s: &str| {
            self.metrics
                .instances
                .get_or_create(&crate::metrics::StateLabel { state: s.into() })
                .clone()
        };
        g("idle").set(idle);
        g("busy").set(live - idle);
        let memory = |tier: &str, bytes: u64| {
            self.metrics
                .memory
                .get_or_create(&crate::metrics::TierLabel { tier: tier.into() })
                .set(i64::try_from(bytes).unwrap_or(i64::MAX))
        };
        let (resident, private) = {
            let m = self.measured.lock().unwrap_or_else(|p| p.into_inner());
            m.live.values().fold((0, 0), |(r, p), (_, u)| {
                (r + u.memory_bytes, p + u.private_bytes)
            })
        };
        memory("instances", resident);
        memory("instances_private", private);
        memory("instances_budgeted", st.engine.usage().ram_mb << 20);
    }

    /// (live, idle) instances of a function.
    pub fn counts(&self, name: &str) -> (u32, u32) {
        let st = lock(&self.state);
        st.fns.get(name).map_or((0, 0), |f| (f.live, f.idle))
    }

    /// Carries out the policy's actions. Instances go at once; snapshot
    /// transfers are handed to the mover (`crate::tiering`), which moves
    /// the snapshot between tmpfs and disk and then reports them done.
    /// A function keeps exactly one copy of its snapshot: where the policy
    /// wants none at all, it stays (or goes) on disk.
    fn apply(&self, st: &mut State, out: Vec<Action>) {
        let name_of = |st: &State, f: FnId| st.fn_names.get(f.0 as usize).cloned();
        let mut changed = Vec::new();
        for a in out {
            let (f, up) = match a {
                Action::Kill { instance } => {
                    forget_idle(st, instance);
                    continue;
                }
                // the deployed snapshot already holds the instance's state:
                // demoting it is dropping it and bringing the snapshot up
                Action::Checkpoint {
                    id, instance, f, ..
                } => {
                    forget_idle(st, instance);
                    (f, Some((id, true)))
                }
                Action::Download { id, f, .. } => (f, Some((id, true))),
                Action::Upload { id, f, .. } => (f, Some((id, false))),
                Action::DeleteDisk { f } => (f, None),
                Action::Cancel { id } => {
                    if let Some((name, true)) = st.transfers.remove(&id) {
                        st.want_fast.insert(name.clone(), false);
                        changed.push(name);
                    }
                    continue;
                }
                // the one copy is on disk (the policy forgets it: its next
                // prediction is a boot, counted when it is wrong)
                Action::DeleteNet { .. } => continue,
            };
            let Some(name) = name_of(st, f) else { continue };
            let want = up.is_some_and(|(_, up)| up);
            if let Some(w) = st.want_fast.get_mut(&name) {
                *w = want;
            }
            if let Some((id, up)) = up {
                st.transfers.insert(id, (name.clone(), up));
            }
            changed.push(name);
        }
        let tx = self.mover.lock().unwrap_or_else(|p| p.into_inner());
        for name in changed {
            // the mover has ended only when the daemon is going away
            let _ = tx.send(name);
        }
    }
}

impl Instance {
    /// The function this instance serves (its name is `FUNCTION-HEX`).
    fn name_fn(&self) -> &str {
        self.name.rsplit_once('-').map_or("", |(f, _)| f)
    }
}

/// The policy's id for function `name` (made on first use).
fn fn_id(st: &mut State, name: &str) -> FnId {
    if let Some(&f) = st.fn_ids.get(name) {
        return f;
    }
    #[allow(clippy::cast_possible_truncation)] // functions deployed number far below 2^32
    let f = FnId(st.fn_names.len() as u32);
    st.fn_ids.insert(name.to_string(), f);
    st.fn_names.push(name.to_string());
    f
}

/// Drops an idle instance (its thread ends and kills the sandbox).
fn forget_idle(st: &mut State, id: InstanceId) {
    if let Some(inst) = st.idle.remove(&id) {
        let f = inst.name_fn().to_string();
        if let Some(fp) = st.fns.get_mut(&f) {
            fp.idle -= 1;
            fp.live = fp.live.saturating_sub(1);
            wake_one(Some(fp));
        }
    }
}

fn wake_one(fp: Option<&mut FnState>) {
    let Some(fp) = fp else { return };
    while let Some(w) = fp.waiters.pop_front() {
        if w.send(()).is_ok() {
            return;
        }
    }
}

fn wake_all(fp: Option<&mut FnState>) {
    let Some(fp) = fp else { return };
    for w in fp.waiters.drain(..) {
        let _ = w.send(());
    }
}

/// Wakes every request waiting for RAM: each asks the policy again.
fn wake_memory(st: &mut State) {
    for (_, w) in st.memory_waiters.drain(..) {
        let _ = w.send(());
    }
}
