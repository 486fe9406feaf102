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
