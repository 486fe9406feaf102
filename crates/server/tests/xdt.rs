//! XDT through a live daemon: functions deployed like any user's
//! code call each other and pass objects by reference with `import thaw`;
//! every hostile case gets a clear error in the function while
//! the daemon keeps serving, and nothing leaks (objects, descriptors).
use base64::Engine as _;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use thaw_client::{Client, Response, Target};

const FNS: &str = include_str!("xdt_fns/xdtfns.py");
const BUDGET: u64 = 128 << 20;

struct Daemon<'a> {
    app: &'a thaw_server::App,
    socket: PathBuf,
}

/// Runs `body` against a daemon on a throw-away home (removed afterwards,
/// also when `body` fails).
fn with_daemon(body: impl FnOnce(&Daemon)) {
    let res = thaw_server::on_temp_daemon_with(
        &thaw_runtime::default_home(),
        "xdt-test",
        |cfg| {
            cfg.drain_grace_s = 10;
            cfg.xdt.objects.budget_per_function_bytes = BUDGET;
            cfg.xdt.objects.max_object_bytes = 256 << 20;
            cfg.xdt.chains.max_depth = 3;
            Ok(())
        },
        |app, socket| {
            let d = Daemon {
                app,
                socket: socket.to_path_buf(),
            };
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(&d)))
                .map_err(|_| anyhow::anyhow!("the test failed (its panic is above)"))
        },
    );
    res.unwrap();
}

impl Daemon<'_> {
    fn post(&self, path: &str, v: &Value) -> Response {
        Client::new(Target::Unix(self.socket.clone()))
            .request("POST", path, Some(&serde_json::to_vec(v).unwrap()))
            .expect("request")
    }

    fn deploy(&self, name: &str, handler: &str, extra: Value) {
        let mut req = json!({
            "name": name,
            "handler": format!("xdtfns.{handler}"),
            "code": {"format": "file", "filename": "xdtfns.py",
                     "data_base64": base64::engine::general_purpose::STANDARD.encode(FNS)},
        });
        for (k, v) in extra.as_object().unwrap() {
            req[k] = v.clone();
        }
        let r = self.post("/v1/functions", &req);
        assert_eq!(
            r.status,
            201,
            "deploy {name}: {}",
            String::from_utf8_lossy(&r.body)
        );
    }

    /// Invokes and expects 200; returns the output.
    fn invoke(&self, name: &str, event: Value) -> Value {
        let r = self.post(&format!("/v1/functions/{name}/invoke"), &event);
        assert_eq!(
            r.status,
            200,
            "{name}: {}",
            String::from_utf8_lossy(&r.body)
        );
        r.json().unwrap()
    }

    fn objects(&self) -> (usize, u64) {
        thaw_xdt::sdk::Host::table(self.app.instances.xdt.get().unwrap().as_ref()).usage()
    }
}

/// Descriptors of this process (the daemon runs in it) that are objects the
/// tests made: memfds named by the SDK or by the hostile function.
fn object_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter(|t| {
            let t = t.to_string_lossy();
            ["thaw-object", "big", "nosealing", "mapped", "half"]
                .iter()
                .any(|n| t.starts_with(&format!("/memfd:{n} ")))
        })
        .count()
}

#[test]
fn functions_call_functions_and_pass_objects_by_reference() {
    with_daemon(run);
}

fn run(d: &Daemon) {
    let big = json!({"memory_mb": 512, "max_instances": 8});
    d.deploy("producer", "produce", big.clone());
    d.deploy(
        "consumer",
        "consume",
        json!({"memory_mb": 256, "max_instances": 16}),
    );
    d.deploy("pipeline", "pipeline", json!({}));
    d.deploy("fanout", "fanout", big.clone());
    d.deploy("recurse", "recurse", json!({"max_instances": 8}));
    d.deploy("hostile", "hostile", big);
    d.deploy("half", "half_put", json!({"timeout_ms": 1500}));
    d.deploy("leave", "leave", json!({}));
    d.deploy("stranger", "produce", json!({"owner": "bob"}));

    // 1 MB through a chain: producer -> reference -> consumer, byte-exact
    let out = d.invoke("pipeline", json!({"size": 1 << 20}));
    let (p, c) = (&out["producer"], &out["consumer"]);
    assert_eq!(c["size"], 1 << 20);
    assert_eq!(c["sha256"], p["sha256"], "the consumer read other bytes");
    assert!(
        c["write"].as_str().unwrap().starts_with("refused"),
        "{}",
        c["write"]
    );
    assert_eq!(d.objects(), (0, 0), "a 1-retrieval object goes when read");

    // 100 MB: mapped, not copied. The consumer touches 16 pages; a copy
    // would grow its resident set by 100 MB.
    let out = d.invoke("pipeline", json!({"size": 100 << 20, "touch_pages": 16}));
    let c = &out["consumer"];
    let grew = c["rss_after_kb"].as_u64().unwrap() - c["rss_before_kb"].as_u64().unwrap();
    eprintln!("100 MB object, 16 pages touched: consumer RSS grew by {grew} kB");
    assert!(grew < 8 << 10, "consumer RSS grew by {grew} kB: {c}");
    assert_eq!(c["size"], 100 << 20);

    // scatter: one object, 4 retrievals by 4 concurrent consumers
    let out = d.invoke("fanout", json!({"n": 4, "size": 1 << 20}));
    let shas = out.as_array().unwrap();
    assert_eq!(shas.len(), 4);
    assert!(shas.iter().all(|s| s == &shas[0]));
    assert_eq!(d.objects(), (0, 0));

    // recursion stops at the depth limit (3) with a clear error
    let out = d.invoke("recurse", json!({}));
    assert_eq!(out["deepest"], 3, "{out}");
    assert_eq!(out["kind"], "limit", "{out}");

    // every hostile case: a clear error kind, and the function goes on
    let foreign = d.invoke("stranger", json!({"size": 100, "ttl_s": 1}))["ref"].clone();
    let out = d.invoke("hostile", json!({"foreign_ref": foreign}));
    eprintln!("hostile: {out:#}");
    let want = [
        ("forged", "bad_reference"),
        ("truncated", "bad_reference"),
        ("garbage", "bad_reference"),
        ("huge_ref", "bad_reference"),
        ("first_get", "ok"),
        ("replayed", "exhausted"),
        ("foreign_ref", "forbidden"),
        ("foreign_fn", "forbidden"),
        ("missing_fn", "not_found"),
        ("expired", "expired"),
        ("zero_retrievals", "bad_request"),
        ("over_budget", "over_budget"),
        ("put_10gb", "too_large"),
        ("put_pipe", "bad_object"),
        ("put_unsealable", "bad_object"),
        ("put_mapped_writable", "bad_object"),
        ("unknown_op", "bad_request"),
        ("get_without_ref", "bad_request"),
        ("fd_with_get", "bad_request"),
        ("wait_unknown", "bad_request"),
        ("map_read", "wwww"),
    ];
    for (k, v) in want {
        assert_eq!(out[k], v, "{k}: {out:#}");
    }
    for k in ["write_fd", "map_writable", "mprotect_writable"] {
        assert!(
            out[k].as_str().unwrap().starts_with("refused"),
            "{k}: {}",
            out[k]
        );
    }

    // a producer killed half-way through writing its object
    let r = d.post("/v1/functions/half/invoke", &json!({}));
    assert_eq!(r.status, 504, "{}", String::from_utf8_lossy(&r.body));

    // a consumer that never reads: the object waits for its TTL, then goes
    let out = d.invoke("leave", json!({"ttl_s": 1}));
    assert!(out["ref"].as_str().unwrap().starts_with("thref1."));
    assert!(d.objects().0 >= 1, "the unread object is held");
    let t = Instant::now();
    while d.objects() != (0, 0) {
        assert!(t.elapsed() < Duration::from_secs(5), "expired object kept");
        std::thread::sleep(Duration::from_millis(100));
    }

    // still serving, and the daemon holds no object descriptor
    assert_eq!(
        d.invoke("pipeline", json!({"size": 10_000}))["consumer"]["size"],
        10_000
    );
    assert_eq!(d.objects(), (0, 0));
    // the objects a function got are let go of just after its reply
    let t = Instant::now();
    while object_fds() != 0 && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(object_fds(), 0, "object descriptors leaked in the daemon");
}
