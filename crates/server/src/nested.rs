//! A function's own invocations (XDT's `thaw.invoke`): the daemon side of
//! [`xdt::Daemon`], through [`crate::invoke::call`] like `POST .../invoke`.
use serde_json::Value;
use std::sync::Arc;
use thaw_xdt::sdk::{CallFailure, CallOutcome};
use thaw_xdt::CallCtx;

use crate::app::App;
use crate::instances::Mode;
use crate::invoke::{CallError, Caller};
use crate::outcome;
use crate::xdt::{self, failure};

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
    let caller = Caller::Function(ctx);
    let c = match crate::invoke::call(&app, &name, Mode::Normal, event, caller).await {
        Ok(c) => c,
        Err(CallError::BadName(_) | CallError::NotFound(_)) => {
            return Err(failure("not_found", format!("no function {name:?}")))
        }
        Err(CallError::Timeout) => {
            return Err(failure(
                "timeout",
                format!("no instance of {name:?} before the caller's deadline"),
            ))
        }
        Err(CallError::Refused(r)) => {
            let r = outcome::refused(&name, r);
            app.metrics.reject(r.code);
            return Err(failure(r.code, r.message));
        }
        Err(CallError::Internal(e)) => return Err(failure("instance_failed", e)),
    };
    match c.done.reply.map(|i| i.output) {
        Ok(Ok(output)) => Ok(output),
        Ok(Err(e)) => Err(from_body(
            &outcome::function_failure(&e, c.v.rec.timeout_ms).1,
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
