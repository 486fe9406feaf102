//! What the daemon's tests share besides the in-process daemon
//! (`thaw_server::testing`): deploy requests, errors, metrics. Each test
//! binary uses part of it.
#![allow(dead_code)]
use base64::Engine as _;
use serde_json::{json, Value};
use thaw_client::Response;

/// The daemon in-process (`thaw_server::testing`).
pub use thaw_server::testing::test_config;
pub use thaw_server::TempDaemon as Daemon;

pub fn b64(d: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(d)
}

/// A deploy request for one source file.
pub fn file_deploy(name: &str, handler: &str, src: &str) -> Value {
    let module = handler.split('.').next().unwrap();
    json!({
        "name": name,
        "handler": handler,
        "code": {"format": "file", "data_base64": b64(src.as_bytes()), "filename": format!("{module}.py")},
    })
}

/// A Node.js function from one file, `m.js`, with handler `m.handler`.
pub fn node_file_deploy(name: &str, src: &str) -> Value {
    json!({
        "name": name,
        "runtime": "nodejs",
        "handler": "m.handler",
        "code": {"format": "file", "data_base64": b64(src.as_bytes()), "filename": "m.js"},
    })
}

pub fn deploy(d: &Daemon, req: &Value) -> Value {
    let r = d.post_json("/v1/functions", req);
    assert!(
        r.status == 201 || r.status == 200,
        "deploy failed: {} {}",
        r.status,
        String::from_utf8_lossy(&r.body)
    );
    r.json().unwrap()
}

pub fn error_of(r: &Response) -> (u16, String, String) {
    let v = r.json().unwrap_or(Value::Null);
    (
        r.status,
        v["error"].as_str().unwrap_or("").to_string(),
        v["message"].as_str().unwrap_or("").to_string(),
    )
}

/// One sample of the daemon's `/metrics`: `series` is the name with its
/// labels as the daemon writes them (`thaw_instances{state="idle"}`).
pub fn metric(d: &Daemon, series: &str) -> u64 {
    let text = String::from_utf8(d.req("GET", "/metrics", None).body).unwrap();
    let key = format!("{series} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&key))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series} in /metrics"))
}
