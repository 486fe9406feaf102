//! One top-level invocation of a deployed function through the pool: what
//! the native API's invoke and Lambda's Invoke both run (lookup, the
//! prefetch of other workers' objects, the wait for an instance across a
//! redeploy, the run on its own task, the metrics).
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::app::App;
use crate::instances::{Created, FnVersion, JobDone, Mode, Refusal, StartType};

/// Why an invocation did not run.
#[derive(Debug)]
pub enum CallError {
    /// a function name outside the grammar
    BadName(String),
    NotFound(String),
    /// no instance was given
    Refused(Refusal),
    /// the invocation's task failed (a bug, not the function)
    Internal(String),
}

/// One invocation that ran, and how its instance started.
pub struct Called {
    /// the version that ran
    pub v: Arc<FnVersion>,
    pub invocation_id: String,
    pub start: StartType,
    /// what the policy predicted: (start type, tier)
    pub predicted: (StartType, String),
    pub created: Option<Created>,
    pub queue_ms: f64,
    pub done: JobDone,
}

impl Called {
    /// The time inside the handler (0 when the instance failed).
    pub fn exec_ms(&self) -> f64 {
        self.done.reply.as_ref().map_or(0.0, |i| i.exec_ms)
    }
}

fn lookup(app: &App, name: &str) -> Result<Arc<FnVersion>, CallError> {
    crate::registry::check_name(name).map_err(|e| CallError::BadName(format!("{e:#}")))?;
    app.function(name)
        .ok_or_else(|| CallError::NotFound(name.to_string()))
}

/// Invokes `name` with `event`: finds or starts an instance (following a
/// redeploy made while waiting) and runs the event on it.
pub async fn call(
    app: &Arc<App>,
    name: &str,
    mode: Mode,
    event: Value,
) -> Result<Called, CallError> {
    // other workers' objects in the event start coming now, while an
    // instance is found or restored
    let prefetched = match app.instances.xdt.get() {
        Some(host) => {
            let v = lookup(app, name)?;
            let deadline = Instant::now() + Duration::from_millis(v.rec.timeout_ms);
            host.prefetch(&v.rec.owner, &event, v.rec.memory_mb << 20, deadline)
        }
        None => Default::default(),
    };
    let mut tries = 0;
    let (v, lease) = loop {
        let v = lookup(app, name)?;
        match app.instances.acquire(&v, mode).await {
            Ok(l) => break (v, l),
            Err(Refusal::Replaced) if tries < 3 => tries += 1,
            Err(r) => return Err(CallError::Refused(r)),
        }
    };
    let invocation_id = hex::encode(rand::random::<[u8; 12]>());
    let (start, predicted, created, queue_ms) = (
        lease.start,
        lease.predicted.clone(),
        lease.created.clone(),
        lease.queue_ms,
    );
    let timeout = Duration::from_millis(v.rec.timeout_ms);
    // the invocation runs on its own task: a client that goes away does not
    // cancel it half-way, and the instance always goes back to the pool
    let instances = app.instances.clone();
    let id2 = invocation_id.clone();
    let (_lease, done) =
        tokio::spawn(async move { instances.run(lease, event, timeout, id2, prefetched).await })
            .await
            .map_err(|e| CallError::Internal(e.to_string()))?;
    Ok(Called {
        v,
        invocation_id,
        start,
        predicted,
        created,
        queue_ms,
        done,
    })
}

/// Counts one invocation of `name` that ended as `code` after `total_s`.
pub fn count(app: &App, name: &str, start: StartType, code: &str, total_s: f64) {
    app.metrics
        .invocations
        .get_or_create(&crate::metrics::InvocationLabels {
            function: name.to_string(),
            start_type: start.name().into(),
            status: code.into(),
        })
        .inc();
    app.metrics
        .duration
        .get_or_create(&crate::metrics::FunctionLabel {
            function: name.to_string(),
        })
        .observe(total_s);
}
