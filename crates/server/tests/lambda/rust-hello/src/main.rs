//! A Lambda function in Rust, as its authors write it: lambda_runtime's
//! `run(service_fn(...))`, state made at init, an `Err` on request.
use lambda_runtime::{service_fn, Error, LambdaEvent};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

static CALLS: AtomicU64 = AtomicU64::new(0);

#[tokio::main]
async fn main() -> Result<(), Error> {
    let init_at = SystemTime::now().duration_since(UNIX_EPOCH)?.as_nanos() as u64;
    lambda_runtime::run(service_fn(move |e: LambdaEvent<Value>| async move {
        if e.payload["fail"].as_bool() == Some(true) {
            return Err(Error::from(format!("asked to fail: {}", e.payload["name"])));
        }
        let calls = CALLS.fetch_add(1, Ordering::Relaxed) + 1;
        Ok::<Value, Error>(json!({
            "hello": e.payload["name"],
            "calls": calls,
            "init_at": init_at,
            "request_id": e.context.request_id,
            "arn": e.context.invoked_function_arn,
        }))
    }))
    .await
}
