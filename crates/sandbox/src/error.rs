//! What can go wrong talking to a sandbox, for callers to match.
use crate::agent::AgentError;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// killed or dead before the request
    #[error("sandbox {id} is no longer running")]
    Gone { id: String },
    /// no answer in time: the sandbox was killed
    #[error("sandbox {id} did not answer within {after:?}: killed")]
    Timeout { id: String, after: Duration },
    /// the kernel's OOM killer ended it at its memory limit
    #[error("sandbox {id}: killed by the kernel's OOM killer: it reached its memory limit of {limit_mib} MiB (memory.oom_control: oom_kill {kills}); raise the limit or use less memory ({cause})")]
    OomKilled {
        id: String,
        limit_mib: u64,
        kills: u64,
        cause: String,
    },
    /// the socket closed or the reply broke the protocol: the sandbox is dead
    #[error("sandbox {id}: {cause}; runtime log ends: {log_tail}")]
    Died {
        id: String,
        cause: String,
        log_tail: String,
    },
    /// the agent answered `"ok": false` (the sandbox lives on)
    #[error(transparent)]
    Agent(#[from] AgentError),
    /// a reply without a usable `ok` field (the sandbox lives on)
    #[error("{0}")]
    Reply(String),
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
    /// the snapshot's files are missing, corrupt, of another version or
    /// fail their checksums
    #[error(transparent)]
    Snapshot(#[from] thaw_store::StoreError),
    /// the strategy could not prepare, plan or serve this snapshot
    #[error(transparent)]
    Strategy(#[from] thaw_restore::StrategyError),
    /// anything else: the process state, the root, building the sandbox
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

/// What a restorer failure's `detail` names.
fn item(step: u32, detail: u32) -> String {
    if thaw_restorer::FD_STEPS.contains(&step) {
        format!("fd {detail}")
    } else {
        format!("item {detail}")
    }
}

impl From<std::io::Error> for RestoreError {
    fn from(e: std::io::Error) -> Self {
        RestoreError::Other(e.into())
    }
}
