//! What can go wrong driving the daemon, generating the study's trace,
//! running the study and comparing its records, for callers to match.
use thaw_error::Context;

#[derive(Debug, thiserror::Error)]
pub enum SimliveError {
    /// the study's parameters are out of range
    #[error("{0}")]
    Config(String),
    /// the daemon did not start, stop or answer as it should
    #[error("{0}")]
    Daemon(String),
    /// a records file or a calibration without what the comparison needs
    #[error("{0}")]
    Records(String),
    #[error(transparent)]
    Plot(#[from] thaw_plot::PlotError),
    #[error(transparent)]
    Load(#[from] thaw_load::LoadError),
    /// the simulator's side of the comparison
    #[error(transparent)]
    Sim(#[from] thaw_sim::SimError),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// the step that failed, with its cause
    #[error(transparent)]
    Other(#[from] Context),
}

pub type Result<T, E = SimliveError> = std::result::Result<T, E>;
