//! Invoke: `RequestResponse` through the native invocation path
//! ([`crate::invoke::call`]) with Lambda's answer (the payload, or the
//! function's error with `X-Amz-Function-Error`; `LogType=Tail`'s last
//! 4 KB of the log); `Event` queued (bounded) and tried up to three times;
//! `DryRun` only resolved.
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::errors::LambdaError;
use super::model::{arn, resolve, Lambda, QualifierQuery, Shared};
use crate::instances::{Mode, Refusal};
use crate::invoke::{CallError, Called, Caller};
use thaw_sandbox::agent::ErrorKind;

/// How much of the log `LogType=Tail` returns.
const TAIL_BYTES: usize = 4096;
/// The waits before an asynchronous invocation's second and third tries
/// (Lambda waits a minute, then two; a local worker answers sooner).
const RETRY_DELAYS: [Duration; 2] = [Duration::from_secs(1), Duration::from_secs(2)];

pub async fn invoke(
    State(l): Shared,
    Path(function): Path<String>,
    Query(q): Query<QualifierQuery>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, LambdaError> {
    let header = |n: &str| headers.get(n).and_then(|v| v.to_str().ok());
    let kind = header("x-amz-invocation-type").unwrap_or("RequestResponse");
    if !["RequestResponse", "Event", "DryRun"].contains(&kind) {
        return Err(LambdaError::invalid(format!(
            "InvocationType {kind:?}: use RequestResponse, Event or DryRun"
        )));
    }
    let tail = match header("x-amz-log-type").unwrap_or("None") {
        "None" => false,
        "Tail" => true,
        o => {
            return Err(LambdaError::invalid(format!(
                "LogType {o:?}: use None or Tail"
            )))
        }
    };
    let max = l.app.cfg.limits.event_bytes;
    if body.len() as u64 > max {
        l.app.metrics.reject("payload_too_large");
        return Err(LambdaError::too_large(format!(
            "Request must be smaller than {max} bytes for the InvokeFunction operation"
        )));
    }
    let event: Value = if body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        serde_json::from_slice(&body).map_err(|e| {
            LambdaError::new(
                StatusCode::BAD_REQUEST,
                "InvalidRequestContentException",
                format!("Could not parse request body into json: {e}"),
            )
        })?
    };
    let t = resolve(&l, &function, q.qualifier.as_deref())?;
    let native = t.v.rec.name.clone();
    let mut h = HeaderMap::new();
    h.insert("x-amz-executed-version", value(&t.version));
    match kind {
        "DryRun" => Ok((StatusCode::NO_CONTENT, h).into_response()),
        "Event" => {
            let id = enqueue(&l, native, event)?;
            h.insert("x-amzn-requestid", value(&id));
            Ok((StatusCode::ACCEPTED, h).into_response())
        }
        _ => {
            let (called, payload, function_error, timing) =
                run_counted(&l, &native, event)
                    .await
                    .map_err(|e| call_error(&l, &native, e))?;
            h.insert("x-amzn-requestid", value(&called.invocation_id));
            h.insert("thaw-start-type", value(called.start.name()));
            h.insert("server-timing", value(&timing));
            if function_error {
                h.insert(
                    "x-amz-function-error",
                    HeaderValue::from_static("Unhandled"),
                );
            }
            if tail {
                h.insert("x-amz-log-result", value(&log_tail(&called, &t.version)));
            }
            h.insert("content-type", HeaderValue::from_static("application/json"));
            let body = serde_json::to_vec(&payload).unwrap_or_default();
            Ok((StatusCode::OK, h, body).into_response())
        }
    }
}

fn value(s: &str) -> HeaderValue {
    HeaderValue::from_str(s).unwrap_or(HeaderValue::from_static("-"))
}

/// One invocation of `native`, counted in the metrics and learnt from as
/// the native invoke's are: what ran, the payload Lambda answers, whether
/// that is the function's error, and its `Server-Timing`.
async fn run_counted(
    l: &Lambda,
    native: &str,
    event: Value,
) -> Result<(Called, Value, bool, String), CallError> {
    let t0 = Instant::now();
    let c = crate::invoke::call(&l.app, native, Mode::Normal, event, Caller::Client).await?;
    crate::invoke::learn(&l.app, native, &c);
    let (payload, failed, code) = answer(&c);
    let total = t0.elapsed().as_secs_f64();
    crate::invoke::count(&l.app, native, c.start, code, total);
    let timing = c.server_timing(total * 1e3);
    Ok((c, payload, failed, timing))
}

/// The payload Lambda answers, whether it is the function's error, and the
/// outcome code the metrics count.
fn answer(c: &Called) -> (Value, bool, &'static str) {
    let timeout_s = c.v.rec.timeout_ms as f64 / 1e3;
    let err = |ty: &str, msg: String| json!({"errorMessage": msg, "errorType": ty});
    match &c.done.reply {
        Ok(i) => match &i.output {
            Ok(v) => (v.clone(), false, "ok"),
            Err(e) => match e.kind() {
                ErrorKind::FunctionError => {
                    (crate::outcome::lambda_error(e), true, "function_error")
                }
                ErrorKind::Timeout => (
                    err(
                        "Sandbox.Timedout",
                        format!("Task timed out after {timeout_s:.2} seconds"),
                    ),
                    true,
                    "timeout",
                ),
                ErrorKind::BadOutput => (
                    err("Runtime.MarshalError", e.message.clone()),
                    true,
                    "bad_output",
                ),
                _ => (
                    err("Runtime.Unknown", e.message.clone()),
                    true,
                    "agent_error",
                ),
            },
        },
        Err(e) => (
            err("Runtime.ExitError", format!("the instance failed: {e}")),
            true,
            "instance_failed",
        ),
    }
}

/// The invocation's log as Lambda's tail shows it (START, the output, END,
/// REPORT), its last 4 KB, base64.
fn log_tail(c: &Called, version: &str) -> String {
    let id = &c.invocation_id;
    let mut log = format!("START RequestId: {id} Version: {version}\n");
    for e in c.v.ring.read(0, 10_000, None, Some(id)) {
        log += &e.output;
        if !log.ends_with('\n') {
            log.push('\n');
        }
    }
    let exec = c.exec_ms();
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // floats saturate
    let billed = exec.ceil() as u64;
    log += &format!(
        "END RequestId: {id}\nREPORT RequestId: {id}\tDuration: {exec:.2} ms\tBilled Duration: {} ms\tMemory Size: {} MB\n",
        billed,
        c.v.rec.memory_mb
    );
    let bytes = log.as_bytes();
    let mut from = bytes.len().saturating_sub(TAIL_BYTES);
    // not in the middle of a character
    while from < bytes.len() && (bytes[from] & 0xc0) == 0x80 {
        from += 1;
    }
    base64::engine::general_purpose::STANDARD.encode(&bytes[from..])
}

fn call_error(l: &Lambda, name: &str, e: CallError) -> LambdaError {
    match e {
        CallError::BadName(m) => LambdaError::invalid(m),
        CallError::NotFound(n) => {
            LambdaError::not_found(format!("Function not found: {}", arn(l, &n)))
        }
        CallError::Refused(r) => {
            let answer: fn(String) -> LambdaError = match &r {
                Refusal::Draining => {
                    |m| LambdaError::new(StatusCode::SERVICE_UNAVAILABLE, "ServiceException", m)
                }
                Refusal::Replaced => LambdaError::conflict,
                Refusal::Failed(_) => {
                    |m| LambdaError::new(StatusCode::BAD_GATEWAY, "ServiceException", m)
                }
                // the queue, the memory budget, the instance cap: throttled
                _ => LambdaError::too_many,
            };
            let r = crate::outcome::refused(name, r);
            l.app.metrics.reject(r.code);
            answer(r.message)
        }
        CallError::Timeout => LambdaError::service("no instance before the deadline".to_string()),
        CallError::Internal(m) => LambdaError::service(m),
    }
}

/// A place in the asynchronous queue, given back when its invocation ends.
struct Slot(Arc<Lambda>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.queued.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Accepts an asynchronous invocation of `native`: up to three tries (the
/// first, then two retries after [`RETRY_DELAYS`]) on a task of its own;
/// the outcome goes to the function's log and metrics.
fn enqueue(l: &Arc<Lambda>, native: String, event: Value) -> Result<String, LambdaError> {
    let cap = l.app.cfg.limits.lambda_event_queue as usize;
    if l.queued.fetch_add(1, Ordering::SeqCst) >= cap {
        l.queued.fetch_sub(1, Ordering::SeqCst);
        l.app.metrics.reject("queue_full");
        return Err(LambdaError::too_many(format!(
            "the asynchronous invocation queue is full ({cap} waiting or running)"
        )));
    }
    let slot = Slot(l.clone());
    let id = super::store::uuid_like();
    let id2 = id.clone();
    tokio::spawn(async move {
        let l = slot.0.clone();
        let mut failures = Vec::new();
        for attempt in 0..=RETRY_DELAYS.len() {
            if attempt > 0 {
                tokio::time::sleep(RETRY_DELAYS[attempt - 1]).await;
            }
            let why = match run_counted(&l, &native, event.clone()).await {
                Ok((_, payload, failed, _)) => {
                    if !failed {
                        note(
                            &l,
                            &native,
                            &id2,
                            "ok",
                            format!("succeeded on try {}", attempt + 1),
                        );
                        return;
                    }
                    format!(
                        "{}: {}",
                        payload["errorType"].as_str().unwrap_or(""),
                        payload["errorMessage"].as_str().unwrap_or("")
                    )
                }
                Err(CallError::NotFound(_)) => {
                    note(
                        &l,
                        &native,
                        &id2,
                        "failed",
                        "the function was deleted".into(),
                    );
                    return;
                }
                Err(e) => format!("{e:?}"),
            };
            failures.push(format!("try {}: {why}", attempt + 1));
        }
        note(
            &l,
            &native,
            &id2,
            "failed",
            format!(
                "failed after {} tries: {}",
                failures.len(),
                failures.join("; ")
            ),
        );
    });
    Ok(id)
}

/// An asynchronous invocation's outcome, in the function's log (instance
/// `lambda-async`) and metrics.
fn note(l: &Lambda, native: &str, id: &str, outcome: &str, text: String) {
    l.app
        .metrics
        .async_events
        .get_or_create(&crate::metrics::AsyncLabels {
            function: native.to_string(),
            outcome: outcome.to_string(),
        })
        .inc();
    let Some(v) = l.app.function(native) else {
        return;
    };
    let entry = crate::logs::LogEntry {
        seq: 0,
        invocation_id: id.to_string(),
        instance: "lambda-async".into(),
        unix_ms: crate::logs::now_unix_ms(),
        output: format!("asynchronous invocation {id}: {text}\n"),
        truncated: false,
        net_in_bytes: None,
        net_out_bytes: None,
    };
    if let Err(e) = v.ring.append(entry) {
        tracing::warn!(function = %native, "writing the function log: {e:#}");
    }
}
