//! What can go wrong measuring the daemon, for callers to match.
use thaw_error::Context;

#[derive(Debug, thiserror::Error)]
pub enum BenchServeError {
    /// options that do not make a run
    #[error("{0}")]
    Config(String),
    /// a measured step did not give what it should (an answer's status or
    /// fields, no samples, a daemon that did not come up)
    #[error("{0}")]
    Failed(String),
    #[error(transparent)]
    Client(#[from] thaw_client::Error),
    #[error(transparent)]
    Worker(#[from] thaw_worker::WorkerError),
    #[error(transparent)]
    Tiers(#[from] thaw_tiers::TiersError),
    #[error(transparent)]
    Restore(#[from] thaw_checkpoint::RestoreError),
    #[error(transparent)]
    Sandbox(#[from] thaw_sandbox::SandboxError),
    #[error(transparent)]
    Host(#[from] thaw_sandbox::HostError),
    /// the test host of `thaw bench egress`
    #[error(transparent)]
    Egress(#[from] thaw_egress::EgressError),
    #[error(transparent)]
    Plot(#[from] thaw_plot::PlotError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// the daemon did not open, start or find the function
    #[error(transparent)]
    Serve(#[from] thaw_server::ServeError),
    #[error(transparent)]
    Image(#[from] thaw_server::image::ImageError),
    #[error(transparent)]
    ServerConfig(#[from] thaw_server::config::ConfigError),
    #[error(transparent)]
    Runtime(#[from] thaw_runtime::RuntimeError),
    /// the step that failed, with its cause
    #[error(transparent)]
    Other(#[from] Context),
}

pub type Result<T, E = BenchServeError> = std::result::Result<T, E>;

/// A value a measurement needs: its absence fails the run with `what`.
pub(crate) trait OrFail<T> {
    fn or_fail(self, what: &str) -> Result<T>;
}

impl<T> OrFail<T> for Option<T> {
    fn or_fail(self, what: &str) -> Result<T> {
        self.ok_or_else(|| BenchServeError::Failed(what.to_string()))
    }
}
