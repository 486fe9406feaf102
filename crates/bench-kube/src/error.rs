//! What can go wrong measuring pods, for callers to match.
use thaw_error::Context;

#[derive(Debug, thiserror::Error)]
pub enum BenchKubeError {
    /// options that do not make a run
    #[error("{0}")]
    Config(String),
    /// a measured step did not give what it should (an answer's status or
    /// fields, no samples, a pod that did not come up)
    #[error("{0}")]
    Failed(String),
    #[error(transparent)]
    Client(#[from] thaw_client::Error),
    #[error(transparent)]
    Tiers(#[from] thaw_tiers::TiersError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// the daemon did not open, start or find the function
    #[error(transparent)]
    Serve(#[from] thaw_server::ServeError),
    /// containerd, crictl, a pod network or the cluster
    #[error(transparent)]
    Harness(#[from] thaw_kube_harness::containerd::HarnessError),
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

pub type Result<T, E = BenchKubeError> = std::result::Result<T, E>;
