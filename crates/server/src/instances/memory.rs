//! The pool's memory budget: what an instance is charged as it is
//! measured, and requests waiting for RAM (docs/API.md, the memory budget).
use super::{lock, Instances, Mode, Next, Refusal, State};
use std::time::Duration;
use thaw_policy::{InstanceId, Policy};
use tokio::sync::oneshot;

/// How long a request waits, without any RAM given back, for running
/// instances to give some back before idle instances are given up for it:
/// a burst must not empty the node of hundreds of small idle instances for
/// RAM its own instances free in a moment, nor may instances that run for
/// long keep requests waiting while idle ones hold RAM.
pub(super) const MEMORY_PATIENCE: Duration = Duration::from_millis(500);

impl Instances {
    /// An instance was measured to hold `private_mb` on its own: what the
    /// policy charges it while idle (see `thaw_policy::Engine::measured`).
    /// RAM given back wakes the requests waiting for it.
    pub(super) fn charge_measured(&self, id: InstanceId, private_mb: u32) {
        if !self.measure_idle {
            return;
        }
        let mut st = lock(&self.state);
        let before = st.engine.usage().ram_mb;
        let mut out = Vec::new();
        // an instance gone meanwhile is no longer charged anything
        if st
            .engine
            .measured(self.now(), id, private_mb, &mut out)
            .is_ok()
        {
            self.apply(&mut st, out);
            if st.engine.usage().ram_mb < before {
                wake_memory(&mut st);
            }
        }
    }

    /// Gives up idle instances in the policy's order until 1/`divisor` of
    /// the RAM charged to idle instances (at least one MiB: one instance) is
    /// freed, or none is idle: (instances, MiB) freed.
    pub fn shed_idle_share(&self, divisor: u64) -> (usize, u64) {
        let mut st = lock(&self.state);
        let mb = (st.engine.usage().idle_mb / divisor.max(1)).max(1);
        let mut out = Vec::new();
        let shed = st.engine.shed_idle(self.now(), mb, &mut out);
        self.apply(&mut st, out);
        wake_memory(&mut st);
        shed
    }

    /// RAM the policy charges every instance now (running: declared; idle:
    /// measured; shared pages once per function).
    pub fn budgeted_bytes(&self) -> u64 {
        lock(&self.state).engine.usage().ram_mb << 20
    }

    /// The budget cannot hold one more running instance of `name` even
    /// with every idle instance given up: the request waits for a running
    /// instance (or a deploy) to give RAM back, as past `max_instances`
    /// (a prewarm too: the instances it starts go idle, charged far less).
    /// A request that nothing running could ever make room for does not.
    pub(super) fn wait_for_memory(&self, st: &mut State, name: &str) -> Result<Next, Refusal> {
        let u = st.engine.usage();
        if u.running_mb + u.writing_mb == 0 {
            return Err(Refusal::Memory);
        }
        let waiting = st.fns.get(name).map_or(0, |f| f.waiters.len())
            + (st.memory_waiters.iter())
                .filter(|(f, w)| f == name && !w.is_closed())
                .count();
        if waiting as u32 >= self.queue_cap {
            return Err(Refusal::QueueFull);
        }
        let (tx, rx) = oneshot::channel();
        st.memory_waiters.push_back((name.to_string(), tx));
        Ok(Next::WaitMemory(rx))
    }
}

/// What the policy charges an instance while idle: its private memory as
/// last measured, told to the pool when its figure in MiB changes.
pub(super) struct Charge {
    pub(super) instances: std::sync::Weak<Instances>,
    pub(super) id: InstanceId,
    pub(super) mb: Option<u32>,
}

impl Charge {
    pub(super) fn set(&mut self, private_bytes: u64) {
        // to the nearest MiB (the policy counts in MiB): most instances
        // hold a little over one
        let mb = ((private_bytes + (1 << 19)) >> 20).clamp(1, u32::MAX as u64) as u32;
        if self.mb != Some(mb) {
            self.mb = Some(mb);
            if let Some(instances) = self.instances.upgrade() {
                instances.charge_measured(self.id, mb);
            }
        }
    }
}

/// Wakes every request waiting for RAM: each asks the policy again.
pub(super) fn wake_memory(st: &mut State) {
    for (_, w) in st.memory_waiters.drain(..) {
        let _ = w.send(());
    }
}

/// The node's instance cap (see `limits`).
impl Instances {
    /// Instances alive on the node (running, starting and idle).
    fn node_live(st: &State) -> u32 {
        st.fns.values().map(|f| f.live).sum()
    }

    /// Whether the node must wait before one more instance starts: at its
    /// cap, a request gives the policy's next idle instance up (a prewarm
    /// does not: it would only trade its own idle instances) and waits if
    /// none is idle.
    pub(super) fn node_full(&self, st: &mut State, mode: Mode) -> Result<bool, Refusal> {
        if Self::node_live(st) < self.node_cap {
            return Ok(false);
        }
        if mode == Mode::Prewarm {
            return Err(Refusal::NodeFull(self.node_cap));
        }
        let mut out = Vec::new();
        st.engine.shed_idle(self.now(), 1, &mut out);
        self.apply(st, out);
        Ok(Self::node_live(st) >= self.node_cap)
    }
}
