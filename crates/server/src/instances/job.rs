//! What passes between a request and its instance's thread.
use serde_json::Value;
use std::time::Duration;
use thaw_sandbox::StartStrategy;
use tokio::sync::oneshot;

pub(super) struct Job {
    pub(super) event: Value,
    pub(super) timeout: Duration,
    pub(super) invocation_id: String,
    /// the caller's chain, for an invocation a function made (XDT)
    pub(super) chain: Option<thaw_xdt::CallCtx>,
    /// pulls of other workers' objects started when the invocation arrived
    pub(super) prefetched: crate::xdt::Prefetched,
    pub(super) reply: oneshot::Sender<JobDone>,
}

/// What an instance thread answers for one job.
pub struct JobDone {
    /// The agent's answer, or why the instance is gone.
    pub reply: Result<thaw_worker::Invoked, String>,
    pub alive: bool,
}

/// What creating an instance took.
#[derive(Debug, Clone)]
pub struct Created {
    pub create_ms: f64,
    pub hook_ms: f64,
    pub strategy: StartStrategy,
    /// the tier the snapshot was restored from ("-" for a boot)
    pub tier: String,
}
