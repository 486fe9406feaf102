//! What can go wrong with the storage hierarchy, for callers to match.
use thaw_error::Context;
use thaw_store::{PathError, StoreError, TierError};

/// The kinds callers decide on (not found, corrupt, busy, a device that is
/// missing, a configuration that does not hold together), each with its
/// message; everything else is `Other`, the failed step with its cause.
#[derive(Debug, thiserror::Error)]
pub enum TiersError {
    /// the tier configuration, a tier's options or the tiers named for an
    /// operation do not hold together
    #[error("{0}")]
    Config(String),
    /// a device, mount or host facility a tier needs is missing, not set
    /// up, or failed to start
    #[error("{0}")]
    Device(String),
    /// in use: restore slots, a move in progress, a network name taken
    #[error("{0}")]
    Busy(String),
    /// no such snapshot or object where it was asked for
    #[error("{0}")]
    NotFound(String),
    /// more bytes than the reader may take (refused before they are read
    /// or opened where the length is announced)
    #[error("{0}")]
    TooLarge(String),
    /// already there: a snapshot on the target tier, a committed copy
    #[error("{0}")]
    Exists(String),
    /// data that fails its checks: sealed objects (format, length,
    /// authentication), commit records, copies that differ from their source
    #[error("{0}")]
    Corrupt(String),
    /// a step that failed without an underlying error to carry (a child
    /// process's status, a stream's failure reported by another thread)
    #[error("{0}")]
    Failed(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Path(#[from] PathError),
    #[error(transparent)]
    Tier(#[from] TierError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// the step that failed, with its cause
    #[error(transparent)]
    Other(#[from] Context),
    /// a step of a larger operation failed: [`TiersError::cause`] is what
    /// callers match on
    #[error("{what}")]
    During {
        what: String,
        #[source]
        source: Box<TiersError>,
    },
}

impl TiersError {
    /// This error as the cause of a failed step `what` ("copying X").
    pub fn during(self, what: impl Into<String>) -> TiersError {
        TiersError::During {
            what: what.into(),
            source: Box::new(self),
        }
    }

    /// The error under any steps it failed: the kind to match on.
    pub fn cause(&self) -> &TiersError {
        match self {
            TiersError::During { source, .. } => source.cause(),
            e => e,
        }
    }
}

pub type Result<T, E = TiersError> = std::result::Result<T, E>;
