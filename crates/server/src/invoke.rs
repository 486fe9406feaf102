//! One invocation of a deployed function through the pool: what the
//! native API's invoke, Lambda's Invoke and a function's own invocations
//! (XDT's `thaw.invoke`) all run (lookup, the prefetch of other workers'
//! objects, the wait for an instance across a redeploy, the run on its own
//! task, the metrics).
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};
use thaw_xdt::CallCtx;

use crate::app::App;
use crate::instances::{Created, FnVersion, JobDone, Mode, Refusal, StartType};

/// Who makes an invocation.
pub enum Caller {
    /// a client of the daemon's API: a new chain, the function's own timeout
    Client,
    /// a function (XDT): in its chain, and never past its deadline
    Function(CallCtx),
}

impl Caller {
    fn deadline(&self) -> Option<Instant> {
        match self {
            Caller::Client => None,
            Caller::Function(ctx) => Some(ctx.deadline),
        }
    }
}

/// Why an invocation did not run.
#[derive(Debug)]
pub enum CallError {
    /// a function name outside the grammar
    BadName(String),
    NotFound(String),
    /// no instance was given
    Refused(Refusal),
    /// no instance before the calling function's deadline
    Timeout,
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

    /// The `Server-Timing` header's value: the wait for an instance, its
    /// start (boot or restore, and the after-restore step), the handler,
    /// and `total_ms` as the caller measured it.
    pub fn server_timing(&self, total_ms: f64) -> String {
        let mut timing = format!("queue;dur={:.3}", self.queue_ms);
        if self.start != StartType::Warm {
            let (create_ms, hook_ms) = self
                .created
                .as_ref()
                .map_or((0.0, 0.0), |c| (c.create_ms, c.hook_ms));
            timing += &format!(", {};dur={create_ms:.3}", self.start.name());
            if self.start == StartType::Restore {
                timing += &format!(", after_restore;dur={hook_ms:.3}");
            }
        }
        timing + &format!(", exec;dur={:.3}, total;dur={total_ms:.3}", self.exec_ms())
    }

    /// Where this instance's snapshot was read from; for a warm start,
    /// where the function's snapshot is now ("-": none).
    pub fn tier(&self) -> String {
        match self.start {
            StartType::Restore => self.created.as_ref().map_or("-".into(), |c| c.tier.clone()),
            StartType::Warm => self.v.placed().map_or("-".into(), |p| p.tier),
            StartType::Boot => "-".into(),
        }
    }
}

fn lookup(app: &App, name: &str) -> Result<Arc<FnVersion>, CallError> {
    crate::registry::check_name(name).map_err(|e| CallError::BadName(format!("{e:#}")))?;
    app.function(name)
        .ok_or_else(|| CallError::NotFound(name.to_string()))
}

/// Invokes `name` with `event` for `caller`: finds or starts an instance
/// (following a redeploy made while waiting) and runs the event on it.
pub async fn call(
    app: &Arc<App>,
    name: &str,
    mode: Mode,
    event: Value,
    caller: Caller,
) -> Result<Called, CallError> {
    let deadline = caller.deadline();
    let left = |d: Instant| d.saturating_duration_since(Instant::now());
    // other workers' objects in the event start coming now, while an
    // instance is found or restored; a function's pulls are on its owner
    let prefetched = match app.instances.xdt.get() {
        Some(host) => {
            let v = lookup(app, name)?;
            let (owner, until) = match &caller {
                Caller::Client => (
                    &v.rec.owner,
                    Instant::now() + Duration::from_millis(v.rec.timeout_ms),
                ),
                Caller::Function(ctx) => (&ctx.owner, ctx.deadline),
            };
            host.prefetch(owner, &event, v.rec.memory_mb << 20, until)
        }
        None => Default::default(),
    };
    let mut tries = 0;
    let (v, lease) = loop {
        let v = lookup(app, name)?;
        let acquired = match deadline {
            None => app.instances.acquire(&v, mode).await,
            Some(d) => tokio::time::timeout(left(d), app.instances.acquire(&v, mode))
                .await
                .map_err(|_| CallError::Timeout)?,
        };
        match acquired {
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
    let mut timeout = Duration::from_millis(v.rec.timeout_ms);
    if let Some(d) = deadline {
        timeout = timeout.min(left(d));
    }
    let chain = match caller {
        Caller::Client => None,
        Caller::Function(ctx) => Some(ctx),
    };
    // the invocation runs on its own task: a caller that goes away does not
    // cancel it half-way, and the instance always goes back to the pool
    let instances = app.instances.clone();
    let id2 = invocation_id.clone();
    let (_lease, done) = tokio::spawn(async move {
        instances
            .run(lease, event, timeout, id2, chain, prefetched)
            .await
    })
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

/// What one invocation's start teaches: a start the policy predicted
/// wrong is counted, and a restore's whole cold time (restore, hook,
/// handler) calibrates its tier.
pub fn learn(app: &App, name: &str, c: &Called) {
    let (start, predicted) = (c.start, &c.predicted);
    let tier = match start {
        StartType::Restore => c.tier(),
        _ => "-".into(),
    };
    if (predicted.0, predicted.1.as_str()) != (start, tier.as_str()) {
        app.metrics
            .mispredictions
            .get_or_create(&crate::metrics::PredictionLabels {
                predicted: format!("{}:{}", predicted.0.name(), predicted.1),
                actual: format!("{}:{tier}", start.name()),
            })
            .inc();
    }
    if let (StartType::Restore, Some(created)) = (start, &c.created) {
        let cold_ms = created.create_ms + created.hook_ms + c.exec_ms();
        app.calibrations
            .observe(name, c.v.rec.version, &created.tier, cold_ms);
    }
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
