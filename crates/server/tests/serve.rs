//! The daemon through real HTTP: each test starts `thaw serve` in-process on
//! a temporary state home (the runtime root is shared from the default
//! home), talks to it over its Unix socket and checks what comes back.
use serde_json::{json, Value};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use thaw_client::{Client, Response, Target};
use thaw_server::Config;

mod common;
use common::*;

/// A tar.gz written entry by entry (raw ustar headers, so hostile names and
/// link entries can be made too).
struct RawTar(Vec<u8>);

impl RawTar {
    fn new() -> Self {
        RawTar(Vec::new())
    }
    fn entry(&mut self, name: &str, kind: u8, data: &[u8], link: &str) -> &mut Self {
        self.header(name, kind, data.len() as u64, link);
        self.0.extend_from_slice(data);
        let pad = (512 - data.len() % 512) % 512;
        self.0.extend(std::iter::repeat_n(0u8, pad));
        self
    }
    fn header(&mut self, name: &str, kind: u8, size: u64, link: &str) {
        let mut h = [0u8; 512];
        h[..name.len()].copy_from_slice(name.as_bytes());
        let oct = |h: &mut [u8; 512], at: usize, len: usize, v: u64| {
            let s = format!("{:0w$o}", v, w = len - 1);
            h[at..at + len - 1].copy_from_slice(s.as_bytes());
        };
        oct(&mut h, 100, 8, 0o644);
        oct(&mut h, 108, 8, 0);
        oct(&mut h, 116, 8, 0);
        oct(&mut h, 124, 12, size);
        oct(&mut h, 136, 12, 0);
        h[156] = kind;
        h[157..157 + link.len()].copy_from_slice(link.as_bytes());
        h[257..263].copy_from_slice(b"ustar\0");
        h[263..265].copy_from_slice(b"00");
        h[148..156].copy_from_slice(b"        ");
        let sum: u32 = h.iter().map(|&b| b as u32).sum();
        let s = format!("{sum:06o}\0 ");
        h[148..156].copy_from_slice(s.as_bytes());
        self.0.extend_from_slice(&h);
    }
    fn file(&mut self, name: &str, data: &[u8]) -> &mut Self {
        self.entry(name, b'0', data, "")
    }
    fn gz(&mut self) -> Vec<u8> {
        self.0.extend(std::iter::repeat_n(0u8, 1024));
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(&self.0).unwrap();
        e.finish().unwrap()
    }
}

fn archive_deploy(name: &str, handler: &str, format: &str, data: &[u8]) -> Value {
    json!({
        "name": name,
        "handler": handler,
        "code": {"format": format, "data_base64": b64(data)},
    })
}

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
                x as u8
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
    let big = vec![b'1'; (d.cfg.limits.event_bytes + 1) as usize];
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

#[test]
fn sandbox_pool_serves_restores_and_goes_with_the_function() {
    let mut cfg = test_config("sandboxpool");
    cfg.limits.sandbox_pool = 2;
    let d = Daemon::start(cfg);
    let mut r = file_deploy("sp", "m.handler", "def handler(e):\n    return e\n");
    r["memory_mb"] = json!(144);
    deploy(&d, &r);
    // two restorers wait for a plan, nothing else runs
    wait_sandboxes(144, 2);
    let pooled = sandboxes_with_limit(144);
    let r = d.invoke("sp", &json!({"x": 1}));
    assert_eq!(r.status, 200);
    assert_eq!(r.header("thaw-start-type"), Some("restore"));
    assert_eq!(r.json().unwrap(), json!({"x": 1}));
    // the restore took one; the pool refills beside the warm instance
    wait_sandboxes(144, 3);
    // the instance (dropped to its own uid; waiting restorers are root) is
    // in one of the sandboxes that were waiting
    let running: Vec<_> = sandboxes_with_limit(144)
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
        .collect();
    assert_eq!(running.len(), 1, "{running:?}");
    assert!(pooled.contains(&running[0]), "restored outside the pool");
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
    let rt = tokio::runtime::Runtime::new().unwrap();
    let err = rt.block_on(async {
        let app = tokio::task::spawn_blocking(move || thaw_server::open(cfg))
            .await
            .unwrap()
            .unwrap();
        let home = app.cfg.home.clone();
        let e = thaw_server::start(app, false).await.err();
        let _ = thaw_server::remove_home(&home);
        e
    });
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

/// `thaw_snapshot_moves_total{from,to}` as the daemon reports it.
fn moves(d: &Daemon, from: &str, to: &str) -> u64 {
    metric(
        d,
        &format!("thaw_snapshot_moves_total{{from=\"{from}\",to=\"{to}\"}}"),
    )
}

/// Waits (bounded) until the mover has made `n` moves from `from` to `to`.
fn wait_moves(d: &Daemon, from: &str, to: &str, n: u64) {
    let t = Instant::now();
    while moves(d, from, to) < n {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "no {n} moves {from} -> {to}: {}",
            moves(d, from, to)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        moves(d, from, to),
        n,
        "more moves {from} -> {to} than expected"
    );
}

#[test]
fn tiered_policy_moves_snapshots_between_tmpfs_and_disk() {
    // a snapshot big enough that the policy's "fits the tier" check (it
    // sizes a demoted instance at its memory limit) passes for one of them
    let src = "BALLAST = b'x' * (100 << 20)\ndef handler(e):\n    return e\n";
    let req = |n: &str| {
        let mut r = file_deploy(n, "m.handler", src);
        r["memory_mb"] = json!(192);
        r["tier"] = json!("tmpfs");
        r["strategy"] = json!("mmap");
        r
    };
    let mut cfg = test_config("tiers");
    cfg.policy = "tiered-lru".into();
    // RAM for two instances charged their declared memory; the policy
    // demotes past one idle instance
    cfg.memory_budget_mb = 384;
    cfg.memory_accounting = "declared".into();
    cfg.threshold = 0.5;
    let d = Daemon::start(cfg);
    let size = deploy(&d, &req("a"))["size_bytes"].as_u64().unwrap();
    // room on tmpfs for one snapshot (restart keeps the deployment)
    let mut d = d;
    let mb = size.div_ceil(1 << 20);
    d.cfg.dram_snapshot_mb = (mb * 3 / 2).max(192);
    assert!(d.cfg.dram_snapshot_mb < 2 * mb, "{mb} MiB snapshots");
    let d = d.restart(|| {});
    assert_eq!(moves(&d, "tmpfs", "disk"), 0);
    deploy(&d, &req("b"));
    // b took tmpfs: the least recently used snapshot (a) goes to disk
    wait_moves(&d, "tmpfs", "disk", 1);
    let v = d.req("GET", "/v1/functions/a", None).json().unwrap();
    assert_eq!(
        (v["tier"].as_str(), v["snapshot_tier"].as_str()),
        (Some("tmpfs"), Some("disk"))
    );
    let r = d.invoke("a", &json!(1));
    assert_eq!(r.status, 200);
    assert_eq!(r.header("thaw-start-type"), Some("restore"));
    assert_eq!(r.header("thaw-tier"), Some("disk"));
    assert_eq!(r.header("thaw-predicted-start"), Some("restore"));
    assert_eq!(r.header("thaw-predicted-tier"), Some("disk"));
    // b idle too: over the threshold, the policy demotes a's instance and
    // brings its snapshot up to tmpfs, which pushes b's down
    let r = d.invoke("b", &json!(2));
    assert_eq!(r.header("thaw-tier"), Some("tmpfs"));
    wait_moves(&d, "disk", "tmpfs", 1);
    wait_moves(&d, "tmpfs", "disk", 2);
    let r = d.req("POST", "/v1/functions/a/invoke?force=cold", Some(b"3"));
    assert_eq!(r.status, 200);
    assert_eq!(r.header("thaw-tier"), Some("tmpfs"));
    let r = d.req("POST", "/v1/functions/b/invoke?force=cold", Some(b"4"));
    assert_eq!(r.header("thaw-tier"), Some("disk"));
    // instance memory is measured (cgroup charge or RSS), not the policy's
    // accounting of the declared limits
    let gauge = |t: &str| metric(&d, &format!("thaw_memory_bytes{{tier=\"{t}\"}}"));
    let (measured, budgeted) = (gauge("instances"), gauge("instances_budgeted"));
    assert!(measured > 4 << 20, "{measured} bytes measured");
    assert!(budgeted > 0 && budgeted % (192 << 20) == 0, "{budgeted}");
    assert_ne!(measured, budgeted);
    // after a restart: one copy each, restored from the tier the daemon says
    let d = d.restart(|| {});
    for n in ["a", "b"] {
        let v = d
            .req("GET", &format!("/v1/functions/{n}"), None)
            .json()
            .unwrap();
        let t = v["snapshot_tier"].as_str().unwrap().to_string();
        let t = t.as_str();
        let copies: usize = ["snapshots", "dram/snapshots"]
            .iter()
            .map(|dir| {
                std::fs::read_dir(d.home.join(dir))
                    .unwrap()
                    .flatten()
                    .filter(|e| {
                        e.file_name()
                            .to_string_lossy()
                            .starts_with(&format!("{n}-v"))
                    })
                    .count()
            })
            .sum();
        assert_eq!(copies, 1, "{n}: one copy of its snapshot");
        let r = d.req(
            "POST",
            &format!("/v1/functions/{n}/invoke?force=cold"),
            Some(b"5"),
        );
        assert_eq!((r.status, r.header("thaw-tier")), (200, Some(t)));
    }
    // delete leaves no snapshot on either tier
    for n in ["a", "b"] {
        assert_eq!(
            d.req("DELETE", &format!("/v1/functions/{n}"), None).status,
            204
        );
    }
    for t in ["snapshots", "dram/snapshots"] {
        let left: Vec<_> = std::fs::read_dir(d.home.join(t))
            .map(|rd| rd.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "{t} still holds {left:?}");
    }
}

/// Uses a Debian package the runtime root does not have: python3-dateutil
/// (pure Python; pulls python3-six and tzdata, which the root lacks too).
const DATEUTIL_SRC: &str = "\
import datetime, os
from dateutil.relativedelta import relativedelta
import dateutil

def handler(e):
    d = datetime.date.fromisoformat(e['date']) + relativedelta(months=e['months'])
    try:
        open(dateutil.__file__, 'a').close()
        writable = True
    except OSError:
        writable = False
    return {'date': d.isoformat(), 'from': dateutil.__file__, 'writable': writable}
";

#[test]
fn own_debian_packages_deploy_invoke_restore_and_bad_sets() {
    let d = Daemon::start(test_config("packages"));
    let root = d.running.as_ref().unwrap().app.worker.root.clone();
    for p in ["python3-dateutil", "python3-six", "tzdata"] {
        assert!(
            !root.manifest.packages.iter().any(|(n, _, _)| n == p),
            "the runtime root has {p}: pick another test package"
        );
    }
    // without the package the import fails
    let (s, _, m) = error_of(&d.post_json(
        "/v1/functions",
        &file_deploy("nodeps", "m.handler", DATEUTIL_SRC),
    ));
    assert!(
        s == 400 && m.contains("No module named 'dateutil'"),
        "{s} {m}"
    );

    let mut req = file_deploy("when", "m.handler", DATEUTIL_SRC);
    req["packages"] = json!(["python3-dateutil"]);
    let r = d.post_json("/v1/functions", &req);
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json().unwrap();
    let pk = &v["packages"];
    let resolved: Vec<&str> = pk["resolved"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    for want in ["python3-dateutil=", "python3-six=", "tzdata="] {
        assert!(resolved.iter().any(|p| p.starts_with(want)), "{resolved:?}");
    }
    // the root's own packages (python3 ...) are not fetched again
    for (n, _, _) in &root.manifest.packages {
        assert!(
            !resolved.iter().any(|p| p.split('=').next() == Some(n)),
            "{n} is in the root but was resolved again: {resolved:?}"
        );
    }
    assert_eq!(pk["reused"], json!(false), "{pk}");
    let hash = pk["hash"].as_str().unwrap().to_string();
    assert!(d
        .home
        .join("serve/packages")
        .join(&hash)
        .join("tree/usr/lib/python3/dist-packages/dateutil")
        .is_dir());

    let ev = json!({"date": "2024-01-31", "months": 1});
    let want = json!({
        "date": "2024-02-29",
        "from": "/opt/thaw/packages/usr/lib/python3/dist-packages/dateutil/__init__.py",
        "writable": false,
    });
    let r = d.invoke("when", &ev);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json().unwrap(), want);

    // another function with the same set reuses the tree; one without
    // packages does not see it
    let mut req2 = file_deploy("when2", "m.handler", DATEUTIL_SRC);
    req2["packages"] = json!(["python3-dateutil", "python3-dateutil"]);
    let v2 = deploy(&d, &req2);
    assert_eq!(v2["packages"]["reused"], json!(true), "{v2}");
    assert_eq!(v2["packages"]["hash"], json!(hash));
    deploy(
        &d,
        &file_deploy(
            "plain",
            "m.handler",
            "import os\ndef handler(e):\n    return sorted(os.listdir('/opt/thaw/packages'))\n",
        ),
    );
    let r = d.invoke("plain", &json!(null));
    assert_eq!(r.json().unwrap(), json!(["README.md"]));
    let g = d.req("GET", "/v1/functions/when", None).json().unwrap();
    assert_eq!(g["packages"]["hash"], json!(hash), "{g}");

    // bad package sets: clear 4xx, nothing published, the daemon serves on
    let many: Vec<String> = (0..33).map(|i| format!("python3-p{i}")).collect();
    let bad: Vec<(Value, u16, &str, &str)> = vec![
        (
            json!(["python3-thaw-no-such-package"]),
            422,
            "unknown_package",
            "python3-thaw-no-such-package",
        ),
        // apt would read an unknown name as a regular expression
        (
            json!(["python3-dateutil.+"]),
            422,
            "unknown_package",
            "python3-dateutil.+",
        ),
        (
            json!(["chrony", "ntpsec"]),
            422,
            "unresolvable_packages",
            "Conflicts",
        ),
        (json!(["dpkg"]), 422, "unresolvable_packages", "stub"),
        (
            json!(["Python3-Six"]),
            400,
            "bad_request",
            "not a Debian package name",
        ),
        (
            json!(["python3-six=1.16.0-4"]),
            400,
            "bad_request",
            "not a Debian package name",
        ),
        (
            json!(["python3-six-"]),
            400,
            "bad_request",
            "not a Debian package name",
        ),
        (
            json!(["a b", "--yes"]),
            400,
            "bad_request",
            "not a Debian package name",
        ),
        (json!(many), 400, "bad_request", "at most 32"),
        (json!("python3-six"), 400, "bad_request", "invalid type"),
    ];
    for (pkgs, status, code, needle) in bad {
        let mut r = file_deploy("badpkg", "m.handler", DATEUTIL_SRC);
        r["packages"] = pkgs.clone();
        let (s, e, m) = error_of(&d.post_json("/v1/functions", &r));
        assert_eq!((s, e.as_str()), (status, code), "{pkgs}: {m}");
        assert!(m.contains(needle), "{pkgs}: {m}");
    }
    let mut r = file_deploy("badpkg", "m.handler", DATEUTIL_SRC);
    r["packages"] = json!(["python3-dateutil"]);
    r["env"] = json!({"LD_LIBRARY_PATH": "/tmp"});
    let (s, _, m) = error_of(&d.post_json("/v1/functions", &r));
    assert!(s == 400 && m.contains("LD_LIBRARY_PATH"), "{s} {m}");
    assert_eq!(d.req("GET", "/v1/functions/badpkg", None).status, 404);
    d.healthy();

    // after a restart the snapshot restores with its packages mounted; a
    // tree that went missing meanwhile is built again
    let tree = d.home.join("serve/packages").join(&hash);
    let unused = d.home.join("serve/packages").join("ab".repeat(32));
    let d = d.restart(|| {
        std::fs::remove_dir_all(&tree).unwrap();
        std::fs::create_dir_all(unused.join("tree")).unwrap();
    });
    assert!(!unused.exists(), "a tree no function uses was kept");
    for f in ["when", "when2"] {
        let r = d.invoke(f, &ev);
        assert_eq!(r.status, 200, "{f}: {}", String::from_utf8_lossy(&r.body));
        assert_eq!(r.header("thaw-start-type"), Some("restore"), "{f}");
        assert_eq!(r.json().unwrap(), want, "{f}");
    }
    assert!(tree.join("tree").is_dir());
    // a warm one too, with a computed value
    let r = d.invoke("when", &json!({"date": "2023-12-31", "months": 2}));
    assert_eq!(r.header("thaw-start-type"), Some("warm"));
    assert_eq!(r.json().unwrap()["date"], json!("2024-02-29"));
}

#[test]
fn deploy_time_placement_explains_its_choice_and_honours_the_request() {
    let d = Daemon::start(test_config("placement"));
    let src = "def handler(e):\n    return sum(range(e['n']))\n";
    let ev = json!({"n": 1000});

    // nothing named: thaw measures and chooses
    let mut req = file_deploy("auto", "m.handler", src);
    req["sample_event"] = ev.clone();
    let v = deploy(&d, &req);
    let pl = &v["placement"];
    assert_eq!(pl["chosen_by"], json!("thaw"), "{pl}");
    let (strategy, tier) = (
        pl["strategy"].as_str().unwrap(),
        pl["tier"].as_str().unwrap(),
    );
    assert_eq!(
        (v["strategy"].as_str(), v["tier"].as_str()),
        (Some(strategy), Some(tier))
    );
    assert_eq!(v["snapshot_tier"].as_str(), Some(tier));
    let prof = &pl["profile"];
    assert_eq!(prof["ws_measured"], json!(true), "{prof}");
    let (ws, image) = (
        prof["ws_mib"].as_f64().unwrap(),
        prof["image_mib"].as_f64().unwrap(),
    );
    assert!(ws > 0.0 && ws <= image, "{prof}");
    let reason = pl["reason"].as_array().unwrap();
    assert!(reason[0].as_str().unwrap().contains("measured"), "{pl}");
    assert!(
        reason
            .iter()
            .any(|r| r.as_str().unwrap().starts_with("chosen: ")),
        "{pl}"
    );
    // the choice is the model's rule applied to the recorded estimates
    let est = pl["estimates"].as_array().unwrap();
    assert_eq!(est.len(), 2, "{pl}");
    let ok: Vec<&Value> = est.iter().filter(|e| e["rejected"].is_null()).collect();
    let cold = |e: &Value| e["cold_ms"].as_f64().unwrap();
    let fastest = ok.iter().map(|e| cold(e)).fold(f64::INFINITY, f64::min);
    let best = ok
        .iter()
        .filter(|e| cold(e) <= fastest * prof["max_slowdown"].as_f64().unwrap())
        .min_by(|a, b| {
            (a["cost_per_month"].as_f64().unwrap() * cold(a))
                .total_cmp(&(b["cost_per_month"].as_f64().unwrap() * cold(b)))
        })
        .unwrap();
    assert_eq!(
        (best["tier"].as_str(), best["strategy"].as_str()),
        (Some(tier), Some(strategy))
    );
    let r = d.invoke("auto", &json!({"n": 10}));
    assert_eq!(r.json().unwrap(), json!(45));
    assert_eq!(r.header("thaw-start-type"), Some("restore"));
    assert_eq!(r.header("thaw-strategy"), Some(strategy));
    assert_eq!(r.header("thaw-tier"), Some(tier));
    let g = d.req("GET", "/v1/functions/auto", None).json().unwrap();
    assert_eq!(g["placement"], *pl);

    // without a sample event the whole image counts as the working set
    let v = deploy(&d, &file_deploy("nosample", "m.handler", src));
    let pl = &v["placement"];
    assert_eq!(pl["profile"]["ws_measured"], json!(false), "{pl}");
    assert_eq!(pl["profile"]["ws_mib"], pl["profile"]["image_mib"]);
    assert!(
        pl["reason"][0]
            .as_str()
            .unwrap()
            .contains("no REAP working set"),
        "{pl}"
    );

    // both named: honoured as given
    let mut req = file_deploy("given", "m.handler", src);
    req["strategy"] = json!("eager");
    req["tier"] = json!("disk");
    let v = deploy(&d, &req);
    assert_eq!(v["placement"]["chosen_by"], json!("request"));
    assert_eq!(
        (v["strategy"].as_str(), v["tier"].as_str()),
        (Some("eager"), Some("disk"))
    );
    let r = d.invoke("given", &json!({"n": 4}));
    assert_eq!(r.json().unwrap(), json!(6));
    assert_eq!(r.header("thaw-strategy"), Some("eager"));
    assert_eq!(r.header("thaw-tier"), Some("disk"));

    // one named: kept, the other chosen for it
    let mut req = file_deploy("half", "m.handler", src);
    req["tier"] = json!("tmpfs");
    req["sample_event"] = ev;
    let v = deploy(&d, &req);
    let pl = &v["placement"];
    assert_eq!(
        (pl["chosen_by"].as_str(), v["tier"].as_str()),
        (Some("thaw"), Some("tmpfs"))
    );
    let want = pl["estimates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["tier"] == "tmpfs")
        .unwrap()["strategy"]
        .clone();
    assert_eq!(v["strategy"], want, "{pl}");
    assert!(
        pl["reason"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r == "tier tmpfs named by the request"),
        "{pl}"
    );
}

/// A function given egress: HTTP, raw connects, DNS, its own address.
const NET_FN: &str = r#"
import socket, struct, time, urllib.request
HELD = []
def handler(event):
    op = event["op"]
    if op == "http":
        with urllib.request.urlopen(event["url"], timeout=10) as r:
            return {"body": r.read().decode()}
    if op == "connect":
        t = time.monotonic()
        try:
            socket.create_connection((event["host"], event["port"]), timeout=3).close()
            res = "connected"
        except OSError as e:
            res = type(e).__name__ + ": " + str(e)
        return {"result": res, "elapsed": time.monotonic() - t}
    if op == "connections":
        held, res = [], "all connected"
        for i in range(event["n"]):
            try:
                held.append(socket.create_connection((event["host"], event["port"]), timeout=3))
            except OSError as e:
                res = "refused at %d: %s" % (i, e)
                break
        if event.get("keep"):
            HELD.extend(held)
        else:
            for s in held:
                s.close()
        return {"result": res}
    if op == "resolve":
        try:
            return {"result": socket.gethostbyname(event["name"])}
        except OSError as e:
            return {"result": type(e).__name__ + ": " + str(e)}
    if op == "resolve6":
        try:
            return {"result": socket.getaddrinfo(event["name"], None, socket.AF_INET6)[0][4][0]}
        except OSError as e:
            return {"result": type(e).__name__ + ": " + str(e)}
    if op == "dns_direct":
        # one A query for the name straight to another server's port 53
        q = struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0)
        q += b"".join(bytes([len(p)]) + p.encode() for p in event["name"].split(".")) + b"\0"
        q += struct.pack(">HH", 1, 1)
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(1)
        try:
            s.sendto(q, (event["server"], 53))
            s.recv(512)
            return {"result": "answered"}
        except OSError as e:
            return {"result": type(e).__name__}
    if op == "addr":
        s = socket.socket(socket.AF_INET6 if ":" in event["host"] else socket.AF_INET, socket.SOCK_DGRAM)
        try:
            s.connect((event["host"], 9))
            return {"result": s.getsockname()[0]}
        except OSError as e:
            return {"result": type(e).__name__ + ": " + str(e)}
"#;

const NO_NET_FN: &str = r#"
import socket
def handler(event):
    try:
        socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        return "created"
    except OSError as e:
        return e.errno
"#;

fn egress_deploy(name: &str, net: Value) -> Value {
    let mut req = file_deploy(name, "netfn.handler", NET_FN);
    req["network"] = net;
    req
}

fn call(d: &Daemon, name: &str, ev: Value) -> Value {
    let r = d.invoke(name, &ev);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    r.json().unwrap()
}

fn call_cold(d: &Daemon, name: &str, ev: Value) -> (Value, String) {
    let r = d.post_json(&format!("/v1/functions/{name}/invoke?force=cold"), &ev);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let start = r.header("thaw-start-type").unwrap_or("").to_string();
    (r.json().unwrap(), start)
}

/// A daemon for the egress tests: also on TCP at `listen` (with a token), so
/// its API port is there to be refused; a pool of one sandbox. Returns it,
/// its port and the token file.
fn egress_daemon(name: &str, listen: &str) -> (Daemon, u16, PathBuf) {
    let mut cfg = test_config(name);
    cfg.listen = Some(listen.into());
    let token_file = cfg.home.with_extension("token");
    std::fs::write(&token_file, "0123456789abcdef0123456789abcdef\n").unwrap();
    cfg.token_file = Some(token_file.clone());
    cfg.limits.sandbox_pool = 1;
    let d = Daemon::start(cfg);
    let api_port = d
        .running
        .as_ref()
        .unwrap()
        .tcp
        .expect("tcp listener")
        .port();
    (d, api_port, token_file)
}

/// Deploys the network function as `PREFIX-STRATEGY` with `net` for every
/// strategy; each answers two cold calls fetching `url` (fresh for boot,
/// restored for the others) with the test host's page.
fn http_with_every_strategy(d: &Daemon, prefix: &str, net: &Value, url: &str) {
    let hello = json!({"body": "hello from the test host"});
    for strategy in ["boot", "mmap", "eager", "uffd", "reap"] {
        let name = format!("{prefix}-{strategy}");
        let mut req = egress_deploy(&name, net.clone());
        req["strategy"] = json!(strategy);
        req["tier"] = json!("tmpfs");
        deploy(d, &req);
        for _ in 0..2 {
            let (out, start) = call_cold(d, &name, json!({"op": "http", "url": url}));
            assert_eq!(out, hello, "{strategy} ({start} start)");
            let want = if strategy == "boot" {
                "boot"
            } else {
                "restore"
            };
            assert_eq!(start, want, "{strategy}");
        }
    }
}

/// Function `f` (capped at 4 connections) opens connections to the echo
/// server on `host`:7007: the fifth is refused.
fn assert_cap_of_4(d: &Daemon, f: &str, host: &str) {
    let out = call(
        d,
        f,
        json!({"op": "connections", "host": host, "port": 7007, "n": 6}),
    );
    assert!(
        out["result"].as_str().unwrap().starts_with("refused at 4"),
        "{out}"
    );
}

/// Egress: the listed destinations answer (fresh and after restores with
/// every strategy, pooled or not), everything else is refused fast and
/// counted, DNS goes only to the named resolver, and a function without
/// `network` still has no IP sockets.
#[test]
fn egress_reaches_what_is_listed_and_nothing_else() {
    let mut host = thaw_egress::nethost::NetHost::create().expect("a test host namespace");
    host.http_server(0, 8080).unwrap();
    host.echo_server(0, 7007).unwrap();
    host.dns_server(0, "svc.thaw-test", &[host.addr(0).into()])
        .unwrap();
    host.dns_server(1, "svc.thaw-test", &[host.addr(1).into()])
        .unwrap();
    let (allowed, other_resolver, unlisted) = (host.addr(0), host.addr(1), host.addr(2));
    host.echo_server(2, 7007).unwrap();

    let (d, api_port, token_file) = egress_daemon("egress", "0.0.0.0:0");
    let net = json!({
        "egress": [format!("{allowed}/32"), format!("{other_resolver}/32")],
        "dns": allowed.to_string(),
        "max_connections": 4,
    });
    http_with_every_strategy(&d, "net", &net, &format!("http://{allowed}:8080/"));
    let f = "net-mmap";
    // the test zone resolves through the named resolver
    let out = call(&d, f, json!({"op": "resolve", "name": "svc.thaw-test"}));
    assert_eq!(out["result"], json!(allowed.to_string()), "{out}");
    // a listed address that also answers DNS cannot be used as a resolver
    let out = call(
        &d,
        f,
        json!({"op": "dns_direct", "server": other_resolver.to_string(), "name": "svc.thaw-test"}),
    );
    assert_ne!(out["result"], "answered", "{out}");
    // the connection cap
    assert_cap_of_4(&d, f, &allowed.to_string());
    // the cap counts the function's connections, over all its instances:
    // one instance keeps 3 open, a second one gets the fourth only
    let mut req = egress_deploy("net-cap", net.clone());
    req["strategy"] = json!("mmap");
    req["max_instances"] = json!(2);
    deploy(&d, &req);
    let hold = |n: u32| json!({"op": "connections", "host": allowed.to_string(), "port": 7007, "n": n, "keep": true});
    assert_eq!(call(&d, "net-cap", hold(3))["result"], "all connected");
    let (out, start) = call_cold(&d, "net-cap", hold(3));
    assert_eq!(start, "restore");
    assert!(
        out["result"].as_str().unwrap().starts_with("refused at 1"),
        "{out}"
    );

    // refused: not listed, this machine (its address on the test link, the
    // bridge's, the daemon's port), another sandbox, link-local
    let me = call(&d, f, json!({"op": "addr", "host": allowed.to_string()}))["result"]
        .as_str()
        .unwrap()
        .parse::<std::net::Ipv4Addr>()
        .unwrap();
    let other = call(
        &d,
        "net-eager",
        json!({"op": "addr", "host": allowed.to_string()}),
    )["result"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(me.to_string(), other);
    let gateway = std::net::Ipv4Addr::from((u32::from(me) & 0xffff_f000) + 1);
    let refused = [
        (unlisted.to_string(), 7007),
        (host.host_addr().to_string(), 7007),
        (gateway.to_string(), api_port),
        (other, 7007),
        ("169.254.169.254".to_string(), 80),
    ];
    let m = String::from_utf8(d.req("GET", "/metrics", None).body).unwrap();
    let counted = |m: &str| -> u64 {
        m.lines()
            .find(|l| l.starts_with("thaw_egress_refused_packets_total{function=\"net-mmap\"}"))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0)
    };
    let before = counted(&m);
    for (h, port) in &refused {
        let out = call(&d, f, json!({"op": "connect", "host": h, "port": port}));
        assert_ne!(out["result"], "connected", "{h}:{port}: {out}");
        assert!(out["elapsed"].as_f64().unwrap() < 1.0, "{h}:{port}: {out}");
    }
    let m = String::from_utf8(d.req("GET", "/metrics", None).body).unwrap();
    assert!(
        counted(&m) >= before + refused.len() as u64,
        "refusals not counted: {before} -> {}\n{m}",
        counted(&m)
    );
    assert!(
        m.contains("thaw_egress_bytes_total{function=\"net-mmap\",direction=\"in\"}"),
        "{m}"
    );
    // bytes per invocation in the function's log
    let logs = d.req("GET", "/v1/functions/net-mmap/logs?tail=50", None);
    let logs = logs.json().unwrap();
    assert!(
        logs["entries"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["net_in_bytes"].as_u64().unwrap_or(0) > 0),
        "{logs}"
    );

    // without network: no IP socket at all
    deploy(&d, &file_deploy("nonet", "nonet.handler", NO_NET_FN));
    assert_eq!(call(&d, "nonet", json!(null)), json!(97));

    // a stopped daemon leaves no bridge, veth or rule table behind
    let index = (u32::from(gateway) - u32::from(std::net::Ipv4Addr::new(10, 208, 0, 0))) >> 12;
    let bridge = format!("/sys/class/net/thaw-br{index}");
    assert!(Path::new(&bridge).exists());
    drop(d);
    assert!(!Path::new(&bridge).exists(), "{bridge} left behind");
    let links = std::process::Command::new("ip")
        .args(["-o", "link"])
        .output()
        .unwrap();
    let links = String::from_utf8_lossy(&links.stdout);
    assert!(!links.contains(&format!(" thaw{index}v")), "{links}");
    let tables = std::process::Command::new("nft")
        .args(["list", "tables"])
        .output()
        .unwrap();
    let tables = String::from_utf8_lossy(&tables.stdout);
    assert!(
        !tables.contains(&format!("thaw_egress_{index}\n")),
        "{tables}"
    );
    let _ = std::fs::remove_file(token_file);
}

/// Keep-alive connections opened at init are closed at the snapshot: a
/// restored instance's http.client connection and urllib3 pool see a dropped
/// connection and reconnect; a listening socket on the sandbox's loopback
/// keeps accepting.
const KEEPALIVE_FN: &str = r#"
import http.client, socket, urllib3
S = {}
def init():
    c = http.client.HTTPConnection(HOST, 8080, timeout=5)
    c.request("GET", "/")
    c.getresponse().read()
    S["conn"] = c
    S["pool"] = urllib3.HTTPConnectionPool(HOST, 8080, maxsize=1, retries=False)
    S["pool"].request("GET", "/").data
    l = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind(("127.0.0.1", 9000))
    l.listen(8)
    S["listen"] = l
def handler(event):
    out = {}
    c = S["conn"]
    try:
        c.request("GET", "/")
        out["http_client"] = c.getresponse().read().decode()
        out["dropped"] = None
    except (OSError, http.client.HTTPException) as e:
        out["dropped"] = type(e).__name__
        c.close()
        c.request("GET", "/")
        out["http_client"] = c.getresponse().read().decode()
    out["urllib3"] = S["pool"].request("GET", "/").data.decode()
    out["pool_connections"] = S["pool"].num_connections
    cl = socket.create_connection(("127.0.0.1", 9000), timeout=3)
    conn, _ = S["listen"].accept()
    cl.sendall(b"hi")
    out["listen"] = conn.recv(10).decode()
    conn.close()
    cl.close()
    return out
"#;

#[test]
fn keep_alive_connections_drop_at_the_snapshot_and_reconnect_after_restore() {
    let mut host = thaw_egress::nethost::NetHost::create().expect("a test host namespace");
    host.http_server(0, 8080).unwrap();
    let addr = host.addr(0);
    let d = Daemon::start(test_config("keepalive"));
    let src = format!("HOST = '{addr}'\n{KEEPALIVE_FN}");
    let hello = "hello from the test host";
    for strategy in ["mmap", "reap"] {
        let name = format!("keepalive-{strategy}");
        let mut req = file_deploy(&name, "m.handler", &src);
        req["init"] = json!("m.init");
        req["network"] = json!({"egress": [format!("{addr}/32")]});
        req["packages"] = json!(["python3-urllib3"]);
        req["snapshot"] = json!("required");
        req["strategy"] = json!(strategy);
        let v = deploy(&d, &req);
        assert_eq!(v["start_type"], "restore", "{v}");
        for _ in 0..2 {
            let (out, start) = call_cold(&d, &name, json!({}));
            assert_eq!(start, "restore");
            // the connection of init is gone: sending on it fails; the pool
            // (no retries) notices before use and reconnects, or it would fail
            assert_eq!(out["dropped"], "BrokenPipeError", "{strategy}: {out}");
            assert_eq!(out["http_client"], hello, "{out}");
            assert_eq!(out["urllib3"], hello, "{out}");
            assert_eq!(out["listen"], "hi", "{out}");
        }
        // warm: the new connections are kept alive
        let out = call(&d, &name, json!({}));
        assert_eq!(out["dropped"], Value::Null, "{out}");
        assert_eq!(out["pool_connections"], 1, "{out}");
    }
}

/// IPv6 egress: a listed IPv6 destination answers (fresh and after restores
/// with every strategy), by its address and by a name the named resolver
/// answers with AAAA; everything else is refused fast and counted (not
/// listed, a listed address on another port, this machine's addresses, the
/// daemon's port, another sandbox, link-local); the connection cap counts
/// IPv6 connections; a function listing only IPv4 has no IPv6 at all.
#[test]
fn ipv6_egress_reaches_what_is_listed_and_nothing_else() {
    if let Some(why) = thaw_egress::ipv6_unavailable() {
        panic!("IPv6 egress cannot be tested here: {why}");
    }
    let mut host = thaw_egress::nethost::NetHost::create().expect("a test host namespace");
    host.http_server6(0, 8080).unwrap();
    host.echo_server6(0, 7007).unwrap();
    host.echo_server6(2, 7007).unwrap();
    host.echo_server(0, 7007).unwrap();
    let (allowed, unlisted) = (host.addr6(0), host.addr6(2));
    // a resolver on IPv4 answering AAAA
    host.dns_server(0, "svc6.thaw-test", &[allowed.into()])
        .unwrap();

    let (d, api_port, token_file) = egress_daemon("egress6", "[::]:0");
    let net = json!({
        "egress": [format!("{allowed}/128:8080"), format!("[{allowed}]:7007")],
        "dns": host.addr(0).to_string(),
        "max_connections": 4,
    });
    http_with_every_strategy(&d, "net6", &net, &format!("http://[{allowed}]:8080/"));
    let hello = json!({"body": "hello from the test host"});
    let f = "net6-mmap";
    // AAAA through the named resolver, and a call by that name
    let out = call(&d, f, json!({"op": "resolve6", "name": "svc6.thaw-test"}));
    assert_eq!(out["result"], json!(allowed.to_string()), "{out}");
    let out = call(
        &d,
        f,
        json!({"op": "http", "url": "http://svc6.thaw-test:8080/"}),
    );
    assert_eq!(out, hello);
    let addr6 = |f: &str| -> std::net::Ipv6Addr {
        let out = call(&d, f, json!({"op": "addr", "host": allowed.to_string()}));
        out["result"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap_or_else(|_| panic!("{f} has no IPv6 address: {out}"))
    };
    let me = addr6(f);
    let other = addr6("net6-eager");
    assert_ne!(me, other);
    // the connection cap counts IPv6 connections (once the server has
    // closed the calls' connections: a closing one still counts)
    quiet_connections_from(me, 64);
    assert_cap_of_4(&d, f, &allowed.to_string());

    let gateway = std::net::Ipv6Addr::from((u128::from(me) & !((1u128 << 72) - 1)) | 1);
    let refused = [
        (unlisted.to_string(), 7007),
        (allowed.to_string(), 7008),
        (host.host_addr6().to_string(), 7007),
        (gateway.to_string(), api_port),
        (other.to_string(), 7007),
        ("fe80::1%eth0".to_string(), 80),
    ];
    let counted = || -> u64 {
        let m = String::from_utf8(d.req("GET", "/metrics", None).body).unwrap();
        m.lines()
            .find(|l| l.starts_with("thaw_egress_refused_packets_total{function=\"net6-mmap\"}"))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0)
    };
    let before = counted();
    for (h, port) in &refused {
        let out = call(&d, f, json!({"op": "connect", "host": h, "port": port}));
        assert_ne!(out["result"], "connected", "{h}:{port}: {out}");
        assert!(out["elapsed"].as_f64().unwrap() < 1.0, "{h}:{port}: {out}");
    }
    let after = counted();
    assert!(
        after >= before + refused.len() as u64,
        "refusals not counted: {before} -> {after}"
    );
    // its own loopback only
    let out = call(&d, f, json!({"op": "connect", "host": "::1", "port": 7007}));
    assert_ne!(out["result"], "connected", "{out}");

    // a function listing only IPv4 has no IPv6 address
    deploy(
        &d,
        &egress_deploy(
            "net4only",
            json!({"egress": [format!("{}/32:7007", host.addr(0))]}),
        ),
    );
    let out = call(
        &d,
        "net4only",
        json!({"op": "addr", "host": allowed.to_string()}),
    );
    assert!(
        out["result"].as_str().unwrap().starts_with("OSError"),
        "{out}"
    );
    let out = call(
        &d,
        "net4only",
        json!({"op": "connect", "host": host.addr(0).to_string(), "port": 7007}),
    );
    assert_eq!(out["result"], "connected", "{out}");

    // a stopped daemon leaves no IPv6 route of its subnet behind
    let subnet = format!(
        "{}/56",
        std::net::Ipv6Addr::from(u128::from(gateway) & !((1u128 << 72) - 1))
    );
    let routes = |net: &str| {
        let out = std::process::Command::new("ip")
            .args(["-6", "route", "show", net])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(
        routes(&subnet).contains("thaw-br"),
        "{subnet}: {}",
        routes(&subnet)
    );
    drop(d);
    assert_eq!(routes(&subnet), "", "{subnet} left behind");
    let _ = std::fs::remove_file(token_file);
}

/// Waits (10 s at most) until this machine's connection tracking holds no
/// TCP connection from `net/prefix` that is not closed yet.
fn quiet_connections_from(net: std::net::Ipv6Addr, prefix: u32) {
    // conntrack prints each group of four hex digits in full
    let groups = net.segments()[..(prefix / 16) as usize]
        .iter()
        .map(|g| format!("{g:04x}"))
        .collect::<Vec<_>>()
        .join(":");
    let tag = format!(" src={groups}:");
    let t = Instant::now();
    loop {
        let table = std::fs::read_to_string("/proc/net/nf_conntrack").unwrap_or_default();
        let open: Vec<&str> = table
            .lines()
            .filter(|l| l.contains(" tcp ") && l.contains(&tag))
            .filter(|l| !l.contains(" TIME_WAIT ") && !l.contains(" CLOSE "))
            .collect();
        if open.is_empty() {
            return;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "connections still open: {open:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A function that opens a PostgreSQL connection at init (psycopg2, from
/// Debian's `python3-psycopg2`) and, like a pool, reconnects when it finds
/// the connection broken (`OperationalError`: libpq saw the server close it).
const PG_FN: &str = r#"
import psycopg2
S = {}
def connect():
    c = psycopg2.connect(host=HOST, port=PORT, user="thaw", dbname="thawtest",
                         sslmode="disable", connect_timeout=5)
    c.autocommit = True
    return c
def query(c):
    with c.cursor() as cur:
        cur.execute("select count(*), sum(n), string_agg(name, ',' order by n), pg_backend_pid() from items")
        count, total, names, pid = cur.fetchone()
    return {"count": count, "sum": int(total), "names": names}, pid
def init():
    S["conn"] = connect()
    S["at_init"], S["init_backend"] = query(S["conn"])
def handler(event):
    dropped, closed = None, None
    try:
        now, pid = query(S["conn"])
    except (psycopg2.OperationalError, psycopg2.InterfaceError) as e:
        closed = S["conn"].closed
        dropped = type(e).__name__ + ": " + str(e).strip()
        S["conn"].close()
        S["conn"] = connect()
        now, pid = query(S["conn"])
    return {"at_init": S["at_init"], "now": now, "dropped": dropped, "closed": closed,
            "backend": pid, "init_backend": S["init_backend"]}
"#;

/// A PostgreSQL connection opened at init: a fresh instance queries through
/// it; a restored one (every strategy) finds it closed at the snapshot,
/// reconnects, and answers as the fresh one did. The server's own log shows
/// exactly one new connection per restored call, the handler's, and
/// `pg_stat_activity` has it open from this machine's address.
#[test]
fn a_database_connection_opened_at_init_reconnects_after_every_restore() {
    let mut host = thaw_egress::nethost::NetHost::create().expect("a test host namespace");
    let pg = host
        .postgres_server(0, 5432)
        .expect("PostgreSQL in the test host");
    pg.psql("postgres", "create role thaw login").unwrap();
    pg.psql("postgres", "create database thawtest owner thaw")
        .unwrap();
    pg.psql(
        "thawtest",
        "create table items (n int, name text); \
         insert into items values (1, 'one'), (2, 'two'), (3, 'three'); \
         grant select on items to thaw",
    )
    .unwrap();
    let addr = host.addr(0);
    let d = Daemon::start(test_config("postgres"));
    let src = format!("HOST = '{addr}'\nPORT = 5432\n{PG_FN}");
    let rows = json!({"count": 3, "sum": 6, "names": "one,two,three"});
    let mut fresh: Option<Value> = None;
    for strategy in ["boot", "mmap", "eager", "uffd", "reap"] {
        let name = format!("pg-{strategy}");
        let mut req = file_deploy(&name, "m.handler", &src);
        req["init"] = json!("m.init");
        req["network"] = json!({"egress": [format!("{addr}/32:5432")]});
        req["packages"] = json!(["python3-psycopg2"]);
        req["strategy"] = json!(strategy);
        if strategy != "boot" {
            req["snapshot"] = json!("required");
        }
        deploy(&d, &req);
        for _ in 0..2 {
            let before = pg.connections_of("thaw").unwrap().len();
            let (out, start) = call_cold(&d, &name, json!({}));
            let new = pg.connections_of("thaw").unwrap()[before..].to_vec();
            let backend = out["backend"].as_u64().expect("a backend pid") as u32;
            // the answer a fresh instance gives
            let answer = json!({"at_init": out["at_init"], "now": out["now"]});
            assert_eq!(out["now"], rows, "{strategy}: {out}");
            let fresh = fresh.get_or_insert_with(|| answer.clone());
            assert_eq!(&answer, fresh, "{strategy}");
            if strategy == "boot" {
                assert_eq!(start, "boot");
                // init connected; the handler used that connection
                assert_eq!(out["dropped"], Value::Null, "{out}");
                assert_eq!(out["backend"], out["init_backend"], "{out}");
            } else {
                assert_eq!(start, "restore", "{strategy}");
                // the snapshot's connection is gone: the query on it finds
                // it closed (as the deploying instance would), psycopg2
                // marks it broken (2), the function connects again
                assert_eq!(out["closed"], 2, "{strategy}: {out}");
                assert!(
                    out["dropped"].as_str().is_some_and(|e| e.starts_with(
                        "OperationalError: server closed the connection unexpectedly"
                    )),
                    "{strategy}: {out}"
                );
                assert_ne!(out["backend"], out["init_backend"], "{strategy}: {out}");
            }
            // the server saw one new connection, the one that answered
            assert_eq!(new, vec![backend], "{strategy}: {out}");
            let seen = pg
                .psql(
                    "postgres",
                    &format!("select client_addr from pg_stat_activity where pid = {backend}"),
                )
                .unwrap();
            assert_eq!(seen, host.host_addr().to_string(), "{strategy}");
        }
        // warm: an open connection is used as it is
        let before = pg.connections_of("thaw").unwrap().len();
        let out = call(&d, &name, json!({}));
        let new = pg.connections_of("thaw").unwrap().len() - before;
        assert_eq!(out["now"], rows, "{strategy}: {out}");
        assert_eq!(
            new,
            usize::from(!out["dropped"].is_null()),
            "{strategy}: {out}"
        );
    }
}

/// Malformed network requests: 400 with the reason, nothing deployed.
#[test]
fn bad_network_requests_get_400_with_the_reason() {
    let d = Daemon::start(test_config("egress-bad"));
    let many: Vec<String> = (0..65).map(|i| format!("10.1.{i}.0/24")).collect();
    for (net, why) in [
        (json!({"egress": ["10.0.0.0/33"]}), "prefix length"),
        (json!({"egress": ["10.0.0.1/8"]}), "host bits"),
        (json!({"egress": ["10.0.0.0/8:70000"]}), "not in 1..=65535"),
        (json!({"egress": ["10.0.0.0/8:0"]}), "not in 1..=65535"),
        (json!({"egress": ["10.0.0.0/8:90-80"]}), "empty"),
        (json!({"egress": ["not-a-cidr"]}), "not an IPv4 address"),
        (json!({"egress": ["fd00::/129"]}), "not in 0..=128"),
        (json!({"egress": ["fd00::1/64"]}), "host bits"),
        (json!({"egress": ["fd00:::1"]}), "not an IPv6 address"),
        (json!({"egress": ["[fd00::1]:70000"]}), "not in 1..=65535"),
        (json!({"egress": ["[fd00::1"]}), "bracket"),
        (json!({"egress": [], "dns": "fe80::1"}), "never reach"),
        (json!({"egress": many}), "at most 64"),
        (json!({"egress": [], "dns": "resolver.example"}), "dns"),
        (
            json!({"egress": ["10.0.0.0/8"], "max_connections": 0}),
            "max_connections",
        ),
        (
            json!({"egress": ["10.0.0.0/8"], "proxy": "x"}),
            "unknown field",
        ),
    ] {
        let r = d.post_json("/v1/functions", &egress_deploy("badnet", net.clone()));
        let (status, _, msg) = error_of(&r);
        assert_eq!(status, 400, "{net}: {msg}");
        assert!(msg.contains(why), "{net}: {msg}");
    }
    assert_eq!(d.req("GET", "/v1/functions/badnet", None).status, 404);
}

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

/// A root filesystem to import: thaw's runtime root linked file by file
/// (`cp -al`: nothing of the runtime root is written; the test only adds
/// and unlinks names) with `extra` written in.
fn linked_root(at: &Path, extra: &[(&str, &str)]) {
    let root = thaw_runtime::ensure_root(&thaw_runtime::default_home(), &mut |_| {}).unwrap();
    let st = std::process::Command::new("cp")
        .arg("-al")
        .arg(&root.path)
        .arg(at)
        .status()
        .unwrap();
    assert!(st.success(), "cp -al of the runtime root");
    for (path, content) in extra {
        let p = at.join(path);
        let _ = std::fs::remove_file(&p);
        std::fs::write(p, content).unwrap();
    }
}

/// The names in `dir`, sorted (none if it does not exist).
fn names_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|r| {
            r.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn import_root(d: &Daemon, path: &Path, key: Option<&str>) -> Response {
    d.post_json("/v1/roots", &json!({"path": path, "key": key}))
}

#[test]
fn image_roots_import_once_refuse_what_they_must_and_functions_run_and_restore_on_them() {
    let from = PathBuf::from(format!("/tmp/thaw-roots-from-{}", std::process::id()));
    let outside = from.with_extension("outside");
    let _ = std::fs::remove_dir_all(&from);
    let _ = std::fs::remove_dir_all(&outside);
    std::fs::create_dir_all(&from).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    let mut cfg = test_config("roots");
    cfg.image_roots_from = vec![from.clone()];
    let d = Daemon::start(cfg);
    let roots = d.home.join("serve/roots");
    let listing = || names_in(&roots);

    // an image's root: thaw's runtime root with a file of its own, and
    // hostile links where the sandbox mounts and elsewhere
    let rootfs = from.join("c1/rootfs");
    std::fs::create_dir_all(rootfs.parent().unwrap()).unwrap();
    linked_root(&rootfs, &[("etc/image-marker", "mine")]);
    std::fs::remove_file(rootfs.join("etc/resolv.conf")).ok();
    std::os::unix::fs::symlink(outside.join("resolv.conf"), rootfs.join("etc/resolv.conf"))
        .unwrap();
    std::os::unix::fs::symlink(&outside, rootfs.join("tmp/escape")).unwrap();
    std::fs::remove_dir_all(rootfs.join("proc")).unwrap();
    std::os::unix::fs::symlink(&outside, rootfs.join("proc")).unwrap();
    let key = "ab".repeat(32);
    let r = import_root(&d, &rootfs, Some(&key));
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let info = r.json().unwrap();
    assert_eq!(info["key"], json!(key), "{info}");
    assert!(
        info["runtimes"]
            .as_array()
            .unwrap()
            .contains(&json!("python")),
        "{info}"
    );
    let copy = roots.join(&key).join("root");
    // links are copied as links, mount points are real directories, and
    // nothing was written through a link
    assert_eq!(
        std::fs::read_link(copy.join("tmp/escape")).unwrap(),
        outside
    );
    for dir in ["proc", "opt/thaw/user", "opt/thaw/packages", "dev", "tmp"] {
        let m = std::fs::symlink_metadata(copy.join(dir)).unwrap();
        assert!(m.is_dir(), "{dir} is a real directory in the copy");
    }
    assert!(std::fs::symlink_metadata(copy.join("etc/resolv.conf"))
        .unwrap()
        .is_file());
    assert_eq!(
        std::fs::read_dir(&outside).unwrap().count(),
        0,
        "written outside"
    );
    // the same key again: nothing copied
    let r = import_root(&d, &rootfs, Some(&key));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(listing(), vec![key.clone()]);

    // refused: paths outside what may be imported, bad keys, a root with
    // no runtime program; nothing is kept of any
    std::os::unix::fs::symlink("/etc", from.join("etc-link")).unwrap();
    for (path, key, want) in [
        (PathBuf::from("/etc"), None, "not below"),
        (from.join("etc-link"), None, "not below"),
        (from.join("c1/rootfs/../../../"), None, "not below"),
        (from.clone(), None, "not below"),
        (PathBuf::from("c1/rootfs"), None, "not absolute"),
        (from.join("missing"), None, "No such file"),
        (rootfs.clone(), Some("../../etc"), "not 64 hex digits"),
    ] {
        let r = import_root(&d, &path, key);
        let (status, code, msg) = error_of(&r);
        assert_eq!(
            (status, code.as_str()),
            (400, "bad_request"),
            "{path:?}: {msg}"
        );
        assert!(msg.contains(want), "{path:?}: {msg}");
    }
    let bare = from.join("c2/rootfs");
    std::fs::create_dir_all(bare.join("etc")).unwrap();
    std::fs::write(bare.join("etc/os-release"), "ID=bare\n").unwrap();
    std::os::unix::fs::symlink("/usr/bin/python3", bare.join("python3")).unwrap();
    let (status, code, msg) = error_of(&import_root(&d, &bare, None));
    assert_eq!((status, code.as_str()), (422, "unusable_root"), "{msg}");
    assert!(msg.contains("/usr/bin/python3"), "{msg}");
    assert_eq!(
        listing(),
        vec![key.clone()],
        "nothing kept of refused roots"
    );

    // a function on it reads the image's file; its snapshot restores
    // there, also after a restart
    let src = "import os\ndef handler(e):\n    return [open('/etc/image-marker').read(), os.path.exists('/opt/thaw/agent.py')]\n";
    let mut req = file_deploy("rooted", "m.handler", src);
    req["root"] = json!(key);
    let v = deploy(&d, &req);
    assert!(v["snapshot"]["id"].is_string(), "{v}");
    assert_eq!(v["root"], json!(key), "{v}");
    let manifest: Value = serde_json::from_slice(
        &std::fs::read(PathBuf::from(v["snapshot"]["dir"].as_str().unwrap()).join("manifest.json"))
            .unwrap(),
    )
    .unwrap();
    let runtime_root = thaw_runtime::ensure_root(&thaw_runtime::default_home(), &mut |_| {})
        .unwrap()
        .hash;
    assert_ne!(
        manifest["runtime_root"],
        json!(runtime_root),
        "taken over the image's root"
    );
    let r = d.invoke("rooted", &json!(null));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json().unwrap(), json!(["mine", true]));
    // a deploy on a root never imported, or without its runtime
    req["root"] = json!("cd".repeat(32));
    let (status, _, msg) = error_of(&d.post_json("/v1/functions", &req));
    assert_eq!(status, 400, "{msg}");
    assert!(msg.contains("no root filesystem imported"), "{msg}");
    std::fs::remove_dir_all(&from).unwrap();
    let d = d.restart(|| {});
    let r = d.invoke("rooted", &json!(null));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.header("thaw-start-type"), Some("restore"));
    assert_eq!(r.json().unwrap(), json!(["mine", true]));
    drop(d);
    std::fs::remove_dir_all(&outside).unwrap();
}

/// `method path` on its own thread: the answer, or a failure naming the
/// request if none came within `secs` (a hung daemon fails the test).
fn answered_within(
    d: &Daemon,
    secs: u64,
    method: &str,
    path: &str,
    body: Option<Vec<u8>>,
) -> Response {
    let (tx, rx) = std::sync::mpsc::channel();
    let mut client = d.client();
    let (m, p) = (method.to_string(), path.to_string());
    std::thread::spawn(move || {
        let _ = tx.send(client.request(&m, &p, body.as_deref()).expect("request"));
    });
    rx.recv_timeout(Duration::from_secs(secs))
        .unwrap_or_else(|_| panic!("{method} {path}: no answer within {secs} s"))
}

/// A daemon of `cfg` with function `name` (source `src`) deployed with
/// mmap on tmpfs: the daemon, the deploy request, the daemon's state and
/// the deployed version.
fn deployed_on_tmpfs(
    cfg: Config,
    name: &str,
    src: &str,
) -> (
    Daemon,
    Value,
    std::sync::Arc<thaw_server::App>,
    std::sync::Arc<thaw_server::pool::FnVersion>,
) {
    let d = Daemon::start(cfg);
    let mut req = file_deploy(name, "m.handler", src);
    req["tier"] = json!("tmpfs");
    req["strategy"] = json!("mmap");
    deploy(&d, &req);
    let app = d.running.as_ref().unwrap().app.clone();
    let v = app.function(name).expect("deployed");
    (d, req, app, v)
}

#[test]
fn a_snapshot_move_waiting_for_a_restore_holds_up_no_request() {
    let mut cfg = test_config("switch");
    cfg.limits.lock_wait_ms = 1500;
    let (d, req, app, v) = deployed_on_tmpfs(cfg, "s", "def handler(e):\n    return e\n");
    // a restore opening the snapshot holds the version's snapshot so (a
    // slot wait, a stream from the remote tier: up to a minute)
    let restoring = v.placed.read().unwrap();
    // the mover, as it moves the snapshot: the copy, then the switch
    // (under the function's lock), which waits for that restore
    let (app2, v2) = (app.clone(), v.clone());
    let mover = std::thread::spawn(move || {
        thaw_server::tiering::move_to(&app2, &v2, "disk").map_err(|e| e.to_string())
    });
    // the copy is on disk: the switch is waiting for the restore
    let t = Instant::now();
    while thaw_server::tiering::snapshots_on(&app, "disk", &|_| true)
        .unwrap()
        .is_empty()
    {
        assert!(t.elapsed() < Duration::from_secs(30), "no copy on disk");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    // lookups, the shim's and the front's calls, and restores answer
    for _ in 0..5 {
        let r = answered_within(&d, 10, "GET", "/v1/functions/s", None);
        assert_eq!(r.status, 200);
        assert_eq!(r.json().unwrap()["snapshot_tier"], "tmpfs");
        std::thread::sleep(Duration::from_millis(100));
    }
    let r = answered_within(&d, 10, "GET", "/v1/functions", None);
    assert_eq!(r.status, 200);
    let r = answered_within(
        &d,
        30,
        "PUT",
        "/v1/functions/s/prewarm",
        Some(b"{\"count\": 1}".to_vec()),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json().unwrap()["started"], 1);
    let r = answered_within(
        &d,
        30,
        "POST",
        "/v1/functions/s/invoke?force=cold",
        Some(b"7".to_vec()),
    );
    assert_eq!((r.status, r.body.as_slice()), (200, &b"7"[..]));
    assert_eq!(r.header("thaw-tier"), Some("tmpfs"));
    // a redeploy or delete waits for the move a bounded time, then says why
    let body = serde_json::to_vec(&req).unwrap();
    for (m, p, b) in [
        ("POST", "/v1/functions", Some(body)),
        ("DELETE", "/v1/functions/s", None),
    ] {
        let t = Instant::now();
        let r = answered_within(&d, 10, m, p, b);
        let (s, code, msg) = error_of(&r);
        assert_eq!((s, code.as_str()), (503, "busy"), "{m} {p}: {msg}");
        assert!(msg.contains("move of its snapshot"), "{msg}");
        assert_eq!(r.header("retry-after"), Some("1"));
        assert!(
            t.elapsed() >= Duration::from_millis(1500),
            "{m} {p} waited {:?}",
            t.elapsed()
        );
    }
    assert!(
        !mover.is_finished(),
        "the switch did not wait for the restore"
    );
    // the restore has opened its copy: the move ends, the function is whole
    drop(restoring);
    let moved = mover.join().unwrap().expect("the move");
    assert_eq!(moved, Some(("tmpfs".to_string(), "disk".to_string())));
    let r = d.req("GET", "/v1/functions/s", None);
    assert_eq!(r.json().unwrap()["snapshot_tier"], "disk");
    let r = d.req("POST", "/v1/functions/s/invoke?force=cold", Some(b"8"));
    assert_eq!((r.status, r.header("thaw-tier")), (200, Some("disk")));
    assert_eq!(deploy(&d, &req)["version"], 2);
    assert_eq!(d.req("DELETE", "/v1/functions/s", None).status, 204);
}

#[test]
fn a_redeploy_during_a_snapshot_transfer_is_served_and_the_move_gives_way() {
    let mut cfg = test_config("transfer");
    cfg.limits.lock_wait_ms = 1500;
    let (d, mut req, app, v) =
        deployed_on_tmpfs(cfg, "t", "def handler(e):\n    return ['v1', e]\n");
    // the mover's transfer, held after its copy for as long as the test
    // needs (a long transfer to or from the remote tier)
    let (copied_tx, copied_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let go_rx = std::sync::Mutex::new(go_rx);
    let (app2, v2) = (app.clone(), v.clone());
    let mover = std::thread::spawn(move || {
        let copied = || {
            copied_tx.send(()).unwrap();
            let _ = go_rx.lock().unwrap().recv();
        };
        thaw_server::tiering::move_to_pausing(&app2, &v2, "disk", &copied)
            .map_err(|e| e.to_string())
    });
    copied_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the copy to disk");
    assert_eq!(
        thaw_server::tiering::snapshots_on(&app, "disk", &|_| true)
            .unwrap()
            .len(),
        1,
        "the copy is on disk"
    );
    // a redeploy is served meanwhile: no 503
    req["code"]["data_base64"] = json!(b64(b"def handler(e):\n    return ['v2', e]\n"));
    let body = serde_json::to_vec(&req).unwrap();
    let r = answered_within(&d, 120, "POST", "/v1/functions", Some(body));
    assert!(
        r.status == 200 || r.status == 201,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    assert_eq!(r.json().unwrap()["version"], 2);
    // a delete waits for the whole move (a redeploy after it would reuse
    // the snapshot's name), bounded
    let t = Instant::now();
    let r = answered_within(&d, 10, "DELETE", "/v1/functions/t", None);
    let (s, code, msg) = error_of(&r);
    assert_eq!((s, code.as_str()), (503, "busy"), "{msg}");
    assert!(t.elapsed() >= Duration::from_millis(1500));
    // the move ends: its version was replaced, so it gives way and removes
    // its copy; version 1's snapshot stays where it was
    go_tx.send(()).unwrap();
    let e = mover
        .join()
        .unwrap()
        .expect_err("the move of a replaced version");
    assert!(e.contains("replaced by a newer version"), "{e}");
    assert!(
        thaw_server::tiering::snapshots_on(&app, "disk", &|_| true)
            .unwrap()
            .is_empty(),
        "the copy is gone"
    );
    assert_eq!(v.placed().unwrap().tier, "tmpfs");
    let r = d.req("POST", "/v1/functions/t/invoke?force=cold", Some(b"3"));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json().unwrap(), json!(["v2", 3]));
    assert_eq!(r.header("thaw-tier"), Some("tmpfs"));
    assert_eq!(d.req("DELETE", "/v1/functions/t", None).status, 204);
}

#[test]
fn a_switch_that_restores_hold_off_gives_up_and_leaves_the_snapshot_readable() {
    let mut cfg = test_config("giveup");
    cfg.limits.switch_wait_ms = 400;
    let (d, _, app, v) = deployed_on_tmpfs(cfg, "g", "def handler(e):\n    return ['g', e]\n");
    let before = v.placed().unwrap();
    // a restore opening the snapshot for longer than the switch may wait
    let restoring = v.placed.read().unwrap();
    let t = Instant::now();
    let e = thaw_server::tiering::move_to(&app, &v, "disk").expect_err("the switch gives up");
    let waited = t.elapsed();
    drop(restoring);
    assert!(
        matches!(
            &e,
            thaw_server::tiering::Error::RestoresHoldIt { tier, waited, .. }
                if tier == "tmpfs" && *waited >= Duration::from_millis(400)
        ),
        "{e}"
    );
    assert!(e.to_string().contains("the move is given up"), "{e}");
    assert!(waited < Duration::from_secs(30), "bounded: {waited:?}");
    // the copy made is gone; the snapshot is where it was, readable
    assert!(thaw_server::tiering::snapshots_on(&app, "disk", &|_| true)
        .unwrap()
        .is_empty());
    let after = v.placed().unwrap();
    assert_eq!(after.tier, "tmpfs");
    assert_eq!(
        after.stored.local().unwrap().dir,
        before.stored.local().unwrap().dir
    );
    after
        .stored
        .local()
        .unwrap()
        .open_image()
        .expect("the snapshot's image opens");
    let r = d.req("GET", "/v1/functions/g", None);
    assert_eq!(r.json().unwrap()["snapshot_tier"], "tmpfs");
    let r = d.req("POST", "/v1/functions/g/invoke?force=cold", Some(b"5"));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.header("thaw-start-type"), Some("restore"));
    assert_eq!(r.header("thaw-tier"), Some("tmpfs"));
    assert_eq!(r.json().unwrap(), json!(["g", 5]));
    // with nothing holding it, the same move is made
    assert_eq!(
        thaw_server::tiering::move_to(&app, &v, "disk").expect("the move"),
        Some(("tmpfs".to_string(), "disk".to_string()))
    );
    let r = d.req("POST", "/v1/functions/g/invoke?force=cold", Some(b"6"));
    assert_eq!((r.status, r.header("thaw-tier")), (200, Some("disk")));
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

/// Two imports of one key at once: one copies the root, the other waits
/// for it at most `limits.lock_wait_ms` and answers 503 `busy` with a
/// Retry-After (a copy of a whole root takes seconds, the wait 50 ms);
/// asked again, the root is there.
#[test]
fn an_import_waiting_behind_a_long_copy_of_its_key_answers_busy() {
    let from = PathBuf::from(format!("/tmp/thaw-rootbusy-from-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&from);
    let rootfs = from.join("c1/rootfs");
    std::fs::create_dir_all(rootfs.parent().unwrap()).unwrap();
    linked_root(&rootfs, &[]);
    let mut cfg = test_config("rootbusy");
    cfg.image_roots_from = vec![from.clone()];
    cfg.limits.lock_wait_ms = 50;
    let d = Daemon::start(cfg);
    let key = "cd".repeat(32);
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| import_root(&d, &rootfs, Some(&key)));
        let b = s.spawn(|| import_root(&d, &rootfs, Some(&key)));
        (a.join().unwrap(), b.join().unwrap())
    });
    let (copied, busy) = if a.status == 201 { (a, b) } else { (b, a) };
    assert_eq!(
        copied.status,
        201,
        "{}",
        String::from_utf8_lossy(&copied.body)
    );
    assert_eq!(busy.status, 503, "{}", String::from_utf8_lossy(&busy.body));
    assert_eq!(busy.json().unwrap()["error"], "busy");
    assert_eq!(busy.header("retry-after"), Some("1"));
    let again = import_root(&d, &rootfs, Some(&key));
    assert_eq!(
        again.status,
        200,
        "{}",
        String::from_utf8_lossy(&again.body)
    );
    drop(d);
    let _ = std::fs::remove_dir_all(&from);
}

#[test]
fn image_roots_go_when_no_version_names_them_and_imports_hold_them_for_their_deploy() {
    let from = PathBuf::from(format!("/tmp/thaw-rootgc-from-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&from);
    let rootfs = from.join("c1/rootfs");
    std::fs::create_dir_all(rootfs.parent().unwrap()).unwrap();
    linked_root(&rootfs, &[("etc/image-marker", "mine")]);
    let mut cfg = test_config("rootgc");
    cfg.image_roots_from = vec![from.clone()];
    let d = Daemon::start(cfg);
    let roots = d.home.join("serve/roots");
    let listing = || names_in(&roots);
    let imported = |key: &str| {
        let r = import_root(&d, &rootfs, Some(key));
        assert!(
            r.status == 201 || r.status == 200,
            "{}",
            String::from_utf8_lossy(&r.body)
        );
    };
    let on_root = |name: &str, key: Option<&str>| {
        let src = "import os\ndef handler(e):\n    return os.path.exists('/etc/image-marker')\n";
        let mut req = file_deploy(name, "m.handler", src);
        req["strategy"] = json!("boot");
        req["root"] = json!(key);
        deploy(&d, &req);
        let r = d.invoke(name, &json!(null));
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        assert_eq!(r.json().unwrap(), json!(key.is_some()), "{name}");
    };
    let delete = |name: &str| {
        assert_eq!(
            d.req("DELETE", &format!("/v1/functions/{name}"), None)
                .status,
            204
        );
    };

    // two functions on one root: it goes with the last of them
    let a = "a1".repeat(32);
    imported(&a);
    on_root("fa", Some(&a));
    on_root("fb", Some(&a));
    delete("fa");
    assert_eq!(listing(), vec![a.clone()], "fb still runs on it");
    delete("fb");
    assert_eq!(listing(), Vec::<String>::new(), "no function names it");

    // an import no deploy followed yet is held through other deletes
    let b = "b2".repeat(32);
    imported(&b);
    on_root("plain", None);
    delete("plain");
    assert_eq!(listing(), vec![b.clone()], "held for its deploy");

    // a function moved off its root: the root stays while the previous
    // version (kept for its in-flight invocations) names it, then goes
    let c = "c3".repeat(32);
    imported(&c);
    on_root("moved", Some(&c));
    on_root("moved", None);
    assert_eq!(listing(), vec![b.clone(), c.clone()]);
    on_root("moved", None);
    assert_eq!(listing(), vec![b.clone()], "no version names it any more");

    // at a start: a root imported longer ago than the grace that no
    // function names goes, with what dead imports left; a recent import
    // and a root a function names stay
    let e = "e4".repeat(32);
    imported(&e);
    on_root("kept", Some(&e));
    let f = "f5".repeat(32);
    imported(&f);
    let roots2 = roots.clone();
    let (b2, e2) = (b.clone(), e.clone());
    let d = d.restart(move || {
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        for k in [&b2, &e2] {
            std::fs::File::options()
                .write(true)
                .open(roots2.join(k).join("root.json"))
                .unwrap()
                .set_modified(old)
                .unwrap();
        }
        std::fs::create_dir_all(roots2.join(".staging-1-00/root")).unwrap();
        std::fs::create_dir_all(roots2.join(format!(".removing-{b2}-00/root"))).unwrap();
    });
    assert_eq!(names_in(&roots), vec![e.clone(), f.clone()]);
    let r = d.invoke("kept", &json!(null));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json().unwrap(), json!(true));
    // the recent import is still held after the start for its deploy
    assert_eq!(d.req("DELETE", "/v1/functions/kept", None).status, 204);
    assert_eq!(names_in(&roots), vec![f.clone()]);
    let mut req = file_deploy("late", "m.handler", "def handler(e):\n    return 1\n");
    req["strategy"] = json!("boot");
    req["root"] = json!(f);
    deploy(&d, &req);
    drop(d);
    std::fs::remove_dir_all(&from).unwrap();
}
