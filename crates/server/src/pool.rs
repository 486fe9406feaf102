//! The instance pool. Each instance is a live sandbox owned by one
//! long-lived thread (the sandbox's PDEATHSIG follows the thread that made
//! it), serving one invocation at a time. A request takes an idle warm
//! instance, else a new one restored from the function's snapshot, else
//! (no snapshot) booted. Which idle instances stay in RAM and which are
//! given up is decided by `thaw_policy::Engine` on the real clock, exactly
//! as the simulator drives it on virtual time.
use serde_json::Value;
use std::collections::{HashMap, VecDeque};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};
use thaw_policy::{Action, Engine, FnId, InstanceId, Outcome, Policy, Start};
use thaw_store::Snapshot;
use thaw_worker::{UserFunction, Worker};
use tokio::sync::oneshot;

use crate::logs::{take_sandbox_output, LogEntry, Ring};
use crate::metrics::Metrics;
use crate::registry::Record;

/// One deployed version, as the pool runs it.
pub struct FnVersion {
    pub rec: Record,
    pub func: UserFunction,
    /// Trusted (verified) snapshot, if the version has one.
    pub snapshot: Option<Snapshot>,
    pub ring: Arc<Ring>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartType {
    Warm,
    Restore,
    Boot,
}

impl StartType {
    pub fn name(self) -> &'static str {
        match self {
            StartType::Warm => "warm",
            StartType::Restore => "restore",
            StartType::Boot => "boot",
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
    Create(InstanceId, f64),
    Wait(oneshot::Receiver<()>),
}

/// Why no instance was given.
#[derive(Debug)]
pub enum Refusal {
    QueueFull,
    Memory,
    Draining,
    /// redeployed or deleted while the request waited
    Replaced,
    AtCap,
    Failed(String),
    Waited,
}

struct Job {
    event: Value,
    timeout: Duration,
    invocation_id: String,
    reply: oneshot::Sender<JobDone>,
}

/// What an instance thread answers for one job.
pub struct JobDone {
    /// The agent's reply, or why the instance is gone.
    pub reply: Result<Value, String>,
    pub alive: bool,
}

/// What creating an instance took.
#[derive(Debug, Clone, Default)]
pub struct Created {
    pub create_ms: f64,
    pub hook_ms: f64,
    pub strategy: String,
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
    draining: bool,
}

pub struct Pool {
    state: Mutex<State>,
    worker: Arc<Worker>,
    metrics: Arc<Metrics>,
    epoch: Instant,
    queue_cap: u32,
    log_cap: u64,
    /// instance threads alive (each owns a sandbox until it ends)
    threads: Arc<std::sync::atomic::AtomicUsize>,
}

/// An instance leased to one request. Dropped without being released (the
/// request's future was cancelled), it gives its instance up.
pub struct Lease {
    pool: Arc<Pool>,
    inst: Option<Instance>,
    pub start: StartType,
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
        policy: thaw_policy::Config,
        queue_cap: u32,
        log_cap: u64,
    ) -> anyhow::Result<Pool> {
        let engine = Engine::new(policy).map_err(anyhow::Error::msg)?;
        Ok(Pool {
            state: Mutex::new(State {
                engine,
                fns: HashMap::new(),
                idle: HashMap::new(),
                fn_ids: HashMap::new(),
                draining: false,
            }),
            worker,
            metrics,
            epoch: Instant::now(),
            queue_cap,
            log_cap,
            threads: Arc::default(),
        })
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_micros() as u64
    }

    /// Makes `version` the one new instances run; idle instances of older
    /// versions go now, busy ones when their invocation ends.
    pub fn set_version(&self, name: &str, version: u64) {
        let mut st = lock(&self.state);
        let next = st.fn_ids.len() as u32;
        st.fn_ids.entry(name.to_string()).or_insert(FnId(next));
        st.fns.entry(name.to_string()).or_default().version = version;
        self.drop_idle_of(&mut st, name, |v| v != version);
        wake_all(st.fns.get_mut(name));
    }

    /// Forgets a function: idle instances go, waiters are told.
    pub fn remove(&self, name: &str) {
        let mut st = lock(&self.state);
        if let Some(fp) = st.fns.get_mut(name) {
            fp.version = 0;
        }
        self.drop_idle_of(&mut st, name, |_| true);
        wake_all(st.fns.get_mut(name));
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
        self.metrics
            .memory
            .get_or_create(&crate::metrics::TierLabel {
                tier: "instances".into(),
            })
            .set((st.engine.usage().ram_mb << 20) as i64);
    }

    /// (live, idle) instances of a function.
    pub fn counts(&self, name: &str) -> (u32, u32) {
        let st = lock(&self.state);
        st.fns.get(name).map_or((0, 0), |f| (f.live, f.idle))
    }

    /// Carries out the policy's actions.
    fn apply(&self, st: &mut State, mut out: Vec<Action>) {
        while let Some(a) = out.pop() {
            match a {
                Action::Kill { instance } => forget_idle(st, instance),
                Action::Checkpoint { id, instance, .. } => {
                    // the deployed snapshot already holds this function:
                    // demoting the instance is dropping it
                    forget_idle(st, instance);
                    let mut more = Vec::new();
                    st.engine.transfer_done(self.now(), id, &mut more);
                    out.extend(more);
                }
                Action::Download { id, .. } | Action::Upload { id, .. } => {
                    let mut more = Vec::new();
                    st.engine.transfer_done(self.now(), id, &mut more);
                    out.extend(more);
                }
                // the deployed snapshot stays on its tier for as long as
                // the function is deployed
                Action::Cancel { .. } | Action::DeleteDisk { .. } | Action::DeleteNet { .. } => {}
            }
        }
    }

    /// Finds or makes an instance for one request of `v`.
    pub async fn acquire(
        self: &Arc<Self>,
        v: &Arc<FnVersion>,
        mode: Mode,
    ) -> Result<Lease, Refusal> {
        let t0 = Instant::now();
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
                if warm_ok || live < cap {
                    let mut out = Vec::new();
                    let mem = v.rec.memory_mb as u32;
                    let now = self.now();
                    let outcome = if warm_ok {
                        st.engine.arrive(now, fid, mem, &mut out)
                    } else {
                        st.engine.arrive_skipping_warm(now, fid, mem, &mut out)
                    };
                    self.apply(&mut st, out);
                    let queue_ms = t0.elapsed().as_secs_f64() * 1e3;
                    let next = match outcome {
                        Outcome::Rejected => return Err(Refusal::Memory),
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
                                created: None,
                                queue_ms,
                                function: name,
                            });
                        }
                        Outcome::Started { instance, .. } => {
                            st.fns.get_mut(&name).expect("entry made above").live += 1;
                            self.metrics.queue_wait.observe(queue_ms / 1e3);
                            Next::Create(instance, queue_ms)
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
            let wait = match next {
                Next::Create(instance, queue_ms) => {
                    return self.create(v, instance, queue_ms).await
                }
                Next::Wait(rx) => rx,
            };
            // woken when an instance of this function frees up (or the
            // function changes); a bounded wait so nothing hangs forever
            let limit = Duration::from_millis(v.rec.timeout_ms) + Duration::from_secs(30);
            if tokio::time::timeout(limit.saturating_sub(t0.elapsed()), wait)
                .await
                .is_err()
            {
                return Err(Refusal::Waited);
            }
        }
    }

    /// Starts a new instance on its own thread: restore, else boot.
    async fn create(
        self: &Arc<Self>,
        v: &Arc<FnVersion>,
        policy_id: InstanceId,
        queue_ms: f64,
    ) -> Result<Lease, Refusal> {
        let (tx, rx) = mpsc::channel::<Job>();
        let (ready_tx, ready_rx) = oneshot::channel();
        let name = format!("{}-{}", v.rec.name, hex::encode(rand::random::<[u8; 6]>()));
        let start = if v.snapshot.is_some() {
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
            created: None,
            queue_ms,
            function: v.rec.name.clone(),
        };
        let worker = self.worker.clone();
        let vv = v.clone();
        let log_cap = self.log_cap;
        let alive = ThreadCount::new(&self.threads);
        let spawned = std::thread::Builder::new()
            .name(format!("thaw-inst-{}", v.rec.name))
            .spawn(move || {
                let _alive = alive;
                instance_thread(worker, vv, name, rx, ready_tx, log_cap)
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
                            strategy: c.strategy.clone(),
                            tier: v.rec.tier.clone(),
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
        mut lease: Lease,
        event: Value,
        timeout: Duration,
        invocation_id: String,
    ) -> (Lease, JobDone) {
        let (tx, rx) = oneshot::channel();
        let job = Job {
            event,
            timeout,
            invocation_id,
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
    }
}

impl Instance {
    /// The function this instance serves (its name is `FUNCTION-HEX`).
    fn name_fn(&self) -> &str {
        self.name.rsplit_once('-').map_or("", |(f, _)| f)
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
    log_cap: u64,
) {
    let t0 = Instant::now();
    let init_timeout = Duration::from_millis(v.rec.timeout_ms.max(60_000));
    let made = match &v.snapshot {
        Some(snap) => worker
            .restore_user(snap, &v.rec.strategy, &v.func)
            .and_then(|(mut sb, _)| {
                let create_ms = ms(t0);
                let hook = thaw_worker::after_restore(&mut sb, &name, init_timeout)?;
                Ok((
                    sb,
                    Created {
                        create_ms,
                        hook_ms: hook.hook_ms,
                        strategy: v.rec.strategy.clone(),
                    },
                ))
            }),
        None => worker.start_user(&v.func, init_timeout).map(|(sb, _)| {
            (
                sb,
                Created {
                    create_ms: ms(t0),
                    hook_ms: 0.0,
                    strategy: "boot".into(),
                },
            )
        }),
    };
    let mut sb = match made {
        Ok((sb, c)) => {
            let _ = ready.send(Ok(c));
            sb
        }
        Err(e) => {
            let _ = ready.send(Err(format!("{e:#}")));
            return;
        }
    };
    // what the runtime printed while starting is not any invocation's
    let _ = take_sandbox_output(sb.log_path(), 0);
    while let Ok(job) = jobs.recv() {
        let reply = thaw_worker::invoke_event(&mut sb, &job.event, job.timeout)
            .map_err(|e| format!("{e:#}"));
        let (output, truncated) = take_sandbox_output(sb.log_path(), log_cap);
        if !output.is_empty() {
            let entry = LogEntry {
                seq: 0,
                invocation_id: job.invocation_id.clone(),
                instance: name.clone(),
                unix_ms: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64),
                output,
                truncated,
            };
            if let Err(e) = v.ring.append(entry) {
                tracing::warn!(function = %v.rec.name, "writing the function log: {e:#}");
            }
        }
        // an agent-side timeout leaves the runtime usable, but the contract
        // is that a timed-out instance is replaced
        let timed_out =
            matches!(&reply, Ok(r) if r.get("error").and_then(Value::as_str) == Some("timeout"));
        let alive = sb.is_alive() && !timed_out;
        let _ = job.reply.send(JobDone { reply, alive });
        if !alive {
            break;
        }
    }
}
