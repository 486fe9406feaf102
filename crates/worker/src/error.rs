//! What can go wrong on the invocation path, for callers to match.
use thaw_error::Context;

#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// not a function of the runtime root (nor a test-only `_test_*` one)
    #[error("unknown function {name:?} (known: {known})")]
    UnknownFunction { name: String, known: String },
    /// the instance holds what a snapshot cannot keep (every reason)
    #[error(transparent)]
    NotCheckpointable(thaw_checkpoint::NotCheckpointable),
    /// the sandbox died, timed out or answered out of protocol
    #[error(transparent)]
    Sandbox(#[from] thaw_sandbox::SandboxError),
    #[error(transparent)]
    Restore(#[from] thaw_checkpoint::RestoreError),
    #[error(transparent)]
    Runtime(#[from] thaw_runtime::RuntimeError),
    #[error(transparent)]
    Store(#[from] thaw_store::StoreError),
    #[error(transparent)]
    Tier(#[from] thaw_store::TierError),
    #[error(transparent)]
    Path(#[from] thaw_store::PathError),
    #[error(transparent)]
    Memory(#[from] thaw_memory::MemoryError),
    /// crash cleanup left something behind (each failure, joined)
    #[error("{0}")]
    Cleanup(String),
    /// the step that failed, with its cause
    #[error(transparent)]
    Other(#[from] Context),
}

pub type Result<T, E = WorkerError> = std::result::Result<T, E>;

/// A checkpoint's error: its refusal kept as a variant, anything else as
/// the step `what` with its cause.
pub(crate) fn checkpoint_error(what: &str, e: thaw_checkpoint::CheckpointError) -> WorkerError {
    match e {
        thaw_checkpoint::CheckpointError::NotCheckpointable(nc) => {
            WorkerError::NotCheckpointable(nc)
        }
        e => Context::new(what, e).into(),
    }
}
