//! `thaw bench concurrency`: N simultaneous cold starts (restore + first
//! response), N = 1, 2, 4, ..., per strategy and tier, of the same function
//! (one snapshot, N restores of it) and of different functions (N distinct
//! snapshots: copies of the function's snapshot under their own names, so the
//! work per start is the same and only sharing differs: no page cache, no image
//! mapping, no working-set file is shared between instances).
//!
//! Each batch: page cache of every snapshot used dropped, N threads released by
//! one barrier, each restores and invokes once and keeps its instance until all
//! have answered (so memory is held at once, as N live instances would). Cold
//! start = barrier release to first response; throughput = N / time until the
//! last first response.

use crate::error::{BenchError, Result, SinkResult};
use crate::stats::{summarize, Summary};
use serde::Serialize;
use std::sync::Barrier;
use std::time::Instant;
use thaw_error::{fail, ResultExt};
use thaw_store::{secure, Snapshot, Tier};
use thaw_worker::InputSize;
use thaw_worker::RestoreRequest;
use thaw_worker::{invoke, ms, StrategyKind, Worker, INVOKE_TIMEOUT};

#[derive(Debug, Clone)]
pub struct Options {
    pub function: String,
    pub strategies: Vec<StrategyKind>,
    pub tiers: Vec<String>,
    /// `same` and/or `different`.
    pub modes: Vec<String>,
    pub levels: Vec<usize>,
    pub reps: usize,
    pub size: InputSize,
}

pub const MODES: [&str; 2] = ["same", "different"];
/// Most simultaneous starts one batch may ask for.
pub const MAX_LEVEL: usize = 256;

/// One instance of a batch.
#[derive(Debug, Clone, Serialize)]
pub struct Start {
    pub cold_ms: f64,
    /// memory charged to the instance's cgroup after its first response
    pub added_kb: u64,
}

/// One batch of N simultaneous cold starts: a JSON line.
#[derive(Debug, Clone, Serialize)]
pub struct Batch {
    pub function: String,
    pub tier: String,
    pub emulated: bool,
    pub strategy: StrategyKind,
    pub mode: String,
    pub n: usize,
    pub rep: usize,
    pub ok: usize,
    pub errors: Vec<String>,
    /// barrier release to the last first response
    pub wall_ms: f64,
    /// successful cold starts per second of wall time
    pub throughput: f64,
    /// the machine's 1-minute load average when the batch started (others' work
    /// shows here on a shared machine)
    pub loadavg_1m: f64,
    pub starts: Vec<Start>,
}

pub fn check(o: &Options) -> Result<()> {
    if o.reps == 0 {
        fail!(BenchError::Config, "--reps must be at least 1");
    }
    if o.levels.is_empty() || o.levels.iter().any(|&n| n == 0 || n > MAX_LEVEL) {
        fail!(
            BenchError::Config,
            "--levels must be between 1 and {MAX_LEVEL}"
        );
    }
    for m in &o.modes {
        if !MODES.contains(&m.as_str()) {
            fail!(
                BenchError::Config,
                "--modes: unknown mode {m:?} (same, different)"
            );
        }
    }
    Ok(())
}

/// Copies of `snap` for the `different` mode, each published under its own
/// name on the same tier (a verified copy through the store), removed on drop.
struct Copies {
    tier: Tier,
    names: Vec<String>,
}

impl Copies {
    fn make(tier: &Tier, name: &str, snap: &Snapshot, n: usize) -> Result<Copies> {
        let mut c = Copies {
            tier: tier.clone(),
            names: Vec::new(),
        };
        for k in 1..n {
            let copy = format!("{name}-bench{k}");
            let _ = secure::remove_tree(&tier.function_dir(&copy));
            // Registered before copying, so a failed copy is cleaned up too.
            c.names.push(copy.clone());
            tier.lock_deploy(&copy)?.publish_copy(snap)?;
        }
        Ok(c)
    }

    fn open(&self) -> Result<Vec<Snapshot>> {
        self.names
            .iter()
            .map(|n| {
                let s = self
                    .tier
                    .open_current(n)?
                    .ok_or_else(|| BenchError::Failed(format!("bench copy {n} vanished")))?;
                // untimed: the first use of an image verifies (and on DRAM seals) it
                s.open_image()?;
                Ok(s)
            })
            .collect()
    }
}

impl Drop for Copies {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = secure::remove_tree(&self.tier.function_dir(n));
        }
    }
}

/// N simultaneous restores + first invocations; instance i restores `snaps[i % len]`.
fn batch(
    w: &Worker,
    snaps: &[Snapshot],
    strategy: StrategyKind,
    size: InputSize,
    n: usize,
) -> Result<(Vec<Result<Start>>, f64)> {
    for s in snaps {
        s.drop_page_cache()?;
    }
    let go = Barrier::new(n + 1);
    let done = Barrier::new(n + 1);
    let mut t0 = Instant::now();
    let results = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..n)
            .map(|i| {
                let (go, done, snap) = (&go, &done, &snaps[i % snaps.len()]);
                scope.spawn(move || {
                    go.wait();
                    let t = Instant::now();
                    let r = w
                        .restore(RestoreRequest::new(snap, strategy))
                        .map_err(Into::into)
                        .and_then(|(mut sb, _)| {
                            invoke(&mut sb, size, INVOKE_TIMEOUT)?;
                            let cold_ms = ms(t);
                            let added_kb = sb.memory_usage().unwrap_or(0) / 1024;
                            Ok((sb, Start { cold_ms, added_kb }))
                        });
                    // Hold the instance until every start of the batch has answered.
                    done.wait();
                    r.map(|(_sb, s)| s)
                })
            })
            .collect();
        go.wait();
        t0 = Instant::now();
        done.wait();
        let wall = ms(t0);
        let res: Vec<Result<Start>> = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(BenchError::Failed("a start thread panicked".into())))
            })
            .collect();
        (res, wall)
    });
    Ok(results)
}

/// The 1-minute load average (NaN if unreadable).
pub fn loadavg() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

/// Runs the benchmark; every batch goes to `sink` as it is measured.
pub fn run(
    w: &Worker,
    o: &Options,
    sink: &mut dyn FnMut(&Batch) -> SinkResult,
) -> Result<Vec<Batch>> {
    check(o)?;
    w.check_function(&o.function)?;
    let max_n = *o.levels.iter().max().unwrap_or(&1);
    let mut out = Vec::new();
    for tier_name in &o.tiers {
        let tier = w.tier(tier_name)?;
        let snap = w.snapshot(&o.function, &tier)?;
        // dax maps the image in place: only a byte-addressable tier has one
        let on_dram = secure::on_dram(&snap.dir)?;
        let mut strategies = Vec::new();
        for &s in &o.strategies {
            if s == StrategyKind::Dax && !on_dram {
                thaw_output::errln!(
                    "bench: {s} skipped on {tier_name}: not a byte-addressable tier"
                );
            } else {
                strategies.push(s);
            }
        }
        // Untimed: first-use costs (image verify, REAP's recording) stay out.
        for &s in &strategies {
            let (mut sb, _) = w.restore(RestoreRequest::new(&snap, s))?;
            let inv = invoke(&mut sb, o.size, INVOKE_TIMEOUT)?;
            w.check(&o.function, o.size, &inv.output)
                .with_context(|| format!("{} restored with {s} gave a wrong output", o.function))?;
        }
        let copies = if o.modes.iter().any(|m| m == "different") {
            thaw_output::errln!(
                "bench: {} copies of {} on {tier_name}",
                max_n - 1,
                snap.dir.display()
            );
            Copies::make(&tier, &w.snapshot_name(&o.function), &snap, max_n)?
        } else {
            Copies {
                tier: tier.clone(),
                names: Vec::new(),
            }
        };
        let mut distinct = vec![snap.clone()];
        distinct.extend(copies.open()?);
        for mode in &o.modes {
            for &n in &o.levels {
                for rep in 0..o.reps {
                    // Strategies interleaved within a repetition: noise falls on all alike.
                    for &s in &strategies {
                        thaw_output::err!(
                            "\rbench: concurrency {tier_name} {mode} n={n} rep {}/{} {s}        ",
                            rep + 1,
                            o.reps
                        );
                        let snaps = if mode == "same" {
                            &distinct[..1]
                        } else {
                            &distinct[..n]
                        };
                        let loadavg_1m = loadavg();
                        let (res, wall_ms) = batch(w, snaps, s, o.size, n)?;
                        let mut starts = Vec::new();
                        let mut errors = Vec::new();
                        for r in res {
                            match r {
                                Ok(st) => starts.push(st),
                                Err(e) => errors.push(thaw_error::chain(&e)),
                            }
                        }
                        let b = Batch {
                            function: o.function.clone(),
                            tier: tier_name.clone(),
                            emulated: tier.emulated || s == StrategyKind::Dax,
                            strategy: s,
                            mode: mode.clone(),
                            n,
                            rep,
                            ok: starts.len(),
                            errors,
                            wall_ms,
                            throughput: starts.len() as f64 / (wall_ms / 1e3).max(1e-9),
                            loadavg_1m,
                            starts,
                        };
                        sink(&b).map_err(|e| thaw_error::Context::new("writing a record", e))?;
                        out.push(b);
                    }
                }
            }
        }
        thaw_output::errln!();
    }
    Ok(out)
}

/// Per (tier, mode, strategy, N): pooled cold starts and per-batch throughput.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub tier: String,
    pub emulated: bool,
    pub mode: String,
    pub strategy: StrategyKind,
    pub n: usize,
    pub attempted: usize,
    pub ok: usize,
    pub cold: Option<Summary>,
    pub throughput: Option<Summary>,
    pub added_mib: Option<Summary>,
    /// median throughput over mmap's median at the same tier, mode and N
    pub vs_mmap: Option<f64>,
    /// the same over mmap's from the `disk` tier (PASS's baseline: snapshots
    /// on an SSD), when that tier was measured
    pub vs_mmap_disk: Option<f64>,
}

pub fn summarize_rows(batches: &[Batch]) -> Vec<Row> {
    let mut keys: Vec<(String, String, StrategyKind, usize)> = Vec::new();
    for b in batches {
        let k = (b.tier.clone(), b.mode.clone(), b.strategy, b.n);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let mut rows: Vec<Row> = keys
        .into_iter()
        .map(|(tier, mode, strategy, n)| {
            let bs: Vec<&Batch> = batches
                .iter()
                .filter(|b| b.tier == tier && b.mode == mode && b.strategy == strategy && b.n == n)
                .collect();
            let cold: Vec<f64> = bs
                .iter()
                .flat_map(|b| b.starts.iter().map(|s| s.cold_ms))
                .collect();
            let added: Vec<f64> = bs
                .iter()
                .flat_map(|b| b.starts.iter().map(|s| s.added_kb as f64 / 1024.0))
                .collect();
            let tput: Vec<f64> = bs.iter().map(|b| b.throughput).collect();
            Row {
                emulated: bs.iter().any(|b| b.emulated),
                attempted: bs.iter().map(|b| b.n).sum(),
                ok: bs.iter().map(|b| b.ok).sum(),
                cold: summarize(&cold),
                throughput: summarize(&tput),
                added_mib: summarize(&added),
                vs_mmap: None,
                vs_mmap_disk: None,
                tier,
                mode,
                strategy,
                n,
            }
        })
        .collect();
    let base: Vec<(String, String, usize, f64)> = rows
        .iter()
        .filter(|r| r.strategy == StrategyKind::Mmap)
        .filter_map(|r| Some((r.tier.clone(), r.mode.clone(), r.n, r.throughput?.median)))
        .collect();
    let over = |r: &Row, tier: &str| {
        base.iter()
            .find(|(t, m, n, _)| t == tier && *m == r.mode && *n == r.n)
            .and_then(|b| Some(r.throughput?.median / b.3))
    };
    for r in &mut rows {
        (r.vs_mmap, r.vs_mmap_disk) = (over(r, &r.tier), over(r, "disk"));
    }
    rows
}

pub fn markdown(rows: &[Row], function: &str, reps: usize) -> String {
    let mut s = format!(
        "Function {function} · {reps} batches per cell · cold start = restore request to first response, pooled over the batches (ms, p50 / p99) · throughput = successful cold starts per second of batch wall time (min / median) · ratio = median throughput over mmap's at the same tier, mode and N, and over mmap's from `disk` (PASS's baseline)\n\n\
         | tier | mode | strategy | N | ok | cold p50 | cold p99 | throughput /s | vs mmap | vs mmap on disk | MiB added per instance |\n|---|---|---|---|---|---|---|---|---|---|---|\n"
    );
    for r in rows {
        let tier = if r.emulated && r.strategy == StrategyKind::Dax {
            format!("{} (dax: pmem emulated)", r.tier)
        } else if r.emulated {
            format!("{} (emulated)", r.tier)
        } else {
            r.tier.clone()
        };
        let f = |v: Option<f64>, d: usize| v.map_or("-".to_string(), |x| format!("{x:.d$}"));
        s.push_str(&format!(
            "| {tier} | {} | {} | {} | {}/{} | {} | {} | {} / {} | {} | {} | {} |\n",
            r.mode,
            r.strategy,
            r.n,
            r.ok,
            r.attempted,
            f(r.cold.map(|c| c.median), 1),
            f(r.cold.map(|c| c.p99), 1),
            f(r.throughput.map(|c| c.min), 1),
            f(r.throughput.map(|c| c.median), 1),
            f(r.vs_mmap, 2),
            f(r.vs_mmap_disk, 2),
            f(r.added_mib.map(|c| c.median), 1),
        ));
    }
    s
}
