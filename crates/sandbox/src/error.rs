//! What can go wrong building, talking to, checkpointing and restoring a
//! sandbox: one enum per operation, with the kinds its callers decide on as
//! variants and the host's failures (a /proc file, ptrace, a mount, a
//! cgroup) as `Other`, a [`HostError`] that keeps its cause.
use crate::agent::AgentError;
use crate::state::StateError;
use crate::NotCheckpointable;
use std::time::Duration;
use thaw_egress::EgressError;
use thaw_error::Context;

/// A step on the host that failed: callers only report these.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// a step that failed without an underlying error to carry (a call's
    /// return value, a malformed /proc line, a child's status)
    #[error("{0}")]
    Failed(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// the step that failed, with its cause
    #[error(transparent)]
    Other(#[from] Context),
}

pub(crate) type Result<T, E = HostError> = std::result::Result<T, E>;

/// A sandbox's veth plugged in at spawn: the egress crate's failure as the
/// host step it is, its message unchanged.
impl From<EgressError> for HostError {
    fn from(e: EgressError) -> HostError {
        match e {
            EgressError::Exhausted(m) | EgressError::Failed(m) => HostError::Failed(m),
            EgressError::Io(e) => HostError::Io(e),
            EgressError::Other(c) => HostError::Other(c),
        }
    }
}

/// Turns a crate's `From<HostError>` into `From` its sources as well, so
/// `?` takes an I/O error or a `.context(...)` into any of the enums here.
macro_rules! host_sources {
    ($($t:ty),*) => {$(
        impl From<std::io::Error> for $t {
            fn from(e: std::io::Error) -> Self {
                HostError::from(e).into()
            }
        }
        impl From<Context> for $t {
            fn from(e: Context) -> Self {
                HostError::from(e).into()
            }
        }
    )*};
}
host_sources!(StartError, CheckpointError, RestoreError, ProfileError);

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
    /// a reply without a usable `ok` field or without the fields of its
    /// request's reply (the sandbox lives on)
    #[error("{0}")]
    Reply(String),
}

/// Why a sandbox (fresh, a zygote's template or child, a pool's) could not
/// be built.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// every sandbox uid, or every egress address of the function, is in
    /// use: one is free again when a sandbox ends
    #[error("{0}")]
    Exhausted(String),
    /// what was asked for cannot make a sandbox (an empty command, a pool
    /// of no sandboxes, a bind source that is not a directory)
    #[error("{0}")]
    Config(String),
    /// the function's network could not be given to the sandbox
    #[error(transparent)]
    Egress(#[from] EgressError),
    /// the new sandbox's agent failed (a zygote template's load)
    #[error("{what}")]
    Sandbox {
        what: String,
        #[source]
        source: SandboxError,
    },
    #[error(transparent)]
    Other(#[from] HostError),
}

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

impl From<crate::agent::ReplyError> for SandboxError {
    fn from(e: crate::agent::ReplyError) -> Self {
        match e {
            crate::agent::ReplyError::Agent(e) => SandboxError::Agent(e),
            e => SandboxError::Reply(thaw_error::chain(&e)),
        }
    }
}
