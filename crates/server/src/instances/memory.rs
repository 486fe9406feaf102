//! The pool's memory budget: what an instance is charged as its thread
//! measures it (the gauge), what a deploy's sandbox reserves, and the
//! node's instance cap (docs/API.md, the memory budget).
use std::sync::Arc;
use std::time::Duration;
use thaw_policy::{InstanceId, Outcome, Policy};

use super::usage::{FunctionUsage, InstanceUsage, Measured};
use super::{fn_id, lock, wake_memory, Instances, Mode, Refusal, State};

/// [`thaw_policy::MEMORY_PATIENCE`], which the simulator waits too.
pub(super) const MEMORY_PATIENCE: Duration = Duration::from_micros(thaw_policy::MEMORY_PATIENCE);

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
        let mb = u32::try_from((private_bytes + (1 << 19)) >> 20)
            .unwrap_or(u32::MAX)
            .max(1);
        if self.mb != Some(mb) {
            self.mb = Some(mb);
            if let Some(instances) = self.instances.upgrade() {
                instances.charge_measured(self.id, mb);
            }
        }
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

/// RAM a deploy's sandbox holds in the policy's budget until it is gone.
pub struct Reservation {
    instances: Arc<Instances>,
    id: InstanceId,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut st = lock(&self.instances.state);
        let _ = st.engine.discard(self.instances.now(), self.id);
        wake_memory(&mut st);
    }
}

/// The policy's function id for deploy sandboxes (no function has this name).
const DEPLOYS: &str = "\0deploy";

impl Instances {
    /// Counts a deploy's sandbox of `memory_mb` in the instance budget
    /// (idle instances make room as for any start); `None` when the budget
    /// cannot hold it.
    pub fn reserve(self: &Arc<Self>, memory_mb: u64) -> Option<Reservation> {
        let mut st = lock(&self.state);
        let fid = fn_id(&mut st, DEPLOYS);
        let mut out = Vec::new();
        let mem = u32::try_from(memory_mb).unwrap_or(u32::MAX);
        let outcome = st
            .engine
            .arrive_skipping_warm(self.now(), fid, mem, &mut out);
        self.apply(&mut st, out);
        match outcome {
            Outcome::Started { instance, .. } => Some(Reservation {
                instances: self.clone(),
                id: instance,
            }),
            Outcome::Rejected => None,
        }
    }
}

impl Instances {
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
}

/// One instance's entry in the measured usage; gone with the instance
/// (its CPU time then counts among its function's ended instances').
pub(super) struct MemoryGauge {
    pub(super) measured: Measured,
    pub(super) instance: String,
    pub(super) function: String,
    pub(super) last: InstanceUsage,
    /// its cgroup's CPU quota and weight, read at the first measure: they
    /// are set when the sandbox is made and never change
    pub(super) cpu: Option<(Option<u64>, Option<u64>)>,
    pub(super) charge: Charge,
}

impl MemoryGauge {
    fn cpu_of(&mut self, sb: &thaw_sandbox::Sandbox) -> (Option<u64>, Option<u64>) {
        *self
            .cpu
            .get_or_insert_with(|| (sb.cpu_millis(), sb.cpu_weight()))
    }

    pub(super) fn set(&mut self, sb: &thaw_sandbox::Sandbox) {
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
