//! Where the daemon keeps snapshots, through real HTTP: the policy's moves
//! between tiers, the placement a deploy chooses, packages' images, and
//! requests served while snapshots move.
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use thaw_client::Response;
use thaw_server::Config;

mod common;
use common::*;

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
    // accounting of the declared limits; an instance is measured right
    // after its reply, off the request's path, so the gauge may lag it
    let gauge = |t: &str| metric(&d, &format!("thaw_memory_bytes{{tier=\"{t}\"}}"));
    let t = Instant::now();
    while gauge("instances") <= 4 << 20 && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
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
    std::sync::Arc<thaw_server::instances::FnVersion>,
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
