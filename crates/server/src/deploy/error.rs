//! Why a deploy or a delete failed (`http` gives each kind its status).
use crate::tiering;

/// Why a deploy or a delete failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request is wrong.
    #[error("{0}")]
    Invalid(String),
    #[error("{what} of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge {
        what: &'static str,
        len: usize,
        max: u64,
    },
    /// The instance holds what a snapshot cannot keep, and the deploy
    /// required a snapshot.
    #[error("{}", not_checkpointable(.0))]
    NotCheckpointable(Vec<thaw_checkpoint::Refusal>),
    /// The function's packages were refused.
    #[error("{0}")]
    Packages(thaw_runtime::packages::Refused),
    /// The instance memory budget cannot hold the deploy's sandbox now.
    #[error("the instance memory budget cannot hold a {0} MiB deploy sandbox now")]
    Memory(u64),
    #[error("no function named {0:?}")]
    NotFound(String),
    /// The request asked for `only_if_absent` and the function exists.
    #[error("a function named {0:?} exists (the request deploys only if none does)")]
    Exists(String),
    /// Another deploy or delete of the function, or a move of its
    /// snapshot, held its lock past `limits.lock_wait_ms`.
    #[error("{name:?} is busy: another deploy or delete of it, or a move of its snapshot between tiers, has held it for over {waited_ms} ms")]
    Busy { name: String, waited_ms: u64 },
    /// The host failed, not the request.
    #[error("{}", thaw_error::chain(&**.0))]
    Internal(thaw_error::BoxError),
}

fn not_checkpointable(reasons: &[thaw_checkpoint::Refusal]) -> String {
    thaw_checkpoint::NotCheckpointable {
        reasons: reasons.to_vec(),
    }
    .to_string()
}

impl From<tiering::Error> for Error {
    fn from(e: tiering::Error) -> Error {
        internal(e)
    }
}

pub(super) fn bad(msg: impl Into<String>) -> Error {
    Error::Invalid(msg.into())
}

pub(super) fn internal(e: impl Into<thaw_error::BoxError>) -> Error {
    Error::Internal(e.into())
}
