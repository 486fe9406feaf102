//! What can go wrong reading the `thaw load` command line, building a load
//! and sending it, for callers to match.
use thaw_error::Context;

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// flags, rates or a trace mapping that do not make a load
    #[error("{0}")]
    Config(String),
    /// a trace line that does not parse (`--skip-malformed` skips them)
    #[error("{0}")]
    Malformed(String),
    /// the target does not accept connections
    #[error("{0}")]
    Unreachable(String),
    /// requests that were sent but never answered nor failed
    #[error("{0}")]
    Lost(String),
    #[error(transparent)]
    Plot(#[from] thaw_plot::PlotError),
    #[error(transparent)]
    Trace(#[from] thaw_sim::SimError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// the step that failed, with its cause
    #[error(transparent)]
    Other(#[from] Context),
}

pub type Result<T, E = LoadError> = std::result::Result<T, E>;
