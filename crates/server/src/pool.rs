//! The instance pool. Each instance is a live sandbox owned by one
//! long-lived thread (the sandbox's PDEATHSIG follows the thread that made
//! it), serving one invocation at a time. A request takes an idle warm
//! instance, else a new one restored from the function's snapshot, else
//! (no snapshot) booted. Which idle instances stay in RAM and which are
//! given up is decided by `thaw_policy::Engine` on the real clock, exactly
//! as the simulator drives it on virtual time.
use serde_json::Value;
use std::collections::{HashMap, VecDeque};
use std::sync::{mpsc, Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use thaw_policy::{
    Action, Engine, FnId, Footprint, InstanceId, Outcome, Policy, SnapshotLevel, Start, XferId,
};
use thaw_worker::{RestoreRequest, UserFunction, Worker};
use tokio::sync::oneshot;

use crate::config::SnapshotTiers;

mod limits;
mod memory;
use crate::logs::{take_sandbox_output, LogEntry, Ring};
use crate::metrics::Metrics;
use crate::registry::Record;
use crate::stored::{RemoteCopy, Stored};
use memory::{wake_memory, Charge, MEMORY_PATIENCE};
use thaw_sandbox::{StartStrategy, StrategyKind};
use thaw_tiers::slots::RestoreSlot;
use thaw_tiers::stream::Stream;

/// How long a restore waits for one of its tier's restore slots.
const SLOT_WAIT: Duration = Duration::from_secs(60);

/// Why the pool could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error(transparent)]
    Policy(#[from] thaw_policy::PolicyError),
    #[error(transparent)]
    Tiers(#[from] thaw_tiers::TiersError),
}

/// One deployed version, as the pool runs it.
pub struct FnVersion {
    pub rec: Record,
    pub func: UserFunction,
    /// The trusted (verified) snapshot and the tier it is on now, if the
    /// version has one. The policy's moves replace it; a restore holds the
    /// read lock while it opens the snapshot, so a move removes the old
    /// copy only once no restore is reading it.
    pub placed: RwLock<Option<Placed>>,
    pub ring: Arc<Ring>,
    /// Sandboxes built ahead for this version's restores (`limits.sandbox_pool`;
    /// none for boot-only versions). Dropped with the version.
    pub sandboxes: Option<thaw_sandbox::SandboxPool>,
}

#[derive(Clone)]
pub struct Placed {
    pub tier: String,
    pub stored: Stored,
}

impl FnVersion {
    pub fn placed(&self) -> Option<Placed> {
        self.placed
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn has_snapshot(&self) -> bool {
        self.placed
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }

    /// Makes `new` the version's snapshot once no restore is opening the
    /// current one, waiting at most `wait`; returns the one replaced, or
    /// the time waited (`new` is dropped) if restores held on to it past
    /// `wait`. It polls
    /// rather than queue on the lock: std's `RwLock` holds off every new
    /// reader behind a queued writer, so a switch waiting for one long
    /// restore (a slot wait, a stream from the remote tier) would stall
    /// lookups, the pool's policy updates and the other restores with it.
    pub fn switch_placed(&self, new: Placed, wait: Duration) -> Result<Option<Placed>, Duration> {
        let t0 = Instant::now();
        loop {
            match self.placed.try_write() {
                Ok(mut placed) => return Ok(placed.replace(new)),
                Err(std::sync::TryLockError::Poisoned(p)) => {
                    return Ok(p.into_inner().replace(new))
                }
                Err(std::sync::TryLockError::WouldBlock) if t0.elapsed() >= wait => {
                    return Err(t0.elapsed())
                }
                Err(std::sync::TryLockError::WouldBlock) => {
                    std::thread::sleep(Duration::from_millis(5))
                }
            }
        }
    }
}

/// The daemon's snapshot tiers as the policy's levels below RAM: a snapshot
/// on the fast tier (tmpfs by default) is the policy's "disk" level (a
/// lukewarm start), one on the slow tier its "network" level (one step
/// slower).
pub fn level_of(tiers: &SnapshotTiers, tier: &str) -> SnapshotLevel {
    if tier == tiers.fast {
        SnapshotLevel::Disk
    } else {
        SnapshotLevel::Net
    }
}

/// The start the policy predicts, in the daemon's terms: (start type, tier).
pub fn predicted(tiers: &SnapshotTiers, start: Start) -> (StartType, String) {
    match start {
        Start::Warm => (StartType::Warm, "-".into()),
        Start::Lukewarm => (StartType::Restore, tiers.fast.clone()),
        Start::Remote => (StartType::Restore, tiers.slow.clone()),
        Start::Cold => (StartType::Boot, "-".into()),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartType {
    Warm,
    Restore,
    Boot,
}

impl StartType {
    /// How a new instance of a function that starts as `s` starts.
    pub fn of_new(s: StartStrategy) -> StartType {
        match s {
            StartStrategy::Boot => StartType::Boot,
            StartStrategy::Restore(_) => StartType::Restore,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            StartType::Warm => "warm",
            StartType::Restore => "restore",
            // a boot is named as the start strategy is
            StartType::Boot => StartStrategy::Boot.name(),
        }
    }
}

/// How a request wants its instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Normal,
    /// `?force=cold`: never a warm instance.
    Cold,
    /// prewarm: only a new instance, never wait.
    Prewarm,
}

enum Next {
    Create(InstanceId, f64, (StartType, String)),
    Wait(oneshot::Receiver<()>),
    /// waiting for RAM: also asks again once its patience is over
    WaitMemory(oneshot::Receiver<()>),
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

struct Job {
    event: Value,
    timeout: Duration,
    invocation_id: String,
    /// the caller's chain, for an invocation a function made (XDT)
    chain: Option<thaw_xdt::CallCtx>,
    /// pulls of other workers' objects started when the invocation arrived
    prefetched: crate::xdt::Prefetched,
    reply: oneshot::Sender<JobDone>,
}

/// What an instance thread answers for one job.
pub struct JobDone {
    /// The agent's answer, or why the instance is gone.
    pub reply: Result<thaw_worker::Invoked, String>,
    pub alive: bool,
}

/// What creating an instance took.
#[derive(Debug, Clone)]
pub struct Created {
    pub create_ms: f64,
    pub hook_ms: f64,
    pub strategy: StartStrategy,
    /// the tier the snapshot was restored from ("-" for a boot)
    pub tier: String,
}

struct Instance {
    policy_id: InstanceId,
    name: String,
    version: u64,
    tx: mpsc::Sender<Job>,
}

#[derive(Default)]
struct FnPool {
    /// instances in any state (starting, busy, idle)
    live: u32,
    idle: u32,
    waiters: VecDeque<oneshot::Sender<()>>,
    version: u64,
}

struct State {
    engine: Engine,
    fns: HashMap<String, FnPool>,
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

pub struct Pool {
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

type Measured = Arc<Mutex<Usage>>;

#[derive(Default)]
struct Usage {
    /// by instance name: its function and what it uses
    live: HashMap<String, (String, InstanceUsage)>,
    /// CPU time of each function's ended instances, in ns
    ended_cpu_ns: HashMap<String, u64>,
}

/// What one instance uses, as its thread last read it.
#[derive(Debug, Clone, Copy, Default)]
struct InstanceUsage {
    /// charged to its cgroup (or its RSS, if more)
    memory_bytes: u64,
    /// its own (anonymous) pages, without the snapshot's it shares
    private_bytes: u64,
    /// CPU time of its processes so far
    cpu_ns: u64,
    /// its cgroup's CPU quota (thousandths of a CPU)
    cpu_millis: Option<u64>,
    /// its cgroup's CPU weight (cgroup v2 units)
    cpu_weight: Option<u64>,
}

/// What a function's instances on this daemon use (`GET
/// /v1/functions/NAME/stats`).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct FunctionUsage {
    /// live instances (starting, busy or idle)
    pub instances: u32,
    /// memory charged to them now (cgroup or RSS, whichever is more:
    /// pages of the snapshot they map count in each)
    pub memory_bytes: u64,
    /// their own pages, without those of the snapshot they share: what
    /// the budget charges an idle instance
    pub private_bytes: u64,
    /// CPU time of every instance since the daemon started, ended ones
    /// included (it only grows)
    pub cpu_ns: u64,
    /// the CPU quota their cgroups have (none: unlimited)
    pub cpu_millis: Option<u64>,
    /// the CPU weight their cgroups have, cgroup v2 units (none: no cpu
    /// cgroup of their own, so the host's default)
    pub cpu_weight: Option<u64>,
}

/// RAM a deploy's sandbox holds in the policy's budget until it is gone.
pub struct Reservation {
    pool: Arc<Pool>,
    id: InstanceId,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut st = lock(&self.pool.state);
        let _ = st.engine.discard(self.pool.now(), self.id);
        wake_memory(&mut st);
    }
}

/// The policy's function id for deploy sandboxes (no function has this name).
const DEPLOYS: &str = "\0deploy";

/// An instance leased to one request. Dropped without being released (the
/// request's future was cancelled), it gives its instance up.
pub struct Lease {
    pool: Arc<Pool>,
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
            let pool = self.pool.clone();
            pool.release(self, false);
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

impl Pool {
    pub fn new(
        worker: Arc<Worker>,
        metrics: Arc<Metrics>,
        tiers: SnapshotTiers,
        policy: thaw_policy::Config,
        limits: &crate::config::Limits,
        measure_idle: bool,
        mover: mpsc::Sender<String>,
    ) -> Result<Pool, PoolError> {
        let engine = Engine::new(policy)?;
        let (node_cap, bound) = limits::node_cap(limits.instances_per_node, limits::raise_nofile());
        tracing::info!(instances = node_cap, bound = %bound, "the node holds at most");
        let cfg = thaw_tiers::TiersConfig::load(&worker.home)?;
        let slot_tiers = tiers
            .names()
            .iter()
            .map(|t| Ok((t.to_string(), cfg.get(t)?.clone())))
            .collect::<Result<HashMap<_, _>, PoolError>>()?;
        Ok(Pool {
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
        self.epoch.elapsed().as_micros() as u64
    }

    /// Makes `v` the version new instances run; idle instances of older
    /// versions go now, busy ones when their invocation ends. The policy
    /// learns where the version's snapshot is (which may make it move
    /// other functions' snapshots down to make room).
    pub fn set_version(&self, v: &FnVersion) {
        let name = v.rec.name.as_str();
        let mut st = lock(&self.state);
        let fid = fn_id(&mut st, name);
        st.fns.entry(name.to_string()).or_default().version = v.rec.version;
        self.drop_idle_of(&mut st, name, |old| old != v.rec.version);
        let placed = v.placed();
        let mb = v
            .rec
            .snapshot
            .as_ref()
            .map_or(0, |s| s.size_bytes.div_ceil(1 << 20) as u32);
        let level = placed.as_ref().map(|p| level_of(&self.tiers, &p.tier));
        match &placed {
            Some(p) => st
                .want_fast
                .insert(name.to_string(), p.tier == self.tiers.fast),
            None => st.want_fast.remove(name),
        };
        let mut out = Vec::new();
        st.engine.set_snapshot(self.now(), fid, mb, level, &mut out);
        // a new version's idle instances are charged their declared memory
        // until measured; its snapshot's pages are shared by all of them
        if self.measure_idle {
            let fp = Footprint {
                idle_mb: None,
                shared_mb: mb,
            };
            st.engine.set_footprint(fid, fp, &mut out);
        }
        self.apply(&mut st, out);
        wake_all(st.fns.get_mut(name));
        wake_memory(&mut st);
    }

    /// `v`'s snapshot is now where `v.placed` says (a shared copy kept on
    /// the fast tier): the policy learns its level, if `v` is still live.
    pub fn placed_changed(&self, v: &FnVersion) {
        let live = lock(&self.state).fns.get(&v.rec.name).map(|f| f.version);
        if live == Some(v.rec.version) {
            self.set_version(v);
        }
    }

    /// Forgets a function: idle instances go, waiters are told, the policy
    /// forgets its snapshot.
    pub fn remove(&self, name: &str) {
        let mut st = lock(&self.state);
        if let Some(fp) = st.fns.get_mut(name) {
            fp.version = 0;
        }
        self.drop_idle_of(&mut st, name, |_| true);
        if let Some(&fid) = st.fn_ids.get(name) {
            let mut out = Vec::new();
            st.engine.set_snapshot(self.now(), fid, 0, None, &mut out);
            self.apply(&mut st, out);
        }
        st.want_fast.remove(name);
        wake_all(st.fns.get_mut(name));
        wake_memory(&mut st);
        let mut m = self.measured.lock().unwrap_or_else(|p| p.into_inner());
        m.ended_cpu_ns.remove(name);
    }

    /// Counts a deploy's sandbox of `memory_mb` in the instance budget
    /// (idle instances make room as for any start); `None` when the budget
    /// cannot hold it.
    pub fn reserve(self: &Arc<Self>, memory_mb: u64) -> Option<Reservation> {
        let mut st = lock(&self.state);
        let fid = fn_id(&mut st, DEPLOYS);
        let mut out = Vec::new();
        let mem = memory_mb.min(u32::MAX as u64) as u32;
        let outcome = st
            .engine
            .arrive_skipping_warm(self.now(), fid, mem, &mut out);
        self.apply(&mut st, out);
        match outcome {
            Outcome::Started { instance, .. } => Some(Reservation {
                pool: self.clone(),
                id: instance,
            }),
            Outcome::Rejected => None,
        }
    }

    /// Where the policy wants `name`'s snapshot now: the fast tier (true)
    /// or the slow one; `None` for a function without a snapshot.
    pub fn wants_fast(&self, name: &str) -> Option<bool> {
        lock(&self.state).want_fast.get(name).copied()
    }

    /// The mover has carried out what the policy wanted for `name`: every
    /// transfer issued for it so far is done.
    pub fn transfers_done(&self, name: &str) {
        let mut st = lock(&self.state);
        let ids: Vec<XferId> = st
            .transfers
            .iter()
            .filter(|(_, (f, _))| f == name)
            .map(|(id, _)| *id)
            .collect();
        let now = self.now();
        for id in ids {
            st.transfers.remove(&id);
            let mut out = Vec::new();
            st.engine.transfer_done(now, id, &mut out);
            self.apply(&mut st, out);
        }
    }

    /// Transfers the policy issued that the mover has not finished.
    pub fn transfers_pending(&self) -> usize {
        lock(&self.state).transfers.len()
    }

    fn drop_idle_of(&self, st: &mut State, name: &str, pred: impl Fn(u64) -> bool) {
        let ids: Vec<InstanceId> = st
            .idle
            .iter()
            .filter(|(_, i)| i.name_fn() == name && pred(i.version))
            .map(|(id, _)| *id)
            .collect();
        let now = self.now();
        for id in ids {
            let _ = st.engine.discard(now, id);
            forget_idle(st, id);
        }
        wake_memory(st);
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
                .set(bytes as i64)
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

    /// What the function's instances use (read by each instance's thread
    /// after each invocation and every second while idle).
    pub fn usage(&self, name: &str) -> FunctionUsage {
        let m = self.measured.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = FunctionUsage {
            cpu_ns: m.ended_cpu_ns.get(name).copied().unwrap_or(0),
            ..FunctionUsage::default()
        };
        for (f, u) in m.live.values() {
            if f == name {
                out.instances += 1;
                out.memory_bytes += u.memory_bytes;
                out.private_bytes += u.private_bytes;
                out.cpu_ns += u.cpu_ns;
                out.cpu_millis = out.cpu_millis.or(u.cpu_millis);
                out.cpu_weight = out.cpu_weight.or(u.cpu_weight);
            }
        }
        out
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

    /// Finds or makes an instance for one request of `v`.
    pub async fn acquire(
        self: &Arc<Self>,
        v: &Arc<FnVersion>,
        mode: Mode,
    ) -> Result<Lease, Refusal> {
        let t0 = Instant::now();
        // when RAM was last given back while this request waited for it
        let mut ram_back = t0;
        let name = v.rec.name.clone();
        loop {
            let next = {
                let mut st = lock(&self.state);
                if st.draining {
                    return Err(Refusal::Draining);
                }
                let fid = *st.fn_ids.get(&name).ok_or(Refusal::Replaced)?;
                let cap = v.rec.max_instances;
                let fp = st.fns.entry(name.clone()).or_default();
                if fp.version != v.rec.version {
                    return Err(Refusal::Replaced);
                }
                let (live, idle) = (fp.live, fp.idle);
                let warm_ok = mode == Mode::Normal && idle > 0;
                if mode == Mode::Cold && live >= cap && idle > 0 {
                    // room for the cold start: give up one idle instance
                    if let Some(id) = st
                        .idle
                        .iter()
                        .find(|(_, i)| i.name_fn() == name)
                        .map(|(k, _)| *k)
                    {
                        let _ = st.engine.discard(self.now(), id);
                        forget_idle(&mut st, id);
                    }
                }
                let live = st.fns[&name].live;
                let node_full = !warm_ok && live < cap && self.node_full(&mut st, mode)?;
                if node_full {
                    self.wait_for_memory(&mut st, &name)?
                } else if warm_ok || live < cap {
                    let mut out = Vec::new();
                    let mem = v.rec.memory_mb as u32;
                    let now = self.now();
                    // a prewarm never gives idle instances up for RAM that
                    // running ones hold: it is made ahead of any need
                    let patient = mode == Mode::Prewarm || ram_back.elapsed() < MEMORY_PATIENCE;
                    let outcome = if patient {
                        st.engine.arrive_patiently(now, fid, mem, warm_ok, &mut out)
                    } else if warm_ok {
                        st.engine.arrive(now, fid, mem, &mut out)
                    } else {
                        st.engine.arrive_skipping_warm(now, fid, mem, &mut out)
                    };
                    self.apply(&mut st, out);
                    let queue_ms = t0.elapsed().as_secs_f64() * 1e3;
                    let next = match outcome {
                        Outcome::Rejected => self.wait_for_memory(&mut st, &name)?,
                        Outcome::Started {
                            start: Start::Warm,
                            instance,
                            ..
                        } => {
                            let Some(inst) = st.idle.remove(&instance) else {
                                let _ = st.engine.discard(now, instance);
                                return Err(Refusal::Failed(
                                    "policy and pool disagree about an idle instance".into(),
                                ));
                            };
                            if let Some(fp) = st.fns.get_mut(&name) {
                                fp.idle -= 1;
                            }
                            self.metrics.queue_wait.observe(queue_ms / 1e3);
                            return Ok(Lease {
                                pool: self.clone(),
                                inst: Some(inst),
                                start: StartType::Warm,
                                predicted: predicted(&self.tiers, Start::Warm),
                                created: None,
                                queue_ms,
                                function: name,
                            });
                        }
                        Outcome::Started {
                            instance, start, ..
                        } => {
                            st.fns.get_mut(&name).expect("entry made above").live += 1;
                            self.metrics.queue_wait.observe(queue_ms / 1e3);
                            Next::Create(instance, queue_ms, predicted(&self.tiers, start))
                        }
                    };
                    next
                } else {
                    if mode == Mode::Prewarm {
                        return Err(Refusal::AtCap);
                    }
                    let fp = st.fns.get_mut(&name).expect("entry made above");
                    if fp.waiters.len() as u32 >= self.queue_cap {
                        return Err(Refusal::QueueFull);
                    }
                    let (tx, rx) = oneshot::channel();
                    fp.waiters.push_back(tx);
                    Next::Wait(rx)
                }
            };
            // woken when an instance of this function frees up, RAM is
            // given back or the function changes; a bounded wait so
            // nothing hangs forever
            let limit = Duration::from_millis(v.rec.timeout_ms) + Duration::from_secs(30);
            let (wait, until) = match next {
                Next::Create(instance, queue_ms, predicted) => {
                    let ahead = mode == Mode::Prewarm;
                    return self.create(v, instance, queue_ms, predicted, ahead).await;
                }
                Next::Wait(rx) => (rx, limit),
                // patient, it asks again when its patience is over: idle
                // instances may go for it then
                Next::WaitMemory(rx) if mode == Mode::Prewarm => (rx, limit),
                Next::WaitMemory(rx) if ram_back.elapsed() < MEMORY_PATIENCE => {
                    let patience = ram_back + MEMORY_PATIENCE - t0;
                    (rx, patience.min(limit))
                }
                Next::WaitMemory(rx) => (rx, limit),
            };
            let woken = tokio::time::timeout(until.saturating_sub(t0.elapsed()), wait).await;
            if woken.is_err() && until == limit {
                return Err(Refusal::Waited);
            }
            if woken.is_ok() {
                ram_back = Instant::now();
            }
        }
    }

    /// Starts a new instance on its own thread: restore, else boot.
    async fn create(
        self: &Arc<Self>,
        v: &Arc<FnVersion>,
        policy_id: InstanceId,
        queue_ms: f64,
        predicted: (StartType, String),
        ahead: bool,
    ) -> Result<Lease, Refusal> {
        let (tx, rx) = mpsc::channel::<Job>();
        let (ready_tx, ready_rx) = oneshot::channel();
        let name = format!("{}-{}", v.rec.name, hex::encode(rand::random::<[u8; 6]>()));
        let start = if v.has_snapshot() {
            StartType::Restore
        } else {
            StartType::Boot
        };
        // the lease exists before the wait: if this future is dropped, the
        // slot goes back to the pool (and the thread's channel closes)
        let mut lease = Lease {
            pool: self.clone(),
            inst: Some(Instance {
                policy_id,
                name: name.clone(),
                version: v.rec.version,
                tx,
            }),
            start,
            predicted,
            created: None,
            queue_ms,
            function: v.rec.name.clone(),
        };
        let worker = self.worker.clone();
        let vv = v.clone();
        let log_cap = self.log_cap;
        let measured = self.measured.clone();
        let xdt = self.xdt.get().cloned();
        let slot_tiers = self.slot_tiers.clone();
        let alive = ThreadCount::new(&self.threads);
        let metrics = self.metrics.clone();
        let pool = Arc::downgrade(self);
        let spawned = std::thread::Builder::new()
            .name(format!("thaw-inst-{}", v.rec.name))
            .spawn(move || {
                let _alive = alive;
                let services = InstanceServices {
                    log_cap,
                    gauge: MemoryGauge {
                        measured,
                        instance: name.clone(),
                        function: vv.rec.name.clone(),
                        last: InstanceUsage::default(),
                        cpu: None,
                        charge: Charge {
                            pool: pool.clone(),
                            id: policy_id,
                            mb: None,
                        },
                    },
                    xdt,
                    slot_tiers,
                    metrics,
                    pool,
                    ahead,
                };
                instance_thread(worker, vv, name, rx, ready_tx, services)
            });
        let created = match spawned {
            Err(e) => Err(format!("starting an instance thread: {e}")),
            Ok(_) => ready_rx
                .await
                .unwrap_or_else(|_| Err("the instance thread ended".into())),
        };
        match created {
            Ok(c) => {
                if start == StartType::Restore {
                    self.metrics
                        .restore
                        .get_or_create(&crate::metrics::RestoreLabels {
                            strategy: c.strategy.to_string(),
                            tier: c.tier.clone(),
                        })
                        .observe(c.create_ms / 1e3);
                }
                lease.created = Some(c);
                Ok(lease)
            }
            Err(e) => {
                self.release(&mut lease, false);
                Err(Refusal::Failed(e))
            }
        }
    }

    /// Runs one invocation on a leased instance; the lease goes back to the
    /// pool whatever happens (also when the client has gone away).
    pub async fn run(
        self: &Arc<Self>,
        lease: Lease,
        event: Value,
        timeout: Duration,
        invocation_id: String,
        prefetched: crate::xdt::Prefetched,
    ) -> (Lease, JobDone) {
        self.run_in_chain(lease, event, timeout, invocation_id, None, prefetched)
            .await
    }

    /// [`Pool::run`] for an invocation a function made: it joins the
    /// caller's chain (`None`: a top-level invocation starts one).
    pub async fn run_in_chain(
        self: &Arc<Self>,
        mut lease: Lease,
        event: Value,
        timeout: Duration,
        invocation_id: String,
        chain: Option<thaw_xdt::CallCtx>,
        prefetched: crate::xdt::Prefetched,
    ) -> (Lease, JobDone) {
        let (tx, rx) = oneshot::channel();
        let job = Job {
            event,
            timeout,
            invocation_id,
            chain,
            prefetched,
            reply: tx,
        };
        let sent = lease
            .inst
            .as_ref()
            .map(|i| i.tx.send(job).is_ok())
            .unwrap_or(false);
        let done = if sent {
            rx.await.unwrap_or(JobDone {
                reply: Err("the instance thread ended".into()),
                alive: false,
            })
        } else {
            JobDone {
                reply: Err("the instance is gone".into()),
                alive: false,
            }
        };
        self.release(&mut lease, done.alive);
        (lease, done)
    }

    /// Gives an instance back: idle if alive and current, else gone.
    pub fn release(&self, lease: &mut Lease, alive: bool) {
        let Some(inst) = lease.inst.take() else {
            return;
        };
        let mut st = lock(&self.state);
        let now = self.now();
        let draining = st.draining;
        let current = st.fns.get(&lease.function).map(|f| f.version) == Some(inst.version);
        let mut out = Vec::new();
        if alive && current && !draining && st.engine.finish(now, inst.policy_id, &mut out).is_ok()
        {
            let id = inst.policy_id;
            st.idle.insert(id, inst);
            if let Some(fp) = st.fns.get_mut(&lease.function) {
                fp.idle += 1;
            }
            self.apply(&mut st, out);
        } else {
            let _ = st.engine.discard(now, inst.policy_id);
            if let Some(fp) = st.fns.get_mut(&lease.function) {
                fp.live = fp.live.saturating_sub(1);
            }
        }
        wake_one(st.fns.get_mut(&lease.function));
        // idle or gone, it no longer holds its declared memory
        wake_memory(&mut st);
    }
}

impl Instance {
    /// The function this instance serves (its name is `FUNCTION-HEX`).
    fn name_fn(&self) -> &str {
        self.name.rsplit_once('-').map_or("", |(f, _)| f)
    }
}

/// How often an idle instance's memory is read again.
const MEASURE_EVERY: Duration = Duration::from_secs(1);

/// What an instance thread gets from its daemon besides its jobs.
struct InstanceServices {
    /// bytes of output kept per invocation
    log_cap: u64,
    gauge: MemoryGauge,
    /// serves the in-sandbox SDK
    xdt: Option<Arc<crate::xdt::XdtHost>>,
    /// the snapshot tiers' configurations (restore slots)
    slot_tiers: Arc<HashMap<String, thaw_tiers::TierConfig>>,
    /// counts the network bytes of functions given egress
    metrics: Arc<Metrics>,
    /// told when a streamed shared snapshot is kept on the fast tier
    pool: std::sync::Weak<Pool>,
    /// made ahead of its requests (a prewarm): no invocation is coming
    /// soon to read the rest of its snapshot under the restore slot
    ahead: bool,
}

/// One instance's entry in the measured usage; gone with the instance
/// (its CPU time then counts among its function's ended instances').
struct MemoryGauge {
    measured: Measured,
    instance: String,
    function: String,
    last: InstanceUsage,
    /// its cgroup's CPU quota and weight, read at the first measure: they
    /// are set when the sandbox is made and never change
    cpu: Option<(Option<u64>, Option<u64>)>,
    charge: Charge,
}

impl MemoryGauge {
    fn cpu_of(&mut self, sb: &thaw_sandbox::Sandbox) -> (Option<u64>, Option<u64>) {
        *self
            .cpu
            .get_or_insert_with(|| (sb.cpu_millis(), sb.cpu_weight()))
    }

    fn set(&mut self, sb: &thaw_sandbox::Sandbox) {
        // a mmap restore's pages are the tier's page cache, charged to
        // whoever first read them, not to this sandbox: its RSS shows them
        let rss = sb.rss_kb().ok().map(|kb| kb << 10);
        let (cpu_millis, cpu_weight) = self.cpu_of(sb);
        let anon = sb.memory_anon();
        self.last = InstanceUsage {
            memory_bytes: sb.memory_usage().max(rss).unwrap_or(0),
            private_bytes: anon.unwrap_or(0),
            // a process gone between two reads keeps its last figure
            cpu_ns: sb.cpu_ns().unwrap_or(self.last.cpu_ns),
            cpu_millis,
            cpu_weight,
        };
        {
            let mut m = self.measured.lock().unwrap_or_else(|p| p.into_inner());
            m.live
                .insert(self.instance.clone(), (self.function.clone(), self.last));
        }
        // its own pages: those of the snapshot it maps are shared with the
        // other clones (the policy counts them once per function); without
        // a memory cgroup it stays charged its declared memory
        if let Some(anon) = anon {
            self.charge.set(anon);
        }
    }
}

impl Drop for MemoryGauge {
    fn drop(&mut self) {
        let mut m = self.measured.lock().unwrap_or_else(|p| p.into_inner());
        m.live.remove(&self.instance);
        *m.ended_cpu_ns.entry(self.function.clone()).or_default() += self.last.cpu_ns;
    }
}

/// Counts an instance thread from its spawn to its end.
struct ThreadCount(Arc<std::sync::atomic::AtomicUsize>);

impl ThreadCount {
    fn new(n: &Arc<std::sync::atomic::AtomicUsize>) -> ThreadCount {
        n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        ThreadCount(n.clone())
    }
}

impl Drop for ThreadCount {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The policy's id for function `name` (made on first use).
fn fn_id(st: &mut State, name: &str) -> FnId {
    if let Some(&f) = st.fn_ids.get(name) {
        return f;
    }
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

fn wake_one(fp: Option<&mut FnPool>) {
    let Some(fp) = fp else { return };
    while let Some(w) = fp.waiters.pop_front() {
        if w.send(()).is_ok() {
            return;
        }
    }
}

fn wake_all(fp: Option<&mut FnPool>) {
    let Some(fp) = fp else { return };
    for w in fp.waiters.drain(..) {
        let _ = w.send(());
    }
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// One instance's whole life: create the sandbox, then serve jobs until the
/// pool drops the sender or the sandbox dies.
fn instance_thread(
    worker: Arc<Worker>,
    v: Arc<FnVersion>,
    name: String,
    jobs: mpsc::Receiver<Job>,
    ready: oneshot::Sender<Result<Created, String>>,
    services: InstanceServices,
) {
    let InstanceServices {
        log_cap,
        mut gauge,
        xdt,
        slot_tiers,
        metrics,
        pool,
        ahead,
    } = services;
    let t0 = Instant::now();
    let init_timeout = Duration::from_millis(v.rec.timeout_ms.max(60_000));
    // the read lock is held while the restore opens the snapshot: a move
    // does not remove this copy under it
    let mut stream = None;
    let mut shared_copy = None;
    // a restore reads from its tier until its first reply: it holds one of
    // the tier's restore slots until then, or until it idles (shared by
    // every thaw process)
    let mut slot = None;
    let restored = {
        let placed = v.placed.read().unwrap_or_else(|p| p.into_inner());
        placed.as_ref().map(|p| {
            let r = v
                .rec
                .strategy
                .restore()
                .ok_or_else(|| -> thaw_error::BoxError {
                    format!("{} boots its instances, yet has a snapshot", v.rec.name).into()
                })
                .and_then(|s| {
                    if let Some(t) = slot_tiers.get(&p.tier) {
                        slot = Some(RestoreSlot::acquire(&worker.home, t, SLOT_WAIT)?);
                    }
                    Ok(s)
                })
                .and_then(|s| match &p.stored {
                    Stored::Local(snap) => Ok(worker.restore(
                        RestoreRequest::new(snap, s)
                            .function(&v.func)
                            .pool(v.sandboxes.as_ref()),
                    )?),
                    Stored::Remote(copy) => {
                        let (started, s) = restore_streamed(&worker, copy, s, &v)?;
                        stream = Some(s);
                        shared_copy = copy.is_shared().then(|| copy.clone());
                        Ok(started)
                    }
                });
            (r, p.tier.clone())
        })
    };
    let made = match restored {
        Some((r, tier)) => r.and_then(|(mut sb, _)| {
            let create_ms = ms(t0);
            // the whole step as the request waits for it (the runtime's
            // page faults included), not only the hook's own time
            let t1 = Instant::now();
            thaw_worker::after_restore(&mut sb, &name, init_timeout)?;
            Ok((
                sb,
                Created {
                    create_ms,
                    hook_ms: ms(t1),
                    strategy: v.rec.strategy,
                    tier,
                },
            ))
        }),
        None => worker
            .start_user(&v.func, init_timeout)
            .map_err(Into::into)
            .map(|(sb, _)| {
                (
                    sb,
                    Created {
                        create_ms: ms(t0),
                        hook_ms: 0.0,
                        strategy: StartStrategy::Boot,
                        tier: "-".into(),
                    },
                )
            }),
    };
    let mut sb = match made {
        Ok((sb, c)) => {
            // a prewarm's instance goes idle at once: measured before, it is
            // charged what it holds then, not its declared memory (a
            // request's is measured right after its reply, off its path)
            if ahead {
                gauge.set(&sb);
            }
            let _ = ready.send(Ok(c));
            if ahead {
                drop(slot.take());
            }
            sb
        }
        Err(e) => {
            let _ = ready.send(Err(thaw_error::chain(&*e)));
            return;
        }
    };
    let mut streamed_whole = false;
    // what the runtime printed while starting is not any invocation's
    let _ = take_sandbox_output(sb.log_path(), 0);
    loop {
        gauge.set(&sb);
        let job = match jobs.recv_timeout(MEASURE_EVERY) {
            Ok(job) => job,
            // an instance nobody invoked within a second gives its tier's
            // restore slot back: other restores must not wait behind it
            Err(mpsc::RecvTimeoutError::Timeout) => {
                drop(slot.take());
                continue;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        let Job {
            event,
            timeout,
            invocation_id,
            chain,
            prefetched,
            reply: job_reply,
        } = job;
        // dropped after the reply is sent: the objects the function got
        // are freed off the invocation's path
        let mut sdk_session = xdt.as_ref().map(|host| {
            let ctx = chain.unwrap_or_else(|| {
                thaw_xdt::CallCtx::root(&v.rec.owner, &v.rec.name, Instant::now() + timeout)
            });
            thaw_xdt::sdk::Session::new(host.as_ref(), ctx, v.rec.memory_mb << 20)
                .with_prefetched(prefetched)
        });
        let net_before = sb.network().map(|n| n.bytes());
        let reply = match &mut sdk_session {
            Some(sdk_session) => thaw_worker::invoke_event_serving(
                &mut sb,
                &event,
                timeout,
                Some(&invocation_id),
                &mut |r, fds| {
                    let out = sdk_session.serve(r, fds);
                    (out.body, out.fd)
                },
            ),
            None => thaw_worker::invoke_event_as(&mut sb, &event, timeout, Some(&invocation_id)),
        }
        .map_err(|e| thaw_error::chain(&e));
        let (output, truncated) = take_sandbox_output(sb.log_path(), log_cap);
        // what the instance received and sent during this invocation
        let net = net_before
            .zip(sb.network().map(|n| n.bytes()))
            .map(|(b, a)| {
                let d = (a.0.saturating_sub(b.0), a.1.saturating_sub(b.1));
                metrics.egress_bytes(&v.rec.name, d);
                d
            });
        if !output.is_empty() || net.is_some_and(|d| d != (0, 0)) {
            let entry = LogEntry {
                seq: 0,
                invocation_id,
                instance: name.clone(),
                unix_ms: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64),
                output,
                truncated,
                net_in_bytes: net.map(|d| d.0),
                net_out_bytes: net.map(|d| d.1),
            };
            if let Err(e) = v.ring.append(entry) {
                tracing::warn!(function = %v.rec.name, "writing the function log: {e:#}");
            }
        }
        // an agent-side timeout leaves the runtime usable, but the contract
        // is that a timed-out instance is replaced
        let timed_out = matches!(&reply, Ok(thaw_worker::Invoked { output: Err(e), .. })
            if e.kind() == thaw_sandbox::agent::ErrorKind::Timeout);
        let alive = sb.is_alive() && !timed_out;
        let _ = job_reply.send(JobDone { reply, alive });
        drop(sdk_session);
        if !alive {
            break;
        }
        // a streamed restore's image arrives in the background: after the
        // first reply, wait for the rest and check it whole (a chunk that
        // fails kills the instance through its page server)
        drop(slot.take());
        if let Some(s) = stream.as_mut().filter(|_| !streamed_whole) {
            streamed_whole = true;
            if let Err(e) = s.finish() {
                tracing::warn!(function = %v.rec.name, instance = %name, "the streamed snapshot did not arrive whole: {e:#}");
                break;
            }
            if let Some(copy) = shared_copy.take() {
                keep_shared(&worker.home, &v, &copy, &s.snapshot.dir, &pool);
            }
        }
    }
}

/// A stream of the copy shared across nodes arrived whole: it becomes the
/// node's own snapshot on the fast tier (restores read it from there; the
/// node's policy moves it from then on, as any other).
fn keep_shared(
    home: &std::path::Path,
    v: &Arc<FnVersion>,
    copy: &RemoteCopy,
    staged: &std::path::Path,
    pool: &std::sync::Weak<Pool>,
) {
    let Some(keep) = &copy.keep else { return };
    match keep.keep(home, staged) {
        Ok(Some(snap)) => {
            let kept = Placed {
                tier: keep.tier.clone(),
                stored: Stored::Local(snap),
            };
            // the pool is not held through the wait (a stop drops it)
            let Some(wait) = pool.upgrade().map(|p| p.switch_wait) else {
                return;
            };
            if let Err(waited) = v.switch_placed(kept, wait) {
                // restores stream the shared copy still; the kept one is
                // found again at the next start (`tiering::locate`)
                tracing::warn!(function = %v.rec.name, "kept the shared snapshot on this node, yet restores held the shared copy past {waited:?}: they stream it still");
                return;
            }
            tracing::info!(function = %v.rec.name, tier = %keep.tier, "kept the shared snapshot on this node");
            if let Some(pool) = pool.upgrade() {
                pool.placed_changed(v);
            }
        }
        Ok(None) => {}
        Err(e) => {
            tracing::warn!(function = %v.rec.name, "keeping the shared snapshot on this node: {e:#}")
        }
    }
}

/// A restore that streams `copy` from the remote tier (lazily: the
/// function's strategy if it [streams](thaw_restore::Strategy::streams),
/// else `reap`, whose working set travels first, or `uffd` when the
/// snapshot has none). The stream must outlive the instance: it serves the
/// pages that have not arrived yet.
fn restore_streamed(
    worker: &Worker,
    copy: &RemoteCopy,
    strategy: StrategyKind,
    v: &FnVersion,
) -> Result<
    (
        (thaw_sandbox::Sandbox, thaw_checkpoint::RestoreReport),
        Stream,
    ),
    thaw_error::BoxError,
> {
    let stream = Stream::open(&copy.home, copy.store.clone(), &copy.name)?;
    let streams = thaw_restore::strategy(strategy).streams();
    let strategy = match (streams, stream.has_working_set) {
        (true, _) if strategy != StrategyKind::Reap => strategy,
        (_, true) => StrategyKind::Reap,
        // no working set was recorded (no sample event): page by page
        (_, false) => StrategyKind::Uffd,
    };
    let started = worker
        .restore(
            RestoreRequest::new(&stream.snapshot, strategy)
                .function(&v.func)
                .pool(v.sandboxes.as_ref())
                .streamed(stream.inputs()?),
        )
        .map_err(|e| stream.explain(e.into()))?;
    Ok((started, stream))
}
