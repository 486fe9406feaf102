//! A function's own invocations (XDT's `thaw.invoke`): the daemon side of
//! [`xdt::Daemon`], through the pool like `POST .../invoke`.
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};
use thaw_xdt::sdk::{CallFailure, CallOutcome};
use thaw_xdt::CallCtx;

use crate::app::App;
use crate::instances::{FnVersion, Mode, Refusal};
use crate::outcome;
use crate::xdt::{self, failure, Prefetched};

impl xdt::Daemon for App {
    fn owner_of(&self, function: &str) -> Option<String> {
        let fns = self.functions.read().unwrap_or_else(|p| p.into_inner());
        fns.get(function).map(|v| v.rec.owner.clone())
    }

    fn invoke(
        self: Arc<Self>,
        ctx: CallCtx,
        event: Value,
    ) -> futures::future::BoxFuture<'static, CallOutcome> {
        Box::pin(nested_invoke(self, ctx, event))
    }
}

/// One invocation made by a function: like `POST .../invoke`, in the
/// caller's chain, and never past the caller's deadline.
async fn nested_invoke(app: Arc<App>, ctx: CallCtx, event: Value) -> CallOutcome {
    let name = ctx.function.clone();
    let event_bytes = serde_json::to_vec(&event).map_or(0, |b| b.len() as u64);
    if event_bytes > app.cfg.limits.event_bytes {
        return Err(failure(
            "payload_too_large",
            format!(
                "an event of {event_bytes} bytes is over the {}-byte limit (pass a reference: thaw.put)",
                app.cfg.limits.event_bytes
            ),
        ));
    }
    let left = || ctx.deadline.saturating_duration_since(Instant::now());
    let lookup = |app: &App| -> Option<Arc<FnVersion>> {
        let fns = app.functions.read().unwrap_or_else(|p| p.into_inner());
        fns.get(&name).cloned()
    };
    let prefetched = match (lookup(&app), app.instances.xdt.get()) {
        (Some(v), Some(host)) => {
            host.prefetch(&ctx.owner, &event, v.rec.memory_mb << 20, ctx.deadline)
        }
        _ => Prefetched::new(),
    };
    let mut tries = 0;
    let (v, lease) = loop {
        let Some(v) = lookup(&app) else {
            return Err(failure("not_found", format!("no function {name:?}")));
        };
        match tokio::time::timeout(left(), app.instances.acquire(&v, Mode::Normal)).await {
            Err(_) => {
                return Err(failure(
                    "timeout",
                    format!("no instance of {name:?} before the caller's deadline"),
                ))
            }
            Ok(Ok(l)) => break (v, l),
            Ok(Err(Refusal::Replaced)) if tries < 3 => tries += 1,
            Ok(Err(r)) => {
                let r = outcome::refused(&name, r);
                app.metrics.reject(r.code);
                return Err(failure(r.code, r.message));
            }
        }
    };
    let timeout = Duration::from_millis(v.rec.timeout_ms).min(left());
    let id = hex::encode(rand::random::<[u8; 12]>());
    let instances = app.instances.clone();
    let (_lease, done) = instances
        .run_in_chain(lease, event, timeout, id, Some(ctx), prefetched)
        .await;
    match done.reply.map(|i| i.output) {
        Ok(Ok(output)) => Ok(output),
        Ok(Err(e)) => Err(from_body(
            &outcome::function_failure(&e, v.rec.timeout_ms).1,
        )),
        Err(e) => Err(failure("instance_failed", e)),
    }
}

fn from_body(body: &Value) -> CallFailure {
    let s = |k: &str| body.get(k).and_then(Value::as_str).unwrap_or("");
    let message = match s("type") {
        "" => s("message").to_string(),
        ty => format!("{ty}: {}", s("message")),
    };
    failure(s("error"), message)
}
