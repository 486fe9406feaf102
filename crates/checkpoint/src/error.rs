//! What can go wrong checkpointing, restoring and profiling a sandbox: one
//! enum per operation, with the kinds its callers decide on as variants and
//! the host's failures (a /proc file, ptrace, the restorer's handshake) as
//! `Other`, a [`HostError`] that keeps its cause.
use crate::NotCheckpointable;
use thaw_sandbox::{HostError, SandboxError, StartError};
use thaw_snapshot_format::StateError;

pub(crate) type Result<T, E = HostError> = std::result::Result<T, E>;

thaw_sandbox::host_sources!(CheckpointError, RestoreError, ProfileError);

/// Why a checkpoint was not taken.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// the instance holds what a snapshot cannot keep (every reason)
    #[error(transparent)]
    NotCheckpointable(#[from] NotCheckpointable),
    /// a thread is where a restore could not resume it (inside a call that
    /// cannot be re-issued or interrupted, too many of them, their resume
    /// frames too large): the same instance may be taken later
    #[error("{0}")]
    Unresumable(String),
    /// the agent did not prepare: the sandbox died, timed out, refused or
    /// answered out of protocol
    #[error("the agent did not prepare for the checkpoint")]
    Prepare(#[source] SandboxError),
    /// the snapshot could not be written
    #[error(transparent)]
    Store(#[from] thaw_store::StoreError),
    #[error(transparent)]
    Other(#[from] HostError),
}

/// Why a restore failed, for callers to match.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// the restorer failed before resume, at `step` of plan.h's step table
    /// (`detail`: which item of that step, e.g. the VMA or run index, or for
    /// the descriptor steps the descriptor's number)
    #[error("restorer failed while {step_name} ({}): {}", item(*step, *detail), std::io::Error::from_raw_os_error(*errno))]
    Restorer {
        step: u32,
        step_name: &'static str,
        detail: u32,
        errno: i32,
    },
    /// the resumed runtime did not answer its first request
    #[error("the restored runtime did not answer")]
    Resume(#[source] SandboxError),
    /// the snapshot was taken on another runtime root: rebuild it
    #[error("snapshot {id} was taken on runtime root {taken_on}, but the root given is {given}; rebuild the snapshot")]
    OtherRoot {
        id: String,
        taken_on: String,
        given: String,
    },
    /// the snapshot's files are missing, corrupt, of another version or
    /// fail their checksums
    #[error(transparent)]
    Snapshot(#[from] thaw_store::StoreError),
    /// the snapshot's process state does not decode or does not validate
    #[error("snapshot {dir}")]
    State {
        dir: std::path::PathBuf,
        #[source]
        source: StateError,
    },
    /// the strategy could not prepare, plan or serve this snapshot
    #[error(transparent)]
    Strategy(#[from] thaw_restore::StrategyError),
    /// the sandbox to restore into could not be built
    #[error(transparent)]
    Start(#[from] StartError),
    /// anything else: the runtime root, the restorer's handshake, the host
    #[error(transparent)]
    Other(#[from] HostError),
}

/// What a restorer failure's `detail` names.
fn item(step: u32, detail: u32) -> String {
    if thaw_restorer::FD_STEPS.contains(&step) {
        format!("fd {detail}")
    } else {
        format!("item {detail}")
    }
}

/// Why an access profile could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// the lazily served clone could not be restored
    #[error(transparent)]
    Restore(#[from] RestoreError),
    /// the clone failed a profiled request
    #[error("{what}")]
    Sandbox {
        what: String,
        #[source]
        source: SandboxError,
    },
    #[error(transparent)]
    Snapshot(#[from] thaw_store::StoreError),
    #[error(transparent)]
    State(#[from] StateError),
    #[error(transparent)]
    Other(#[from] HostError),
}
