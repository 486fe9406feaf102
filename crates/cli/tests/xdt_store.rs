//! The object-store baseline of XDT end to end: functions on a
//! live daemon PUT and GET objects through the worker to the emulated
//! remote tier (MinIO in its network namespace, set up with `thaw tier
//! setup`); a missing key, a bad key, another owner's key and a store that
//! is not there give clear errors in the function while the daemon keeps
//! serving; `thaw bench xdt` runs all three methods and leaves no store
//! behind. Needs root (network namespaces) and MinIO (scripts/setup.sh).
mod common;
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;
use thaw_client::{Client, Target};

use common::{thaw, THAW};
const FNS: common::Module = common::Module {
    file: "storefns.py",
    source: include_str!("xdt_store_fns/storefns.py"),
};

/// One MinIO at a time on this 2-core machine (see tests/tiers.rs).
static ONE_OBJECT_STORE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The home's remote tier, torn down when this goes (also on a failure).
struct Store<'a>(&'a Path);

impl Drop for Store<'_> {
    fn drop(&mut self) {
        let (ok, out) = thaw(
            self.0,
            &["tier", "teardown", "--tiers", "remote", "--force"],
        );
        assert!(ok || std::thread::panicking(), "teardown: {out}");
    }
}

fn netns_of(home: &Path) -> std::path::PathBuf {
    Path::new("/run/netns").join(thaw_tiers::remote::RemoteNet::for_home(home).netns)
}

struct D(std::path::PathBuf);

impl D {
    fn client(&self) -> Client {
        Client::new(Target::Unix(self.0.clone()))
    }

    fn deploy(&self, name: &str, handler: &str, owner: &str) {
        self.deploy_mb(name, handler, owner, 256)
    }

    fn deploy_mb(&self, name: &str, handler: &str, owner: &str, memory_mb: u64) {
        common::deploy(&mut self.client(), &FNS, name, handler, owner, memory_mb)
    }

    fn invoke(&self, name: &str, ev: Value) -> Value {
        common::invoke(&mut self.client(), name, &ev)
    }

    /// The error kind a store call raised in `attempt`, and its message.
    fn error(&self, name: &str, ev: Value) -> (String, String) {
        common::error(&mut self.client(), name, &ev)
    }
}

/// Runs `body` against a daemon on a throw-away home, which is removed
/// afterwards also when `body` fails.
fn with_daemon(body: impl FnOnce(&Path, &D)) {
    thaw_server::on_temp_daemon(
        &thaw_runtime::default_home(),
        "xdt-store-test",
        |app, socket| {
            let d = D(socket.to_path_buf());
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(&app.cfg.home, &d)))
                .map_err(|_| anyhow::anyhow!("the test failed (its panic is above)"))
        },
    )
    .unwrap();
}

#[test]
fn functions_put_and_get_through_the_emulated_object_store() {
    let _turn = ONE_OBJECT_STORE.lock().unwrap_or_else(|p| p.into_inner());
    with_daemon(|home, d| {
        d.deploy("rt", "roundtrip", "default");
        d.deploy("try", "attempt", "default");
        d.deploy("other", "attempt", "someone-else");

        // no store set up yet: a clear error, and the daemon serves on
        let (kind, msg) = d.error("try", json!({"op": "put", "key": "a"}));
        assert_eq!(kind, "store_failed", "{msg}");
        assert!(msg.contains("thaw tier setup --tiers remote"), "{msg}");

        // torn down at the end, also if setup fails half-way
        let _store = Store(home);
        let (ok, out) = thaw(home, &["tier", "setup", "--tiers", "remote"]);
        assert!(
            ok,
            "the emulated object store (MinIO, root, netns) did not start:\n{out}"
        );

        for size in [256, 3 << 20, 0] {
            let out = d.invoke("rt", json!({"key": format!("t/obj-{size}"), "size": size}));
            assert_eq!(out["put"], size, "{out}");
            assert_eq!(out["n"], size, "{out}");
            assert_eq!(out["same"], true, "{out}");
            assert_eq!(out["readonly"], true, "{out}");
        }
        // a missing key: not_found naming the key, the function carries on
        let (kind, msg) = d.error("try", json!({"op": "get", "key": "no/such/key"}));
        assert_eq!(kind, "not_found");
        assert!(msg.contains("no/such/key"), "{msg}");
        // another owner's key is another object
        assert_eq!(
            d.invoke("try", json!({"op": "get", "key": "t/obj-256"}))["n"],
            256
        );
        let (kind, _) = d.error("other", json!({"op": "get", "key": "t/obj-256"}));
        assert_eq!(kind, "not_found");
        // bad keys and data are refused before any request
        for key in [
            "",
            "../x",
            "a//b",
            "/abs",
            "sp ace",
            "./a",
            &"k".repeat(513),
        ] {
            for op in ["get", "put"] {
                let (kind, msg) = d.error("try", json!({"op": op, "key": key}));
                assert_eq!(kind, "bad_request", "{op} {key:?}: {msg}");
            }
        }
        assert_eq!(
            d.error("try", json!({"op": "put_str", "key": "s"})).0,
            "TypeError"
        );
        // larger than the function's memory: too_large, not a store failure
        d.deploy_mb("tiny", "attempt", "default", 64);
        let out = d.invoke("rt", json!({"key": "t/big", "size": 65 << 20}));
        assert_eq!(out["same"], true, "{out}");
        let (kind, msg) = d.error("tiny", json!({"op": "get", "key": "t/big"}));
        assert_eq!(kind, "too_large", "{msg}");
        // and the worker still serves
        let out = d.invoke("rt", json!({"key": "t/after", "size": 4096}));
        assert_eq!(out["same"], true, "{out}");
    });
}

#[test]
fn bench_xdt_runs_every_method_and_leaves_no_store_behind() {
    let _turn = ONE_OBJECT_STORE.lock().unwrap_or_else(|p| p.into_inner());
    let dir = std::env::temp_dir().join(format!("thaw-xdt-bench-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json_path = dir.join("xdt.json");
    let md_path = dir.join("xdt.md");
    let child = Command::new(THAW)
        .args([
            "bench",
            "xdt",
            "--sizes",
            "10000",
            "--runs",
            "2",
            "--degrees",
            "2",
        ])
        .args(["--pattern-runs", "1", "--app-runs", "1", "--wc-mb", "1"])
        .args(["--ens-rows", "2000", "--json"])
        .arg(&json_path)
        .arg("--markdown")
        .arg(&md_path)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "thaw bench xdt:\n{text}");
    let r: Value = serde_json::from_slice(&std::fs::read(&json_path).unwrap()).unwrap();
    assert!(r["store"].as_str().unwrap().contains("emulated"));
    let methods: Vec<&str> = r["transfers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["ms"]["median"].as_f64().is_some_and(|m| m > 0.0))
        .map(|c| c["method"].as_str().unwrap())
        .collect();
    assert_eq!(methods, ["xdt", "inline", "store", "xdt-peer"]);
    assert!(r["workers"].as_str().unwrap().contains("network namespace"));
    // the plots beside the markdown
    for p in [
        "latency",
        "latency-p99",
        "bandwidth",
        "scatter",
        "gather",
        "broadcast",
    ] {
        let svg = std::fs::read_to_string(dir.join(format!("xdt-{p}.svg")))
            .unwrap_or_else(|e| panic!("xdt-{p}.svg: {e}"));
        assert!(svg.starts_with("<svg") && svg.contains("<polyline"), "{p}");
    }
    // scatter, gather and broadcast by each method, across workers too (a
    // 1 MB inline gather is over the output cap: a cell without timings,
    // saying so)
    let pats = r["patterns"].as_array().unwrap();
    assert_eq!(pats.len(), 12);
    for c in pats {
        let timed = c["ms"]["median"].as_f64().is_some();
        let capped = c["pattern"] == "gather" && c["method"] == "inline";
        assert_eq!(timed, !capped, "{c}");
    }
    for p in ["scatter", "gather", "broadcast"] {
        assert!(
            pats.iter()
                .any(|c| c["pattern"] == p && c["method"] == "xdt-peer"),
            "no {p} across workers"
        );
    }
    // the step-by-step breakdown of both by-reference methods: every step
    // timed, the steps inside the consumer's invocation shorter than it
    let phases = r["phases"].as_array().unwrap();
    assert_eq!(phases.len(), 2, "{phases:?}");
    for p in phases {
        let m = &p["median_ms"];
        for (k, v) in m.as_object().unwrap() {
            assert!(v.as_f64().is_some_and(|v| v >= 0.0), "{k} in {p}");
        }
        let step = |k: &str| m[k].as_f64().unwrap();
        assert!(step("get") + step("touch") <= step("invoke"), "{p}");
        assert!(step("invoke") <= step("total"), "{p}");
    }
    // both applications by both methods, the same answers, each run's
    // driver laps adding up to its end to end (one run: medians are it)
    let apps = r["apps"].as_array().unwrap();
    assert_eq!(apps.len(), 4, "{apps:?}");
    for pair in apps.chunks(2) {
        assert_eq!(pair[0]["method"], "xdt");
        assert_eq!(pair[1]["method"], "store");
        let (a, b) = (&pair[0]["result"], &pair[1]["result"]);
        assert_eq!(a["words"], b["words"]);
        assert_eq!(a["accuracy"], b["accuracy"]);
    }
    assert!(apps[2]["result"]["accuracy"].as_f64().unwrap() > 0.6);
    for a in apps {
        let stages = a["stages"].as_array().unwrap();
        let driver: f64 = stages
            .iter()
            .filter(|s| s["function"] == "driver")
            .map(|s| s["ms"]["median"].as_f64().unwrap())
            .sum();
        let e2e = a["e2e_ms"]["median"].as_f64().unwrap();
        assert!(driver <= e2e && driver >= 0.99 * e2e, "{a}");
        let called: Vec<String> = stages
            .iter()
            .filter(|s| s["function"] != "driver")
            .map(|s| {
                format!(
                    "{}/{}",
                    s["function"].as_str().unwrap(),
                    s["stage"].as_str().unwrap()
                )
            })
            .collect();
        let want: &[&str] = if a["app"] == "stacking-ensemble" {
            &[
                "ens-base/dispatch",
                "ens-base/get",
                "ens-base/unpickle",
                "ens-base/fit",
            ]
        } else {
            &[
                "wc-map/dispatch",
                "wc-map/get",
                "wc-map/count",
                "wc-map/send",
            ]
        };
        assert!(
            called.starts_with(&want.iter().map(|s| s.to_string()).collect::<Vec<_>>()),
            "{a}"
        );
    }
    // one bar per application and method, and a legend swatch per method
    let svg = std::fs::read_to_string(dir.join("xdt-apps.svg")).unwrap();
    let fills: usize = (0..2)
        .map(|i| {
            svg.matches(&format!("fill=\"{}\"", thaw_plot::fill_of(i)))
                .count()
        })
        .sum();
    assert_eq!(fills, 4 + 2, "{svg}");
    let md = std::fs::read_to_string(&md_path).unwrap();
    assert!(
        md.contains("| stacking-ensemble | ens-base | fit |"),
        "{md}"
    );

    // the overlap: a cold consumer with the pull at arrival and at get
    let ov = &r["overlap"][0];
    assert_eq!(ov["size"], 10000, "{ov}");
    for k in ["at_arrival", "at_get"] {
        assert!(ov[k]["median"].as_f64().is_some_and(|m| m > 0.0), "{ov}");
    }
    // the bench's temporary home was named after its pid: its store and the
    // two workers' namespaces are gone
    let pairnet = thaw_bench_serve::pair::PairNet::for_tag(pid);
    for ns in &pairnet.netns {
        assert!(
            !Path::new("/run/netns").join(ns).exists(),
            "{ns} left behind"
        );
    }
    let home = std::env::temp_dir().join(format!("thaw-bench-xdt-{pid}"));
    assert!(
        !netns_of(&home).exists(),
        "the bench left {}",
        netns_of(&home).display()
    );
    let _ = std::fs::remove_dir_all(&dir);

    // bad options are refused clearly
    let bad = Command::new(THAW)
        .args(["bench", "xdt", "--degrees", "17"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--degrees: 17"));
}
