//! Scheduling: a request finds an idle instance or starts one (waiting
//! for a free instance or for RAM when it must), runs its invocation on it
//! and gives it back.
use serde_json::Value;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};
use thaw_policy::{InstanceId, Outcome, Policy, Start};
use tokio::sync::oneshot;

use super::deployed::FnVersion;
use super::job::{Job, JobDone};
use super::memory::{Charge, MemoryGauge, MEMORY_PATIENCE};
use super::start::{predicted, Mode, StartType};
use super::thread::{instance_thread, InstanceServices, ThreadCount};
use super::usage::InstanceUsage;
use super::{forget_idle, lock, wake_memory, wake_one, Instance, Instances, Lease, Refusal, State};

enum Next {
    Create(InstanceId, f64, (StartType, String)),
    Wait(oneshot::Receiver<()>),
    /// waiting for RAM: also asks again once its patience is over
    WaitMemory(oneshot::Receiver<()>),
}

impl Instances {
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
                    let mem = u32::try_from(v.rec.memory_mb).unwrap_or(u32::MAX);
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
                                instances: self.clone(),
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
                    if fp.waiters.len() >= self.queue_cap as usize {
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
            instances: self.clone(),
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
        let instances = Arc::downgrade(self);
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
                            instances: instances.clone(),
                            id: policy_id,
                            mb: None,
                        },
                    },
                    xdt,
                    slot_tiers,
                    metrics,
                    instances,
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

    /// Runs one invocation on a leased instance, in the caller's chain
    /// (`None`: a top-level invocation starts one); the lease goes back to
    /// the pool whatever happens (also when the client has gone away).
    pub async fn run(
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

impl Instances {
    /// The budget cannot hold one more running instance of `name` even
    /// with every idle instance given up: the request waits for a running
    /// instance (or a deploy) to give RAM back, as past `max_instances`
    /// (a prewarm too: the instances it starts go idle, charged far less).
    /// A request that nothing running could ever make room for does not.
    fn wait_for_memory(&self, st: &mut State, name: &str) -> Result<Next, Refusal> {
        let u = st.engine.usage();
        if u.running_mb + u.writing_mb == 0 {
            return Err(Refusal::Memory);
        }
        let waiting = st.fns.get(name).map_or(0, |f| f.waiters.len())
            + (st.memory_waiters.iter())
                .filter(|(f, w)| f == name && !w.is_closed())
                .count();
        if waiting >= self.queue_cap as usize {
            return Err(Refusal::QueueFull);
        }
        let (tx, rx) = oneshot::channel();
        st.memory_waiters.push_back((name.to_string(), tx));
        Ok(Next::WaitMemory(rx))
    }
}
