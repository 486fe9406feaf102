//! `thaw bench simlive` end to end on a short trace: the same file through
//! `thaw sim` and through `thaw load` against a `thaw serve` the command starts.
use std::process::Command;

const THAW: &str = env!("CARGO_BIN_EXE_thaw");

#[test]
fn a_short_day_runs_through_both_sides_and_the_counts_agree() {
    let out = std::env::temp_dir().join(format!("thaw-simlive-test-{}", std::process::id()));
    let o = Command::new(THAW)
        .arg("--home")
        .arg(thaw_runtime::default_home())
        .args([
            "bench",
            "simlive",
            "--functions",
            "6",
            "--minutes",
            "2",
            "--rps",
            "2",
            "--seed",
            "3",
            "--calibration-runs",
            "2",
            "--out",
        ])
        .arg(&out)
        .output()
        .expect("running thaw bench simlive");
    assert!(
        o.status.success(),
        "thaw bench simlive failed:\n{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("simlive.json")).unwrap()).unwrap();
    let (sim, live) = (&v["sim"], &v["live"]);
    let n = |s: &serde_json::Value, k: &str| s[k].as_u64().unwrap();
    // both sides replayed every row of the same file, and the live side
    // answered every one of them successfully
    let rows = std::fs::read_to_string(out.join("trace.csv"))
        .unwrap()
        .lines()
        .count() as u64
        - 1;
    assert_eq!(n(sim, "invocations"), rows);
    assert_eq!(n(live, "invocations"), rows);
    for s in [sim, live] {
        // failed: an arrival refused (both sides queue what the RAM budget,
        // 3 running instances, cannot hold yet: few or none)
        assert_eq!(
            n(s, "warm") + n(s, "restore") + n(s, "boot") + n(s, "failed"),
            rows
        );
        assert_eq!(
            n(s, "boot"),
            0,
            "every function is deployed with a snapshot"
        );
    }
    // Tolerance: a start is a restore exactly when no idle instance is there,
    // which on the live side also depends on the daemon's real restore and
    // release times on a shared 2-core machine (an arrival racing a finish can
    // go either way, and so can a refusal at the RAM budget). On this ~250-
    // request trace with ~75 restores (first run: 74 vs 74), a few such races
    // move a count by a few %; 20% of the live count, or at least 4, bounds
    // that without letting a different policy pass (idle instances charged
    // their declared memory on one side only would turn most warm starts
    // into restores there).
    let (sr, lr) = (n(sim, "restore") as f64, n(live, "restore") as f64);
    let tol = (0.2 * lr).max(4.0);
    assert!((sr - lr).abs() <= tol, "restores: sim {sr} vs live {lr}");
    let (sf, lf) = (n(sim, "failed") as f64, n(live, "failed") as f64);
    assert!(
        (sf - lf).abs() <= (0.2 * lf).max(4.0),
        "failed: sim {sf} vs live {lf}"
    );
    assert!(v["rows"].as_array().unwrap().len() >= 6);
    // the calibration went through thaw load: every function got a warm and
    // a restore cost from answered requests of both kinds
    let cal: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("calibration.json")).unwrap()).unwrap();
    let fns = cal["functions"].as_object().unwrap();
    assert_eq!(fns.len(), 6);
    for (name, c) in fns {
        assert!(c["warm_ms"].as_f64().unwrap() > 0.0, "{name}: {c}");
        assert!(
            c["restore_ms"]["disk"].as_f64().unwrap() > 0.0,
            "{name}: {c}"
        );
    }
    for round in 1..=2 {
        let recs = std::fs::read_to_string(out.join(format!("calibration-{round}.jsonl"))).unwrap();
        assert_eq!(
            recs.lines().count(),
            6 * 4,
            "round {round}: one record per call"
        );
    }
    for f in [
        "simlive.md",
        "simlive.svg",
        "calibration.json",
        "live.jsonl",
        "sim.json",
    ] {
        assert!(out.join(f).is_file(), "{f} missing");
    }
    let svg = std::fs::read_to_string(out.join("simlive.svg")).unwrap();
    assert!(svg.contains("<svg") && svg.contains("simulated") && svg.contains("live"));
    let _ = std::fs::remove_dir_all(&out);
}
