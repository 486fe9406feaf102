//! What a function's snapshot holds and what comes back in a restore
//! (/tmp, /dev/shm, threads, databases, tools, hooks), what cannot be
//! snapshotted, and the Lambda and Node.js shapes of functions.
use serde_json::{json, Value};
use std::io::Write;
use std::path::PathBuf;
use thaw_client::Response;

mod common;
use common::*;

/// Init writes a model file and more into /tmp and /dev/shm; the handler
/// reads them back (and writes /tmp/scratch when asked).
const TMP_MODEL: &str = r#"
import os
def init():
    os.makedirs("/tmp/cache/sub")
    with open("/tmp/model.bin", "wb") as f:
        f.write(bytes(range(256)) * 3 + bytes(range(232)))
    os.chmod("/tmp/model.bin", 0o640)
    os.symlink("/tmp/model.bin", "/tmp/cache/link")
    with open("/dev/shm/seg", "wb") as f:
        f.write(b"shm" * 100)
def handler(event):
    if event and event.get("write"):
        with open("/tmp/scratch", "w") as f:
            f.write(event["write"])
    st = os.stat("/tmp/model.bin")
    scratch = open("/tmp/scratch").read() if os.path.exists("/tmp/scratch") else None
    return {"model": open("/tmp/model.bin", "rb").read().hex(),
            "mode": st.st_mode & 0o7777, "mine": st.st_uid == os.getuid(),
            "link": os.readlink("/tmp/cache/link"), "sub": os.path.isdir("/tmp/cache/sub"),
            "shm": open("/dev/shm/seg").read(), "scratch": scratch}
"#;

/// What [`TMP_MODEL`]'s handler answers in an instance whose /tmp holds
/// what init wrote (and `scratch`).
fn tmp_model_answer(scratch: Option<&str>) -> Value {
    let model: Vec<u8> = (0..=255u8).cycle().take(768).chain(0..232u8).collect();
    json!({"model": hex::encode(model), "mode": 0o640, "mine": true,
           "link": "/tmp/model.bin", "sub": true, "shm": "shm".repeat(100), "scratch": scratch})
}

fn tmp_model_deploy(name: &str, strategy: &str, tier: &str) -> Value {
    let mut req = file_deploy(name, "m.handler", TMP_MODEL);
    req["init"] = json!("m.init");
    req["strategy"] = json!(strategy);
    req["tier"] = json!(tier);
    req["sample_event"] = json!({});
    req
}

fn cold(d: &Daemon, name: &str, event: &Value) -> Response {
    let r = d.post_json(&format!("/v1/functions/{name}/invoke?force=cold"), event);
    assert_eq!(
        (r.status, r.header("thaw-start-type")),
        (200, Some("restore")),
        "{name}: {}",
        String::from_utf8_lossy(&r.body)
    );
    r
}

#[test]
fn tmp_and_dev_shm_written_at_init_come_back_in_every_restore() {
    let d = Daemon::start(test_config("tmpfiles"));
    for tier in ["tmpfs", "disk"] {
        for strategy in ["mmap", "eager", "uffd", "reap"] {
            let name = format!("model-{strategy}-{tier}");
            let v = deploy(&d, &tmp_model_deploy(&name, strategy, tier));
            assert_eq!(v["start_type"], "restore", "{v}");
            // twice: REAP's first restore records, the second prefetches
            for _ in 0..2 {
                let r = cold(&d, &name, &json!({}));
                assert_eq!(r.json().unwrap(), tmp_model_answer(None), "{name}");
            }
        }
    }
    // each instance has its own copy: a write in one is not seen by the next
    let r = cold(&d, "model-mmap-tmpfs", &json!({"write": "one"}));
    assert_eq!(r.json().unwrap(), tmp_model_answer(Some("one")));
    let r = cold(&d, "model-mmap-tmpfs", &json!({}));
    assert_eq!(r.json().unwrap(), tmp_model_answer(None));
}

#[test]
fn a_flipped_byte_in_the_saved_tmp_is_refused() {
    let d = Daemon::start(test_config("tmpflip"));
    let v = deploy(&d, &tmp_model_deploy("flip", "mmap", "disk"));
    let img = PathBuf::from(v["snapshot"]["dir"].as_str().unwrap()).join("memory.img");
    cold(&d, "flip", &json!({}));
    // the image ends with model.bin (1,000 bytes), then /dev/shm/seg (300)
    thaw_store::secure::set_immutable(&img, false).unwrap();
    let mut data = std::fs::read(&img).unwrap();
    let at = data.len() - 300 - 500;
    data[at] ^= 0x01;
    std::fs::write(&img, &data).unwrap();
    thaw_store::secure::set_immutable(&img, true).unwrap();
    let r = d.post_json("/v1/functions/flip/invoke?force=cold", &json!({}));
    let (status, code, message) = error_of(&r);
    assert_eq!((status, code.as_str()), (502, "start_failed"), "{message}");
    assert!(message.contains("checksum mismatch"), "{message}");
}

#[test]
fn dev_shm_serves_a_thread_pool_at_init() {
    let d = Daemon::start(test_config("shm"));
    let src = "from multiprocessing.pool import ThreadPool\nSQUARES = []\ndef init():\n    p = ThreadPool(2)\n    SQUARES.extend(p.map(lambda x: x * x, range(5)))\n    p.close()\n    p.join()\ndef handler(event):\n    return SQUARES\n";
    let mut req = file_deploy("pool", "m.handler", src);
    req["init"] = json!("m.init");
    let v = deploy(&d, &req);
    assert_eq!(v["start_type"], "restore", "{v}");
    let r = cold(&d, "pool", &json!(null));
    assert_eq!(r.json().unwrap(), json!([0, 1, 4, 9, 16]));
}

/// A deploy request whose `m.init` runs before the snapshot, which must be
/// taken (a refusal is a 422, not a fallback to fresh starts).
fn init_and_snapshot_required(mut req: Value) -> Value {
    req["init"] = json!("m.init");
    req["snapshot"] = json!("required");
    req
}

const THREAD_FN: &str = "import threading, time\ndef init():\n    threading.Thread(target=time.sleep, args=(3600,), name='refresher', daemon=True).start()\ndef handler(event):\n    return {'threads': threading.active_count()}\n";
const CHILD_FN: &str = "import subprocess, sys\nP = []\ndef init():\n    P.append(subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(3600)']))\ndef handler(event):\n    return {'running': P[0].poll() is None}\n";

#[test]
fn a_function_whose_init_starts_a_thread_deploys_with_a_snapshot() {
    let d = Daemon::start(test_config("thread"));
    let req = init_and_snapshot_required(file_deploy("threads", "m.handler", THREAD_FN));
    let v = deploy(&d, &req);
    assert_eq!(v["start_type"], "restore", "{v}");
    let r = cold(&d, "threads", &json!(null));
    assert_eq!(r.json().unwrap(), json!({"threads": 2}));
}
const SQLITE_FN: &str = "import sqlite3\nDB = None\ndef init():\n    global DB\n    DB = sqlite3.connect('/tmp/app.db')\n    DB.execute('create table t (x)')\n    DB.execute('insert into t values (41)')\n    DB.commit()\ndef handler(event):\n    DB.execute('insert into t values (1)')\n    DB.commit()\n    return {'x': DB.execute('select max(x) + 1 from t').fetchone()[0], 'rows': DB.execute('select count(*) from t').fetchone()[0]}\n";
const NODE_CHILD_FN: &str = "const { spawn } = require('child_process');\nconst kids = [];\nexports.init = async () => { kids.push(spawn('/usr/bin/sleep', ['3600'])); };\nexports.handler = async () => ({ running: kids[0].exitCode === null });\n";
const TEMPFILE_FN: &str = "import tempfile\nSPOOL = []\ndef init():\n    SPOOL.append(tempfile.TemporaryFile())\ndef handler(event):\n    return {'spool': len(SPOOL)}\n";

#[test]
fn a_function_keeping_a_sqlite_connection_deploys_with_a_snapshot() {
    let d = Daemon::start(test_config("sqlite"));
    let mut req = init_and_snapshot_required(file_deploy("sqlite", "m.handler", SQLITE_FN));
    req["strategy"] = json!("mmap");
    let v = deploy(&d, &req);
    assert_eq!(v["start_type"], "restore", "{v}");
    // every restore starts from the snapshot's database and open connection,
    // and answers as the fresh instance's first call did
    for _ in 0..3 {
        let r = cold(&d, "sqlite", &json!({}));
        assert_eq!(r.json().unwrap(), json!({"x": 42, "rows": 2}));
    }
    // a warm instance goes on writing through the restored connection
    let r = d.invoke("sqlite", &json!({}));
    assert_eq!(r.header("thaw-start-type"), Some("warm"));
    assert_eq!(r.json().unwrap(), json!({"x": 42, "rows": 3}));
}

#[test]
fn instances_that_cannot_be_snapshotted_deploy_with_fresh_starts_and_say_why() {
    let d = Daemon::start(test_config("boots"));
    // (deploy request, the fresh start's answer, the refusal's kind and a
    // word of its detail)
    let cases = [
        (
            file_deploy("child", "m.handler", CHILD_FN),
            json!({"running": true}),
            "process",
            "child process",
        ),
        (
            file_deploy("spool", "m.handler", TEMPFILE_FN),
            json!({"spool": 1}),
            "descriptor",
            "a deleted file",
        ),
        // a Node.js init that leaves a child process running: named by the
        // child's own name
        (
            node_file_deploy("nodechild", NODE_CHILD_FN),
            json!({"running": true}),
            "process",
            "sleep",
        ),
    ];
    for (req, answer, kind, detail) in cases {
        let mut req = init_and_snapshot_required(req);
        let name = req["name"].as_str().unwrap().to_string();
        let r = d.post_json("/v1/functions", &req);
        let (status, code, message) = error_of(&r);
        assert_eq!(
            (status, code.as_str()),
            (422, "not_checkpointable"),
            "{message}"
        );
        let reasons = r.json().unwrap()["reasons"].clone();
        let named = |reasons: &Value| {
            reasons
                .as_array()
                .unwrap()
                .iter()
                .any(|x| x["kind"] == kind && x["detail"].as_str().unwrap().contains(detail))
        };
        assert!(named(&reasons), "{name}: {reasons}");
        assert_eq!(
            d.req("GET", &format!("/v1/functions/{name}"), None).status,
            404
        );

        req["snapshot"] = json!("auto");
        let v = deploy(&d, &req);
        assert_eq!(
            (v["start_type"].as_str(), v["strategy"].as_str()),
            (Some("boot"), Some("boot")),
            "{v}"
        );
        assert!(v["snapshot"].is_null(), "{v}");
        assert!(named(&v["snapshot_refused"]), "{name}: {v}");
        let got = d
            .req("GET", &format!("/v1/functions/{name}"), None)
            .json()
            .unwrap();
        assert_eq!(got["start_type"], "boot");
        assert!(named(&got["snapshot_refused"]), "{got}");
        let r = d.invoke(&name, &json!(null));
        assert_eq!(r.header("thaw-start-type"), Some("boot"));
        assert_eq!(r.json().unwrap(), answer);
    }
    let list = d.req("GET", "/v1/functions", None).json().unwrap();
    assert!(
        list["functions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["start_type"] == "boot"),
        "{list}"
    );
}

const TOOLS_FN: &str = "import subprocess\ndef handler(event):\n    cat = subprocess.run(['/bin/cat'], input=event['text'].encode(), capture_output=True, check=True)\n    ls = subprocess.run(['ls', '/usr/bin/sleep'], capture_output=True, check=True)\n    return {'cat': cat.stdout.decode(), 'ls': ls.stdout.decode().strip()}\n";
const NODE_TOOLS_FN: &str = "const { execFileSync } = require('child_process');\nexports.handler = async (event) => ({\n  cat: execFileSync('/bin/cat', { input: event.text }).toString(),\n  ls: execFileSync('ls', ['/usr/bin/sleep']).toString().trim(),\n});\n";

/// The runtime root's basic tools (coreutils) run as child processes of a
/// restored instance's invocation, in Python and Node.js (a Node.js init
/// that leaves a child process running is refused: see
/// `instances_that_cannot_be_snapshotted_deploy_with_fresh_starts_and_say_why`).
#[test]
fn restored_functions_run_the_roots_coreutils() {
    let d = Daemon::start(test_config("tools"));
    for mut req in [
        file_deploy("tools", "m.handler", TOOLS_FN),
        node_file_deploy("nodetools", NODE_TOOLS_FN),
    ] {
        req["snapshot"] = json!("required");
        let name = req["name"].as_str().unwrap().to_string();
        let v = deploy(&d, &req);
        assert_eq!(v["start_type"], "restore", "{v}");
        for _ in 0..2 {
            let r = cold(&d, &name, &json!({"text": "meow"}));
            assert_eq!(
                r.json().unwrap(),
                json!({"cat": "meow", "ls": "/usr/bin/sleep"}),
                "{name}"
            );
        }
    }
}

#[test]
fn before_snapshot_runs_once_and_a_restored_instance_sees_what_it_did() {
    let d = Daemon::start(test_config("before"));
    // closes the database a snapshot could not keep; the file stays in /tmp
    let src = format!(
        "import os\n{SQLITE_FN}def before_snapshot():\n    global DB\n    DB.close()\n    DB = None\n    with open('/tmp/marker', 'a') as f:\n        f.write('before\\n')\ndef reopen(instance_id):\n    global DB\n    DB = sqlite3.connect('/tmp/app.db')\ndef answer(event):\n    # the deploy's sample event runs before the snapshot: no marker yet\n    marker = open('/tmp/marker').read() if os.path.exists('/tmp/marker') else None\n    return dict(handler(event), marker=marker)\n"
    );
    let mut req = file_deploy("closes", "m.answer", &src);
    req["init"] = json!("m.init");
    req["before_snapshot"] = json!("m.before_snapshot");
    req["after_restore"] = json!("m.reopen");
    req["strategy"] = json!("reap");
    req["sample_event"] = json!({});
    let v = deploy(&d, &req);
    assert_eq!(v["start_type"], "restore", "{v}");
    assert_eq!(v["before_snapshot"], "m.before_snapshot");
    for _ in 0..2 {
        let r = cold(&d, "closes", &json!({}));
        // the sample event's row is in the snapshot's database: 3 after this call
        assert_eq!(
            r.json().unwrap(),
            json!({"x": 42, "rows": 3, "marker": "before\n"})
        );
    }
}

const LAMBDA_FN: &str = r#"
def lambda_handler(event, context):
    if event.get("fail"):
        raise ValueError("bad input " + event["fail"])
    return {"request_id": context.aws_request_id,
            "remaining": context.get_remaining_time_in_millis(),
            "name": context.function_name, "version": context.function_version,
            "memory": context.memory_limit_in_mb, "arn": context.invoked_function_arn,
            "group": context.log_group_name, "stream": context.log_stream_name}
"#;

#[test]
fn lambda_handlers_get_a_context_and_errors_in_lambdas_shape() {
    let d = Daemon::start(test_config("lambda"));
    // Lambda's layout as it is: lambda_function.py at the top of a zip
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    zip.start_file(
        "lambda_function.py",
        zip::write::SimpleFileOptions::default(),
    )
    .unwrap();
    zip.write_all(LAMBDA_FN.as_bytes()).unwrap();
    let data = zip.finish().unwrap().into_inner();
    let mut req = archive_deploy("lam", "lambda_function.lambda_handler", "zip", &data);
    req["timeout_ms"] = json!(3000);
    req["memory_mb"] = json!(256);
    let v = deploy(&d, &req);
    assert_eq!(v["start_type"], "restore", "{v}");
    for path in [
        "/v1/functions/lam/invoke?force=cold",
        "/v1/functions/lam/invoke",
    ] {
        let r = d.post_json(path, &json!({}));
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        let out = r.json().unwrap();
        assert_eq!(out["request_id"].as_str(), r.header("thaw-invocation-id"));
        let left = out["remaining"].as_i64().unwrap();
        assert!(left > 0 && left < 3000, "{out}");
        assert_eq!(
            (&out["name"], &out["version"], &out["memory"]),
            (&json!("lam"), &json!("1"), &json!("256"))
        );
        assert_eq!(out["arn"], "arn:thaw:lambda:local:default:function:lam");
        assert_eq!(out["group"], "/thaw/functions/lam");
        assert!(out["stream"].as_str().unwrap().contains("/[1]"), "{out}");
    }
    let r = d.post_json(
        "/v1/functions/lam/invoke?error_shape=lambda",
        &json!({"fail": "x"}),
    );
    assert_eq!(r.status, 502);
    let e = r.json().unwrap();
    assert_eq!(
        (&e["errorMessage"], &e["errorType"]),
        (&json!("bad input x"), &json!("ValueError")),
        "{e}"
    );
    let frames = e["stackTrace"].as_array().unwrap();
    assert!(
        !frames.is_empty()
            && frames
                .iter()
                .all(|f| f.as_str().unwrap().contains("lambda_function.py")),
        "{e}"
    );
    // the default shape stays thaw's
    let r = d.invoke("lam", &json!({"fail": "y"}));
    assert_eq!(error_of(&r).1, "function_error");
    let r = d.post_json("/v1/functions/lam/invoke?error_shape=xml", &json!({}));
    assert_eq!(error_of(&r).0, 400);
}

const NODE_INDEX: &str = r#"
const { greet } = require('./lib/greet');
let count = 0;
exports.init = async () => {
  await new Promise((r) => setTimeout(r, 1));
  count = 100;
};
exports.handler = async (event, context) => {
  if (event.fail) throw new TypeError('no such thing: ' + event.fail);
  count += 1;
  console.log('handling', JSON.stringify(event));
  return {
    greeting: greet(event.name),
    count,
    requestId: context.awsRequestId,
    functionName: context.functionName,
    memoryLimitInMB: context.memoryLimitInMB,
    remaining: context.getRemainingTimeInMillis(),
  };
};
"#;

const NODE_CALLBACK: &str = r#"
exports.handler = (event, context, callback) => {
  setImmediate(() => callback(null, { sum: event.numbers.reduce((a, b) => a + b, 0) }));
};
"#;

#[test]
fn nodejs_function_deploys_and_answers_with_lambda_shapes() {
    let d = Daemon::start(test_config("node"));
    let code = RawTar::new()
        .file("index.js", NODE_INDEX.as_bytes())
        .file("lib/greet.js", b"exports.greet = (n) => `Hello, ${n}!`;\n")
        .gz();
    let mut req = archive_deploy("hellonode", "index.handler", "tar.gz", &code);
    req["runtime"] = json!("nodejs");
    req["init"] = json!("index.init");
    req["timeout_ms"] = json!(5000);
    let v = deploy(&d, &req);
    assert_eq!(v["runtime"], "nodejs", "{v}");
    // its threads and descriptors are captured: it deploys with a snapshot
    assert_eq!(v["start_type"], "restore", "{v}");
    assert!(v["snapshot_refused"].is_null(), "{v}");

    let r = d.invoke("hellonode", &json!({"name": "node"}));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.header("thaw-start-type"), Some("restore"));
    let out = r.json().unwrap();
    assert_eq!(out["greeting"], "Hello, node!");
    assert_eq!(out["count"], 101, "init ran once, before the first event");
    assert_eq!(out["functionName"], "hellonode");
    assert_eq!(out["memoryLimitInMB"], v["memory_mb"].to_string());
    // the invocation's id, as the logs know it
    assert_eq!(
        out["requestId"].as_str(),
        r.header("thaw-invocation-id"),
        "{out}"
    );
    let remaining = out["remaining"].as_f64().unwrap();
    assert!(remaining > 0.0 && remaining <= 5000.0, "{out}");
    let r = d.invoke("hellonode", &json!({"name": "again"}));
    assert_eq!(r.header("thaw-start-type"), Some("warm"));
    let again = r.json().unwrap();
    assert_eq!(again["count"], 102);
    assert_ne!(again["requestId"], out["requestId"]);

    // a thrown error: ours, and Lambda's shape
    let r = d.invoke("hellonode", &json!({"fail": "x"}));
    assert_eq!(r.status, 502);
    let e = r.json().unwrap();
    assert_eq!(e["error"], "function_error", "{e}");
    assert_eq!(e["type"], "TypeError", "{e}");
    let r = d.post_json(
        "/v1/functions/hellonode/invoke?error_shape=lambda",
        &json!({"fail": "x"}),
    );
    let e = r.json().unwrap();
    assert_eq!(e["errorType"], "TypeError", "{e}");
    assert_eq!(e["errorMessage"], "no such thing: x", "{e}");
    let trace = e["stackTrace"].as_array().unwrap();
    assert!(
        trace
            .iter()
            .any(|l| l.as_str().unwrap().contains("index.js")),
        "{e}"
    );
    let logs = d
        .req("GET", "/v1/functions/hellonode/logs?tail=5", None)
        .json()
        .unwrap();
    assert!(logs.to_string().contains("handling"), "{logs}");

    // a callback-style handler in a single .js file (named after the module)
    let cb = json!({
        "name": "sumnode",
        "runtime": "nodejs",
        "handler": "sum.handler",
        "code": {"format": "file", "data_base64": b64(NODE_CALLBACK.as_bytes())},
    });
    deploy(&d, &cb);
    let r = d.invoke("sumnode", &json!({"numbers": [1, 2, 3.5]}));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json().unwrap(), json!({"sum": 6.5}));

    // an unknown runtime is the request's fault
    let mut bad = cb.clone();
    bad["name"] = json!("rubyfn");
    bad["runtime"] = json!("ruby");
    let (s, e, m) = error_of(&d.post_json("/v1/functions", &bad));
    assert_eq!((s, e.as_str()), (400, "bad_request"), "{m}");
    assert!(m.contains("nodejs"), "{m}");

    // a snapshot required, with each strategy: restores answer as a boot did
    for strategy in ["mmap", "reap", "eager", "uffd"] {
        let mut snap = cb.clone();
        snap["name"] = json!(format!("snapnode-{strategy}"));
        snap["strategy"] = json!(strategy);
        snap["snapshot"] = json!("required");
        let r = d.post_json("/v1/functions", &snap);
        assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
        for n in 0..3 {
            let r = cold(
                &d,
                &format!("snapnode-{strategy}"),
                &json!({"numbers": [4, n]}),
            );
            assert_eq!(r.json().unwrap(), json!({"sum": 4 + n}), "{strategy}");
        }
    }
    d.healthy();
}
