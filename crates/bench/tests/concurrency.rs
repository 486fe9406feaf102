//! `thaw bench concurrency` on the real worker (root, the cached runtime root):
//! every start of a small batch succeeds and is accounted once, the copies for
//! the `different` mode are removed afterwards, and the summary pools batches.

use thaw_bench::concurrency::{self, Batch, Options, Start};
use thaw_worker::StrategyKind;

fn options() -> Options {
    Options {
        function: "helloworld".into(),
        strategies: vec![StrategyKind::Mmap],
        tiers: vec!["tmpfs".into()],
        modes: vec!["same".into(), "different".into()],
        levels: vec![1, 3],
        reps: 1,
        size: thaw_worker::InputSize::I,
    }
}

#[test]
fn small_batches_succeed_and_leave_no_copies() {
    let home = thaw_runtime::default_home();
    let w = thaw_worker::Worker::new(&home, &mut |m| eprintln!("runtime: {m}"))
        .expect("the runtime root (these tests run as root)");
    let mut seen = 0;
    let batches = concurrency::run(&w, &options(), &mut |_| {
        seen += 1;
        Ok(())
    })
    .unwrap();
    assert_eq!((batches.len(), seen), (4, 4));
    for b in &batches {
        assert!(b.errors.is_empty(), "{:?}", b.errors);
        assert_eq!((b.ok, b.starts.len()), (b.n, b.n));
        assert!(b.starts.iter().all(|s| s.cold_ms > 0.0 && s.added_kb > 0));
        assert!(b.throughput > 0.0 && b.wall_ms > 0.0);
    }
    let tier = w.tier("tmpfs").unwrap();
    let copy_prefix = format!("{}-bench", w.snapshot_name("helloworld"));
    let left: Vec<_> = std::fs::read_dir(&tier.path)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&copy_prefix))
        .collect();
    assert!(left.is_empty(), "copies left behind: {left:?}");
}

fn batch(strategy: &str, n: usize, colds: &[f64], wall_ms: f64) -> Batch {
    Batch {
        function: "f".into(),
        tier: "disk".into(),
        emulated: false,
        strategy: strategy.parse().unwrap(),
        mode: "same".into(),
        n,
        rep: 0,
        ok: colds.len(),
        errors: vec!["x".into(); n - colds.len()],
        wall_ms,
        throughput: colds.len() as f64 / (wall_ms / 1e3),
        loadavg_1m: 1.0,
        starts: colds
            .iter()
            .map(|&cold_ms| Start {
                cold_ms,
                added_kb: 2048,
            })
            .collect(),
    }
}

#[test]
fn rows_pool_batches_and_compare_with_mmap() {
    let rows = concurrency::summarize_rows(&[
        batch("mmap", 2, &[10.0, 30.0], 100.0),
        batch("mmap", 2, &[20.0, 40.0], 100.0),
        batch("reap", 2, &[5.0], 25.0),
        batch("reap", 2, &[5.0, 6.0], 25.0),
    ]);
    assert_eq!(rows.len(), 2);
    let (mmap, reap) = (&rows[0], &rows[1]);
    assert_eq!((mmap.attempted, mmap.ok), (4, 4));
    assert_eq!(mmap.cold.unwrap().median, 25.0);
    assert_eq!(mmap.added_mib.unwrap().median, 2.0);
    assert_eq!(mmap.vs_mmap, Some(1.0));
    assert_eq!((reap.attempted, reap.ok), (4, 3));
    // reap: 40 and 80 starts/s, median 60; mmap: 20/s.
    assert_eq!(reap.vs_mmap, Some(3.0));
    let md = concurrency::markdown(&rows, "f", 2);
    assert!(md.contains("| disk | same | reap | 2 | 3/4 |"), "{md}");
    // PASS's comparison: dax from the byte-addressable tier against mmap from disk
    let mut dax = batch("dax", 2, &[4.0, 4.0], 20.0);
    dax.tier = "pmem".into();
    let rows = concurrency::summarize_rows(&[batch("mmap", 2, &[10.0, 30.0], 100.0), dax]);
    let dax = rows
        .iter()
        .find(|r| r.strategy == StrategyKind::Dax)
        .unwrap();
    assert_eq!(dax.vs_mmap, None, "no mmap measured on pmem");
    assert_eq!(dax.vs_mmap_disk, Some(5.0));
    assert_eq!(rows[0].vs_mmap_disk, Some(1.0));
}

#[test]
fn bad_options_are_refused() {
    for tweak in [
        (|o: &mut Options| o.reps = 0) as fn(&mut Options),
        |o| o.levels = vec![],
        |o| o.levels = vec![0],
        |o| o.levels = vec![concurrency::MAX_LEVEL + 1],
        |o| o.modes = vec!["some".into()],
    ] {
        let mut o = options();
        tweak(&mut o);
        assert!(concurrency::check(&o).is_err(), "{o:?}");
    }
    assert!(concurrency::check(&options()).is_ok());
    // not restore strategies: the type cannot hold them
    for s in ["fresh", "zygote", "nope", ""] {
        assert!(s.parse::<StrategyKind>().is_err(), "{s}");
    }
}
