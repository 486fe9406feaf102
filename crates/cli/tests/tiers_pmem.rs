//! The split of a snapshot over a fast and a byte-addressable slow tier
//! (TOSS) on the emulated pmem tier, end to end through `thaw`. Needs
//! root; every missing capability fails the test naming it.
use std::path::Path;
use thaw_tiers::TiersConfig;
use thaw_worker::{InputSize, RestoreRequest, StrategyKind};

mod common;
use common::tier_home::Home;

/// The `(size kB, anonymous kB)` of each mapping of `path` in `pid`'s smaps.
fn mappings_of(pid: i32, path: &Path) -> Vec<(u64, u64)> {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap();
    let name = path.to_str().unwrap();
    let kb = |l: &str| -> u64 {
        l.split_whitespace()
            .nth(1)
            .and_then(|v| v.parse().ok())
            .unwrap()
    };
    let mut out: Vec<(u64, u64)> = Vec::new();
    let mut ours = false;
    for l in smaps.lines() {
        let head = l.split_whitespace().next().unwrap_or("");
        if head.contains('-') && head.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            ours = l.ends_with(name);
            if ours {
                out.push((0, 0));
            }
        } else if let Some(last) = out.last_mut().filter(|_| ours) {
            if l.starts_with("Size:") {
                last.0 = kb(l);
            } else if l.starts_with("Anonymous:") {
                last.1 = kb(l);
            }
        }
    }
    out
}

/// TOSS with its slow file on the emulated pmem tier: the model takes the
/// tiers' probed page-fault costs, the slow file is mapped from the pmem
/// mount into the restored process, every function answers correctly, and
/// the runtime's writes stay in its own copies (the file is unchanged).
#[test]
fn tiered_maps_its_slow_file_from_pmem_in_place() {
    let h = Home::new("toss");
    h.config(&["tmpfs", "pmem", "disk"], |t| t.capacity_bytes = 512 << 20);
    h.ok(&["tier", "setup", "--tiers", "pmem"]);
    h.ok(&[
        "tier",
        "probe",
        "--tiers",
        "tmpfs,pmem",
        "--mib",
        "4",
        "--reads",
        "32",
    ]);
    let cfg = TiersConfig::load(&h.0).unwrap();
    let costs = thaw_tiers::split::costs(&h.0, &cfg, "tmpfs", "pmem").unwrap();
    let probed = |tier: &str| {
        thaw_tiers::probe::load(&h.0)[tier]
            .iter()
            .find(|r| r.reader.starts_with("sandbox-cgroup faults ("))
            .expect("the probe's page-fault reader")
            .rand_read_4k_us_mean
    };
    assert_eq!(
        (costs.fast_fault_us, costs.slow_fault_us),
        (probed("tmpfs"), probed("pmem")),
        "{costs:?}"
    );
    assert!(
        costs.fault_source.iter().all(|s| s.contains("probed")),
        "{costs:?}"
    );
    let w = thaw_worker::Worker::with_runtime_home(&h.0, &thaw_runtime::default_home(), &mut |m| {
        eprintln!("{m}")
    })
    .unwrap();
    let (fast, slow) = (w.tier("tmpfs").unwrap(), w.tier("pmem").unwrap());
    let params = thaw_bench::restore::cost_params(&costs);
    // no extra cost on the slow tier: every page goes there, written ones too
    let all_slow = thaw_memory::tiering::CostParams {
        slow_fault_us: costs.fast_fault_us,
        ..params.clone()
    };
    for f in ["lr_serving", "chameleon", "pyaes", "matmul"] {
        let snap = w.snapshot(f, &fast).unwrap();
        for params in [&params, &all_slow] {
            let rep = w
                .make_tiered(f, &fast, &slow, &[InputSize::I], 1, params)
                .unwrap();
            assert_eq!(
                rep.params.slow_fault_us, params.slow_fault_us,
                "{f}: {rep:?}"
            );
            assert_eq!(rep.params.price_ratio, costs.price_ratio);
            assert!(rep.slow_path.starts_with(h.0.join("tiers/pmem")), "{rep:?}");
            let slow_before = std::fs::metadata(&rep.slow_path)
                .unwrap()
                .modified()
                .unwrap();
            // the split's mmap restores (its all-DRAM baseline) recorded the write set
            let (mut sb, r) = w
                .restore(RestoreRequest::new(&snap, StrategyKind::Tiered))
                .unwrap();
            assert_eq!(r.strategy, StrategyKind::Tiered, "{f}: {r:?}");
            assert!(
                r.figures.slow_in_place && r.figures.slow_tier == "pmem",
                "{r:?}"
            );
            assert_eq!(r.copied_bytes, 0, "{f}: nothing copied but the write set");
            assert!(
                r.populated_bytes > 0,
                "{f}: the write set was not copied ahead: {r:?}"
            );
            let inv =
                thaw_worker::invoke(&mut sb, InputSize::I, thaw_worker::INVOKE_TIMEOUT).unwrap();
            w.check(f, InputSize::I, &inv.output)
                .unwrap_or_else(|e| panic!("{f} tiered from pmem: {e:#}"));
            // the slow file is mapped from the pmem mount
            let maps = mappings_of(sb.pid(), &rep.slow_path);
            assert!(
                !maps.is_empty(),
                "{f}: {} not mapped",
                rep.slow_path.display()
            );
            if std::ptr::eq(params, &all_slow) {
                assert_eq!(rep.slow_share, 1.0, "{f}: {rep:?}");
                // what the runtime wrote there are its own anonymous copies
                let anon: u64 = maps.iter().map(|m| m.1).sum();
                assert!(
                    anon > 0,
                    "{f}: no page of the slow file's mappings was written"
                );
            }
            drop(sb);
            let layout: thaw_memory::tiering::TierLayout =
                serde_json::from_slice(&std::fs::read(snap.dir.join("tiers.json")).unwrap())
                    .unwrap();
            thaw_memory::tiering::verify_files(&layout)
                .unwrap_or_else(|e| panic!("{f}: the restores changed a tier file: {e:#}"));
            assert_eq!(
                std::fs::metadata(&rep.slow_path)
                    .unwrap()
                    .modified()
                    .unwrap(),
                slow_before
            );
        }
    }
    drop(w);
    h.ok(&["tier", "teardown", "--force"]);
}

/// Tier pairs that make no split fail before any runtime work, naming why.
#[test]
fn split_and_bench_refuse_tiers_that_make_no_split() {
    let h = Home::new("tossbad");
    h.config(&["tmpfs", "pmem", "disk", "hdd", "remote"], |_| {});
    h.fails(&["split", "helloworld", "--slow", "nope"], "unknown tier");
    h.fails(
        &["split", "helloworld", "--slow", "tmpfs"],
        "two different tiers",
    );
    h.fails(
        &["split", "helloworld", "--fast", "disk", "--slow", "hdd"],
        "must be byte-addressable",
    );
    h.fails(
        &["split", "helloworld", "--fast", "pmem", "--slow", "tmpfs"],
        "is DRAM",
    );
    h.fails(
        &["split", "helloworld", "--slow", "remote"],
        "must be a local tier",
    );
    h.fails(&["split", "helloworld", "--slow", "pmem"], "not set up");
    h.fails(
        &[
            "split",
            "helloworld",
            "--slow",
            "pmem",
            "--slow-fault-us=-1",
        ],
        "non-negative",
    );
    h.fails(
        &[
            "bench",
            "restore",
            "--strategies",
            "mmap,tiered",
            "--slow",
            "remote",
        ],
        "must be a local tier",
    );
}
