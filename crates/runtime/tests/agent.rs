//! The agent and the function suite, driven over fd 3 of a real sandbox
//! (namespaces, the production seccomp filter, limits), as the worker runs them.

mod common;

use serde_json::{json, Value};
use std::time::{Duration, Instant};
use thaw_runtime::{InputSize, Runtime};
use thaw_sandbox::agent::{Reply, Request};
use thaw_sandbox::{Sandbox, SandboxConfig};

const T: Duration = Duration::from_secs(120);

/// One function's agent in its own sandbox.
struct Agent {
    sb: Sandbox,
    function: String,
}

fn spawn(f: &str) -> Agent {
    let root = common::root();
    let (argv, env) = root.agent_command(f);
    let sb = Sandbox::start(&SandboxConfig::default(), &root.path, &argv, &env)
        .unwrap_or_else(|e| panic!("start a sandbox for {f}: {e:#}"));
    Agent {
        sb,
        function: f.to_string(),
    }
}

impl Agent {
    /// The agent's reply as sent, whatever its `ok` says.
    fn request(&mut self, req: Request) -> Value {
        self.sb
            .call_raw(&req, T)
            .unwrap_or_else(|e| panic!("{} {req}: {e:#}", self.function))
    }

    /// A request that must succeed, and its typed reply.
    fn ok(&mut self, req: Request) -> Reply {
        self.sb
            .call(&req, T)
            .unwrap_or_else(|e| panic!("{} {req}: {e:#}", self.function))
    }

    fn invoke_ok(&mut self, req: Request) -> Value {
        self.ok(req).into_invoke().unwrap().0
    }

    fn health(&mut self) -> (String, u64) {
        match self.ok(Request::Health) {
            Reply::Health {
                state, invocations, ..
            } => (state, invocations),
            other => panic!("health answered {other:?}"),
        }
    }

    /// Entries of a /proc directory of the runtime, seen from outside.
    fn proc_entries(&self, dir: &str) -> Vec<i32> {
        let mut v: Vec<i32> = std::fs::read_dir(format!("/proc/{}/{dir}", self.sb.pid()))
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_string_lossy().parse().ok())
            .collect();
        v.sort();
        v
    }

    /// Asks the agent to exit: it answers, then exits (a zombie until the
    /// sandbox reaps it) within 5 s.
    fn shutdown(mut self) {
        assert_eq!(self.ok(Request::Exit), Reply::Exit);
        let stat = format!("/proc/{}/stat", self.sb.pid());
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(5) {
            let s = std::fs::read_to_string(&stat).unwrap_or_default();
            if s.rsplit_once(") ")
                .is_none_or(|(_, rest)| rest.starts_with('Z'))
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("the agent for {} did not exit", self.function);
    }
}

/// Threads a suite function keeps: idle_threads_8 starts 7 at init, the
/// rest none.
fn threads_of(function: &str) -> usize {
    if function == "idle_threads_8" {
        8
    } else {
        1
    }
}

fn assert_threads_and_clean(a: &Agent, when: &str) {
    let threads = a.proc_entries("task").len();
    let want = threads_of(&a.function);
    assert_eq!(threads, want, "{} {when}: {threads} threads", a.function);
    let fds = a.proc_entries("fd");
    assert_eq!(fds, [0, 1, 2, 3], "{} {when}: open fds", a.function);
}

/// The agent runs under the production seccomp filter, with no way to
/// regain privileges, in a pid namespace of its own.
fn assert_sandboxed(a: &Agent) {
    let pid = a.sb.pid();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |k: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .map(str::trim)
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(field("Seccomp:"), "2", "{}: no seccomp filter", a.function);
    assert_eq!(field("NoNewPrivs:"), "1", "{}", a.function);
    // NSpid: the host's pid, then 1 inside the sandbox's namespace
    assert_eq!(field("NSpid:"), format!("{pid}\t1"), "{}", a.function);
}

fn err_kind(r: &Value) -> &str {
    assert_eq!(r["ok"], json!(false), "expected an error reply, got {r}");
    r["error"].as_str().unwrap_or("")
}

fn invoke_input(input: Value) -> Request {
    Request::invoke_input(input)
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
    // the Node functions have a test of their own
    for f in fns.iter().filter(|f| f.runtime == Runtime::Python) {
        assert_eq!(f.sizes, InputSize::ALL.to_vec(), "{}", f.name);
        assert!(!f.mirrors.is_empty());
        let t = Instant::now();
        let mut a = spawn(&f.name);
        assert_sandboxed(&a);
        assert_eq!(a.health().0, "idle");
        let load = a.ok(Request::Load).into_loaded().unwrap();
        assert_eq!(load.function, f.name);
        assert!(load.init_ms >= 0.0);
        assert!(load.import_ms > 0.0);
        assert!(load.rss_kb > 1000);
        assert_threads_and_clean(&a, "after load");
        let mut times = Vec::new();
        for size in InputSize::ALL {
            let (output, exec) = a
                .ok(Request::invoke_size(size.name()))
                .into_invoke()
                .unwrap();
            // How long a size takes is a benchmark's business, not a test's.
            assert!(exec >= 0.0);
            root.check_output(&f.name, size, &output)
                .unwrap_or_else(|e| panic!("{} {size}: {e:#}", f.name));
            times.push(format!("{size}={exec:.1}ms"));
        }
        assert_threads_and_clean(&a, "after invocations");
        assert_eq!(a.ok(Request::PrepareCheckpoint), Reply::PrepareCheckpoint);
        assert_eq!(a.health(), ("ready".to_string(), 4));
        a.shutdown();
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
    let good = a.invoke_ok(Request::invoke_size("I"));
    root.check_output("matmul", InputSize::I, &good).unwrap();
    let mut bad = good.clone();
    bad["sum"] = json!(good["sum"].as_f64().unwrap() * 1.001);
    let e = root
        .check_output("matmul", InputSize::I, &bad)
        .unwrap_err()
        .to_string();
    assert!(e.contains("sum"), "{e}");
    let mut bad = good.clone();
    bad["samples"][1][2] = json!(0.5);
    let e = root
        .check_output("matmul", InputSize::I, &bad)
        .unwrap_err()
        .to_string();
    assert!(e.contains("C["), "{e}");
    // Right output for another size is wrong for this one.
    let e = root
        .check_output("matmul", InputSize::II, &good)
        .unwrap_err()
        .to_string();
    assert!(e.contains("n"), "{e}");
    let e = root
        .check_output(
            "helloworld",
            InputSize::I,
            &json!({"message": "Hello, Wrld!", "length": 5}),
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("message"), "{e}");
    let e = root
        .check_output("helloworld", InputSize::I, &json!([]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a JSON object"), "{e}");
    assert!(root.check_output("nope", InputSize::I, &json!({})).is_err());
    assert!("V".parse::<InputSize>().is_err(), "an unknown size");
    a.shutdown();
}

#[test]
fn malformed_and_oversized_requests_get_errors_and_the_agent_keeps_serving() {
    for f in ["helloworld", "node_helloworld"] {
        malformed_and_oversized_requests(f);
    }
}

fn malformed_and_oversized_requests(function: &str) {
    let mut a = spawn(function);
    let raw = |a: &mut Agent, body: &[u8]| -> Value {
        let mut m = u32::try_from(body.len()).unwrap().to_le_bytes().to_vec();
        m.extend_from_slice(body);
        a.sb.call_bytes(&m, T).unwrap()
    };
    for body in [
        &b"{not json"[..],
        b"[1,2,3]",
        b"\"op\"",
        b"",
        b"\xff\xfe\x00",
        b"{\"op\":\"health\",\"x\":\"\xc3\"}",
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
            "{function}: {:?} -> {r}",
            String::from_utf8_lossy(body)
        );
        assert!(r["message"].as_str().is_some_and(|m| !m.is_empty()), "{r}");
        a.health();
    }
    // Oversized: 16 MiB + 1 byte of body; the agent discards it and stays in sync.
    let n = (16 << 20) + 1;
    let mut m = u32::try_from(n).unwrap().to_le_bytes().to_vec();
    m.resize(4 + n, b' ');
    let r = a.sb.call_bytes(&m, T).unwrap();
    assert_eq!(err_kind(&r), "bad_request");
    assert!(r["message"].as_str().unwrap().contains("exceeds"), "{r}");
    a.health();
    let out = a.invoke_ok(Request::invoke_size("I"));
    assert_eq!(out["message"], "Hello, World!");
    let out = a.invoke_ok(invoke_input(json!({"name": "thaw"})));
    assert_eq!(out["message"], "Hello, thaw!");
    a.shutdown();
}

#[test]
fn unknown_function_is_a_clear_error() {
    let mut a = spawn("no_such_function");
    let r = a.request(Request::Load);
    assert_eq!(err_kind(&r), "bad_request");
    assert!(
        r["message"].as_str().unwrap().contains("unknown function"),
        "{r}"
    );
    a.health();
    let mut a = spawn("../agent");
    let r = a.request(Request::Load);
    assert_eq!(err_kind(&r), "bad_request");
}

#[test]
fn raising_function_reports_function_error_and_keeps_serving() {
    let mut a = spawn("_test_raise");
    a.ok(Request::Load);
    for _ in 0..2 {
        let r = a.request(invoke_input(json!({"x": 1})));
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
    // test functions have no sized inputs: every size is {}
    let r = a.request(Request::invoke_size("I"));
    assert_eq!(err_kind(&r), "function_error", "{r}");
    assert!(r["message"].as_str().unwrap().contains("boom: {}"), "{r}");
    let r = a.request(Request::invoke_size("V"));
    assert_eq!(err_kind(&r), "bad_request", "an unknown size: {r}");
    assert_eq!(a.health().1, 3);
    a.ok(Request::PrepareCheckpoint);
    a.shutdown();
}

#[test]
fn hanging_function_times_out_and_the_agent_keeps_serving() {
    let mut a = spawn("_test_hang");
    a.ok(Request::Load);
    for timeout in [200, 50] {
        let t = Instant::now();
        let r = a.request(Request::Invoke {
            event: thaw_sandbox::agent::Event::Input(json!({})),
            timeout_ms: Some(timeout as f64),
            request_id: None,
        });
        let el = t.elapsed();
        assert_eq!(err_kind(&r), "timeout", "{r}");
        assert!(
            el >= Duration::from_millis(timeout) && el < Duration::from_millis(timeout + 1500),
            "timeout of {timeout} ms took {el:?}"
        );
    }
    a.health();
    // No timer left armed: a following request is not interrupted.
    std::thread::sleep(Duration::from_millis(300));
    a.ok(Request::PrepareCheckpoint);
    a.health();
    assert_threads_and_clean(&a, "after timeouts");
    a.shutdown();
}

#[test]
fn prepare_checkpoint_leaves_descriptors_and_threads_to_the_checkpoint() {
    // the checkpoint captures them or refuses them by name, from outside
    let mut a = spawn("_test_leak_fd");
    a.invoke_ok(invoke_input(json!({})));
    let r = a.request(Request::PrepareCheckpoint);
    assert_eq!(r["ok"], true, "{r}");
    a.health();

    let mut a = spawn("_test_thread");
    a.invoke_ok(invoke_input(json!({})));
    let r = a.request(Request::PrepareCheckpoint);
    assert_eq!(r["ok"], true, "{r}");
}

fn draws(a: &mut Agent) -> Value {
    a.invoke_ok(invoke_input(json!({})))
}

fn restored(seed: &str) -> Request {
    Request::Restored {
        seed: seed.to_string(),
        unmap: None,
    }
}

#[test]
fn restored_reseeds_every_generator_and_reinstalls_signal_handlers() {
    let s1 = "11".repeat(32);
    let s2 = "22".repeat(32);
    let mut a = spawn("_test_rng");
    let mut b = spawn("_test_rng");
    a.ok(Request::Load);
    b.ok(Request::Load);
    let Reply::Restored { state, reseeded } = a.ok(restored(&s1)) else {
        panic!("restored answered with another reply");
    };
    assert_eq!(state, "restored");
    for g in ["random", "numpy.random", "function"] {
        assert!(
            reseeded.iter().any(|d| d == g),
            "{g} not reseeded: {reseeded:?}"
        );
    }
    b.ok(restored(&s1));
    let (da, db) = (draws(&mut a), draws(&mut b));
    assert_eq!(da, db, "same seed must give the same draws");
    b.ok(restored(&s2));
    let (da, db) = (draws(&mut a), draws(&mut b));
    for k in ["random", "numpy", "module"] {
        assert_ne!(
            da[k], db[k],
            "{k}: clones with different seeds share RNG state"
        );
    }
    // Signal handlers work after "restored": timeouts still fire.
    let mut h = spawn("_test_hang");
    h.ok(restored(&s2));
    let r = h.request(Request::Invoke {
        event: thaw_sandbox::agent::Event::Input(json!({})),
        timeout_ms: Some(100.0),
        request_id: None,
    });
    assert_eq!(err_kind(&r), "timeout");
}

#[test]
fn output_cap_and_explicit_inputs() {
    let mut a = spawn("helloworld");
    let big = "x".repeat(1 << 20);
    let r = a.request(invoke_input(json!({"name": big})));
    assert_eq!(
        err_kind(&r),
        "bad_output",
        "{}",
        &r.to_string()[..200.min(r.to_string().len())]
    );
    let out = a.invoke_ok(invoke_input(json!({"name": "y"})));
    assert_eq!(out["message"], "Hello, y!");
    let r = a.request(invoke_input(json!(7)));
    assert_eq!(err_kind(&r), "function_error", "{r}");
    a.health();
}

/// Threads of a Node agent: main, one V8 platform worker, the platform's
/// delayed-task scheduler, the inspector's signal watcher, and libuv's
/// one-thread pool once a function used it (`--v8-pool-size=1`,
/// `UV_THREADPOOL_SIZE=1`).
const NODE_MAX_THREADS: usize = 5;

#[test]
fn node_functions_pass_their_checkers_in_the_sandbox() {
    let root = common::root();
    let fns: Vec<_> = root
        .functions()
        .unwrap()
        .into_iter()
        .filter(|f| f.runtime == Runtime::Nodejs)
        .collect();
    let names: Vec<&str> = fns.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["node_helloworld", "node_compress"]);
    for f in &fns {
        let mut a = spawn(&f.name);
        assert_sandboxed(&a);
        let h = a.request(Request::Health);
        assert_eq!(h["runtime"], "nodejs", "{h}");
        assert_eq!(h["pid"], 1, "{h}");
        let load = a.ok(Request::Load).into_loaded().unwrap();
        assert_eq!(load.function, f.name);
        assert!(load.import_ms > 0.0 && load.rss_kb > 10_000, "{load:?}");
        let started = a.proc_entries("task").len();
        assert!(
            (4..=NODE_MAX_THREADS).contains(&started),
            "{}: {started} threads after load",
            f.name
        );
        for size in InputSize::ALL {
            let (output, exec) = a
                .ok(Request::invoke_size(size.name()))
                .into_invoke()
                .unwrap();
            assert!(exec >= 0.0);
            root.check_output(&f.name, size, &output)
                .unwrap_or_else(|e| panic!("{} {size}: {e:#}", f.name));
        }
        let threads = a.proc_entries("task").len();
        assert!(
            (started..=NODE_MAX_THREADS).contains(&threads),
            "{}: {threads} threads after invocations (limit: the sandbox's pids cgroup)",
            f.name
        );
        assert_eq!(a.ok(Request::PrepareCheckpoint), Reply::PrepareCheckpoint);
        assert_eq!(a.health(), ("ready".to_string(), 4));
        a.shutdown();
    }
}

#[test]
fn node_handler_shapes_context_and_errors() {
    let mut a = spawn("_test_node");
    // a plain async handler, given Lambda's context
    let out = a.invoke_ok(invoke_input(json!({"mode": "context", "x": [1, 2]})));
    assert_eq!(out["functionName"], "_test_node", "{out}");
    assert_eq!(out["event"]["x"], json!([1, 2]));
    let id = out["awsRequestId"].as_str().unwrap();
    assert_eq!(id.len(), 36, "{id}");
    let remaining = out["remaining"].as_f64().unwrap();
    assert!(remaining > 0.0 && remaining <= 60_000.0, "{out}");
    let again = a.invoke_ok(invoke_input(json!({"mode": "context"})));
    assert_ne!(again["awsRequestId"], out["awsRequestId"]);
    let given = a.invoke_ok(Request::Invoke {
        event: thaw_sandbox::agent::Event::Input(json!({"mode": "context"})),
        timeout_ms: None,
        request_id: Some("req-42".into()),
    });
    assert_eq!(given["awsRequestId"], "req-42");
    // a thrown Error: Lambda's shape beside the protocol's
    let r = a.request(invoke_input(json!({"mode": "throw", "what": "x"})));
    assert_eq!(err_kind(&r), "function_error");
    assert_eq!(r["error_type"], "TypeError", "{r}");
    assert_eq!(r["error_message"], "boom: x", "{r}");
    assert_eq!(r["message"], "TypeError: boom: x", "{r}");
    let trace = r["stack_trace"].as_array().unwrap();
    assert!(
        trace
            .iter()
            .any(|l| l.as_str().unwrap().contains("_test_node.js")),
        "{r}"
    );
    // a rejection with something not an Error
    let r = a.request(invoke_input(json!({"mode": "reject"})));
    assert_eq!(err_kind(&r), "function_error");
    assert_eq!(r["error_type"], "string", "{r}");
    assert_eq!(r["error_message"], "a plain string", "{r}");
    // a promise rejected outside the handler's chain fails the invocation
    let r = a.request(invoke_input(json!({"mode": "unhandled"})));
    assert_eq!(r["error_type"], "RangeError", "{r}");
    // never settles: the soft timeout answers
    let r = a.request(Request::Invoke {
        event: thaw_sandbox::agent::Event::Input(json!({"mode": "hang"})),
        timeout_ms: Some(100.0),
        request_id: Some("req-7".into()),
    });
    assert_eq!(err_kind(&r), "timeout");
    let r = a.request(invoke_input(json!({"mode": "bigint"})));
    assert_eq!(err_kind(&r), "bad_output", "{r}");
    // and it keeps serving
    let out = a.invoke_ok(invoke_input(json!({"mode": "fine"})));
    assert_eq!(out, json!({"mode": "fine"}));
    assert_eq!(a.health(), ("ready".to_string(), 9));

    // callback style: the callback's value, or its error
    let mut c = spawn("_test_node_callback");
    let out = c.invoke_ok(invoke_input(json!({"n": 21})));
    assert_eq!(out, json!({"doubled": 42}));
    let r = c.request(invoke_input(json!({"fail": true})));
    assert_eq!(r["error_type"], "Error", "{r}");
    assert_eq!(r["error_message"], "callback failure", "{r}");
    a.shutdown();
    c.shutdown();
}

/// The warm-up before a snapshot runs `restored` with throwaway seeds and
/// invocations of the agent's own: none of it shows in the instance, whose
/// generators restart from its own state and whose clones follow their
/// seed exactly as an instance that never warmed up.
#[test]
fn node_warm_up_before_a_snapshot_leaves_the_instance_as_it_was() {
    let seed = "33".repeat(32);
    let rng = json!({"mode": "rng"});
    let mut a = spawn("_test_node");
    let mut b = spawn("_test_node");
    a.ok(Request::Load);
    assert_eq!(a.ok(Request::PrepareCheckpoint), Reply::PrepareCheckpoint);
    assert_eq!(
        a.health(),
        ("ready".to_string(), 0),
        "the warm-up's invocations counted"
    );
    // not restored: both generators still draw
    let before = a.invoke_ok(invoke_input(rng.clone()));
    let x = before["math"][0].as_f64().unwrap();
    assert!((0.0..1.0).contains(&x), "{before}");
    assert_eq!(before["crypto"].as_str().unwrap().len(), 32, "{before}");
    a.ok(restored(&seed));
    b.ok(restored(&seed));
    let (da, db) = (
        a.invoke_ok(invoke_input(rng.clone())),
        b.invoke_ok(invoke_input(rng)),
    );
    assert_eq!(
        da["math"], db["math"],
        "the warm-up's seeds leaked into Math.random"
    );
    assert_ne!(da["crypto"], db["crypto"]);
    a.shutdown();
    b.shutdown();
}

/// A restored Node instance's Math.random is xoshiro128** on the first 16
/// bytes of SHA-256("thaw Math.random" || seed) (the agent hashes in
/// JavaScript, not through OpenSSL): its draws are computed here.
#[test]
fn node_math_random_follows_the_sha256_of_its_seed() {
    use sha2::{Digest, Sha256};
    let seed: Vec<u8> = (0u8..32)
        .map(|i| i.wrapping_mul(37).wrapping_add(5))
        .collect();
    let h = Sha256::new()
        .chain_update(b"thaw Math.random")
        .chain_update(&seed)
        .finalize();
    let mut s: [u32; 4] =
        std::array::from_fn(|i| u32::from_le_bytes(h[4 * i..4 * i + 4].try_into().unwrap()));
    let mut next = || {
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 9;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(11);
        result
    };
    let mut random = || {
        let (hi, lo) = (next() >> 5, next() >> 6);
        (hi as f64 * 67108864.0 + lo as f64) / 9007199254740992.0
    };
    let want = [random(), random()];
    let mut a = spawn("_test_node");
    a.ok(restored(&hex::encode(&seed)));
    let out = a.invoke_ok(invoke_input(json!({"mode": "rng"})));
    let got: Vec<f64> = out["math"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    // serde_json's default float parsing may be off by an ulp
    let close = got.len() == 2 && got.iter().zip(want).all(|(g, w)| (g - w).abs() < 1e-15);
    assert!(close, "{out}: want {want:?}");
    a.shutdown();
}

#[test]
fn node_restored_reseeds_math_random_and_crypto() {
    let s1 = "11".repeat(32);
    let s2 = "22".repeat(32);
    let mut a = spawn("_test_node");
    let mut b = spawn("_test_node");
    let rng = json!({"mode": "rng"});
    let Reply::Restored { reseeded, .. } = a.ok(restored(&s1)) else {
        panic!("restored answered with another reply");
    };
    for g in ["Math.random", "crypto"] {
        assert!(reseeded.iter().any(|d| d == g), "{g}: {reseeded:?}");
    }
    b.ok(restored(&s1));
    let (da, db) = (
        a.invoke_ok(invoke_input(rng.clone())),
        b.invoke_ok(invoke_input(rng.clone())),
    );
    // Math.random follows the seed, as Python's random does
    assert_eq!(da["math"], db["math"], "same seed, different Math.random");
    let x = da["math"][0].as_f64().unwrap();
    assert!((0.0..1.0).contains(&x));
    // crypto mixes the seed into fresh OS randomness: never equal
    assert_ne!(da["crypto"], db["crypto"]);
    b.ok(restored(&s2));
    let (da, db) = (
        a.invoke_ok(invoke_input(rng.clone())),
        b.invoke_ok(invoke_input(rng)),
    );
    assert_ne!(da["math"], db["math"], "different seeds, same Math.random");
    let bad = a.request(restored("zz"));
    assert_eq!(err_kind(&bad), "bad_request");
    a.shutdown();
    b.shutdown();
}
