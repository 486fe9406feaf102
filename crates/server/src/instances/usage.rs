//! What each live instance uses (memory, CPU), as its thread measures it,
//! summed per function for `GET /v1/functions/NAME/stats`. Plain data:
//! the budget's gauge (`memory`) writes it.
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

pub(super) type Measured = Arc<Mutex<Usage>>;

#[derive(Default)]
pub(super) struct Usage {
    /// by instance name: its function and what it uses
    pub(super) live: HashMap<String, (String, InstanceUsage)>,
    /// CPU time of each function's ended instances, in ns
    pub(super) ended_cpu_ns: HashMap<String, u64>,
}

/// What one instance uses, as its thread last read it.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct InstanceUsage {
    /// charged to its cgroup (or its RSS, if more)
    pub(super) memory_bytes: u64,
    /// its own (anonymous) pages, without the snapshot's it shares
    pub(super) private_bytes: u64,
    /// CPU time of its processes so far
    pub(super) cpu_ns: u64,
    /// its cgroup's CPU quota (thousandths of a CPU)
    pub(super) cpu_millis: Option<u64>,
    /// its cgroup's CPU weight (cgroup v2 units)
    pub(super) cpu_weight: Option<u64>,
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
