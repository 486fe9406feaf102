//! What can go wrong running a benchmark, for callers to match.
use thaw_error::Context;

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// options that do not make a run (counts of zero, unknown names, a
    /// tier the axis cannot use)
    #[error("{0}")]
    Config(String),
    /// a measured step did not give what it should (no runs, a stream that
    /// was not opened, a thread that panicked)
    #[error("{0}")]
    Failed(String),
    #[error(transparent)]
    Worker(#[from] thaw_worker::WorkerError),
    #[error(transparent)]
    Tiers(#[from] thaw_tiers::TiersError),
    /// a streamed restore's failure, with the stream's own when it failed
    #[error(transparent)]
    Stream(#[from] thaw_tiers::stream::Explained),
    #[error(transparent)]
    Store(#[from] thaw_store::StoreError),
    #[error(transparent)]
    Tier(#[from] thaw_store::TierError),
    #[error(transparent)]
    Path(#[from] thaw_store::PathError),
    #[error(transparent)]
    Sandbox(#[from] thaw_sandbox::SandboxError),
    #[error(transparent)]
    Restore(#[from] thaw_checkpoint::RestoreError),
    #[error(transparent)]
    Plot(#[from] thaw_plot::PlotError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// the step that failed, with its cause
    #[error(transparent)]
    Other(#[from] Context),
}

pub type Result<T, E = BenchError> = std::result::Result<T, E>;

/// What a benchmark's sink (a JSON lines file, a live table: each record
/// as it is measured) answers; its failure stops the run.
pub type SinkResult = std::result::Result<(), thaw_error::BoxError>;
