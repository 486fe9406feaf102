//! Custom runtimes through Lambda's Runtime API: a Go function built with
//! aws-lambda-go as `bootstrap` (a Rust one on lambda_runtime, a Python one
//! under Lambda's runtime client awslambdaric alike) starts, answers, is
//! snapshotted while its `next` (or `restore/next`) waits, and every
//! restore answers on the connection it had.
//! Real sandboxes on the real runtime root; runs as root; the bootstrap is
//! built by the server's test script (Go from `scripts/setup.sh --tests`).
mod common;
use common::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use thaw_checkpoint::checkpoint;
use thaw_sandbox::agent::{Reply, Request};
use thaw_sandbox::Sandbox;
use thaw_worker::{RestoreRequest, StrategyKind, UserFunction};

/// The path `script what` prints once it has made `what` (cached by the
/// script); panics naming what failed.
fn made_by(script: &str, what: &str) -> PathBuf {
    let out = std::process::Command::new(script)
        .arg(what)
        .output()
        .unwrap_or_else(|e| panic!("running {script}: {e}"));
    assert!(
        out.status.success(),
        "{script} {what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

const LAMBDA_TESTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../server/tests/lambda");

/// A test function's bootstrap, built once (Go from `scripts/setup.sh --tests`).
fn bootstrap(name: &str) -> PathBuf {
    made_by(&format!("{LAMBDA_TESTS}/build_bootstrap.sh"), name)
}

/// A code directory holding `bootstrap`, in the test's tier: a built test
/// function's, or for `ric-hello` Lambda's Python runtime client with a
/// Python function (awslambdaric from `scripts/lambda-tools.sh`).
fn function(t: &TestTier, name: &str, env: &[(&str, &str)]) -> UserFunction {
    let code = t.path.join("code");
    std::fs::create_dir_all(&code).unwrap();
    let handler = match name {
        "ric-hello" => {
            let tools = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/lambda-tools.sh");
            copy_tree(&made_by(tools, "awslambdaric"), &code);
            copy_tree(&Path::new(LAMBDA_TESTS).join(name), &code);
            "lambda_function.handler"
        }
        _ => {
            std::fs::copy(bootstrap(name), code.join("bootstrap")).unwrap();
            "bootstrap"
        }
    };
    let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
    UserFunction {
        env: env.collect(),
        ..UserFunction::plain("hello", thaw_worker::Runtime::Provided, code, handler)
    }
}

/// Copies the files under `from` into `to`, modes kept.
fn copy_tree(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let dest = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&dest).unwrap();
            copy_tree(&entry.path(), &dest);
        } else {
            std::fs::copy(entry.path(), dest).unwrap();
        }
    }
}

fn invoke(
    sb: &mut Sandbox,
    event: Value,
    id: &str,
) -> Result<Value, thaw_sandbox::agent::AgentError> {
    let req = Request::Invoke {
        event: thaw_sandbox::agent::Event::Input(event),
        timeout_ms: Some(3000.0),
        request_id: Some(id.into()),
    };
    match sb.call(&req, T) {
        Ok(Reply::Invoke { output, .. }) => Ok(output),
        Ok(other) => panic!("not an invoke reply: {other:?}"),
        Err(thaw_sandbox::SandboxError::Agent(e)) => Err(e),
        Err(e) => panic!("the instance failed: {e:#}"),
    }
}

#[test]
fn a_go_function_answers_fresh_and_from_every_restore() {
    answers_fresh_and_from_every_restore("go-hello");
}

#[test]
fn a_rust_function_answers_fresh_and_from_every_restore() {
    answers_fresh_and_from_every_restore("rust-hello");
}

#[test]
fn lambdas_python_runtime_client_answers_fresh_and_from_every_restore() {
    answers_fresh_and_from_every_restore("ric-hello");
}

fn answers_fresh_and_from_every_restore(name: &str) {
    let w = worker();
    let t = tier(name);
    let func = function(&t, name, &[]);
    let (mut fresh, _) = w
        .start_user(&func, T)
        .unwrap_or_else(|e| panic!("starting the {name} bootstrap: {e:#}"));
    let out = invoke(&mut fresh, json!({"name": "fresh"}), "id-fresh-1").unwrap();
    assert_eq!(out["hello"], "fresh", "{out}");
    assert_eq!(out["calls"], 1, "{out}");
    assert_eq!(out["request_id"], "id-fresh-1", "{out}");
    assert_eq!(
        out["arn"], "arn:aws:lambda:us-east-1:000000000000:function:hello",
        "{out}"
    );
    let init_at = out["init_at"].clone();
    let dir = t.path.join("snapshot");
    let (snap, _) = checkpoint(&mut fresh, &dir, "hello", &w.root.hash)
        .unwrap_or_else(|e| panic!("checkpoint of a waiting {name} bootstrap: {e:#}"));
    // the deploying instance goes on over its own connection
    let out = invoke(&mut fresh, json!({"name": "after"}), "id-fresh-2").unwrap();
    assert_eq!(out["calls"], 2, "{out}");
    drop(fresh);
    let strategies = [StrategyKind::Eager, StrategyKind::Mmap, StrategyKind::Uffd];
    // two restores with each strategy, three answers from each
    for what in strategies
        .map(|s| [0, 1].map(|i| (s, format!("{s}-restore-{i}"))))
        .iter()
        .flatten()
    {
        let (s, what) = (what.0, what.1.as_str());
        let req = RestoreRequest::new(&snap, s).function(&func).pool(None);
        let mut sb = match w.restore(req) {
            Ok((sb, _)) => sb,
            Err(e) => panic!("{what}: {e:#}"),
        };
        for n in 2..5 {
            let id = format!("{what}-{n}");
            let out = invoke(&mut sb, json!({"name": what}), &id)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(out["hello"], what, "{out}");
            // the snapshot's state: one call before it, init not run again
            assert_eq!(out["calls"], n, "{what}: {out}");
            assert_eq!(out["init_at"], init_at, "{what}: {out}");
            assert_eq!(out["request_id"], id.as_str(), "{out}");
        }
    }
}

/// A fresh instance of test function `name`, and the error `event` made
/// it report.
fn failed_with(name: &str, event: Value) -> (Sandbox, thaw_sandbox::agent::ErrorDetail) {
    let t = tier(&format!("{name}-error"));
    let (mut sb, _) = worker().start_user(&function(&t, name, &[]), T).unwrap();
    let e = invoke(&mut sb, event, "failing").unwrap_err();
    let d = e
        .detail
        .unwrap_or_else(|| panic!("no error detail: {}", e.message));
    (sb, *d)
}

#[test]
fn a_go_panic_is_the_functions_error_with_its_stack() {
    let (_, d) = failed_with("go-hello", json!({"name": "x", "panic": true}));
    let e = &d;
    assert_eq!(d.error_type, "string", "{e:?}");
    assert_eq!(d.error_message, "asked to panic: x", "{e:?}");
    assert!(
        d.stack_trace.iter().any(|f| f.contains("main.go")),
        "a panic carries its stack: {e:?}"
    );
}

#[test]
fn a_bootstrap_that_exits_at_init_fails_the_load_with_its_words() {
    let w = worker();
    let t = tier("provided-go-init");
    let func = function(
        &t,
        "go-hello",
        &[("HELLO_FAIL_INIT", "no table named orders")],
    );
    let e = match w.start_user(&func, T) {
        Ok(_) => panic!("a bootstrap that exits at init loaded"),
        Err(e) => thaw_error::chain(&e),
    };
    assert!(e.contains("init failed: no table named orders"), "{e}");
}

#[test]
fn a_rust_err_is_the_functions_error_and_the_instance_goes_on() {
    let (mut sb, d) = failed_with("rust-hello", json!({"name": "x", "fail": true}));
    let e = &d;
    assert_eq!(d.error_message, "asked to fail: \"x\"", "{e:?}");
    assert!(!d.error_type.is_empty(), "{e:?}");
    let out = invoke(&mut sb, json!({"name": "y"}), "e2").unwrap();
    assert_eq!(out["hello"], "y", "{out}");
}

/// A function whose bootstrap is `script` (an interpreter's, by its `#!`),
/// in a tier of its own.
fn script_function(tag: &str, script: &str) -> (TestTier, UserFunction) {
    use std::os::unix::fs::PermissionsExt;
    let t = tier(tag);
    let code = t.path.join("script");
    std::fs::create_dir_all(&code).unwrap();
    let b = code.join("bootstrap");
    std::fs::write(&b, script).unwrap();
    std::fs::set_permissions(&b, std::fs::Permissions::from_mode(0o555)).unwrap();
    let func = UserFunction::plain("script", thaw_worker::Runtime::Provided, code, "bootstrap");
    (t, func)
}

/// `provided/probe.py` tries what a hostile bootstrap would: answering a
/// request id it was not given (another instance's, in flight), init
/// errors after init, paths that do not exist, a second waiting call, 20
/// connections held; it answers its own event with the statuses it got.
#[test]
fn a_runtime_reaches_only_its_own_api_and_invocations() {
    let (t, func) = script_function("provided-probe", include_str!("provided/probe.py"));
    let w = worker();
    let (mut a, _) = w.start_user(&func, T).unwrap();
    let (mut b, _) = w.start_user(&func, T).unwrap();
    // A's invocation is in flight while B tries to answer it
    let in_a = std::thread::spawn(move || {
        let out = invoke(&mut a, json!({"sleep": 1.0}), "a-in-flight").unwrap();
        (a, out)
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    let out = invoke(&mut b, json!({"other_id": "a-in-flight"}), "b-1").unwrap();
    assert_eq!(out["me"], "b-1", "{out}");
    let seen = &out["seen"];
    assert_eq!(
        seen["other_id"], 404,
        "another instance's request id: {out}"
    );
    assert_eq!(seen["init_error"], 403, "{out}");
    assert_eq!(seen["unknown"], 404, "{out}");
    assert_eq!(seen["second_next"], 403, "a next before the answer: {out}");
    assert_eq!(seen["garbage"], 404, "{out}");
    let held = seen["held_answered"].as_u64().unwrap();
    assert!(
        (8..20).contains(&held),
        "20 connections held open, all served: {out}"
    );
    let (_a, out) = in_a.join().unwrap();
    assert_eq!(
        out["me"], "a-in-flight",
        "A answered its own, untouched: {out}"
    );
    // and B goes on
    let out = invoke(&mut b, json!({}), "b-2").unwrap();
    assert_eq!(out["me"], "b-2", "{out}");
    // a restored B (Python's http.client on the remade connection) is
    // refused the same, and its new connections reach its own listener
    let (snap, _) = checkpoint(&mut b, &t.path.join("snapshot"), "probe", &w.root.hash).unwrap();
    drop(b);
    let req = RestoreRequest::new(&snap, StrategyKind::Mmap).function(&func);
    let (mut c, _) = w.restore(req).unwrap();
    let out = invoke(&mut c, json!({"other_id": "b-2"}), "c-1").unwrap();
    assert_eq!(out["me"], "c-1", "{out}");
    assert_eq!(
        out["seen"]["other_id"], 404,
        "the snapshot's last id: {out}"
    );
    assert_eq!(out["seen"]["unknown"], 404, "{out}");
}

/// `provided/snapstart.py` knows SnapStart: it ends init in
/// `restore/next`, counts the restores it is told of, and with
/// `FAIL_RESTORE` posts `restore/error` instead of going on.
#[test]
fn a_snapstart_runtime_is_snapshotted_in_restore_next_and_told_of_each_restore() {
    let w = worker();
    let script = include_str!("provided/snapstart.py");
    let (t, func) = script_function("provided-snapstart", script);
    // as a deploy does: loaded, snapshotted while restore/next waits
    let mut fresh = w.start_user(&func, T).unwrap().0;
    let (snap, _) = checkpoint(&mut fresh, &t.path.join("snapshot"), "snap", &w.root.hash)
        .unwrap_or_else(|e| panic!("checkpoint in restore/next: {e:#}"));
    // the deploying instance resumes as a restored one would
    assert_eq!(invoke(&mut fresh, json!({}), "f-1").unwrap()["restores"], 1);
    drop(fresh);
    for i in 0..2 {
        let req = RestoreRequest::new(&snap, StrategyKind::Mmap).function(&func);
        let (mut sb, _) = w.restore(req).unwrap();
        for n in 0..2 {
            let out = invoke(&mut sb, json!({}), &format!("r{i}-{n}")).unwrap();
            assert_eq!(out["restores"], 1, "restore {i}, call {n}: {out}");
        }
    }
    // a failed after-restore step is the first invocation's error
    let failing = UserFunction {
        env: vec![("FAIL_RESTORE".into(), "1".into())],
        ..func
    };
    let (mut sb, _) = w.start_user(&failing, T).unwrap();
    let e = invoke(&mut sb, json!({}), "x-1").unwrap_err();
    let d = e
        .detail
        .unwrap_or_else(|| panic!("no detail: {}", e.message));
    assert_eq!(
        (d.error_type.as_str(), d.error_message.as_str()),
        ("Restore.Failed", "no connection")
    );
}
