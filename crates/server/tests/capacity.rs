//! The instance budget through a live daemon: idle instances are charged
//! what they hold (not their declared memory), requests past the budget
//! wait for RAM instead of failing, and idle instances are given up before
//! any request fails.
use serde_json::{json, Value};
use thaw_client::{Client, Target};

mod common;
use common::*;

const HELLO: &str = "def handler(e):\n    return e\n";

/// `n` requests sent at once to `path`; their statuses, in order.
fn at_once(d: &Daemon, path: &str, n: usize) -> Vec<u16> {
    let sock = d.running.as_ref().unwrap().socket.clone();
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|i| {
                let sock = sock.clone();
                s.spawn(move || {
                    Client::new(Target::Unix(sock))
                        .request("POST", path, Some(i.to_string().as_bytes()))
                        .map_or(0, |r| r.status)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn instances(d: &Daemon, name: &str) -> Value {
    d.req("GET", &format!("/v1/functions/{name}"), None)
        .json()
        .unwrap()["instances"]
        .clone()
}

/// One of the daemon's `thaw_memory_bytes` gauges.
fn memory_gauge(d: &Daemon, tier: &str) -> u64 {
    metric(d, &format!("thaw_memory_bytes{{tier=\"{tier}\"}}"))
}

fn deploy_mb(d: &Daemon, name: &str, memory_mb: u64, max_instances: u32) {
    let mut r = file_deploy(name, "m.handler", HELLO);
    r["memory_mb"] = json!(memory_mb);
    r["max_instances"] = json!(max_instances);
    deploy(d, &r);
}

#[test]
fn a_burst_past_the_budget_waits_for_ram_and_every_request_answers() {
    let mut cfg = test_config("burst");
    // two running instances of 256 MiB at a time
    cfg.memory_budget_mb = 600;
    let d = Daemon::start(cfg);
    deploy_mb(&d, "b", 256, 32);
    let statuses = at_once(&d, "/v1/functions/b/invoke?force=cold", 32);
    assert!(
        statuses.iter().all(|&s| s == 200),
        "every request answers: {statuses:?}"
    );
    // and without force=cold: warm instances are reused as they free up
    let statuses = at_once(&d, "/v1/functions/b/invoke", 32);
    assert!(statuses.iter().all(|&s| s == 200), "{statuses:?}");
    // a function that could never fit is refused at once, not queued
    let mut r = file_deploy("huge", "m.handler", HELLO);
    r["memory_mb"] = json!(1024);
    let (s, e, _) = error_of(&d.post_json("/v1/functions", &r));
    assert_eq!((s, e.as_str()), (503, "memory"));
    d.healthy();
}

#[test]
fn idle_instances_are_charged_what_they_hold_not_their_declared_memory() {
    let mut cfg = test_config("density");
    // declared, four instances would fill it
    cfg.memory_budget_mb = 1024;
    let d = Daemon::start(cfg);
    deploy_mb(&d, "h", 256, 24);
    let r = d.req("PUT", "/v1/functions/h/prewarm", Some(b"{\"count\": 24}"));
    assert_eq!(r.status, 200);
    let v = r.json().unwrap();
    assert_eq!(v["started"], 24, "{v}");
    assert_eq!(v["instances"]["idle"], 24, "{v}");
    let inst = instances(&d, "h");
    let private = inst["private_bytes"].as_u64().unwrap();
    let resident = inst["memory_bytes"].as_u64().unwrap();
    assert!(
        private > 0 && private / 24 < 32 << 20,
        "an idle instance's own pages are a few MiB: {inst}"
    );
    assert!(resident >= private, "{inst}");
    // the budget charges them about that (plus the snapshot's pages once)
    let budgeted = memory_gauge(&d, "instances_budgeted");
    assert!(
        budgeted < 24 * (256 << 20) / 8,
        "{budgeted} bytes budgeted for 24 idle instances"
    );
    // the gauge is refreshed every tick: it has seen some of them
    assert!(memory_gauge(&d, "instances_private") > 0);
    // each one still runs under its declared limit when invoked
    let r = d.invoke("h", &json!(1));
    assert_eq!(r.header("thaw-start-type"), Some("warm"));
    d.healthy();
}

#[test]
fn idle_instances_are_given_up_before_a_request_fails() {
    let mut cfg = test_config("evict");
    cfg.memory_budget_mb = 700;
    let d = Daemon::start(cfg);
    deploy_mb(&d, "small", 128, 8);
    // with its snapshot's pages, big needs nearly all of the budget
    deploy_mb(&d, "big", 690, 1);
    let r = d.req(
        "PUT",
        "/v1/functions/small/prewarm",
        Some(b"{\"count\": 8}"),
    );
    assert_eq!(r.json().unwrap()["started"], 8);
    // big fits only once idle instances of small are gone
    let r = d.invoke("big", &json!(2));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let idle = instances(&d, "small")["idle"].as_u64().unwrap();
    assert!(idle < 8, "small's idle instances made room: {idle} left");
    // while big runs nothing else fits; once it is idle, small runs again
    let r = d.invoke("small", &json!(3));
    assert_eq!(r.status, 200);
    d.healthy();
}

#[test]
fn declared_accounting_charges_idle_instances_their_limit() {
    let mut cfg = test_config("declared");
    cfg.memory_budget_mb = 1024;
    cfg.memory_accounting = "declared".into();
    let d = Daemon::start(cfg);
    deploy_mb(&d, "h", 256, 8);
    let r = d.req("PUT", "/v1/functions/h/prewarm", Some(b"{\"count\": 8}"));
    let v = r.json().unwrap();
    // four fit; the other prewarms wait for RAM the idle ones never give back
    assert_eq!(instances(&d, "h")["idle"], 4, "{v}");
    assert_eq!(memory_gauge(&d, "instances_budgeted"), 4 * (256 << 20));
    let mut bad = test_config("declared-bad");
    bad.memory_accounting = "guessed".into();
    assert!(bad.validate().is_err());
}

/// Memory stalls the kernel reports (through a PSI file in the kernel's
/// format, which the test writes: real stalls on a 24 GiB machine would
/// take the whole machine down) give idle instances up, in the policy's
/// order, and only while the stall grows.
#[test]
fn memory_stalls_give_idle_instances_up() {
    let mut cfg = test_config("psi");
    let psi = std::path::PathBuf::from(format!("{}.psi", cfg.home.display()));
    let write = |total: u64| {
        let t = format!(
            "some avg10=0.00 avg60=0.00 avg300=0.00 total={total}\n\
             full avg10=0.00 avg60=0.00 avg300=0.00 total={total}\n"
        );
        std::fs::write(&psi, t).unwrap();
    };
    write(0);
    cfg.memory_pressure_file = psi.clone();
    cfg.memory_pressure_stall_pct = 10.0;
    let d = Daemon::start(cfg);
    deploy_mb(&d, "p", 128, 8);
    let r = d.req("PUT", "/v1/functions/p/prewarm", Some(b"{\"count\": 8}"));
    assert_eq!(r.json().unwrap()["started"], 8);
    let idle = || instances(&d, "p")["idle"].as_u64().unwrap();
    let shed = || metric(&d, "thaw_shed_instances_total{reason=\"psi\"}");
    std::thread::sleep(std::time::Duration::from_millis(2500));
    assert_eq!((idle(), shed()), (8, 0), "no stall, nothing given up");
    // five seconds of stall at once: far past 10% of a second
    write(5_000_000);
    let t = std::time::Instant::now();
    while shed() == 0 && t.elapsed() < std::time::Duration::from_secs(20) {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let (after, n) = (idle(), shed());
    assert!(n >= 1 && after < 8, "given up: {n}, idle left {after}");
    assert_eq!(after + n, 8, "each one given up was idle");
    // the stall no longer grows: nothing more goes
    std::thread::sleep(std::time::Duration::from_millis(2500));
    assert_eq!(shed(), n);
    assert_eq!(d.invoke("p", &json!(1)).status, 200);
    d.healthy();
    std::fs::remove_file(&psi).unwrap();
}

/// At the node's instance cap, a request gives an idle instance up (the
/// policy's oldest) or waits for a running one; a prewarm stops with
/// `node_full`; the daemon never goes past the cap.
#[test]
fn the_node_holds_at_most_its_instance_cap() {
    let mut cfg = test_config("nodecap");
    cfg.limits.instances_per_node = 4;
    let d = Daemon::start(cfg);
    deploy_mb(&d, "a", 128, 8);
    deploy_mb(&d, "b", 128, 8);
    let r = d.req("PUT", "/v1/functions/a/prewarm", Some(b"{\"count\": 6}"));
    let v = r.json().unwrap();
    assert_eq!(v["started"], 4, "{v}");
    assert!(v["errors"].to_string().contains("node_full"), "{v}");
    let live = |n: &str| instances(&d, n)["live"].as_u64().unwrap();
    // b's requests give a's idle instances up, and wait for running ones
    let statuses = at_once(&d, "/v1/functions/b/invoke?force=cold", 8);
    assert!(statuses.iter().all(|&s| s == 200), "{statuses:?}");
    assert!(
        live("a") + live("b") <= 4,
        "a {} b {}",
        live("a"),
        live("b")
    );
    assert!(live("a") < 4, "an idle instance of a was given up");
    d.healthy();
}
