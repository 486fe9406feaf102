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
