//! What a refused or failed invocation tells its caller, without HTTP: the
//! API (`http`) puts a status on it; a nested invocation (`nested`) hands
//! it to the calling function's SDK as a call failure.
use serde_json::{json, Value};
use thaw_sandbox::agent::{AgentError, ErrorKind};

use crate::instances::Refusal;

/// A refusal as the caller sees it.
#[derive(Debug)]
pub struct Refused {
    /// the error code (`queue_full`, `memory`, ...)
    pub code: &'static str,
    pub message: String,
    /// seconds after which trying again may succeed
    pub retry_after: Option<u64>,
}

/// Why no instance of `name` was given, for its caller.
pub fn refused(name: &str, r: Refusal) -> Refused {
    let (code, message, retry_after) = match r {
        Refusal::QueueFull => (
            "queue_full",
            format!("every instance of {name:?} is busy and its queue is full"),
            Some(1),
        ),
        Refusal::Memory => (
            "memory",
            "the instance memory budget is exhausted".to_string(),
            Some(1),
        ),
        Refusal::Draining => (
            "shutting_down",
            "the daemon is shutting down".to_string(),
            None,
        ),
        Refusal::Replaced => (
            "replaced",
            format!("{name:?} was redeployed or deleted while the request waited"),
            Some(1),
        ),
        Refusal::AtCap => ("at_cap", format!("{name:?} is at its instance cap"), None),
        Refusal::NodeFull(n) => (
            "node_full",
            format!("the node holds its most instances ({n}) and none is idle"),
            Some(1),
        ),
        Refusal::Waited => (
            "queue_timeout",
            format!("no instance of {name:?} became free in time"),
            Some(1),
        ),
        Refusal::Failed(e) => (
            "start_failed",
            format!("starting an instance of {name:?} failed: {e}"),
            None,
        ),
    };
    Refused {
        code,
        message,
        retry_after,
    }
}

/// A function's failure the agent reported: the outcome's code (`timeout`,
/// `function_error`, `bad_output` or `agent_error`) and the error body.
pub fn function_failure(e: &AgentError, timeout_ms: u64) -> (&'static str, Value) {
    match e.kind() {
        ErrorKind::FunctionError => {
            let (ty, text) = e.message.split_once(": ").unwrap_or((&e.message, ""));
            let traceback = e.traceback.as_deref().unwrap_or("");
            (
                "function_error",
                json!({"error": "function_error", "type": ty, "message": text, "traceback": traceback}),
            )
        }
        ErrorKind::Timeout => (
            "timeout",
            json!({"error": "timeout", "message": format!("the function ran past its timeout of {timeout_ms} ms; the instance was replaced")}),
        ),
        ErrorKind::BadOutput => (
            "bad_output",
            json!({"error": "bad_output", "message": e.message}),
        ),
        _ => (
            "agent_error",
            json!({"error": if e.kind.is_empty() { "agent_error" } else { &e.kind }, "message": e.message}),
        ),
    }
}

/// A function's exception in Lambda's shape.
pub fn lambda_error(e: &AgentError) -> Value {
    match &e.detail {
        Some(d) => json!({
            "errorMessage": d.error_message,
            "errorType": d.error_type,
            "stackTrace": d.stack_trace,
        }),
        None => {
            let (ty, text) = e.message.split_once(": ").unwrap_or((&e.message, ""));
            json!({"errorMessage": text, "errorType": ty, "stackTrace": []})
        }
    }
}
