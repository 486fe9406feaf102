//! What can go wrong building and talking to a sandbox: one enum per
//! operation, with the kinds its callers decide on as variants and the
//! host's failures (a /proc file, a mount, a cgroup) as `Other`, a
//! [`HostError`] that keeps its cause.
use crate::agent::AgentError;
use std::time::Duration;
use thaw_egress::EgressError;

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
    Other(#[from] thaw_error::Context),
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

/// Turns a type's `From<HostError>` into `From` its sources as well, so
/// `?` takes an I/O error or a `.context(...)` into any of the enums here
/// (and the checkpoint crate's).
#[macro_export]
macro_rules! host_sources {
    ($($t:ty),*) => {$(
        impl From<std::io::Error> for $t {
            fn from(e: std::io::Error) -> Self {
                $crate::HostError::from(e).into()
            }
        }
        impl From<thaw_error::Context> for $t {
            fn from(e: thaw_error::Context) -> Self {
                $crate::HostError::from(e).into()
            }
        }
    )*};
}
host_sources!(StartError);

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

impl From<crate::agent::ReplyError> for SandboxError {
    fn from(e: crate::agent::ReplyError) -> Self {
        match e {
            crate::agent::ReplyError::Agent(e) => SandboxError::Agent(e),
            e => SandboxError::Reply(thaw_error::chain(&e)),
        }
    }
}
