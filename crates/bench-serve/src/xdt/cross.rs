//! XDT across two workers (a [`crate::pair::Pair`]): the cross-worker
//! method's runs, the overlap of the producer's pull with the consumer's
//! cold start, and the patterns on two workers.
use crate::error::{BenchServeError, OrFail, Result};
use serde::Serialize;
use serde_json::{json, Value};
use thaw_bench::stats::{summarize, Summary};
use thaw_error::fail;

use super::{
    big_mb, deploy, invoke, invoke_path, pull_totals, Cell, Options, PatternCell, Phases, CROSS,
    CROSS_PHASES,
};
use thaw_client::{Client, Target};

/// What the cross-worker method measured.
pub(super) struct Cross {
    pub(super) transfers: Vec<Cell>,
    pub(super) phases: Vec<Phases>,
    pub(super) patterns: Vec<PatternCell>,
    pub(super) overlap: Vec<Overlap>,
}

/// The saving from starting a pull when the invocation arrives (while the
/// consumer's instance is restored), measured on its own: a cold consumer
/// (`?force=cold`) on worker B, with the pull started at arrival and, on a
/// second pair with `[xdt.peering] prefetch = false`, at `thaw.get`.
#[derive(Debug, Clone, Serialize)]
pub struct Overlap {
    pub size: u64,
    /// the cold consumer's invocation, ms
    pub at_arrival: Summary,
    pub at_get: Summary,
}

/// Cold starts per overlap measurement (and prefetch setting).
pub(super) const OVERLAP_RUNS: usize = 5;

pub(super) fn start_pair(
    exe: &std::path::Path,
    runtime_home: &std::path::Path,
    biggest: u64,
    prefetch: bool,
) -> Result<crate::pair::Pair> {
    let d = crate::pair::PairOptions::default();
    let pair = crate::pair::Pair::start(
        exe,
        runtime_home,
        &crate::pair::PairOptions {
            max_object_bytes: d.max_object_bytes.max(biggest),
            budget_per_function_bytes: d.budget_per_function_bytes.max(biggest * 2),
            prefetch,
            ..d
        },
    )?;
    let (mut a, mut b) = (pair.workers[0].client(), pair.workers[1].client());
    deploy(&mut a, "xdt-put", "put_only", big_mb(biggest), 1)?;
    deploy(&mut b, "xdt-sink", "sink", big_mb(biggest), 1)?;
    // the patterns' producers and consumers
    deploy(&mut a, "xdt-pput", "put_only", 256, 16)?;
    deploy(&mut b, "xdt-psink", "sink", 256, 16)?;
    deploy(&mut b, "xdt-gsink", "sink_all", 256, 1)?;
    Ok(pair)
}

/// Objects handed between two workers: the producers run on worker A and
/// return references; the bench passes them to consumers on worker B
/// (which pulls each object from A, starting when the invocation arrives)
/// that touch every page. Latency = the put (timed in the producer) + the
/// consumers' invocations (timed by the bench). The pairs are made and
/// removed here.
pub(super) fn cross_worker(
    exe: &std::path::Path,
    runtime_home: &std::path::Path,
    o: &Options,
) -> Result<Cross> {
    let biggest = o.sizes.iter().copied().max().unwrap_or(0);
    let pair = start_pair(exe, runtime_home, biggest, true)?;
    let (mut a, mut b) = (pair.workers[0].client(), pair.workers[1].client());
    let (mut transfers, mut phases) = (Vec::new(), Vec::new());
    for &size in &o.sizes {
        let mut rows: Vec<[f64; 6]> = Vec::new();
        // the first run warms both instances up
        for run in 0..=o.runs {
            let p = invoke(&mut a, "xdt-put", &json!({"size": size}))?;
            let put_ms = p["put_ms"].as_f64().or_fail("no put time")?;
            let before = pull_totals(&mut b)?;
            let t0 = std::time::Instant::now();
            let out = invoke(&mut b, "xdt-sink", &json!({"ref": p["ref"]}))?;
            let invoke_ms = t0.elapsed().as_secs_f64() * 1e3;
            let pull_ms = (pull_totals(&mut b)?.1 - before.1) * 1e3;
            if out["n"].as_u64() != Some(size) {
                fail!(
                    BenchServeError::Failed,
                    "the consumer on the other worker got {}, not {size} bytes",
                    out["n"]
                );
            }
            let f = |k: &str| out[k].as_f64().unwrap_or(f64::NAN);
            if run > 0 {
                rows.push([
                    put_ms,
                    invoke_ms,
                    f("get_ms"),
                    f("touch_ms"),
                    pull_ms,
                    put_ms + invoke_ms,
                ]);
            }
        }
        let col = |i: usize| summarize(&rows.iter().map(|r| r[i]).collect::<Vec<_>>());
        let total = col(5).or_fail("no samples")?;
        let (after_put, pull) = (col(1).or_fail("no samples")?, col(4).or_fail("no samples")?);
        let mbps = |ms: f64| size as f64 / 1e6 / (ms / 1e3);
        transfers.push(Cell {
            size,
            method: CROSS.into(),
            mb_per_s: Some(mbps(total.median)),
            ms: Some(total),
            note: format!(
                "put + consumer invocation on the other worker; from the producer's return: \
                 {:.0} MB/s; the pull alone: {:.0} MB/s",
                mbps(after_put.median),
                mbps(pull.median)
            ),
        });
        let mut median_ms = std::collections::BTreeMap::new();
        for (i, k) in CROSS_PHASES.iter().enumerate() {
            median_ms.insert(k.to_string(), col(i).or_fail("no samples")?.median);
        }
        phases.push(Phases {
            size,
            method: CROSS.into(),
            median_ms,
        });
    }
    let patterns = cross_patterns(&pair, o)?;
    let cold = *o.sizes.last().or_fail("no sizes")?;
    let at_arrival = cold_consumer(&pair, cold)?;
    drop(pair);
    let at_get = cold_consumer(&start_pair(exe, runtime_home, biggest, false)?, cold)?;
    Ok(Cross {
        transfers,
        phases,
        patterns,
        overlap: vec![Overlap {
            size: cold,
            at_arrival,
            at_get,
        }],
    })
}

/// 1-1 transfers of `size` bytes into a consumer restored for each one.
pub(super) fn cold_consumer(pair: &crate::pair::Pair, size: u64) -> Result<Summary> {
    let (mut a, mut b) = (pair.workers[0].client(), pair.workers[1].client());
    let mut ms = Vec::new();
    for _ in 0..OVERLAP_RUNS {
        let p = invoke(&mut a, "xdt-put", &json!({"size": size}))?;
        let t0 = std::time::Instant::now();
        let out = invoke_path(
            &mut b,
            "/v1/functions/xdt-sink/invoke?force=cold",
            &json!({"ref": p["ref"]}),
        )?;
        ms.push(t0.elapsed().as_secs_f64() * 1e3);
        if out["n"].as_u64() != Some(size) {
            fail!(
                BenchServeError::Failed,
                "the cold consumer got {}, not {size} bytes",
                out["n"]
            );
        }
    }
    summarize(&ms).or_fail("no samples")
}

/// Invokes `function` once per event, all at once, over its own
/// connection each; the outputs in the events' order.
pub(super) fn invoke_all(
    socket: &std::path::Path,
    function: &str,
    events: &[Value],
) -> Result<Vec<Value>> {
    std::thread::scope(|s| {
        let hs: Vec<_> = events
            .iter()
            .map(|ev| {
                s.spawn(move || {
                    invoke(
                        &mut Client::new(Target::Unix(socket.to_path_buf())),
                        function,
                        ev,
                    )
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| BenchServeError::Failed("an invoking thread panicked".into()))?
            })
            .collect()
    })
}

/// Scatter, gather and broadcast between the workers: producers on A,
/// consumers on B. One round's time is the producers' put (the slowest,
/// for a gather's parallel producers) + the consumers' invocations until
/// the last has touched its objects.
pub(super) fn cross_patterns(pair: &crate::pair::Pair, o: &Options) -> Result<Vec<PatternCell>> {
    let (sa, sb) = (&pair.workers[0].socket, &pair.workers[1].socket);
    let size = o.pattern_size;
    let refs = |out: &Value| -> Result<Vec<Value>> {
        Ok(out["refs"].as_array().or_fail("no refs")?.clone())
    };
    let check = |outs: &[Value], want: u64| -> Result<()> {
        match outs.iter().find(|v| v["n"].as_u64() != Some(want)) {
            Some(v) => fail!(
                BenchServeError::Failed,
                "a consumer on the other worker got {}, not {want} bytes",
                v["n"]
            ),
            None => Ok(()),
        }
    };
    let mut cells = Vec::new();
    for pattern in ["scatter", "gather", "broadcast"] {
        for &degree in &o.degrees {
            let d = degree as usize;
            let mut ms = Vec::new();
            for run in 0..=o.pattern_runs {
                let round = match pattern {
                    "gather" => {
                        let outs = invoke_all(sa, "xdt-pput", &vec![json!({"size": size}); d])?;
                        let put_ms = outs
                            .iter()
                            .filter_map(|p| p["put_ms"].as_f64())
                            .fold(0.0, f64::max);
                        let all: Vec<Value> = outs.iter().map(|p| p["ref"].clone()).collect();
                        let t0 = std::time::Instant::now();
                        let out = invoke_all(sb, "xdt-gsink", &[json!({"refs": all})])?;
                        check(&out, size * degree as u64)?;
                        put_ms + t0.elapsed().as_secs_f64() * 1e3
                    }
                    _ => {
                        let ev = match pattern {
                            "scatter" => json!({"size": size, "count": degree}),
                            _ => json!({"size": size, "retrievals": degree}),
                        };
                        let p = invoke_all(sa, "xdt-pput", &[ev])?.remove(0);
                        let put_ms = p["put_ms"].as_f64().or_fail("no put time")?;
                        let evs: Vec<Value> = match pattern {
                            "scatter" => refs(&p)?.into_iter().map(|r| json!({"ref": r})).collect(),
                            _ => vec![json!({"ref": p["ref"]}); d],
                        };
                        let t0 = std::time::Instant::now();
                        let outs = invoke_all(sb, "xdt-psink", &evs)?;
                        check(&outs, size)?;
                        put_ms + t0.elapsed().as_secs_f64() * 1e3
                    }
                };
                // the first round starts the instances
                if run > 0 {
                    ms.push(round);
                }
            }
            let s = summarize(&ms).or_fail("no samples")?;
            cells.push(PatternCell {
                pattern: pattern.into(),
                degree,
                cell: Cell {
                    size,
                    method: CROSS.into(),
                    mb_per_s: Some((size * degree as u64) as f64 / 1e6 / (s.median / 1e3)),
                    ms: Some(s),
                    note: String::new(),
                },
            });
        }
    }
    Ok(cells)
}
