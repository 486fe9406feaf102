//! Placement's estimates recalibrated from the function's own restores.
mod common;

use common::*;
use serde_json::{json, Value};

/// The cold start the daemon timed: restore + after-restore + first invocation.
fn cold_ms(r: &thaw_client::Response) -> f64 {
    let timing = r.header("server-timing").expect("a Server-Timing header");
    let dur = |name: &str| -> f64 {
        timing
            .split(", ")
            .find_map(|p| p.strip_prefix(&format!("{name};dur=")))
            .unwrap_or_else(|| panic!("no {name} in {timing}"))
            .parse()
            .unwrap()
    };
    dur("restore") + dur("after_restore") + dur("exec")
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[test]
fn restores_recalibrate_the_placement_estimate_towards_what_they_measure() {
    let d = Daemon::start(test_config("calibration"));
    let src = "def handler(e):\n    return sum(range(e['n']))\n";
    let ev = json!({"n": 1000});
    let mut req = file_deploy("cal", "m.handler", src);
    req["sample_event"] = ev.clone();
    req["tier"] = json!("tmpfs");
    req["max_instances"] = json!(8);
    let v = deploy(&d, &req);
    let tier = v["tier"].as_str().unwrap().to_string();
    let estimate_at_deploy = v["placement"]["estimates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["tier"] == tier.as_str())
        .unwrap()["cold_ms"]
        .as_f64()
        .unwrap();
    let get = || -> Value { d.req("GET", "/v1/functions/cal", None).json().unwrap() };
    // nothing measured yet: nothing to say
    assert_eq!(get()["calibration"], Value::Null);

    let mut measured = Vec::new();
    for _ in 0..5 {
        let r = d.post_json("/v1/functions/cal/invoke?force=cold", &ev);
        assert_eq!(r.status, 200);
        assert_eq!(r.header("thaw-start-type"), Some("restore"));
        measured.push(cold_ms(&r));
    }
    // a warm start is not a cold start: it leaves the calibration alone
    let r = d.invoke("cal", &ev);
    assert_eq!(r.header("thaw-start-type"), Some("warm"));
    let c = get()["calibration"].clone();
    assert_eq!(c["tier"], json!(tier), "{c}");
    assert_eq!(c["restores"], json!(5), "{c}");
    let m = median(measured);
    assert!(
        // (the header's figures are rounded to the microsecond)
        (c["measured_ms"].as_f64().unwrap() - m).abs() < 0.01,
        "{c} vs {m}"
    );
    assert!((c["deploy_estimate_ms"].as_f64().unwrap() - estimate_at_deploy).abs() < 1e-9);
    // the recalibrated estimate moved to the measured median (or as far as a
    // fixed cost of zero lets it), and is never further off than the deploy's
    let est = c["estimate_ms"].as_f64().unwrap();
    let fixed = c["fixed_ms"].as_f64().unwrap();
    let measured_ms = c["measured_ms"].as_f64().unwrap();
    if fixed > 0.0 {
        assert!((est - measured_ms).abs() < 1e-6, "{c}");
    } else {
        assert!(est > m, "{c}");
    }
    assert!(
        (est - m).abs() <= (estimate_at_deploy - m).abs() + 1e-9,
        "{c}"
    );
    assert!((c["ratio"].as_f64().unwrap() - est / measured_ms).abs() < 1e-9);
    // every tier is estimated again from the refitted fixed cost
    let tiers = c["estimates"].as_array().unwrap();
    assert_eq!(
        tiers.len(),
        v["placement"]["estimates"].as_array().unwrap().len()
    );
    for e in tiers {
        let (cold, mem) = (
            e["cold_ms"].as_f64().unwrap(),
            e["memory_ms"].as_f64().unwrap(),
        );
        let exec = v["placement"]["profile"]["exec_ms"].as_f64().unwrap();
        assert!((cold - (fixed + mem + exec)).abs() < 1e-6, "{e}");
    }
    assert!(c["would_choose"]["tier"].is_string(), "{c}");

    // a redeploy is a new version: its calibration starts over
    deploy(&d, &req);
    assert_eq!(get()["calibration"], Value::Null);
}
