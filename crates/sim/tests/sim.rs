//! Simulator tests: hand-computed traces through the whole pipeline, determinism,
//! conservation, parsers on the sample traces and on broken variants, the CLI.

use std::path::{Path, PathBuf};
use thaw_policy::{Config, Engine, PolicyKind, Start};
use thaw_sim::azure2019::{self, Azure2019, Spread};
use thaw_sim::azure2021::Azure2021;
use thaw_sim::run::{run, Report, RunOptions};
use thaw_sim::source::{Item, Source};
use thaw_sim::synthetic::{Params, Synthetic};

fn open2019(
    dir: &Path,
    spread: Spread,
    fixed_mem: Option<u32>,
    start: u64,
    minutes: Option<u64>,
) -> Azure2019 {
    let o = azure2019::Options {
        seed: 1,
        spread,
        fixed_mem,
        start_minute: start,
        minutes,
    };
    Azure2019::open(dir, o).unwrap()
}

fn samples() -> PathBuf {
    // copies of shared/data/traces, so the tests do not depend on a path outside the repo
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/traces")
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("thaw-sim-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn opts() -> RunOptions {
    RunOptions {
        record_starts: true,
        ..RunOptions::default()
    }
}

fn check_conservation(r: &Report) {
    let s = r.starts;
    assert_eq!(
        r.invocations,
        s.warm + s.lukewarm + s.remote + s.cold + r.failed
    );
    assert_eq!(r.started, r.hist.len());
    assert_eq!(r.started, s.warm + s.lukewarm + s.remote + s.cold);
    assert_eq!(r.log.len() as u64, r.invocations);
}

/// The trace of the hand computations: 100 MB functions A..D, 1 s each.
/// Arrivals: A 0 s, B 2 s, C 4 s, A 6 s, D 8 s, B 10 s.
const HAND: &str = "app,func,end_timestamp,duration
a,A,1.0,1.0
a,B,3.0,1.0
a,C,5.0,1.0
a,A,7.0,1.0
a,D,9.0,1.0
a,B,11.0,1.0
";

fn hand_run(kind: PolicyKind, tweak: impl Fn(&mut Config)) -> Vec<Option<Start>> {
    let dir = tmpdir(&format!("hand-{kind}"));
    let path = write(&dir, "t.csv", HAND);
    let mut src = Azure2021::open(&path, 1, Some(100), 0).unwrap();
    let mut cfg = Config {
        ram_mb: 300,
        disk_mb: 1000,
        threshold: 0.5,
        ..Config::thesis(kind)
    };
    tweak(&mut cfg);
    let mut p = Engine::new(cfg).unwrap();
    let r = run(&mut src, &mut p, &opts()).unwrap();
    check_conservation(&r);
    r.log.iter().map(|e| e.2).collect()
}

#[test]
fn hand_computed_start_sequences_for_every_policy() {
    use Start::*;
    let lru = [Cold, Cold, Cold, Warm, Cold, Cold];
    // RAM holds three idle instances: D evicts B (the least recently idle), so B is cold.
    assert_eq!(
        hand_run(PolicyKind::LruMem, |_| {}),
        lru.iter().map(|s| Some(*s)).collect::<Vec<_>>()
    );
    // Greedy-dual: B and C tie at 250/100, A (invoked twice) is worth more; B goes.
    assert_eq!(
        hand_run(PolicyKind::GreedyDual, |_| {}),
        lru.iter().map(|s| Some(*s)).collect::<Vec<_>>()
    );
    // ttl 5 s: A (idle 1.25 s) is still warm at 6 s; B (idle 3.25 s) is evicted for D.
    let ttl5 = hand_run(PolicyKind::Ttl, |c| c.keep_alive_us = 5_000_000);
    assert_eq!(ttl5, lru.iter().map(|s| Some(*s)).collect::<Vec<_>>());
    // ttl 2 s: everything has expired by its next arrival.
    let ttl2 = hand_run(PolicyKind::Ttl, |c| c.keep_alive_us = 2_000_000);
    assert_eq!(ttl2, vec![Some(Cold); 6]);
    // tiered (threshold 150 MB of idle): A is checkpointed when B goes idle, B when C
    // does; A and B come back from disk.
    let tiered = vec![
        Some(Cold),
        Some(Cold),
        Some(Cold),
        Some(Lukewarm),
        Some(Cold),
        Some(Lukewarm),
    ];
    assert_eq!(hand_run(PolicyKind::TieredLru, |_| {}), tiered);
    assert_eq!(hand_run(PolicyKind::TieredGreedyDual, |_| {}), tiered);
    // Without a disk tier the tiered policies can only drop idle instances.
    let no_disk = hand_run(PolicyKind::TieredLru, |c| c.disk_mb = 0);
    assert_eq!(no_disk, vec![Some(Cold); 6]);
}

#[test]
fn hand_computed_latencies_and_failures() {
    let dir = tmpdir("latency");
    let path = write(&dir, "t.csv", HAND);
    let mut src = Azure2021::open(&path, 1, Some(100), 0).unwrap();
    let mut p = Engine::new(Config {
        ram_mb: 300,
        disk_mb: 1000,
        threshold: 0.5,
        ..Config::thesis(PolicyKind::TieredLru)
    })
    .unwrap();
    let r = run(&mut src, &mut p, &opts()).unwrap();
    // 4 cold at 250 ms + 2 lukewarm at 100 ms restore + 100 MB / 4 GiB/s.
    let lukewarm = 100.0 + 24.414;
    assert!((r.mean_start_by_type_ms.lukewarm - lukewarm).abs() < 1e-9);
    let mean = (4.0 * 250.0 + 2.0 * lukewarm) / 6.0;
    assert!((r.mean_start_ms - mean).abs() < 1e-9, "{}", r.mean_start_ms);
    assert_eq!(r.p50_start_ms, 250.0);
    // A, B and C; then D when B goes idle after the last start.
    assert_eq!(r.transfers.checkpoints, 4);
    // A RAM too small for any instance fails everything, and says so.
    let mut src = Azure2021::open(&path, 1, Some(100), 0).unwrap();
    let mut p = Engine::new(Config {
        ram_mb: 99,
        ..Config::thesis(PolicyKind::LruMem)
    })
    .unwrap();
    let r = run(&mut src, &mut p, &opts()).unwrap();
    assert_eq!((r.failed, r.started), (6, 0));
    check_conservation(&r);
}

#[test]
fn concurrency_cap_delays_arrivals() {
    let dir = tmpdir("cap");
    let path = write(
        &dir,
        "t.csv",
        "app,func,end_timestamp,duration\na,A,1.0,1.0\na,B,1.0,1.0\n",
    );
    let mut src = Azure2021::open(&path, 1, Some(100), 0).unwrap();
    let mut p = Engine::new(Config::thesis(PolicyKind::LruMem)).unwrap();
    let o = RunOptions {
        max_concurrency: 1,
        ..opts()
    };
    let r = run(&mut src, &mut p, &o).unwrap();
    // B waits for A: cold 250 ms + 1 s.
    assert_eq!(r.delayed, 1);
    assert!((r.max_queue_delay_ms - 1250.0).abs() < 1e-9);
}

#[test]
fn waiting_for_ram_delays_instead_of_failing_and_footprints_keep_idle_instances() {
    let dir = tmpdir("ramwait");
    // A and B arrive together; RAM holds one running 100 MB instance
    let path = write(
        &dir,
        "t.csv",
        "app,func,end_timestamp,duration\na,A,1.0,1.0\na,B,1.0,1.0\na,A,3.0,0.5\n",
    );
    let ram = |mb| Config {
        ram_mb: mb,
        ..Config::thesis(PolicyKind::LruMem)
    };
    let run_with = |o: &RunOptions, mb| {
        let mut src = Azure2021::open(&path, 1, Some(100), 0).unwrap();
        let mut p = Engine::new(ram(mb)).unwrap();
        let r = run(&mut src, &mut p, o).unwrap();
        check_conservation(&r);
        r
    };
    let r = run_with(&opts(), 150);
    assert_eq!(r.failed, 1, "without waiting, B fails");
    let wait = RunOptions {
        wait_for_ram: true,
        ..opts()
    };
    let r = run_with(&wait, 150);
    assert_eq!((r.failed, r.delayed), (0, 1), "B waits for A");
    assert!((r.max_queue_delay_ms - 1250.0).abs() < 1e-9);
    // B's start evicted A's idle instance: A's third start is cold
    assert_eq!(r.log[2].2, Some(Start::Cold));
    // idle instances charged 2 MB each (plus 10 shared): A stays warm
    let fp = thaw_policy::Footprint {
        idle_mb: Some(2),
        shared_mb: 10,
    };
    let footprints = [("a,A", fp), ("a,B", fp)]
        .into_iter()
        .map(|(n, f)| (n.to_string(), f))
        .collect();
    let r = run_with(
        &RunOptions {
            fn_footprints: footprints,
            ..wait
        },
        150,
    );
    assert_eq!(r.log[2].2, Some(Start::Warm), "{:?}", r.log);
}

fn synth(seed: u64) -> Synthetic {
    Synthetic::new(Params {
        functions: 300,
        hours: 0.5,
        seed,
        ..Params::default()
    })
    .unwrap()
}

fn small(kind: PolicyKind) -> Config {
    Config {
        // Running instances alone peak near 7 GB in this workload.
        ram_mb: 12 * 1024,
        disk_mb: 8 * 1024,
        net_mb: 64 * 1024,
        ..Config::thesis(kind)
    }
}

#[test]
fn deterministic_for_a_seed_and_conserving_for_every_policy() {
    for kind in PolicyKind::ALL {
        let go = |seed| {
            let mut p = Engine::new(small(kind)).unwrap();
            run(&mut synth(seed), &mut p, &opts()).unwrap()
        };
        let (a, b, c) = (go(7), go(7), go(8));
        check_conservation(&a);
        assert!(a.invocations > 1000, "{kind}: {}", a.invocations);
        assert_eq!(a.log, b.log, "{kind}: same seed, same run");
        assert_eq!(a.starts, b.starts);
        assert_eq!(a.memory_gb_s, b.memory_gb_s);
        assert_eq!(a.mean_start_ms, b.mean_start_ms);
        assert_ne!(a.log, c.log, "{kind}: another seed, another trace");
        if kind.tiered() {
            assert!(a.starts.lukewarm > 0, "{kind} used its disk tier");
        } else {
            assert_eq!(
                a.starts.lukewarm + a.starts.remote,
                0,
                "{kind} has no tiers"
            );
        }
        assert!(a.peak_gb.ram <= 12.0 && a.peak_gb.disk <= 8.0 && a.peak_gb.net <= 64.0);
    }
}

#[test]
fn synthetic_stream_is_sorted_and_within_the_horizon() {
    let mut s = synth(3);
    let mut last = 0;
    let mut n = 0;
    while let Some(Item::Inv(i)) = s.next_item().unwrap() {
        assert!(i.t >= last && i.t < 1_800_000_000);
        assert!(i.mem_mb >= 32 && i.mem_mb <= 4096 && i.dur >= 1);
        last = i.t;
        n += 1;
    }
    assert!(n > 1000);
}

#[test]
fn azure2019_sample_replays_every_counted_invocation() {
    let dir = samples();
    let text = std::fs::read_to_string(dir.join("invocations.csv")).unwrap();
    let expected: u64 = text
        .lines()
        .skip(1)
        .flat_map(|l| l.split(',').skip(4).map(|c| c.parse::<u64>().unwrap()))
        .sum();
    let mut src = open2019(&dir, Spread::Uniform, None, 0, None);
    let (mut n, mut last, mut bad) = (0u64, 0, 0);
    let mut mems = std::collections::BTreeSet::new();
    loop {
        match src.next_item().unwrap() {
            Some(Item::Inv(i)) => {
                assert!(i.t >= last, "sorted");
                last = i.t;
                // Durations stay within the function's 0th..100th percentiles (99..501 ms).
                assert!((99_000..=501_000).contains(&i.dur), "{}", i.dur);
                mems.insert(i.mem_mb);
                n += 1;
            }
            Some(Item::Bad(_)) => bad += 1,
            None => break,
        }
    }
    assert_eq!((n, bad), (expected, 0));
    assert_eq!((src.missing_memory, src.missing_duration), (0, 0));
    assert_eq!(mems, [112u32, 120, 170, 176].into_iter().collect());
    assert!(last < 1440 * 60_000_000);
}

#[test]
fn azure2019_window_and_even_spread() {
    let mut src = open2019(&samples(), Spread::Even, Some(64), 10, Some(2));
    let mut v = vec![];
    while let Some(Item::Inv(i)) = src.next_item().unwrap() {
        v.push(i);
    }
    // Minutes 10 and 11 of the sample: 4 functions x 5 invocations each minute.
    assert_eq!(v.len(), 40);
    assert!(v.iter().all(|i| i.mem_mb == 64 && i.t < 120_000_000));
    // Even spread: each function's 5 invocations in a minute are 12 s apart.
    let f0: Vec<_> = v
        .iter()
        .filter(|i| i.f == 0 && i.t < 60_000_000)
        .map(|i| i.t)
        .collect();
    assert_eq!(f0.len(), 5);
    assert!(f0
        .windows(2)
        .all(|w| (11_999_999..=12_000_001).contains(&(w[1] - w[0]))));
}

#[test]
fn azure2021_samples_parse_cleanly() {
    for (file, n, fns) in [("azure2021_200.csv", 199, 31), ("azure2021_30.csv", 29, 14)] {
        let mut src = Azure2021::open(&samples().join(file), 1, None, 0).unwrap();
        let mut p = Engine::new(Config::thesis(PolicyKind::TieredLru)).unwrap();
        let o = RunOptions {
            strict: true,
            ..opts()
        };
        let r = run(&mut src, &mut p, &o).unwrap();
        assert_eq!(
            (r.invocations, r.malformed_lines, r.functions),
            (n, 0, fns),
            "{file}"
        );
        check_conservation(&r);
    }
}

#[test]
fn azure2021_broken_lines_are_reported_with_file_and_line() {
    let dir = tmpdir("broken2021");
    let path = write(
        &dir,
        "bad.csv",
        "app,func,end_timestamp,duration
a,A,1.0,0.5
a,A,2.0
a,B,x,0.5
a,B,3.0,-1
a,C,1.0,0.9
,C,5.0,1.0
a,C,6.0,1.0,9
a,D,7.0,1.0
",
    );
    let mut src = Azure2021::open(&path, 1, Some(100), 0).unwrap();
    let mut bad = vec![];
    let mut good = 0;
    while let Some(item) = src.next_item().unwrap() {
        match item {
            Item::Inv(_) => good += 1,
            Item::Bad(b) => bad.push((b.line, b.reason.clone(), b.to_string())),
        }
    }
    assert_eq!(good, 2);
    let lines: Vec<u64> = bad.iter().map(|b| b.0).collect();
    assert_eq!(lines, vec![3, 4, 5, 6, 7, 8]);
    assert!(bad[0].1.contains("expected 4 columns"), "{:?}", bad[0]);
    assert!(bad[1].1.contains("not a number"));
    assert!(bad[2].1.contains("-1"));
    assert!(bad[3].1.contains("unsorted"));
    assert!(bad[0].2.starts_with(&format!("{}:3:", path.display())));

    // Skipped and counted by default; fatal with strict.
    let mut p = Engine::new(Config::thesis(PolicyKind::LruMem)).unwrap();
    let mut src = Azure2021::open(&path, 1, Some(100), 0).unwrap();
    let r = run(&mut src, &mut p, &opts()).unwrap();
    assert_eq!((r.invocations, r.malformed_lines), (2, 6));
    let mut src = Azure2021::open(&path, 1, Some(100), 0).unwrap();
    let e = run(
        &mut src,
        &mut p,
        &RunOptions {
            strict: true,
            ..opts()
        },
    )
    .unwrap_err();
    assert!(
        matches!(&e, thaw_sim::SimError::Input(at) if at.contains("bad.csv:3:")),
        "{e:?}"
    );

    // A reorder window accepts rows that are out of order by less than it.
    let mut src = Azure2021::open(&path, 1, Some(100), 10_000_000).unwrap();
    let mut good = 0;
    while let Some(item) = src.next_item().unwrap() {
        good += matches!(item, Item::Inv(_)) as u32;
    }
    assert_eq!(good, 3);

    let nohdr = write(&dir, "nohdr.csv", "a,A,1.0,0.5\n");
    let mut src = Azure2021::open(&nohdr, 1, Some(100), 0).unwrap();
    assert!(matches!(src.next_item().unwrap(), Some(Item::Bad(b)) if b.line == 1));
}

#[test]
fn azure2019_broken_variants() {
    let dir = tmpdir("broken2019");
    let src_dir = samples();
    let inv = std::fs::read_to_string(src_dir.join("invocations.csv")).unwrap();
    let mut rows: Vec<String> = inv.lines().map(String::from).collect();
    rows[2] = rows[2].replacen(",5,", ",five,", 1);
    rows[3] = rows[3].rsplit_once(',').unwrap().0.to_string();
    write(&dir, "invocations.csv", &(rows.join("\n") + "\n"));
    let dur = std::fs::read_to_string(src_dir.join("durations.csv")).unwrap();
    let mut drows: Vec<String> = dur.lines().map(String::from).collect();
    drows[1] = format!("{},abc", drows[1].rsplit_once(',').unwrap().0);
    write(&dir, "durations.csv", &(drows.join("\n") + "\n"));
    std::fs::copy(src_dir.join("memory.csv"), dir.join("memory.csv")).unwrap();
    let mut s = open2019(&dir, Spread::Even, None, 0, None);
    let mut bad = vec![];
    let mut good = 0;
    while let Some(item) = s.next_item().unwrap() {
        match item {
            Item::Inv(_) => good += 1,
            Item::Bad(b) => bad.push(b.to_string()),
        }
    }
    assert_eq!(bad.len(), 3, "{bad:?}");
    assert!(bad.iter().any(|b| b.contains("durations.csv:2:")));
    assert!(bad
        .iter()
        .any(|b| b.contains("invocations.csv:3:") && b.contains("\"five\"")));
    assert!(bad
        .iter()
        .any(|b| b.contains("invocations.csv:4:") && b.contains("columns")));
    // Two functions left, one without its duration row (falls back to a draw).
    assert!(good > 0);
    assert_eq!(s.missing_duration, 1);

    write(&dir, "invocations.csv", "Owner,App\n");
    let mut s = open2019(&dir, Spread::Even, None, 0, None);
    assert!(
        s.next_item().is_err(),
        "a file that is not this format is fatal"
    );
}

fn cli(args: &[&str]) -> Result<(), thaw_sim::SimError> {
    thaw_sim::cli_main(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
}

#[test]
fn cli_writes_json_csv_svg_and_sweeps() {
    let dir = tmpdir("cli");
    let j = dir.join("o.json");
    let c = dir.join("o.csv");
    let s = dir.join("o.svg");
    cli(&[
        "--synthetic",
        "--functions",
        "200",
        "--hours",
        "0.2",
        "--seed",
        "3",
        "--quiet",
        "--ram-gb",
        "2",
        "--json",
        j.to_str().unwrap(),
        "--csv",
        c.to_str().unwrap(),
        "--svg",
        s.to_str().unwrap(),
    ])
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&j).unwrap()).unwrap();
    for k in [
        "mean_start_ms",
        "p50_start_ms",
        "p99_start_ms",
        "failed",
        "invocations",
        "invocations_per_second",
    ] {
        assert!(v[k].is_number(), "{k}");
    }
    for k in ["warm", "lukewarm", "remote", "cold"] {
        assert!(v["starts"][k].is_u64(), "{k}");
    }
    assert_eq!(v["config"]["policy"], "tiered-lru");
    assert!(v["cdf"].as_array().is_some_and(|a| !a.is_empty()));
    assert_eq!(std::fs::read_to_string(&c).unwrap().lines().count(), 2);
    let svg = std::fs::read_to_string(&s).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("<polyline") && svg.trim_end().ends_with("</svg>")
    );

    let t = dir.join("sweep.csv");
    cli(&[
        "sweep",
        "--synthetic",
        "--functions",
        "100",
        "--hours",
        "0.1",
        "--quiet",
        "--policy",
        "lru-mem,tiered-lru",
        "--ram-gb",
        "1,2",
        "--csv",
        t.to_str().unwrap(),
    ])
    .unwrap();
    let table = std::fs::read_to_string(&t).unwrap();
    assert_eq!(table.lines().count(), 5);
    assert!(table.lines().nth(4).unwrap().starts_with("tiered-lru,"));
}

#[test]
fn cli_rejects_impossible_configs_before_running() {
    for bad in [
        &["--ram-gb", "0"][..],
        &["--threshold", "1.5"],
        &["--threshold", "0"],
        &["--disk-read-gbps", "0"],
        &["--policy", "fifo"],
        &["--ram-gb", "1,2"],
        &["--functions", "0"],
        &["--hours", "-1"],
        &["--no-such-flag"],
        &["--trace", "/nonexistent/dir", "--format", "azure2019"],
        &["--trace", "/nonexistent.csv"],
    ] {
        // Tiny rates: a config that is wrongly accepted still finishes at once.
        let mut args = vec!["--quiet", "--rate-scale", "0.001"];
        args.extend_from_slice(bad);
        assert!(cli(&args).is_err(), "{bad:?}");
    }
    let e = cli(&["sweep", "--quiet", "--ram-gb", "8,0"]).unwrap_err();
    assert!(format!("{e:#}").contains("RAM"), "{e:#}");
    assert!(cli(&["--help"]).is_ok());
    assert!(cli(&["sweep", "--help"]).is_ok());
}

#[test]
fn calibration_file_is_loaded_and_checked() {
    let dir = tmpdir("calib");
    let good = write(
        &dir,
        "c.json",
        r#"{"version": 1, "source": "test",
            "defaults": {"cold_ms": 500, "restore_ms": {"disk": 50}},
            "tiers": {"ram": {"capacity_gb": 0.3}, "disk": {"read_mb_s": 1000}},
            "functions": {"a,A": {"cold_ms": 1000}}}"#,
    );
    let cal = thaw_sim::calib::Calibration::load(&good).unwrap();
    let costs = cal
        .function_costs(cal.defaults.apply(Default::default(), "d").unwrap())
        .unwrap();
    assert_eq!(costs["a,A"].cold_us, 1_000_000);
    assert_eq!(costs["a,A"].restore_disk_us, 50_000);
    let trace = write(&dir, "t.csv", HAND);
    let j = dir.join("o.json");
    cli(&[
        "--trace",
        trace.to_str().unwrap(),
        "--format",
        "azure2021",
        "--mem-mb",
        "100",
        "--policy",
        "lru-mem",
        "--calibration",
        good.to_str().unwrap(),
        "--quiet",
        "--json",
        j.to_str().unwrap(),
    ])
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&j).unwrap()).unwrap();
    // RAM 0.3 GB (307 MB) from the file: the hand trace's lru sequence; A's two...
    // A is cold once at 1000 ms, B, C, D and B again at 500 ms.
    assert_eq!(v["starts"]["cold"], 5);
    assert!((v["mean_start_ms"].as_f64().unwrap() - (1000.0 + 4.0 * 500.0) / 6.0).abs() < 1e-9);
    for bad in [
        r#"{"version": 2}"#,
        r#"{"version": 1, "defaults": {"cold_ms": -1}}"#,
        r#"{"version": 1, "defaults": {"cold": 3}}"#,
        r#"{"version": 1, "functions": {"x": {"restore_ms": {"disk": "fast"}}}}"#,
        "not json",
    ] {
        let p = write(&dir, "bad.json", bad);
        let r = cli(&[
            "--calibration",
            p.to_str().unwrap(),
            "--quiet",
            "--hours",
            "0.01",
            "--functions",
            "5",
        ]);
        assert!(r.is_err(), "{bad}");
    }
}

/// Runs the trace at `path` with lru-mem in `ram_mb`, arrivals waiting
/// for RAM up to `patience_ms`, and each function (`a,NAME`) holding
/// `idle_mb` of its own when idle; on a thread, so that a simulation that
/// never ends fails the test instead of hanging it.
fn run_waiting(path: PathBuf, ram_mb: u64, patience_ms: u64, idle_mb: &[(&str, u32)]) -> Report {
    let fn_footprints = idle_mb
        .iter()
        .map(|&(f, mb)| {
            let fp = thaw_policy::Footprint {
                idle_mb: Some(mb),
                shared_mb: 0,
            };
            (format!("a,{f}"), fp)
        })
        .collect();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut src = Azure2021::open(&path, 1, Some(100), 0).unwrap();
        let mut p = Engine::new(Config {
            ram_mb,
            ..Config::thesis(PolicyKind::LruMem)
        })
        .unwrap();
        let o = RunOptions {
            wait_for_ram: true,
            ram_patience: patience_ms * 1000,
            fn_footprints,
            ..opts()
        };
        let _ = tx.send(run(&mut src, &mut p, &o).unwrap());
    });
    let r = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("a simulation of a few invocations did not finish in 60 s");
    check_conservation(&r);
    r
}

#[test]
fn a_waiting_arrival_keeps_idle_instances_for_ram_running_ones_give_back_within_its_patience() {
    let dir = tmpdir("patience");
    // A ends and idles, holding 60 MB; B and C run (100 MB each); D arrives
    // at 1.0 s lacking 60 MB: giving A up makes room now, waiting gets B's
    // RAM back at 1.35 s (a cold start of 250 ms, then 0.6 s)
    let run_with = |b_secs: f64, patience_ms: u64| {
        let trace = format!(
            "app,func,end_timestamp,duration\na,A,0.5,0.5\na,B,{},{b_secs}\na,C,1.5,1.0\na,D,1.1,0.1\na,A,3.5,0.5\n",
            0.5 + b_secs
        );
        let path = write(&dir, &format!("t-{b_secs}.csv"), &trace);
        run_waiting(
            path,
            300,
            patience_ms,
            &[("A", 60), ("B", 2), ("C", 2), ("D", 2)],
        )
    };
    let a_again = |r: &Report| r.log.iter().filter(|l| l.1 == 0).nth(1).unwrap().2;
    // no patience: D gives A up at once, and A's next start is cold
    let r = run_with(0.6, 0);
    assert_eq!((r.failed, r.delayed), (0, 0), "{:?}", r.log);
    assert_eq!(a_again(&r), Some(Start::Cold), "{:?}", r.log);
    // the daemon's patience: D waits 0.35 s for B, and A stays warm
    let r = run_with(0.6, 500);
    assert_eq!((r.failed, r.delayed), (0, 1), "{:?}", r.log);
    assert!(
        (r.max_queue_delay_ms - 350.0).abs() < 1e-6,
        "{}",
        r.max_queue_delay_ms
    );
    assert_eq!(a_again(&r), Some(Start::Warm), "{:?}", r.log);
    // B running past the patience: D waits 0.5 s, then gives A up
    let r = run_with(1.0, 500);
    assert_eq!((r.failed, r.delayed), (0, 1), "{:?}", r.log);
    assert!(
        (r.max_queue_delay_ms - 500.0).abs() < 1e-6,
        "{}",
        r.max_queue_delay_ms
    );
    assert_eq!(a_again(&r), Some(Start::Cold), "{:?}", r.log);
}

#[test]
fn an_arrival_that_idle_instances_cannot_make_room_for_waits_for_an_end_past_its_patience() {
    // A idles holding 30 MB; B and C run 2 s holding 100 MB each; D at 1.0 s
    // lacks 80 MB, which giving A up cannot free: past its patience it asks
    // once more and then waits for B (cold 250 ms + 2 s: 2.75 s)
    let path = write(
        &tmpdir("patience-over"),
        "t.csv",
        "app,func,end_timestamp,duration\na,A,0.5,0.5\na,B,2.5,2.0\na,C,2.5,2.0\na,D,1.1,0.1\n",
    );
    let r = run_waiting(path, 250, 500, &[("A", 30), ("B", 2), ("C", 2), ("D", 2)]);
    assert_eq!(r.failed, 0, "{:?}", r.log);
    assert!(
        (r.max_queue_delay_ms - 1750.0).abs() < 1e-6,
        "{}",
        r.max_queue_delay_ms
    );
}
