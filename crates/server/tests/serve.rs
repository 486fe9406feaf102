//! The daemon's API through real HTTP: each test starts `thaw serve`
//! in-process on a temporary state home (the runtime root is shared from
//! the default home), talks to it over its Unix socket and checks what
//! comes back: deploys, invocations, errors, limits, restarts, keep-alive,
//! the sandbox pool, the listeners' security, the OpenAPI file.
use serde_json::{json, Value};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use thaw_client::{Client, Target};

mod common;
use common::*;

const HELLO: &str = r#"
import os
COUNT = 0
INSTANCE = None
def init():
    global COUNT
    COUNT = 100
def after_restore(instance_id):
    global INSTANCE
    INSTANCE = instance_id
def handler(event):
    global COUNT
    COUNT += 1
    print("handling", event)
    return {"sum": sum(event["numbers"]), "count": COUNT, "instance": INSTANCE,
            "greeting": os.environ.get("GREETING"), "secret_len": len(os.environ.get("TOKEN", ""))}
"#;

#[test]
fn deploy_archive_invoke_warm_restore_logs_metrics_delete() {
    let d = Daemon::start(test_config("roundtrip"));
    // a package in a directory, from a tar.gz
    let mut t = RawTar::new();
    t.entry("app/", b'5', b"", "")
        .file("app/__init__.py", b"")
        .file("app/main.py", HELLO.as_bytes())
        .file("app/util.py", b"def double(x):\n    return 2 * x\n");
    let mut req = archive_deploy("hello", "app.main.handler", "tar.gz", &t.gz());
    req["init"] = json!("app.main.init");
    req["after_restore"] = json!("app.main.after_restore");
    req["env"] = json!({"GREETING": "hi"});
    req["secret_env"] = json!({"TOKEN": "s3cret-value"});
    req["strategy"] = json!("mmap");
    req["tier"] = json!("tmpfs");
    let r = d.post_json("/v1/functions", &req);
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json().unwrap();
    // the snapshot's identity is its store version (the manifest id)
    assert!(thaw_store::is_version_id(
        v["snapshot_id"].as_str().unwrap()
    ));
    assert!(v["size_bytes"].as_u64().unwrap() > 0);
    assert!(v["init_ms"].as_f64().is_some());
    assert_eq!(v["strategy"], "mmap");
    assert_eq!(v["tier"], "tmpfs");

    // first: a restore, with the after_restore hook's instance id
    let r = d.invoke("hello", &json!({"numbers": [1, 2, 3, 4]}));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.header("thaw-start-type"), Some("restore"));
    assert_eq!(r.header("thaw-strategy"), Some("mmap"));
    assert_eq!(r.header("thaw-tier"), Some("tmpfs"));
    let timing = r.header("server-timing").unwrap();
    for phase in [
        "queue;dur=",
        "restore;dur=",
        "after_restore;dur=",
        "exec;dur=",
    ] {
        assert!(timing.contains(phase), "{timing}");
    }
    let out = r.json().unwrap();
    assert_eq!(out["sum"], 10);
    assert_eq!(out["count"], 101, "init ran before the snapshot");
    assert_eq!(out["greeting"], "hi");
    assert_eq!(out["secret_len"], 12);
    let inst = out["instance"].as_str().unwrap().to_string();
    assert!(inst.starts_with("hello-"), "hook got {inst}");
    let id1 = r.header("thaw-invocation-id").unwrap().to_string();

    // then warm, on the same instance
    let r = d.invoke("hello", &json!({"numbers": [5]}));
    assert_eq!(r.header("thaw-start-type"), Some("warm"));
    let out = r.json().unwrap();
    assert_eq!(
        (out["sum"].clone(), out["count"].clone()),
        (json!(5), json!(102))
    );
    assert_eq!(out["instance"], json!(inst));

    // force=cold: a new instance restored from the snapshot, its own id
    let r = d.req(
        "POST",
        "/v1/functions/hello/invoke?force=cold",
        Some(b"{\"numbers\":[]}"),
    );
    assert_eq!(r.header("thaw-start-type"), Some("restore"));
    let out = r.json().unwrap();
    assert_eq!(out["count"], 101);
    assert_ne!(out["instance"], json!(inst));

    // logs per invocation id
    let r = d.req("GET", "/v1/functions/hello/logs?tail=10", None);
    let logs = r.json().unwrap();
    let entries = logs["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 3, "{logs}");
    assert_eq!(entries[0]["invocation_id"], json!(id1));
    assert!(entries[0]["output"]
        .as_str()
        .unwrap()
        .contains("handling {'numbers': [1, 2, 3, 4]}"));
    let r = d.req("GET", "/v1/functions/hello/logs?tail=1", None);
    assert_eq!(r.json().unwrap()["entries"].as_array().unwrap().len(), 1);

    // the listing shows the secret's name, never its value
    let r = d.req("GET", "/v1/functions", None);
    let text = String::from_utf8_lossy(&r.body).to_string();
    assert!(
        text.contains("TOKEN") && !text.contains("s3cret-value"),
        "{text}"
    );
    let rec_file = d.home.join("serve/functions/hello/v1/record.json");
    assert!(!std::fs::read_to_string(rec_file)
        .unwrap()
        .contains("s3cret-value"));

    // metrics
    let m = String::from_utf8(d.req("GET", "/metrics", None).body).unwrap();
    for name in [
        "thaw_invocations_total{function=\"hello\",start_type=\"restore\",status=\"ok\"} 2",
        "thaw_invocations_total{function=\"hello\",start_type=\"warm\",status=\"ok\"} 1",
        "thaw_invocation_duration_seconds_bucket",
        "thaw_restore_duration_seconds_count{strategy=\"mmap\",tier=\"tmpfs\"} 2",
        "thaw_queue_wait_seconds_count 3",
        "thaw_instances{state=\"idle\"} 2",
        "thaw_memory_bytes{tier=\"tmpfs\"}",
        "thaw_snapshot_moves_total{from=\"tmpfs\",to=\"disk\"} 0",
        "thaw_rejected_requests_total{reason=\"queue_full\"} 0",
    ] {
        assert!(m.contains(name), "metrics lack {name}:\n{m}");
    }
    assert_eq!(d.req("GET", "/readyz", None).status, 200);

    // the store is the daemon's alone
    use std::os::unix::fs::PermissionsExt;
    for p in [
        "serve",
        "serve/functions",
        "serve/functions/hello",
        "serve/functions/hello/v1",
    ] {
        let mode = std::fs::metadata(d.home.join(p))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o700, "{p}");
    }
    for p in [
        "serve/thaw.sock",
        "serve/functions/hello/v1/record.json",
        "serve/functions/hello/v1/secrets.json",
        "serve/functions/hello/current",
    ] {
        let mode = std::fs::metadata(d.home.join(p))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600, "{p}");
    }

    // delete: instances, code and every snapshot file go
    let snap_dir = PathBuf::from(v["snapshot"]["dir"].as_str().unwrap());
    assert!(snap_dir.exists());
    assert_eq!(d.req("DELETE", "/v1/functions/hello", None).status, 204);
    assert!(
        !snap_dir.exists(),
        "snapshot left behind: {:?}",
        std::fs::read_dir(snap_dir.parent().unwrap())
            .map(|r| r.flatten().map(|e| e.file_name()).collect::<Vec<_>>())
    );
    assert!(!d.home.join("serve/functions/hello").exists());
    let (s, e, _) = error_of(&d.invoke("hello", &json!({})));
    assert_eq!((s, e.as_str()), (404, "not_found"));
    assert_eq!(d.req("GET", "/v1/functions/hello", None).status, 404);
    std::thread::sleep(Duration::from_millis(100));
    let m = String::from_utf8(d.req("GET", "/metrics", None).body).unwrap();
    assert!(m.contains("thaw_instances{state=\"idle\"} 0"), "{m}");
}

#[test]
fn boot_start_for_functions_without_snapshot_and_zip_code() {
    let d = Daemon::start(test_config("boot"));
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    zip.start_file("fn.py", zip::write::SimpleFileOptions::default())
        .unwrap();
    zip.write_all(b"def handler(event):\n    return event * 2\n")
        .unwrap();
    let data = zip.finish().unwrap().into_inner();
    let mut req = archive_deploy("twice", "fn.handler", "zip", &data);
    req["strategy"] = json!("boot");
    let v = deploy(&d, &req);
    assert!(v["snapshot"].is_null());
    let r = d.invoke("twice", &json!(21));
    assert_eq!(r.header("thaw-start-type"), Some("boot"));
    assert_eq!(r.json().unwrap(), json!(42));
    assert!(r.header("server-timing").unwrap().contains("boot;dur="));
    let r = d.invoke("twice", &json!("ab"));
    assert_eq!(r.header("thaw-start-type"), Some("warm"));
    assert_eq!(r.json().unwrap(), json!("abab"));
}

const ERRORS: &str = r#"
import time
def handler(event):
    if event == "raise":
        raise KeyError("missing thing")
    if event == "hang":
        while True:
            pass
    if event == "sleep":
        time.sleep(0.5)
        return "slept"
    if event == "set":
        return {1, 2}
    if event == "huge":
        return "x" * (2 << 20)
    if event == "gigabyte":
        import os
        written = 0
        for _ in range(1024):
            try:
                written += os.write(1, b"z" * (1 << 20))
            except OSError:
                pass
        return written
    if event == "flood":
        for i in range(60000):
            print("flood", i, "y" * 200)
        return "flooded"
    return {"echo": event}
"#;

#[test]
fn function_errors_timeouts_and_output_limits() {
    let d = Daemon::start(test_config("errors"));
    let mut req = file_deploy("errs", "errs.handler", ERRORS);
    req["timeout_ms"] = json!(1500);
    req["max_instances"] = json!(2);
    deploy(&d, &req);
    let r = d.invoke("errs", &json!("raise"));
    assert_eq!(r.status, 502);
    let v = r.json().unwrap();
    assert_eq!(v["error"], "function_error");
    assert_eq!(v["type"], "KeyError");
    assert!(v["message"].as_str().unwrap().contains("missing thing"));
    assert!(v["traceback"].as_str().unwrap().contains("errs.py"));
    // the instance stays usable
    let r = d.invoke("errs", &json!("ok"));
    assert_eq!(r.status, 200);
    assert_eq!(r.header("thaw-start-type"), Some("warm"));

    let t = Instant::now();
    let r = d.invoke("errs", &json!("hang"));
    assert_eq!(r.status, 504);
    assert!(t.elapsed() < Duration::from_secs(10));
    // the timed-out instance was replaced, not reused
    let r = d.invoke("errs", &json!("ok"));
    assert_eq!(r.status, 200);
    assert_eq!(r.header("thaw-start-type"), Some("restore"));

    let (s, e, _) = error_of(&d.invoke("errs", &json!("set")));
    assert_eq!((s, e.as_str()), (502, "bad_output"));
    let (s, e, m) = error_of(&d.invoke("errs", &json!("huge")));
    assert_eq!((s, e.as_str()), (502, "bad_output"), "{m}");

    // a flood of output: bounded per invocation and per function
    let r = d.invoke("errs", &json!("flood"));
    assert!(r.status == 200 || r.status == 504, "{}", r.status);
    let logs = d
        .req("GET", "/v1/functions/errs/logs?tail=1", None)
        .json()
        .unwrap();
    let e = &logs["entries"][0];
    assert_eq!(e["truncated"], true);
    assert!(e["output"].as_str().unwrap().len() as u64 <= d.cfg.limits.invocation_log_bytes);
    let rings = d.home.join("serve/functions/errs/logs");
    let instance = e["instance"].as_str().unwrap();
    let ring = std::fs::metadata(rings.join(format!("{instance}.jsonl")))
        .unwrap()
        .len();
    assert!(
        ring <= d.cfg.limits.log_bytes + d.cfg.limits.invocation_log_bytes * 2,
        "{ring}"
    );
    // listed per instance and per invocation id
    let id = r.header("thaw-invocation-id").unwrap().to_string();
    let by_id = d
        .req(
            "GET",
            &format!("/v1/functions/errs/logs?invocation_id={id}"),
            None,
        )
        .json()
        .unwrap();
    assert_eq!(by_id["entries"].as_array().unwrap().len(), 1, "{by_id}");
    assert!(by_id["instances"]
        .as_array()
        .unwrap()
        .contains(&json!(instance)));
    let other = d
        .req(
            "GET",
            "/v1/functions/errs/logs?instance=errs-000000000000",
            None,
        )
        .json()
        .unwrap();
    assert_eq!(other["entries"], json!([]));

    // a function writing 1 GiB: the instance's log file is capped (its
    // writes fail past the cap), the ring keeps its bounds, the disk does
    // not fill
    let used = || {
        let out = std::process::Command::new("du")
            .args(["-sb"])
            .arg(d.home.join("serve"))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .next()
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    let before = used();
    let mut req = file_deploy("gig", "errs.handler", ERRORS);
    req["timeout_ms"] = json!(20_000);
    deploy(&d, &req);
    let r = d.invoke("gig", &json!("gigabyte"));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let written = r.json().unwrap().as_u64().unwrap();
    assert!(written < 1 << 30, "all of 1 GiB was written: {written}");
    let grown = used().saturating_sub(before);
    assert!(grown < 64 << 20, "the state home grew by {grown} bytes");
    let logs = d
        .req("GET", "/v1/functions/gig/logs?tail=1", None)
        .json()
        .unwrap();
    assert_eq!(logs["entries"][0]["truncated"], true, "{logs}");
    d.healthy();
}

#[test]
fn cap_queue_429_and_concurrent_restores() {
    let mut cfg = test_config("cap");
    cfg.limits.queue_per_function = 8;
    let d = Daemon::start(cfg);
    let mut req = file_deploy("slow", "errs.handler", ERRORS);
    req["max_instances"] = json!(2);
    deploy(&d, &req);
    let sock = d.running.as_ref().unwrap().socket.clone();
    // 1000 concurrent requests for a function with cap 2 and a queue of 8
    let results: Vec<(u16, Option<String>, Option<String>)> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..1000)
            .map(|_| {
                let sock = sock.clone();
                let b = std::thread::Builder::new().stack_size(256 << 10);
                b.spawn_scoped(s, move || {
                    let mut c = Client::new(Target::Unix(sock));
                    let r = c
                        .request("POST", "/v1/functions/slow/invoke", Some(b"\"sleep\""))
                        .unwrap();
                    (
                        r.status,
                        r.header("retry-after").map(String::from),
                        r.header("thaw-start-type").map(String::from),
                    )
                })
                .unwrap()
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let ok = results.iter().filter(|r| r.0 == 200).count();
    let busy: Vec<_> = results.iter().filter(|r| r.0 == 429).collect();
    assert_eq!(ok + busy.len(), 1000, "only 200 and 429: {results:?}");
    // the threads start over a while: a few may find room after the first wave
    assert!((2..=40).contains(&ok), "served {ok}");
    assert!(
        busy.iter().all(|r| r.1.is_some()),
        "429 without Retry-After"
    );
    let restores = results
        .iter()
        .filter(|r| r.2.as_deref() == Some("restore"))
        .count();
    assert_eq!(
        restores, 2,
        "two instances restored (concurrently), then reused"
    );
    let v = d.req("GET", "/v1/functions/slow", None).json().unwrap();
    assert!(v["instances"]["live"].as_u64().unwrap() <= 2, "{v}");
    let m = String::from_utf8(d.req("GET", "/metrics", None).body).unwrap();
    assert!(
        m.contains("thaw_rejected_requests_total{reason=\"queue_full\"}"),
        "{m}"
    );

    // clients that disconnect mid-request: their invocations finish, their
    // instances come back, nothing leaks past the cap
    for _ in 0..4 {
        use std::io::Write as _;
        let mut s = std::os::unix::net::UnixStream::connect(&sock).unwrap();
        let body = b"\"sleep\"";
        let head = format!(
            "POST /v1/functions/slow/invoke HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        s.write_all(head.as_bytes()).unwrap();
        s.write_all(body).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        drop(s);
    }
    std::thread::sleep(Duration::from_millis(1500));
    let v = d.req("GET", "/v1/functions/slow", None).json().unwrap();
    assert_eq!(
        v["instances"]["live"], v["instances"]["idle"],
        "all back idle: {v}"
    );
    assert!(v["instances"]["live"].as_u64().unwrap() <= 2, "{v}");
    let r = d.invoke("slow", &json!("ok"));
    assert_eq!(r.header("thaw-start-type"), Some("warm"));
    d.healthy();
}

#[test]
fn bad_requests_get_clear_errors_and_the_daemon_keeps_serving() {
    let d = Daemon::start(test_config("bad"));
    let ok_src = "def handler(event):\n    return event\n";
    // a good deploy request with one field set to `v`
    let with = |k: &str, v: Value| {
        let mut r = file_deploy("a", "m.handler", ok_src);
        r[k] = v;
        serde_json::to_vec(&r).unwrap()
    };
    let cases: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        (
            "malformed JSON",
            b"{\"name\": ".to_vec(),
            400,
            "deploy request",
        ),
        (
            "unknown field",
            with("colour", json!("blue")),
            400,
            "unknown field",
        ),
        (
            "wrong type",
            with("memory_mb", json!("lots")),
            400,
            "invalid type",
        ),
        (
            "a CPU quota the kernel would not take",
            with("cpu_millis", json!(5)),
            400,
            "cpu_millis must be in 10..=",
        ),
        (
            "no CPU weight",
            with("cpu_weight", json!(0)),
            400,
            "cpu_weight must be in 1..=10000",
        ),
        (
            "a CPU weight past cgroup v2's",
            with("cpu_weight", json!(10_001)),
            400,
            "cpu_weight must be in 1..=10000",
        ),
        (
            "a CPU weight that is no number",
            with("cpu_weight", json!(-5)),
            400,
            "invalid value: integer `-5`",
        ),
    ];
    for (what, body, status, needle) in cases {
        let r = d.req("POST", "/v1/functions", Some(&body));
        let (s, _, m) = error_of(&r);
        assert_eq!(s, status, "{what}: {m}");
        assert!(m.contains(needle), "{what}: {m}");
    }
    for name in [
        "a/b",
        "..",
        "with space",
        &"x".repeat(200),
        "Upper",
        "-lead",
        "",
    ] {
        let r = d.post_json("/v1/functions", &file_deploy(name, "m.handler", ok_src));
        let (s, _, m) = error_of(&r);
        assert_eq!(s, 400, "name {name:?}: {m}");
        assert!(m.contains("invalid"), "{m}");
    }
    // invoking by a bad name or an unknown function
    assert_eq!(d.invoke("nope", &json!(1)).status, 404);
    assert_eq!(d.req("GET", "/v1/functions/nope/stats", None).status, 404);
    assert_eq!(
        d.req("POST", "/v1/functions/a%2Fb/invoke", Some(b"1"))
            .status,
        400
    );

    // hostile archives
    let entry = |name: &str, kind: u8, link: &str| {
        let mut t = RawTar::new();
        t.file("ok.py", ok_src.as_bytes()).entry(
            name,
            kind,
            if kind == b'0' { b"x" } else { b"" },
            link,
        );
        t.gz()
    };
    let bomb = {
        let mut t = RawTar::new();
        t.file("big.bin", &vec![0u8; 32 << 20]);
        t.gz()
    };
    let over = {
        // incompressible, over the 1 MiB code limit
        let mut x = 0x9e3779b97f4a7c15u64;
        let data: Vec<u8> = (0..(3 << 19))
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x.to_le_bytes()[0]
            })
            .collect();
        data
    };
    let archives: Vec<(&str, &str, Vec<u8>, &str)> = vec![
        (
            "dot-dot",
            "tar.gz",
            entry("../escape.py", b'0', ""),
            "leaves the tree",
        ),
        (
            "nested dot-dot",
            "tar.gz",
            entry("a/../../escape.py", b'0', ""),
            "leaves the tree",
        ),
        (
            "absolute",
            "tar.gz",
            entry("/etc/cron.d/x", b'0', ""),
            "absolute",
        ),
        (
            "symlink out",
            "tar.gz",
            entry("link", b'2', "/etc/shadow"),
            "symbolic link",
        ),
        (
            "hard link out",
            "tar.gz",
            entry("hl", b'1', "../../etc/shadow"),
            "hard link",
        ),
        ("device", "tar.gz", entry("dev", b'3', ""), "device"),
        ("bomb", "tar.gz", bomb, "decompression bomb"),
        ("not an archive", "tar.gz", b"hello".to_vec(), "archive"),
        ("not a zip", "zip", b"PK\x03\x04garbage".to_vec(), "zip"),
        ("over the size limit", "tar.gz", over, "exceeds the limit"),
    ];
    for (what, fmt, data, needle) in archives {
        let r = d.post_json(
            "/v1/functions",
            &archive_deploy("arch", "ok.handler", fmt, &data),
        );
        let (s, _, m) = error_of(&r);
        assert!(s == 400 || s == 413, "{what}: {s} {m}");
        assert!(m.contains(needle), "{what}: {m}");
        assert!(!Path::new("/tmp/escape.py").exists());
    }
    // zip with ../ and a symlink
    let mut z = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    z.start_file("../evil.py", zip::write::SimpleFileOptions::default())
        .unwrap();
    z.write_all(b"x").unwrap();
    let data = z.finish().unwrap().into_inner();
    let (s, _, m) = error_of(&d.post_json(
        "/v1/functions",
        &archive_deploy("z", "ok.handler", "zip", &data),
    ));
    assert_eq!(s, 400, "{m}");
    let mut z = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    z.add_symlink("l", "/etc/passwd", zip::write::SimpleFileOptions::default())
        .unwrap();
    let data = z.finish().unwrap().into_inner();
    let (s, _, m) = error_of(&d.post_json(
        "/v1/functions",
        &archive_deploy("z", "ok.handler", "zip", &data),
    ));
    assert!(s == 400 && m.contains("symbolic link"), "{m}");

    // handlers and init hooks that fail
    let fails: Vec<(&str, Value, &str)> = vec![
        (
            "no such module",
            {
                let mut r = file_deploy("h", "nomod.handler", ok_src);
                r["code"]["filename"] = json!("other.py");
                r
            },
            "No module named 'nomod'",
        ),
        (
            "no such function",
            file_deploy("h", "m.nothere", ok_src),
            "has no function",
        ),
        (
            "handler form",
            file_deploy("h", "handler", ok_src),
            "module.function",
        ),
        (
            "init raises",
            {
                let mut r = file_deploy("h", "m.handler", "def init():\n    raise RuntimeError('init broke')\ndef handler(e):\n    return e\n");
                r["init"] = json!("m.init");
                r
            },
            "init broke",
        ),
        (
            "init exits",
            {
                let mut r = file_deploy(
                    "h",
                    "m.handler",
                    "import os\ndef init():\n    os._exit(3)\ndef handler(e):\n    return e\n",
                );
                r["init"] = json!("m.init");
                r
            },
            "import/init failed",
        ),
        (
            "syntax error",
            file_deploy("h", "m.handler", "def handler(:\n"),
            "SyntaxError",
        ),
        (
            "package name with options",
            {
                let mut r = file_deploy("h", "m.handler", ok_src);
                r["packages"] = json!(["-oAPT::Get::Download=x"]);
                r
            },
            "not a Debian package name",
        ),
        (
            "reserved env",
            {
                let mut r = file_deploy("h", "m.handler", ok_src);
                r["env"] = json!({"PATH": "/evil"});
                r
            },
            "reserved",
        ),
        (
            "bad strategy",
            {
                let mut r = file_deploy("h", "m.handler", ok_src);
                r["strategy"] = json!("teleport");
                r
            },
            "strategy",
        ),
    ];
    for (what, req, needle) in fails {
        let r = d.post_json("/v1/functions", &req);
        let (s, _, m) = error_of(&r);
        assert!((400..=501).contains(&s) && s != 404, "{what}: {s} {m}");
        assert!(m.contains(needle), "{what}: {m}");
    }
    // a strategy the daemon does not know, or does not run: 400 naming
    // those it runs, and why the others are not among them
    for (name, needles) in [
        (
            "teleport",
            &[
                "unknown strategy \"teleport\"",
                "use one of eager, mmap, uffd, reap, boot",
                "not supported by the daemon: dax needs the snapshot on a byte-addressable tier",
                "tiered needs a TOSS tier layout",
            ][..],
        ),
        (
            "dax",
            &[
                "strategy \"dax\" is not supported by the daemon",
                "moves snapshots between its tiers",
                "mmap restores the same way without it",
                "use one of eager, mmap, uffd, reap, boot",
            ][..],
        ),
        (
            "tiered",
            &[
                "strategy \"tiered\" is not supported by the daemon",
                "makes no tier layouts",
                "uffd restores the same way without it",
            ][..],
        ),
    ] {
        let mut req = file_deploy("h", "m.handler", ok_src);
        req["strategy"] = json!(name);
        let (s, e, m) = error_of(&d.post_json("/v1/functions", &req));
        assert_eq!((s, e.as_str()), (400, "bad_request"), "{name}: {m}");
        for n in needles {
            assert!(m.contains(n), "{name}: {m:?} lacks {n:?}");
        }
    }
    // nothing published for any failed deploy
    let list = d.req("GET", "/v1/functions", None).json().unwrap();
    assert_eq!(list["functions"], json!([]), "{list}");
    assert!(std::fs::read_dir(d.home.join("serve/functions"))
        .unwrap()
        .flatten()
        .all(|e| !e.path().join("current").exists()));

    // events over the limit, or not JSON
    deploy(&d, &file_deploy("echo", "m.handler", ok_src));
    let big = vec![b'1'; usize::try_from(d.cfg.limits.event_bytes + 1).unwrap()];
    let (s, e, _) = error_of(&d.req("POST", "/v1/functions/echo/invoke", Some(&big)));
    assert_eq!((s, e.as_str()), (413, "payload_too_large"));
    // far over every limit (a 200 MB deploy): the 413 answer, not a reset
    let huge = vec![b' '; 200 << 20];
    let (s, e, m) = error_of(&d.req("POST", "/v1/functions", Some(&huge)));
    assert_eq!((s, e.as_str()), (413, "payload_too_large"), "{m}");
    drop(huge);
    let (s, _, m) = error_of(&d.req("POST", "/v1/functions/echo/invoke", Some(b"{nope")));
    assert!(s == 400 && m.contains("not JSON"), "{m}");
    let (s, _, _) = error_of(&d.req("POST", "/v1/functions/echo/invoke?force=warm", Some(b"1")));
    assert_eq!(s, 400);
    let r = d.req(
        "POST",
        "/v1/functions/echo/invoke",
        Some(b"[1, {\"a\": null}]"),
    );
    assert_eq!(r.json().unwrap(), json!([1, {"a": null}]));
    // unknown routes and methods
    assert_eq!(d.req("GET", "/v2/nothing", None).status, 404);
    assert_eq!(d.req("PATCH", "/v1/functions", None).status, 405);
    d.healthy();
}

#[test]
fn init_that_hangs_is_bounded() {
    let mut cfg = test_config("inithang");
    cfg.limits.init_timeout_ms = 1500;
    let d = Daemon::start(cfg);
    let mut req = file_deploy(
        "hang",
        "m.handler",
        "def init():\n    while True:\n        pass\ndef handler(e):\n    return e\n",
    );
    req["init"] = json!("m.init");
    let t = Instant::now();
    let (s, _, m) = error_of(&d.post_json("/v1/functions", &req));
    assert_eq!(s, 400, "{m}");
    assert!(m.contains("did not finish"), "{m}");
    assert!(t.elapsed() < Duration::from_secs(20));
    d.healthy();
}

#[test]
fn restart_keeps_deployments_and_retakes_untrusted_snapshots() {
    let d = Daemon::start(test_config("restart"));
    deploy(
        &d,
        &file_deploy(
            "keep",
            "m.handler",
            "def handler(e):\n    return {'kept': e}\n",
        ),
    );
    // on tmpfs: the test corrupts it (disk-tier files are immutable)
    let mut fix = file_deploy(
        "fix",
        "m.handler",
        "def handler(e):\n    return {'fixed': e}\n",
    );
    fix["tier"] = json!("tmpfs");
    let v = deploy(&d, &fix);
    let fix_snap = PathBuf::from(v["snapshot"]["dir"].as_str().unwrap());
    // one whose record says it was taken on another kind of machine
    let mut moved = file_deploy(
        "moved",
        "m.handler",
        "def handler(e):\n    return 'moved'\n",
    );
    moved["tier"] = json!("tmpfs");
    let v = deploy(&d, &moved);
    let moved_id = v["snapshot"]["id"].clone();
    let moved_manifest =
        PathBuf::from(v["snapshot"]["dir"].as_str().unwrap()).join("manifest.json");
    assert_eq!(d.invoke("keep", &json!(1)).status, 200);
    // a deploy that crashed before publishing leaves a version without `current`
    let half = d.home.join("serve/functions/keep/v7");
    std::fs::create_dir_all(half.join("code")).unwrap();
    let d = d.restart(|| {
        // corrupt one snapshot while the daemon is down
        let img = fix_snap.join("memory.img");
        let mut data = std::fs::read(&img).unwrap();
        let mid = data.len() / 2;
        data[mid] ^= 0xff;
        std::fs::write(&img, data).unwrap();
        let mut m: Value =
            serde_json::from_slice(&std::fs::read(&moved_manifest).unwrap()).unwrap();
        assert!(m["machine"]["xsave_bytes"].as_u64().unwrap() >= 576, "{m}");
        m["machine"]["cpu_features"]["7.0.ebx"] = json!(u32::MAX);
        std::fs::write(&moved_manifest, serde_json::to_vec(&m).unwrap()).unwrap();
    });
    assert!(!half.exists(), "an unpublished version was left");
    // the forged snapshot was refused at start and taken again here
    let v = d.req("GET", "/v1/functions/moved", None).json().unwrap();
    assert_ne!(v["snapshot"]["id"], moved_id, "{v}");
    assert_eq!(d.invoke("moved", &json!(0)).json().unwrap(), json!("moved"));
    let list = d.req("GET", "/v1/functions", None).json().unwrap();
    let names: Vec<_> = list["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].clone())
        .collect();
    assert_eq!(names, vec![json!("fix"), json!("keep"), json!("moved")]);
    let r = d.invoke("keep", &json!(2));
    assert_eq!(
        (r.status, r.header("thaw-start-type")),
        (200, Some("restore"))
    );
    assert_eq!(r.json().unwrap(), json!({"kept": 2}));
    let r = d.invoke("fix", &json!(3));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json().unwrap(), json!({"fixed": 3}));
    let d = d.restart(|| {});
    assert_eq!(
        d.invoke("keep", &json!(4)).json().unwrap(),
        json!({"kept": 4})
    );
}

#[test]
fn redeploy_is_atomic_and_sigterm_drains_in_flight_invocations() {
    let d = Daemon::start(test_config("redeploy"));
    let v1 = "import time\ndef handler(e):\n    if e == 'slow':\n        time.sleep(1.0)\n    return 'v1'\n";
    deploy(&d, &file_deploy("f", "m.handler", v1));
    let sock = d.running.as_ref().unwrap().socket.clone();
    let slow = {
        let sock = sock.clone();
        std::thread::spawn(move || {
            Client::new(Target::Unix(sock))
                .request("POST", "/v1/functions/f/invoke", Some(b"\"slow\""))
                .unwrap()
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let r = d.post_json(
        "/v1/functions",
        &file_deploy("f", "m.handler", "def handler(e):\n    return 'v2'\n"),
    );
    assert_eq!(r.status, 200, "a redeploy answers 200");
    assert_eq!(r.json().unwrap()["version"], 2);
    let old = slow.join().unwrap();
    assert_eq!(
        old.json().unwrap(),
        json!("v1"),
        "in-flight finished on the old version"
    );
    assert_eq!(old.header("thaw-version"), Some("1"));
    let r = d.invoke("f", &json!(null));
    assert_eq!(r.json().unwrap(), json!("v2"));

    // drain: an invocation in flight when the stop comes still answers
    deploy(&d, &file_deploy("g", "m.handler", v1));
    let slow = {
        let sock = sock.clone();
        std::thread::spawn(move || {
            Client::new(Target::Unix(sock))
                .request("POST", "/v1/functions/g/invoke", Some(b"\"slow\""))
                .unwrap()
        })
    };
    std::thread::sleep(Duration::from_millis(400));
    let mut d = d;
    let t = Instant::now();
    d.stop();
    let r = slow.join().unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.json().unwrap(), json!("v1"));
    assert!(t.elapsed() < Duration::from_secs(8));
    assert!(!sock.exists(), "socket removed at stop");
}

#[test]
fn deploys_only_if_absent_made_at_once_make_one_version() {
    let d = Daemon::start(test_config("ifabsent"));
    let mut req = file_deploy("once", "m.handler", "def handler(e):\n    return 'one'\n");
    req["only_if_absent"] = json!(true);
    let sock = d.running.as_ref().unwrap().socket.clone();
    let body = serde_json::to_vec(&req).unwrap();
    let both: Vec<_> = (0..2)
        .map(|_| {
            let (sock, body) = (sock.clone(), body.clone());
            std::thread::spawn(move || {
                Client::new(Target::Unix(sock))
                    .request("POST", "/v1/functions", Some(&body))
                    .unwrap()
            })
        })
        .collect();
    let mut codes: Vec<u16> = Vec::new();
    for t in both {
        let r = t.join().unwrap();
        if r.status == 409 {
            assert_eq!(r.json().unwrap()["error"], "exists", "{r:?}");
        }
        codes.push(r.status);
    }
    codes.sort();
    assert_eq!(codes, [201, 409], "one deploy made it, the other found it");
    let f = d.req("GET", "/v1/functions/once", None).json().unwrap();
    assert_eq!(f["version"], 1, "{f}");
    assert_eq!(d.invoke("once", &json!(null)).json().unwrap(), json!("one"));
    // without the flag the same request is a redeploy
    req["only_if_absent"] = json!(false);
    assert_eq!(deploy(&d, &req)["version"], 2);
}

#[test]
fn keep_alive_follows_the_policy() {
    let mut cfg = test_config("ttl");
    cfg.policy = "ttl".into();
    cfg.keep_alive_s = 1;
    let d = Daemon::start(cfg);
    deploy(
        &d,
        &file_deploy("k", "m.handler", "def handler(e):\n    return e\n"),
    );
    assert_eq!(
        d.invoke("k", &json!(1)).header("thaw-start-type"),
        Some("restore")
    );
    assert_eq!(
        d.invoke("k", &json!(1)).header("thaw-start-type"),
        Some("warm")
    );
    std::thread::sleep(Duration::from_millis(2500));
    let v = d.req("GET", "/v1/functions/k", None).json().unwrap();
    assert_eq!(
        v["instances"]["idle"], 0,
        "ttl expired the idle instance: {v}"
    );
    assert_eq!(
        d.invoke("k", &json!(1)).header("thaw-start-type"),
        Some("restore")
    );
    drop(d);

    // lru-mem: a budget for two instances charged their declared memory;
    // a third function evicts the least recently idle one
    let mut cfg = test_config("lru");
    cfg.policy = "lru-mem".into();
    cfg.memory_budget_mb = 256;
    cfg.memory_accounting = "declared".into();
    let d = Daemon::start(cfg);
    for n in ["a", "b", "c"] {
        let mut r = file_deploy(n, "m.handler", "def handler(e):\n    return e\n");
        r["memory_mb"] = json!(128);
        deploy(&d, &r);
    }
    d.invoke("a", &json!(1));
    d.invoke("b", &json!(1));
    assert_eq!(
        d.invoke("a", &json!(1)).header("thaw-start-type"),
        Some("warm")
    );
    d.invoke("c", &json!(1));
    let idle = |n: &str| {
        d.req("GET", &format!("/v1/functions/{n}"), None)
            .json()
            .unwrap()["instances"]["idle"]
            .clone()
    };
    assert_eq!(
        (idle("a"), idle("b"), idle("c")),
        (json!(1), json!(0), json!(1))
    );
    assert_eq!(
        d.invoke("b", &json!(1)).header("thaw-start-type"),
        Some("restore")
    );
    // a function bigger than the whole budget: its deploy sandbox counts in
    // the budget, so even the deploy gets 503 memory, nothing started
    let mut r = file_deploy("big", "m.handler", "def handler(e):\n    return e\n");
    r["memory_mb"] = json!(512);
    let resp = d.post_json("/v1/functions", &r);
    let (s, e, _) = error_of(&resp);
    assert_eq!((s, e.as_str()), (503, "memory"));
    assert!(resp.header("retry-after").is_some());
    assert_eq!(d.req("GET", "/v1/functions/big", None).status, 404);
    d.healthy();
}

#[test]
fn prewarm_restores_ahead() {
    let d = Daemon::start(test_config("prewarm"));
    let mut r = file_deploy("p", "m.handler", "def handler(e):\n    return e\n");
    r["max_instances"] = json!(3);
    deploy(&d, &r);
    let r = d.req("PUT", "/v1/functions/p/prewarm", Some(b"{\"count\": 5}"));
    assert_eq!(r.status, 200);
    let v = r.json().unwrap();
    assert_eq!(v["started"], 3, "capped at max_instances: {v}");
    assert_eq!(v["instances"]["idle"], 3);
    assert_eq!(
        d.invoke("p", &json!(1)).header("thaw-start-type"),
        Some("warm")
    );
    let (s, _, _) = error_of(&d.req(
        "PUT",
        "/v1/functions/p/prewarm",
        Some(b"{\"count\": \"x\"}"),
    ));
    assert_eq!(s, 400);
}

/// Processes of this test process's sandboxes whose memory limit is
/// `limit_mb` (tests share the process; the limit tells this test's apart).
fn sandboxes_with_limit(limit_mb: u64) -> Vec<String> {
    let tag = thaw_store::secure::owner_tag();
    let dir = std::path::Path::new("/sys/fs/cgroup/memory/thaw");
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let limit = std::fs::read_to_string(e.path().join("memory.limit_in_bytes"));
        if name.starts_with(tag) && limit.is_ok_and(|l| l.trim() == (limit_mb << 20).to_string()) {
            out.push(name);
        }
    }
    out
}

fn wait_sandboxes(limit_mb: u64, n: usize) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while sandboxes_with_limit(limit_mb).len() != n {
        assert!(
            std::time::Instant::now() < deadline,
            "want {n} sandboxes, have {:?}",
            sandboxes_with_limit(limit_mb)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// This test's sandboxes (by memory limit) whose process runs a function:
/// dropped to the function's uid, where a restorer waiting for its plan is root.
fn running_sandboxes(limit_mb: u64) -> Vec<String> {
    sandboxes_with_limit(limit_mb)
        .into_iter()
        .filter(|name| {
            let procs = format!("/sys/fs/cgroup/memory/thaw/{name}/cgroup.procs");
            let pid = std::fs::read_to_string(procs).unwrap_or_default();
            let status = std::fs::read_to_string(format!("/proc/{}/status", pid.trim()));
            let uid = status.unwrap_or_default().lines().find_map(|l| {
                l.strip_prefix("Uid:")
                    .map(|u| u.split_whitespace().next().unwrap_or("").to_string())
            });
            uid.is_some_and(|u| u != "0")
        })
        .collect()
}

#[test]
fn sandbox_pool_starts_at_the_first_restore_serves_the_next_and_goes_with_the_function() {
    let mut cfg = test_config("sandboxpool");
    cfg.limits.sandbox_pool = 2;
    let d = Daemon::start(cfg);
    let mut r = file_deploy("sp", "m.handler", "def handler(e):\n    return e\n");
    r["memory_mb"] = json!(144);
    deploy(&d, &r);
    // a version nobody restored yet has nothing built ahead
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(sandboxes_with_limit(144), Vec::<String>::new());
    let r = d.invoke("sp", &json!({"x": 1}));
    assert_eq!(r.status, 200);
    assert_eq!(r.header("thaw-start-type"), Some("restore"));
    assert_eq!(r.json().unwrap(), json!({"x": 1}));
    // once it answered, two restorers wait for a plan beside the instance
    wait_sandboxes(144, 3);
    let first = running_sandboxes(144);
    assert_eq!(first.len(), 1, "{first:?}");
    let pooled: Vec<_> = sandboxes_with_limit(144)
        .into_iter()
        .filter(|s| !first.contains(s))
        .collect();
    // the next restore is into one of them, and the pool refills
    let r = d.post_json("/v1/functions/sp/invoke?force=cold", &json!({"x": 2}));
    assert_eq!(r.status, 200);
    assert_eq!(r.header("thaw-start-type"), Some("restore"));
    wait_sandboxes(144, 4);
    let second: Vec<_> = running_sandboxes(144)
        .into_iter()
        .filter(|s| !first.contains(s))
        .collect();
    assert_eq!(second.len(), 1, "{second:?}");
    assert!(pooled.contains(&second[0]), "restored outside the pool");
    assert_eq!(d.req("DELETE", "/v1/functions/sp", None).status, 204);
    wait_sandboxes(144, 0);
}

const PROBE: &str = r#"
import socket
def handler(event):
    out = {}
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(event["socket"])
        out["unix"] = "connected"
    except OSError as e:
        out["unix"] = type(e).__name__
    try:
        s = socket.create_connection(("127.0.0.1", event["port"]), timeout=1)
        out["tcp"] = "connected"
    except OSError as e:
        out["tcp"] = type(e).__name__
    return out
"#;

#[test]
fn functions_cannot_reach_the_daemon_and_tcp_needs_the_token() {
    let mut cfg = test_config("security");
    cfg.listen = Some("127.0.0.1:0".into());
    let token_file = cfg.home.with_extension("token");
    std::fs::write(&token_file, "0123456789abcdef0123456789abcdef\n").unwrap();
    cfg.token_file = Some(token_file.clone());
    let d = Daemon::start(cfg);
    let tcp = d.running.as_ref().unwrap().tcp.expect("tcp listener");
    let mut anon = Client::new(Target::Tcp(tcp));
    let r = anon.request("GET", "/v1/functions", None).unwrap();
    assert_eq!(r.status, 401);
    let r = Client::new(Target::Tcp(tcp))
        .with_token(Some("wrong-token-wrong-token".into()))
        .request("GET", "/healthz", None)
        .unwrap();
    assert_eq!(r.status, 401);
    let mut authed =
        Client::new(Target::Tcp(tcp)).with_token(Some("0123456789abcdef0123456789abcdef".into()));
    assert_eq!(
        authed.request("GET", "/v1/functions", None).unwrap().status,
        200
    );

    deploy(&d, &file_deploy("probe", "probe.handler", PROBE));
    let sock = d.running.as_ref().unwrap().socket.clone();
    let r = d.invoke(
        "probe",
        &json!({"socket": sock.to_string_lossy(), "port": tcp.port()}),
    );
    let out = r.json().unwrap();
    assert_ne!(out["unix"], "connected", "{out}");
    assert_ne!(out["tcp"], "connected", "{out}");
    // through TCP with the token the same function runs
    let r = authed
        .request(
            "POST",
            "/v1/functions/probe/invoke",
            Some(
                serde_json::to_vec(&json!({"socket": "/nonexistent", "port": 1}))
                    .unwrap()
                    .as_slice(),
            ),
        )
        .unwrap();
    assert_eq!(r.status, 200);
    let _ = std::fs::remove_file(token_file);

    // off loopback without a token: refused at start
    let mut cfg = test_config("notoken");
    cfg.listen = Some("0.0.0.0:0".into());
    let home = cfg.home.clone();
    let err = thaw_server::TempDaemon::serve(cfg, None).err();
    let _ = thaw_server::remove_home(&home);
    assert!(format!("{:#}", err.expect("must refuse")).contains("token"));
}

/// The OpenAPI file lists exactly the daemon's routes, and each answers
/// (not with the router's 404/405 fallbacks).
#[test]
fn openapi_matches_the_live_routes() {
    let spec: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/openapi.json"
        ))
        .unwrap(),
    )
    .unwrap();
    assert_eq!(spec["openapi"].as_str().unwrap().chars().next(), Some('3'));
    let mut in_spec = Vec::new();
    for (path, ops) in spec["paths"].as_object().unwrap() {
        for m in ops.as_object().unwrap().keys() {
            if ["get", "post", "put", "delete", "patch"].contains(&m.as_str()) {
                in_spec.push((m.clone(), path.clone()));
            }
        }
    }
    let mut routes: Vec<_> = thaw_server::http::ROUTES
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    in_spec.sort();
    routes.sort();
    assert_eq!(in_spec, routes);
    let d = Daemon::start(test_config("openapi"));
    deploy(
        &d,
        &file_deploy("x", "m.handler", "def handler(e):\n    return e\n"),
    );
    for (m, p) in &routes {
        let path = p.replace("{name}", "x");
        let body: Option<&[u8]> = match (m.as_str(), path.as_str()) {
            ("post", "/v1/functions") => Some(b"{}"),
            ("put", _) => Some(b"{\"count\": 1}"),
            ("post", _) => Some(b"1"),
            _ => None,
        };
        let r = d.req(&m.to_uppercase(), &path, body);
        let (s, e, _) = error_of(&r);
        assert!(
            !(s == 404 && e == "not_found" && !path.contains("/x")) && s != 405,
            "{m} {path}: {s} {e}"
        );
        assert!(s < 500, "{m} {path}: {s}");
    }
}

#[test]
fn a_cpu_weight_is_the_instances_cgroups() {
    let d = Daemon::start(test_config("weight"));
    let mut req = file_deploy("w", "m.handler", "def handler(e):\n    return e\n");
    req["cpu_weight"] = json!(20);
    deploy(&d, &req);
    let info = d.req("GET", "/v1/functions/w", None).json().unwrap();
    assert_eq!(info["cpu_weight"], 20, "{info}");
    let r = d.req("POST", "/v1/functions/w/invoke", Some(b"1"));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    // read back from the instance's cgroup (cpu.shares, the weight's)
    let t = Instant::now();
    loop {
        let stats = d.req("GET", "/v1/functions/w/stats", None).json().unwrap();
        if stats["usage"]["instances"].as_u64() >= Some(1) {
            assert_eq!(stats["usage"]["cpu_weight"], 20, "{stats}");
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "no instance: {stats}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
