//! How an instance starts, in the daemon's terms and the policy's.
use thaw_policy::{SnapshotLevel, Start};
use thaw_sandbox::StartStrategy;

use crate::config::SnapshotTiers;

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
