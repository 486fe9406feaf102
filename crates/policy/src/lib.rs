//! thaw-policy: keep-alive and tier-caching decisions, as a pure library.
//!
//! No I/O, no clock, no threads. The caller (the simulator with virtual time, the
//! worker with a monotonic clock) feeds events in: an invocation arrives, an instance
//! finishes, a transfer completes, time advances. The policy answers with a start
//! decision (warm, lukewarm from disk, remote from the network store, cold, or
//! rejected) and a list of [`Action`]s for the caller to carry out (checkpoint this
//! instance, upload that snapshot, kill, delete, cancel).
//!
//! Time is in microseconds of the caller's clock, sizes in MiB. The policy only ever
//! *estimates* transfer times (serial queues at the configured bandwidths); the
//! caller reports real completions with [`Policy::transfer_done`].
//!
//! Every named policy ([`PolicyKind`]) is a configuration of one engine: which order
//! picks the idle instance to give up (LRU or greedy-dual), whether lower tiers
//! exist, and whether idle instances expire after a fixed keep-alive window.

pub mod calibrate;
mod engine;
mod list;
pub mod placement;
pub mod toss;

pub use engine::{Engine, SnapshotLevel};

use std::fmt;
use std::str::FromStr;

/// Microseconds on the caller's clock.
pub type Time = u64;

/// How long an arrival whose caller queues it (the daemon; `thaw sim
/// --wait-for-ram`) waits, with no RAM given back meanwhile, for running
/// instances to give back what it lacks before idle instances are given up
/// for it ([`Policy::arrive_queued`], then [`Policy::arrive`]): a burst must
/// not empty a node of hundreds of small idle instances for RAM its own
/// instances free in a moment, nor may instances that run long keep
/// requests waiting while idle ones hold RAM.
pub const MEMORY_PATIENCE: Time = 500_000;

/// Dense function index chosen by the caller (the simulator interns trace names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FnId(pub u32);

/// An index into the engine's per-function or per-instance tables as the
/// `u32` its ids carry: functions are numbered by [`FnId`]'s `u32`, and
/// instance slots (instances in RAM at once) are far fewer.
#[allow(clippy::cast_possible_truncation)] // i < 2^32, as above
pub(crate) fn index_u32(i: usize) -> u32 {
    i as u32
}

/// An instance (sandbox) the policy tracks; stale ids are detected, not trusted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct InstanceId(pub u64);

impl InstanceId {
    /// Its slot (low 32 bits) and generation (high 32 bits): dropping the
    /// other half is the point of each cast.
    #[allow(clippy::cast_possible_truncation)]
    pub(crate) fn slot_and_gen(self) -> (u32, u32) {
        (self.0 as u32, (self.0 >> 32) as u32)
    }
}

/// A transfer the policy asked for (checkpoint, upload, download).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct XferId(pub u64);

/// How an invocation starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Start {
    /// An idle instance in RAM is reused.
    Warm,
    /// A snapshot is read from the disk tier and restored.
    Lukewarm,
    /// A snapshot is downloaded from the network tier and restored.
    Remote,
    /// A fresh instance boots and initialises.
    Cold,
}

impl Start {
    pub const ALL: [Start; 4] = [Start::Warm, Start::Lukewarm, Start::Remote, Start::Cold];
    pub fn name(self) -> &'static str {
        match self {
            Start::Warm => "warm",
            Start::Lukewarm => "lukewarm",
            Start::Remote => "remote",
            Start::Cold => "cold",
        }
    }
    pub fn index(self) -> usize {
        self as usize
    }
}

/// The answer to an arriving invocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Run on `instance`; the policy estimates it is ready at `ready_at`.
    Started {
        start: Start,
        instance: InstanceId,
        ready_at: Time,
    },
    /// Not enough RAM even after dropping pending writes and idle instances.
    Rejected,
}

/// Work the caller must carry out. Transfers carry the policy's estimated end
/// (`eta`); the caller reports the real end with [`Policy::transfer_done`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Checkpoint idle `instance` of `f` to the disk tier, then destroy the instance.
    Checkpoint {
        id: XferId,
        instance: InstanceId,
        f: FnId,
        eta: Time,
    },
    /// Copy `f`'s snapshot from the network tier to the disk tier.
    Download { id: XferId, f: FnId, eta: Time },
    /// Move `f`'s snapshot from disk to the network tier (delete the disk copy after).
    /// The disk budget no longer counts it from the moment this is issued.
    Upload { id: XferId, f: FnId, eta: Time },
    /// Abandon a pending transfer; for a checkpoint, destroy the instance too.
    Cancel { id: XferId },
    /// Destroy an idle instance.
    Kill { instance: InstanceId },
    /// Delete `f`'s snapshot from the disk tier.
    DeleteDisk { f: FnId },
    /// Delete `f`'s snapshot from the network tier.
    DeleteNet { f: FnId },
}

/// Start costs of one function. Defaults are the thesis' (cold 250 ms, restore
/// 100 ms, checkpoint 350 ms); a calibration file can set them per function.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FnCost {
    pub warm_us: Time,
    pub cold_us: Time,
    /// Restore after the snapshot is in RAM, when it came from the disk tier.
    pub restore_disk_us: Time,
    /// Same, when it came from the network tier.
    pub restore_net_us: Time,
    /// Creating the checkpoint, before its bytes are written.
    pub checkpoint_us: Time,
}

impl Default for FnCost {
    fn default() -> Self {
        FnCost {
            warm_us: 0,
            cold_us: 250_000,
            restore_disk_us: 100_000,
            restore_net_us: 100_000,
            checkpoint_us: 350_000,
        }
    }
}

/// What one function's instances hold in RAM besides what running ones
/// reserve (their declared memory): see [`Engine`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Footprint {
    /// What an idle instance holds on its own until it is measured itself
    /// (None: its declared memory).
    pub idle_mb: Option<u32>,
    /// Pages all its instances share (its snapshot image), charged once
    /// while any of them is in RAM.
    pub shared_mb: u32,
}

/// The policies by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PolicyKind {
    /// Fixed keep-alive window in RAM, no tiers.
    Ttl,
    /// RAM bounded by capacity, LRU eviction, no tiers (the thesis' "traditional").
    LruMem,
    /// The thesis' caching layers: RAM, disk and network tiers, LRU everywhere.
    TieredLru,
    /// FaasCache's greedy-dual keep-alive in RAM, no tiers.
    GreedyDual,
    /// Greedy-dual over RAM with the thesis' disk and network tiers below it.
    TieredGreedyDual,
}

impl PolicyKind {
    pub const ALL: [PolicyKind; 5] = [
        PolicyKind::Ttl,
        PolicyKind::LruMem,
        PolicyKind::TieredLru,
        PolicyKind::GreedyDual,
        PolicyKind::TieredGreedyDual,
    ];
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::Ttl => "ttl",
            PolicyKind::LruMem => "lru-mem",
            PolicyKind::TieredLru => "tiered-lru",
            PolicyKind::GreedyDual => "greedy-dual",
            PolicyKind::TieredGreedyDual => "tiered-greedy-dual",
        }
    }
    pub fn tiered(self) -> bool {
        matches!(self, PolicyKind::TieredLru | PolicyKind::TieredGreedyDual)
    }
    pub fn greedy_dual(self) -> bool {
        matches!(self, PolicyKind::GreedyDual | PolicyKind::TieredGreedyDual)
    }
}

impl fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for PolicyKind {
    type Err = PolicyError;
    fn from_str(s: &str) -> Result<Self, PolicyError> {
        PolicyKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| PolicyError::UnknownPolicy(s.to_string()))
    }
}

/// Capacities, bandwidths and default costs the policy plans with.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub kind: PolicyKind,
    pub ram_mb: u64,
    /// Disk tier capacity; 0 disables the tier.
    pub disk_mb: u64,
    /// Network tier capacity; 0 disables the tier.
    pub net_mb: u64,
    /// Tiered policies demote idle instances once they occupy more than this
    /// fraction of RAM, so that RAM is free before an arrival needs it.
    pub threshold: f64,
    /// `ttl` only: how long an idle instance stays in RAM.
    pub keep_alive_us: Time,
    pub disk_read_mb_s: f64,
    pub disk_write_mb_s: f64,
    /// Network bandwidth, each direction.
    pub net_mb_s: f64,
    /// Costs of functions without their own calibration.
    pub cost: FnCost,
    /// Every function was deployed with a snapshot that stays on the disk tier
    /// while it is deployed (as `thaw serve` deploys): a start without an idle
    /// instance restores it (lukewarm, `restore_disk_us`, the read included)
    /// instead of booting, and demoting an idle instance only kills it.
    pub deployed_snapshots: bool,
}

impl Config {
    /// The thesis' defaults: 32 GB RAM, 50 GB disk, disk 4 GB/s, 10 Gbit/s network.
    /// Disk write bandwidth is not given in the thesis; 2 GB/s is an NVMe-class guess.
    pub fn thesis(kind: PolicyKind) -> Config {
        Config {
            kind,
            ram_mb: 32 * 1024,
            disk_mb: 50 * 1024,
            net_mb: 1024 * 1024 * 1024,
            threshold: 0.9,
            keep_alive_us: 10 * 60 * 1_000_000,
            disk_read_mb_s: 4.0 * 1024.0,
            disk_write_mb_s: 2.0 * 1024.0,
            net_mb_s: 10.0 / 8.0 * 1024.0,
            cost: FnCost::default(),
            deployed_snapshots: false,
        }
    }

    /// Rejects configurations that cannot run, before anything runs.
    pub fn validate(&self) -> Result<(), PolicyError> {
        let bad = |m: String| Err(PolicyError::InvalidConfig(m));
        if self.ram_mb == 0 {
            return bad("RAM capacity must be > 0".into());
        }
        if !(self.threshold > 0.0 && self.threshold <= 1.0) {
            return bad(format!("threshold {} is outside (0, 1]", self.threshold));
        }
        for (name, v) in [
            ("disk read bandwidth", self.disk_read_mb_s),
            ("disk write bandwidth", self.disk_write_mb_s),
            ("network bandwidth", self.net_mb_s),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return bad(format!("{name} must be a positive number, got {v}"));
            }
        }
        if self.kind == PolicyKind::Ttl && self.keep_alive_us == 0 {
            return bad("ttl needs a keep-alive window > 0".into());
        }
        Ok(())
    }
}

/// Occupancy of each tier, in MiB.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// running + idle + writing + shared.
    pub ram_mb: u64,
    /// Running instances' declared memory.
    pub running_mb: u64,
    /// Idle instances' own memory (as measured, else estimated).
    pub idle_mb: u64,
    /// Instances being checkpointed (still in RAM until the write ends).
    pub writing_mb: u64,
    /// Pages the instances of one function share, once per function in RAM.
    pub shared_mb: u64,
    pub disk_mb: u64,
    pub net_mb: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyError {
    UnknownPolicy(String),
    InvalidConfig(String),
    /// The caller named an instance that is not running (finished twice, or never ours).
    NotRunning(InstanceId),
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicyError::UnknownPolicy(s) => write!(
                f,
                "unknown policy {s:?} (known: {})",
                PolicyKind::ALL.map(|k| k.name()).join(", ")
            ),
            PolicyError::InvalidConfig(m) => write!(f, "invalid configuration: {m}"),
            PolicyError::NotRunning(i) => write!(f, "instance {:#x} is not running", i.0),
        }
    }
}

impl std::error::Error for PolicyError {}

/// The event interface. The worker and the simulator drive it the same way.
pub trait Policy {
    /// An invocation of `f` needing `mem_mb` of RAM arrives at `now`.
    fn arrive(&mut self, now: Time, f: FnId, mem_mb: u32, out: &mut Vec<Action>) -> Outcome;
    /// [`Policy::arrive`] for a caller that queues what is rejected: where
    /// the instances running now will give back the RAM missing when they
    /// end, nothing idle is given up and the arrival is rejected, to wait
    /// for them (at most [`MEMORY_PATIENCE`]). Policies that never give
    /// idle instances up for RAM need not tell the two apart.
    fn arrive_queued(&mut self, now: Time, f: FnId, mem_mb: u32, out: &mut Vec<Action>) -> Outcome {
        self.arrive(now, f, mem_mb, out)
    }
    /// The invocation on `instance` finished; the instance is idle from `now`.
    fn finish(
        &mut self,
        now: Time,
        instance: InstanceId,
        out: &mut Vec<Action>,
    ) -> Result<(), PolicyError>;
    /// A transfer ended. Unknown or cancelled ids are ignored.
    fn transfer_done(&mut self, now: Time, id: XferId, out: &mut Vec<Action>);
    /// Time passed without other events (expires keep-alive windows).
    fn advance(&mut self, now: Time, out: &mut Vec<Action>);
    /// The next time at which `advance` would do something, if any.
    fn next_deadline(&self) -> Option<Time>;
    fn usage(&self) -> Usage;
    /// Per-function costs, e.g. from a calibration file.
    fn set_cost(&mut self, f: FnId, cost: FnCost);
    /// What `f`'s instances hold in RAM ([`Footprint`]); RAM in use that no
    /// longer fits makes room (the actions go to `out`).
    fn set_footprint(&mut self, f: FnId, fp: Footprint, out: &mut Vec<Action>);
}
