//! What can go wrong reading traces, parsing the `thaw sim` command line and
//! running the simulator, for callers to match.
use thaw_error::Context;

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// a trace, profiles or calibration file that does not parse (the
    /// message names the file and line)
    #[error("{0}")]
    Input(String),
    /// parameters out of their range, or a study asked for what it cannot do
    #[error("{0}")]
    Config(String),
    /// the simulation could not go on (unsorted arrivals, no next event)
    #[error("{0}")]
    Stalled(String),
    #[error(transparent)]
    Policy(#[from] thaw_policy::PolicyError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// the step that failed, with its cause
    #[error(transparent)]
    Other(#[from] Context),
}

pub type Result<T, E = SimError> = std::result::Result<T, E>;
