//! The agent and the function suite, driven over fd 3 in a chroot (harness).

mod common;

use serde_json::{json, Value};
use std::time::{Duration, Instant};
use thaw_runtime::harness::AgentProcess;
use thaw_runtime::SIZES;

fn spawn(f: &str) -> AgentProcess {
    AgentProcess::spawn(common::root(), f).unwrap_or_else(|e| panic!("spawn agent {f}: {e:#}"))
}

fn assert_single_threaded_and_clean(a: &AgentProcess, when: &str) {
    let threads = a.threads().unwrap();
    assert_eq!(threads, 1, "{} {when}: {threads} threads", a.function);
    let fds = a.open_fds().unwrap();
    assert!(
        fds.iter().all(|f| [0, 1, 2, 3].contains(f)) && fds.contains(&3),
        "{} {when}: open fds {fds:?}",
        a.function
    );
}

fn err_kind(r: &Value) -> &str {
    assert_eq!(r["ok"], json!(false), "expected an error reply, got {r}");
    r["error"].as_str().unwrap_or("")
}

#[test]
fn every_function_and_size_passes_its_checker() {
    let root = common::root();
    let fns = root.functions().unwrap();
    assert!(fns.len() >= 10, "suite has only {} functions", fns.len());
    for required in [
        "helloworld",
        "pyaes",
        "chameleon",
        "json_serdes",
        "image_rotate",
        "lr_serving",
        "lr_training",
        "matmul",
        "compress",
        "pagerank",
    ] {
        assert!(
            fns.iter().any(|f| f.name == required),
            "suite lacks {required}"
        );
    }
    for f in &fns {
        assert_eq!(f.sizes, SIZES.to_vec(), "{}", f.name);
        assert!(!f.mirrors.is_empty());
        let t = Instant::now();
        let mut a = spawn(&f.name);
        let h = a.request_ok(&json!({"op": "health"})).unwrap();
        assert_eq!(h["state"], "idle");
        let load = a.request_ok(&json!({"op": "load"})).unwrap();
        assert_eq!(load["function"], f.name.as_str());
        assert!(load["init_ms"].as_f64().unwrap() >= 0.0);
        assert!(load["import_ms"].as_f64().unwrap() > 0.0);
        assert!(load["rss_kb"].as_u64().unwrap() > 1000);
        assert_single_threaded_and_clean(&a, "after load");
        let mut times = Vec::new();
        for size in SIZES {
            let r = a
                .request_ok(&json!({"op": "invoke", "size": size}))
                .unwrap_or_else(|e| panic!("{e:#}"));
            let exec = r["exec_ms"].as_f64().unwrap();
            // How long a size takes is a benchmark's business, not a test's.
            assert!(exec >= 0.0);
            root.check_output(&f.name, size, &r["output"])
                .unwrap_or_else(|e| panic!("{} {size}: {e:#}", f.name));
            times.push(format!("{size}={exec:.1}ms"));
        }
        assert_single_threaded_and_clean(&a, "after invocations");
        let p = a.request_ok(&json!({"op": "prepare_checkpoint"})).unwrap();
        assert_eq!(p["op"], "prepare_checkpoint");
        let h = a.request_ok(&json!({"op": "health"})).unwrap();
        assert_eq!(h["state"], "ready");
        assert_eq!(h["invocations"], 4);
        a.shutdown().unwrap();
        eprintln!(
            "{:<16} ok in {:.1}s: {}",
            f.name,
            t.elapsed().as_secs_f64(),
            times.join(" ")
        );
    }
}

#[test]
fn checker_rejects_wrong_outputs() {
    let root = common::root();
    let mut a = spawn("matmul");
    let r = a.request_ok(&json!({"op": "invoke", "size": "I"})).unwrap();
    let good = r["output"].clone();
    root.check_output("matmul", "I", &good).unwrap();
    let mut bad = good.clone();
    bad["sum"] = json!(good["sum"].as_f64().unwrap() * 1.001);
    let e = root
        .check_output("matmul", "I", &bad)
        .unwrap_err()
        .to_string();
    assert!(e.contains("sum"), "{e}");
    let mut bad = good.clone();
    bad["samples"][1][2] = json!(0.5);
    let e = root
        .check_output("matmul", "I", &bad)
        .unwrap_err()
        .to_string();
    assert!(e.contains("C["), "{e}");
    // Right output for another size is wrong for this one.
    let e = root
        .check_output("matmul", "II", &good)
        .unwrap_err()
        .to_string();
    assert!(e.contains("n"), "{e}");
    let e = root
        .check_output(
            "helloworld",
            "I",
            &json!({"message": "Hello, Wrld!", "length": 5}),
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("message"), "{e}");
    let e = root
        .check_output("helloworld", "I", &json!([]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a JSON object"), "{e}");
    assert!(root.check_output("nope", "I", &json!({})).is_err());
    assert!(root.check_output("helloworld", "V", &json!({})).is_err());
    a.shutdown().unwrap();
}

#[test]
fn malformed_and_oversized_requests_get_errors_and_the_agent_keeps_serving() {
    let mut a = spawn("helloworld");
    let health = json!({"op": "health"});
    let raw = |a: &mut AgentProcess, body: &[u8]| -> Value {
        let mut m = (body.len() as u32).to_le_bytes().to_vec();
        m.extend_from_slice(body);
        a.send_raw(&m).unwrap();
        a.recv().unwrap()
    };
    for body in [
        &b"{not json"[..],
        b"[1,2,3]",
        b"\"op\"",
        b"",
        b"\xff\xfe\x00",
        br#"{"op":"frobnicate"}"#,
        br#"{"nop":"health"}"#,
        br#"{"op":42}"#,
        br#"{"op":"invoke"}"#,
        br#"{"op":"invoke","size":"V"}"#,
        br#"{"op":"invoke","size":"I","input":{}}"#,
        br#"{"op":"invoke","size":"I","timeout_ms":-5}"#,
        br#"{"op":"invoke","size":"I","timeout_ms":"soon"}"#,
        br#"{"op":"restored"}"#,
        br#"{"op":"restored","seed":"xyz"}"#,
        br#"{"op":"restored","seed":"0000000000000000000000000000000000000000000000000000000000000000","unmap":[4096]}"#,
        br#"{"op":"restored","seed":"0000000000000000000000000000000000000000000000000000000000000000","unmap":[0,4096]}"#,
        br#"{"op":"restored","seed":"0000000000000000000000000000000000000000000000000000000000000000","unmap":["a",4096]}"#,
    ] {
        let r = raw(&mut a, body);
        assert_eq!(
            err_kind(&r),
            "bad_request",
            "{:?} -> {r}",
            String::from_utf8_lossy(body)
        );
        assert!(r["message"].as_str().is_some_and(|m| !m.is_empty()), "{r}");
        a.request_ok(&health).unwrap();
    }
    // Oversized: 16 MiB + 1 byte of body; the agent discards it and stays in sync.
    let n = (16 << 20) + 1;
    let mut m = (n as u32).to_le_bytes().to_vec();
    m.resize(4 + n, b' ');
    a.send_raw(&m).unwrap();
    let r = a.recv().unwrap();
    assert_eq!(err_kind(&r), "bad_request");
    assert!(r["message"].as_str().unwrap().contains("exceeds"), "{r}");
    a.request_ok(&health).unwrap();
    // A huge declared length with a short body followed by EOF: the agent exits.
    let r = a.request_ok(&json!({"op": "invoke", "size": "I"})).unwrap();
    assert_eq!(r["output"]["message"], "Hello, World!");
    let r = a
        .request_ok(&json!({"op": "invoke", "input": {"name": "thaw"}}))
        .unwrap();
    assert_eq!(r["output"]["message"], "Hello, thaw!");
    a.shutdown().unwrap();
}

#[test]
fn unknown_function_is_a_clear_error() {
    let mut a = spawn("no_such_function");
    let r = a.request(&json!({"op": "load"})).unwrap();
    assert_eq!(err_kind(&r), "bad_request");
    assert!(
        r["message"].as_str().unwrap().contains("unknown function"),
        "{r}"
    );
    a.request_ok(&json!({"op": "health"})).unwrap();
    let mut a = spawn("../agent");
    let r = a.request(&json!({"op": "load"})).unwrap();
    assert_eq!(err_kind(&r), "bad_request");
}

#[test]
fn raising_function_reports_function_error_and_keeps_serving() {
    let mut a = spawn("_test_raise");
    a.request_ok(&json!({"op": "load"})).unwrap();
    for _ in 0..2 {
        let r = a
            .request(&json!({"op": "invoke", "input": {"x": 1}}))
            .unwrap();
        assert_eq!(err_kind(&r), "function_error");
        assert!(
            r["message"].as_str().unwrap().contains("ValueError: boom"),
            "{r}"
        );
        assert!(
            r["traceback"].as_str().unwrap().contains("Traceback"),
            "{r}"
        );
    }
    let r = a.request(&json!({"op": "invoke", "size": "I"})).unwrap();
    assert_eq!(
        err_kind(&r),
        "bad_request",
        "test functions have no sized inputs: {r}"
    );
    let h = a.request_ok(&json!({"op": "health"})).unwrap();
    assert_eq!(h["invocations"], 2);
    a.request_ok(&json!({"op": "prepare_checkpoint"})).unwrap();
    a.shutdown().unwrap();
}

#[test]
fn hanging_function_times_out_and_the_agent_keeps_serving() {
    let mut a = spawn("_test_hang");
    a.request_ok(&json!({"op": "load"})).unwrap();
    for timeout in [200, 50] {
        let t = Instant::now();
        let r = a
            .request(&json!({"op": "invoke", "input": {}, "timeout_ms": timeout}))
            .unwrap();
        let el = t.elapsed();
        assert_eq!(err_kind(&r), "timeout", "{r}");
        assert!(
            el >= Duration::from_millis(timeout) && el < Duration::from_millis(timeout + 1500),
            "timeout of {timeout} ms took {el:?}"
        );
    }
    a.request_ok(&json!({"op": "health"})).unwrap();
    // No timer left armed: a following request is not interrupted.
    std::thread::sleep(Duration::from_millis(300));
    a.request_ok(&json!({"op": "prepare_checkpoint"})).unwrap();
    a.request_ok(&json!({"op": "health"})).unwrap();
    assert_single_threaded_and_clean(&a, "after timeouts");
    a.shutdown().unwrap();
}

#[test]
fn prepare_checkpoint_refuses_extra_fds_and_threads() {
    let mut a = spawn("_test_leak_fd");
    a.request_ok(&json!({"op": "invoke", "input": {}})).unwrap();
    let r = a.request(&json!({"op": "prepare_checkpoint"})).unwrap();
    assert_eq!(err_kind(&r), "not_checkpointable");
    assert!(
        r["message"].as_str().unwrap().contains("descriptors: 4"),
        "{r}"
    );
    a.request_ok(&json!({"op": "health"})).unwrap();

    let mut a = spawn("_test_thread");
    a.request_ok(&json!({"op": "invoke", "input": {}})).unwrap();
    let r = a.request(&json!({"op": "prepare_checkpoint"})).unwrap();
    assert_eq!(err_kind(&r), "not_checkpointable");
    assert!(r["message"].as_str().unwrap().contains("sleeper"), "{r}");
}

fn draws(a: &mut AgentProcess) -> Value {
    a.request_ok(&json!({"op": "invoke", "input": {}})).unwrap()["output"].clone()
}

#[test]
fn restored_reseeds_every_generator_and_reinstalls_signal_handlers() {
    let s1 = "11".repeat(32);
    let s2 = "22".repeat(32);
    let mut a = spawn("_test_rng");
    let mut b = spawn("_test_rng");
    a.request_ok(&json!({"op": "load"})).unwrap();
    b.request_ok(&json!({"op": "load"})).unwrap();
    let ra = a
        .request_ok(&json!({"op": "restored", "seed": s1}))
        .unwrap();
    assert_eq!(ra["state"], "restored");
    let done: Vec<&str> = ra["reseeded"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    for g in ["random", "numpy.random", "function"] {
        assert!(done.contains(&g), "{g} not reseeded: {ra}");
    }
    b.request_ok(&json!({"op": "restored", "seed": s1}))
        .unwrap();
    let (da, db) = (draws(&mut a), draws(&mut b));
    assert_eq!(da, db, "same seed must give the same draws");
    b.request_ok(&json!({"op": "restored", "seed": s2}))
        .unwrap();
    let (da, db) = (draws(&mut a), draws(&mut b));
    for k in ["random", "numpy", "module"] {
        assert_ne!(
            da[k], db[k],
            "{k}: clones with different seeds share RNG state"
        );
    }
    // Signal handlers work after "restored": timeouts still fire.
    let mut h = spawn("_test_hang");
    h.request_ok(&json!({"op": "restored", "seed": s2}))
        .unwrap();
    let r = h
        .request(&json!({"op": "invoke", "input": {}, "timeout_ms": 100}))
        .unwrap();
    assert_eq!(err_kind(&r), "timeout");
}

#[test]
fn output_cap_and_explicit_inputs() {
    let mut a = spawn("helloworld");
    let big = "x".repeat(1 << 20);
    let r = a
        .request(&json!({"op": "invoke", "input": {"name": big}}))
        .unwrap();
    assert_eq!(
        err_kind(&r),
        "bad_output",
        "{}",
        &r.to_string()[..200.min(r.to_string().len())]
    );
    let r = a
        .request_ok(&json!({"op": "invoke", "input": {"name": "y"}}))
        .unwrap();
    assert_eq!(r["output"]["message"], "Hello, y!");
    let r = a.request(&json!({"op": "invoke", "input": 7})).unwrap();
    assert_eq!(err_kind(&r), "function_error", "{r}");
    a.request_ok(&json!({"op": "health"})).unwrap();
}
