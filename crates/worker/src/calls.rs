//! Calls into a live instance: the after-restore hook and invocations.
use serde_json::Value;
use std::time::{Duration, Instant};
use thaw_sandbox::agent::{Event, Invoked, Reply, Request};
use thaw_sandbox::{Sandbox, SandboxError};

use crate::error::Result;
use crate::{ms, reply_error, AfterRestore, InputSize, Invocation};

/// Runs the function's after-restore hook (if it has one) with the new
/// instance's id, before the instance's first invocation: what the daemon
/// makes of every restore, so a REAP working set recorded at that
/// invocation covers the step too.
pub fn after_restore(
    sb: &mut Sandbox,
    instance_id: &str,
    timeout: Duration,
) -> Result<AfterRestore> {
    let req = Request::AfterRestore {
        instance_id: instance_id.to_string(),
    };
    match sb.call(&req, timeout)? {
        Reply::AfterRestore { hook, hook_ms } => Ok(AfterRestore { hook, hook_ms }),
        other => Err(SandboxError::Reply(format!(
            "expected an after_restore reply, got {other:?}"
        ))
        .into()),
    }
}

/// One invocation with a caller's event. `Ok` holds the agent's answer:
/// the output or the function's failure; `Err` means the instance is gone
/// (timeout, crash, protocol violation).
pub fn invoke_event(sb: &mut Sandbox, event: &Value, timeout: Duration) -> Result<Invoked> {
    invoke_event_as(sb, event, timeout, None)
}

/// [`invoke_event`] under the invocation id `request_id` (what a
/// Lambda-style handler sees as `context.aws_request_id`).
pub fn invoke_event_as(
    sb: &mut Sandbox,
    event: &Value,
    timeout: Duration,
    request_id: Option<&str>,
) -> Result<Invoked> {
    let (req, hard) = invoke_request(event, timeout, request_id);
    let invoked = Invoked::decode(sb.call_raw(&req, hard)?).map_err(reply_error)?;
    first_response(sb, &invoked);
    Ok(invoked)
}

/// [`invoke_event`] for a function that may use the in-sandbox SDK
/// (`import thaw`): its requests during the invocation go to `serve`.
pub fn invoke_event_serving(
    sb: &mut Sandbox,
    event: &Value,
    timeout: Duration,
    request_id: Option<&str>,
    serve: &mut thaw_sandbox::SdkServer<'_>,
) -> Result<Invoked> {
    let (req, hard) = invoke_request(event, timeout, request_id);
    let invoked = Invoked::decode(sb.call_serving(&req, hard, serve)?).map_err(reply_error)?;
    first_response(sb, &invoked);
    Ok(invoked)
}

/// The restore strategy's last phase, after an invocation answered (a
/// function error counts as no response: the strategy waits for a real one).
fn first_response(sb: &mut Sandbox, invoked: &Invoked) {
    if invoked.output.is_ok() {
        sb.after_first_response();
    }
}

fn invoke_request(
    event: &Value,
    timeout: Duration,
    request_id: Option<&str>,
) -> (Request, Duration) {
    let ms_limit = timeout.as_secs_f64() * 1e3;
    // the agent's own (soft) limit fires first; the sandbox's hard limit
    // a little later kills a runtime stuck in native code
    let hard = timeout + Duration::from_millis(500);
    (
        Request::Invoke {
            event: Event::Input(event.clone()),
            timeout_ms: Some(ms_limit),
            request_id: request_id.map(str::to_string),
        },
        hard,
    )
}

/// Invokes an instance on input `size`.
pub fn invoke(sb: &mut Sandbox, size: InputSize, timeout: Duration) -> Result<Invocation> {
    let t = Instant::now();
    let (output, exec_ms) = sb
        .call(&Request::invoke_size(size.name()), timeout)?
        .into_invoke()
        .map_err(reply_error)?;
    let latency_ms = ms(t);
    sb.after_first_response();
    Ok(Invocation {
        output,
        exec_ms,
        latency_ms,
    })
}
