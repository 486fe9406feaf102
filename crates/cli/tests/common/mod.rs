//! HTTP helpers shared by the tests that drive a live `thaw serve` through
//! its API: deploy a function from a Python module, invoke it, read the
//! error a function reported.
#![allow(dead_code)] // each test file uses its own subset

use base64::Engine as _;
use serde_json::{json, Value};
use std::path::Path;
use thaw_client::Client;

pub mod tier_home;

pub const THAW: &str = env!("CARGO_BIN_EXE_thaw");

/// `thaw --home HOME ARGS`: whether it succeeded, and its stdout + stderr
/// (it must not have panicked).
pub fn thaw(home: &Path, args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(THAW)
        .arg("--home")
        .arg(home)
        .args(args)
        .output()
        .expect("running thaw");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !text.contains("panicked"),
        "thaw {args:?} panicked:\n{text}"
    );
    (out.status.success(), text)
}

/// A Python source file deployed as several functions (one per handler).
pub struct Module {
    /// the file name, `NAME.py`; handlers are `NAME.HANDLER`
    pub file: &'static str,
    pub source: &'static str,
}

/// POSTs `v` as JSON: the status and the JSON body (`Null` if it is not JSON).
pub fn post(c: &mut Client, path: &str, v: &Value) -> (u16, Value) {
    let r = c
        .request("POST", path, Some(&serde_json::to_vec(v).unwrap()))
        .expect("request");
    (
        r.status,
        serde_json::from_slice(&r.body).unwrap_or(Value::Null),
    )
}

/// Deploys `name` running `handler` of `m` for `owner`; asserts it was created.
pub fn deploy(c: &mut Client, m: &Module, name: &str, handler: &str, owner: &str, memory_mb: u64) {
    let stem = m.file.strip_suffix(".py").expect("a .py file");
    let (status, body) = post(
        c,
        "/v1/functions",
        &json!({
            "name": name,
            "handler": format!("{stem}.{handler}"),
            "owner": owner,
            "code": {"format": "file", "filename": m.file,
                     "data_base64": base64::engine::general_purpose::STANDARD.encode(m.source)},
            "memory_mb": memory_mb,
            "timeout_ms": 60_000,
        }),
    );
    assert_eq!(status, 201, "deploy {name}: {body}");
}

/// Invokes `name` with `ev`; asserts the daemon answered 200.
pub fn invoke(c: &mut Client, name: &str, ev: &Value) -> Value {
    let (status, body) = post(c, &format!("/v1/functions/{name}/invoke"), ev);
    assert_eq!(status, 200, "{name} {ev}: {body}");
    body
}

/// The error kind and message the function reported for `ev` (its output's
/// `kind` and `message`: the test functions catch and return what they raise).
pub fn error(c: &mut Client, name: &str, ev: &Value) -> (String, String) {
    let out = invoke(c, name, ev);
    let kind = out["kind"]
        .as_str()
        .unwrap_or_else(|| panic!("{name} {ev}: no error: {out}"));
    (
        kind.to_string(),
        out["message"].as_str().unwrap_or("").to_string(),
    )
}
