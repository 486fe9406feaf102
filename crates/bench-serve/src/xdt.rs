//! `thaw bench xdt`: objects handed between functions on one daemon three
//! ways, side by side in one run: by reference (XDT: a sealed memfd mapped
//! into the consumer), inline (base64 in the invocation event, up to the
//! event limit) and through an object store (S3 PUT / GET to the emulated
//! MinIO of the remote tier, which the bench sets up on its temporary home
//! and tears down; the worker makes the requests for the sandbox, which has
//! no network, as a Lambda's S3 client would over the network). Measured:
//! 1-1 transfers per object size; scatter, gather and broadcast per degree;
//! two applications (MapReduce word count, stacking-ensemble training) with
//! their end-to-end time and a cost estimate at published prices. Every
//! timed cell is preceded by one untimed warm-up.
use crate::error::{BenchServeError, OrFail, Result};
use base64::Engine as _;
use serde::Serialize;
use serde_json::{json, Value};
use thaw_bench::stats::{summarize, Summary};
use thaw_error::fail;

use thaw_client::{Client, Target};

const FUNCTIONS: &str = include_str!("xdt_bench.py");

/// What every report says about the store.
pub const STORE_LABEL: &str =
    "object store = MinIO (S3 API) in its own network namespace, emulated link: 0.25 ms each way, 10 Gbit/s";

pub struct Options {
    pub sizes: Vec<u64>,
    pub runs: usize,
    /// scatter / gather / broadcast degrees (empty: no patterns)
    pub degrees: Vec<u32>,
    pub pattern_size: u64,
    pub pattern_runs: usize,
    /// runs of each application and method (0: no applications)
    pub app_runs: usize,
    pub wc_mb: u64,
    pub ens_rows: u64,
    /// the thaw binary, to run two daemons for the cross-worker method
    /// (`None`: that method is not measured)
    pub cross_worker_exe: Option<std::path::PathBuf>,
}

/// One object size and method.
#[derive(Debug, Clone, Serialize)]
pub struct Cell {
    pub size: u64,
    pub method: String,
    /// None: not possible (inline past the event or output limit)
    pub ms: Option<Summary>,
    /// bytes moved (size x degree for a pattern) / median
    pub mb_per_s: Option<f64>,
    pub note: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct PatternCell {
    pub pattern: String,
    pub degree: u32,
    #[serde(flatten)]
    pub cell: Cell,
}

#[derive(Debug, Clone, Serialize)]
pub struct AppCell {
    pub app: String,
    pub method: String,
    pub e2e_ms: Summary,
    /// per run, median over runs (USD)
    pub cost: Cost,
    /// what the application computed (checked by it), from the last run
    pub result: Value,
    /// where the time went, over the runs, in the order the stages ran
    pub stages: Vec<Stage>,
}

/// One stage of an application: a lap of its driver, or of a function it
/// calls (per run the slowest invocation's, the one the driver waits for).
#[derive(Debug, Clone, Serialize)]
pub struct Stage {
    pub function: String,
    pub stage: String,
    pub ms: Summary,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Cost {
    pub function_gb_s: f64,
    pub requests: u64,
    pub store_puts: u64,
    pub store_gets: u64,
    pub store_gb_month: f64,
    pub usd_functions: f64,
    pub usd_store: f64,
    pub usd_total: f64,
}

/// Published prices, us-east-1, x86 (https://aws.amazon.com/lambda/pricing/,
/// https://aws.amazon.com/s3/pricing/, S3 Standard, first 50 TB).
pub mod price {
    pub const LAMBDA_GB_S: f64 = 0.000_016_666_7;
    pub const LAMBDA_REQUEST: f64 = 0.20 / 1e6;
    pub const S3_GB_MONTH: f64 = 0.023;
    pub const S3_PUT: f64 = 0.005 / 1e3;
    pub const S3_GET: f64 = 0.0004 / 1e3;
    /// hours in the average month S3 storage is billed by
    pub const HOURS_PER_MONTH: f64 = 730.0;
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub store: String,
    /// how the two workers of the cross-worker method are linked
    pub workers: String,
    pub transfers: Vec<Cell>,
    /// where a 1-1 by-reference transfer's time goes, per size and method
    pub phases: Vec<Phases>,
    pub patterns: Vec<PatternCell>,
    /// the cross-worker pull started at arrival vs at `get`
    pub overlap: Vec<Overlap>,
    pub apps: Vec<AppCell>,
}

/// One size's by-reference transfer split into its steps (medians over
/// the runs of [`PHASES`], ms), as timed in the producer and the consumer.
#[derive(Debug, Clone, Serialize)]
pub struct Phases {
    pub size: u64,
    pub method: String,
    pub median_ms: std::collections::BTreeMap<String, f64>,
}

/// The steps `phases` in xdt_bench.py times: the producer's alloc round
/// trip, its copy into the memfd, the put round trip, the consumer's whole
/// invocation (which includes the consumer's get and touch), the end to
/// end, and an invocation of the consumer with no data (its fixed cost).
pub const PHASES: [&str; 8] = [
    "alloc",
    "copy",
    "put",
    "invoke",
    "get",
    "touch",
    "total",
    "invoke_empty",
];

/// The steps of a transfer across workers: the put on worker A (timed in
/// the producer), the consumer's invocation on worker B (timed by the
/// bench; it includes the consumer's get, which waits for the pull, and
/// its touch), the pull (worker B's metrics) and the end to end.
pub const CROSS_PHASES: [&str; 6] = ["put", "invoke", "get", "touch", "pull", "total"];

fn pattern_order(p: &str) -> usize {
    ["scatter", "gather", "broadcast"]
        .iter()
        .position(|x| *x == p)
        .unwrap_or(3)
}

pub const METHODS: [&str; 3] = ["xdt", "inline", "store"];
/// By reference across two workers (pulled over HTTP/2).
pub const CROSS: &str = "xdt-peer";

/// What every report says about the two workers.
pub const WORKERS_LABEL: &str = "two `thaw serve` daemons on this machine, each in its own network namespace, joined by a veth pair (MTU 9000, no rate or delay emulation); HTTP/2 h2c between them";

/// Runs the benchmark on a temporary state home, its object store set up
/// on that home for the run.
pub fn run(runtime_home: &std::path::Path, o: &Options) -> Result<Report> {
    let biggest = o.sizes.iter().copied().max().unwrap_or(0);
    thaw_server::on_temp_daemon_with(
        runtime_home,
        "xdt",
        |cfg| {
            // room for 16 consumers at once (a cap on reservations, not use)
            cfg.memory_budget_mb = cfg.memory_budget_mb.max(16384);
            cfg.limits.max_instances_per_function = cfg.limits.max_instances_per_function.max(16);
            cfg.xdt.objects.max_object_bytes = cfg.xdt.objects.max_object_bytes.max(biggest);
            cfg.xdt.objects.budget_per_function_bytes =
                cfg.xdt.objects.budget_per_function_bytes.max(biggest * 2);
            Ok(())
        },
        |app, socket| {
            let _store = thaw_tiers::remote::EmulatedStore::up(&app.cfg.home)?;
            let mut c = Client::new(Target::Unix(socket.to_path_buf()));
            deploy_all(&mut c, biggest)?;
            let event_limit = app.cfg.limits.event_bytes;
            let mut transfers = one_to_one(&mut c, event_limit, &o.sizes, o.runs)?;
            let mut phases = phases(&mut c, &o.sizes, o.runs)?;
            let mut patterns = patterns(&mut c, event_limit, o)?;
            let mut overlap = Vec::new();
            if let Some(exe) = &o.cross_worker_exe {
                let x = cross_worker(exe, runtime_home, o)?;
                transfers.extend(x.transfers);
                transfers.sort_by_key(|c| c.size);
                phases.extend(x.phases);
                patterns.extend(x.patterns);
                patterns.sort_by_key(|c| (pattern_order(&c.pattern), c.degree));
                overlap = x.overlap;
            }
            Ok(Report {
                store: STORE_LABEL.into(),
                workers: WORKERS_LABEL.into(),
                transfers,
                phases,
                patterns,
                overlap,
                apps: apps(&mut c, o)?,
            })
        },
    )
}

/// Memory of a function that holds (and maps) objects of up to `biggest`
/// bytes: room for the data, its encoding and the mapped object.
fn big_mb(biggest: u64) -> u64 {
    ((biggest * 4) >> 20).max(256) + 128
}

fn deploy_all(c: &mut Client, biggest: u64) -> Result<()> {
    let big = big_mb(biggest);
    let fns: [(&str, &str, u64, u32); 13] = [
        ("xdt-source", "source", big, 1),
        ("xdt-phases", "phases", big, 1),
        ("xdt-sink", "sink", big, 1),
        ("xdt-scatter", "scatter", 256, 1),
        ("xdt-broadcast", "broadcast", 256, 1),
        ("xdt-gather", "gather", 256, 1),
        ("xdt-psink", "sink", 256, 16),
        ("xdt-part", "part", 256, 16),
        ("wc-driver", "wc_driver", 1024, 1),
        ("wc-map", "wc_map", 512, 4),
        ("wc-reduce", "wc_reduce", 512, 4),
        ("ens-driver", "ens_driver", 1024, 1),
        ("ens-base", "ens_base", 1024, 4),
    ];
    for (name, handler, memory_mb, max_instances) in fns {
        deploy(c, name, handler, memory_mb, max_instances)?;
    }
    Ok(())
}

/// Deploys one function of `xdt_bench.py`.
pub fn deploy(
    c: &mut Client,
    name: &str,
    handler: &str,
    memory_mb: u64,
    max_instances: u32,
) -> Result<()> {
    let req = json!({
        "name": name,
        "handler": format!("xdt_bench.{handler}"),
        "code": {"format": "file", "filename": "xdt_bench.py",
                 "data_base64": base64::engine::general_purpose::STANDARD.encode(FUNCTIONS)},
        "memory_mb": memory_mb,
        "max_instances": max_instances,
        "timeout_ms": 600_000,
    });
    let r = c.request("POST", "/v1/functions", Some(&serde_json::to_vec(&req)?))?;
    if r.status != 201 {
        fail!(
            BenchServeError::Failed,
            "deploy {name}: {} {}",
            r.status,
            String::from_utf8_lossy(&r.body)
        );
    }
    Ok(())
}

/// (bytes pulled, seconds spent pulling) so far, from a worker's metrics.
fn pull_totals(c: &mut Client) -> Result<(f64, f64)> {
    let r = c.request("GET", "/metrics", None)?;
    let text = String::from_utf8_lossy(&r.body);
    let value = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    Ok((
        value("thaw_xdt_pulled_bytes_total "),
        value("thaw_xdt_pull_duration_seconds_sum "),
    ))
}

/// What the cross-worker method measured.
struct Cross {
    transfers: Vec<Cell>,
    phases: Vec<Phases>,
    patterns: Vec<PatternCell>,
    overlap: Vec<Overlap>,
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
const OVERLAP_RUNS: usize = 5;

fn start_pair(
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
fn cross_worker(
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
fn cold_consumer(pair: &crate::pair::Pair, size: u64) -> Result<Summary> {
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
fn invoke_all(socket: &std::path::Path, function: &str, events: &[Value]) -> Result<Vec<Value>> {
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
fn cross_patterns(pair: &crate::pair::Pair, o: &Options) -> Result<Vec<PatternCell>> {
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

/// Memory of each function the applications run (as deployed above), MB.
fn memory_mb(function: &str) -> f64 {
    match function {
        "wc-map" | "wc-reduce" => 512.0,
        _ => 1024.0,
    }
}

fn invoke(c: &mut Client, function: &str, ev: &Value) -> Result<Value> {
    invoke_path(c, &format!("/v1/functions/{function}/invoke"), ev)
}

fn invoke_path(c: &mut Client, path: &str, ev: &Value) -> Result<Value> {
    let r = c.request("POST", path, Some(&serde_json::to_vec(ev)?))?;
    if r.status != 200 {
        fail!(
            BenchServeError::Failed,
            "{path} {ev}: {} {}",
            r.status,
            String::from_utf8_lossy(&r.body)
        );
    }
    Ok(r.json()?)
}

/// The agent's cap on a function's output (`MAX_OUTPUT` in runtime/agent.py):
/// what a gather's producers may return inline.
const OUTPUT_CAP: u64 = 1 << 20;

/// Whether `size` bytes fit inline in a message of at most `limit` bytes
/// (base64 grows them by 4/3, plus the JSON around them).
fn fits_inline(size: u64, limit: u64) -> bool {
    size.div_ceil(3) * 4 + 256 <= limit
}

fn one_to_one(c: &mut Client, event_limit: u64, sizes: &[u64], runs: usize) -> Result<Vec<Cell>> {
    let mut cells = Vec::new();
    for &size in sizes {
        for method in METHODS {
            if method == "inline" && !fits_inline(size, event_limit) {
                cells.push(Cell {
                    size,
                    method: method.into(),
                    ms: None,
                    mb_per_s: None,
                    note: format!("over the {event_limit}-byte inline event limit"),
                });
                continue;
            }
            let out = invoke(
                c,
                "xdt-source",
                &json!({"size": size, "method": method, "runs": runs}),
            )?;
            let ms: Vec<f64> = out["ms"]
                .as_array()
                .or_fail("no timings")?
                .iter()
                .filter_map(Value::as_f64)
                .collect();
            let s = summarize(&ms).or_fail("no samples")?;
            cells.push(Cell {
                size,
                method: method.into(),
                mb_per_s: Some(size as f64 / 1e6 / (s.median / 1e3)),
                ms: Some(s),
                note: String::new(),
            });
        }
    }
    Ok(cells)
}

fn phases(c: &mut Client, sizes: &[u64], runs: usize) -> Result<Vec<Phases>> {
    let mut out = Vec::new();
    for &size in sizes {
        let r = invoke(c, "xdt-phases", &json!({"size": size, "runs": runs}))?;
        let rows = r["rows"].as_array().or_fail("no phase rows")?;
        let mut median_ms = std::collections::BTreeMap::new();
        for p in PHASES {
            let v: Vec<f64> = rows.iter().filter_map(|r| r[p].as_f64()).collect();
            median_ms.insert(p.to_string(), summarize(&v).or_fail("no samples")?.median);
        }
        out.push(Phases {
            size,
            method: "xdt".into(),
            median_ms,
        });
    }
    Ok(out)
}

fn patterns(c: &mut Client, event_limit: u64, o: &Options) -> Result<Vec<PatternCell>> {
    let mut cells = Vec::new();
    for pattern in ["scatter", "gather", "broadcast"] {
        for &degree in &o.degrees {
            for method in METHODS {
                let mut cell = Cell {
                    size: o.pattern_size,
                    method: method.into(),
                    ms: None,
                    mb_per_s: None,
                    note: String::new(),
                };
                // a gather's objects come back in its producers' outputs
                let (limit, what) = match pattern {
                    "gather" => (OUTPUT_CAP, "output cap"),
                    _ => (event_limit, "event limit"),
                };
                if method == "inline" && !fits_inline(o.pattern_size, limit) {
                    cell.note = format!("over the {limit}-byte inline {what}");
                    cells.push(PatternCell {
                        pattern: pattern.into(),
                        degree,
                        cell,
                    });
                    continue;
                }
                let ev = json!({"size": o.pattern_size, "method": method, "degree": degree});
                let mut ms = Vec::new();
                for run in 0..=o.pattern_runs {
                    let out = invoke(c, &format!("xdt-{pattern}"), &ev)?;
                    // the first round starts the consumers' instances
                    if run > 0 {
                        ms.push(out["ms"].as_f64().or_fail("no timing")?);
                    }
                }
                let s = summarize(&ms).or_fail("no samples")?;
                cell.mb_per_s =
                    Some((o.pattern_size * degree as u64) as f64 / 1e6 / (s.median / 1e3));
                cell.ms = Some(s);
                cells.push(PatternCell {
                    pattern: pattern.into(),
                    degree,
                    cell,
                });
            }
        }
    }
    Ok(cells)
}

fn apps(c: &mut Client, o: &Options) -> Result<Vec<AppCell>> {
    if o.app_runs == 0 {
        return Ok(Vec::new());
    }
    let mut cells = Vec::new();
    let apps = [
        (
            "mapreduce-wordcount",
            "wc-driver",
            json!({"mb": o.wc_mb, "mappers": 4, "reducers": 2}),
        ),
        (
            "stacking-ensemble",
            "ens-driver",
            json!({"rows": o.ens_rows, "features": 40}),
        ),
    ];
    const APP_METHODS: [&str; 2] = ["xdt", "store"];
    for (app, driver, base) in apps {
        // the methods take turns run by run (after a warm-up of each), so a
        // change in the machine's load falls on both alike
        let mut runs: [Vec<Value>; 2] = Default::default();
        for run in 0..=o.app_runs {
            for (method, kept) in APP_METHODS.iter().zip(&mut runs) {
                let mut ev = base.clone();
                ev["method"] = json!(method);
                let out = invoke(c, driver, &ev)?;
                if run > 0 {
                    kept.push(out);
                }
            }
        }
        for (method, mut runs) in APP_METHODS.into_iter().zip(runs) {
            let e2e: Vec<f64> = runs.iter().filter_map(|r| r["e2e_ms"].as_f64()).collect();
            let mut costs: Vec<Cost> = runs.iter().map(|r| cost(driver, method, r)).collect();
            costs.sort_by(|a, b| a.usd_total.total_cmp(&b.usd_total));
            let stages = stage_summaries(&runs);
            let last = runs.pop().or_fail("no runs")?;
            let mut result = last.clone();
            if let Some(m) = result.as_object_mut() {
                m.retain(|k, _| !["fn_ms", "e2e_ms", "stages"].contains(&k.as_str()));
            }
            cells.push(AppCell {
                app: app.into(),
                method: method.into(),
                e2e_ms: summarize(&e2e).or_fail("no timings")?,
                cost: costs[costs.len() / 2].clone(),
                result,
                stages,
            });
        }
    }
    Ok(cells)
}

/// The runs' `stages` ([function, stage, ms] rows) summarised per
/// function and stage over the runs, in the order of the first run.
fn stage_summaries(runs: &[Value]) -> Vec<Stage> {
    let mut all: Vec<(String, String, Vec<f64>)> = Vec::new();
    for row in runs
        .iter()
        .flat_map(|r| r["stages"].as_array().into_iter().flatten())
    {
        let (Some(f), Some(stage), Some(ms)) = (row[0].as_str(), row[1].as_str(), row[2].as_f64())
        else {
            continue;
        };
        match all.iter_mut().find(|(g, s, _)| g == f && s == stage) {
            Some((_, _, v)) => v.push(ms),
            None => all.push((f.into(), stage.into(), vec![ms])),
        }
    }
    all.into_iter()
        .filter_map(|(function, stage, ms)| {
            Some(Stage {
                function,
                stage,
                ms: summarize(&ms)?,
            })
        })
        .collect()
}

/// One application run's cost at published prices: every function billed
/// for its duration at its memory size (the driver for the whole run, as a
/// Lambda waiting on others is), one request fee per invocation, and for
/// the store method its PUT / GET fees and storage for the run's length.
/// XDT's objects are held by the worker outside any function: not billed.
pub fn cost(driver: &str, method: &str, run: &Value) -> Cost {
    let e2e_s = run["e2e_ms"].as_f64().unwrap_or(0.0) / 1e3;
    let mut gb_s = e2e_s * memory_mb(driver) / 1024.0;
    let mut requests = 1;
    if let Some(fns) = run["fn_ms"].as_object() {
        for (f, ms) in fns {
            for m in ms
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_f64)
            {
                gb_s += m / 1e3 * memory_mb(f) / 1024.0;
                requests += 1;
            }
        }
    }
    let mut c = Cost {
        function_gb_s: gb_s,
        requests,
        ..Cost::default()
    };
    if method == "store" {
        c.store_puts = run["puts"].as_u64().unwrap_or(0);
        c.store_gets = run["gets"].as_u64().unwrap_or(0);
        let gb = run["bytes"].as_f64().unwrap_or(0.0) / 1e9;
        c.store_gb_month = gb * e2e_s / 3600.0 / price::HOURS_PER_MONTH;
    }
    c.usd_functions = gb_s * price::LAMBDA_GB_S + requests as f64 * price::LAMBDA_REQUEST;
    c.usd_store = c.store_puts as f64 * price::S3_PUT
        + c.store_gets as f64 * price::S3_GET
        + c.store_gb_month * price::S3_GB_MONTH;
    c.usd_total = c.usd_functions + c.usd_store;
    c
}

fn human(size: u64) -> String {
    match size {
        s if s >= 1_000_000 => format!("{} MB", s / 1_000_000),
        s if s >= 1_000 => format!("{} KB", s / 1_000),
        s => format!("{s} B"),
    }
}

fn ms_cols(m: &Option<Summary>) -> String {
    match m {
        Some(m) => format!("{} | {:.3} | {:.3} | {:.3}", m.n, m.min, m.median, m.p99),
        None => "- | - | - | -".into(),
    }
}

/// A method as the tables print it: the store is always labelled emulated.
fn label(method: &str) -> &str {
    match method {
        "store" => "store (emulated)",
        CROSS => "xdt across workers",
        m => m,
    }
}

fn ratio(num: Option<&Summary>, den: Option<&Summary>) -> String {
    match (num, den) {
        (Some(n), Some(d)) => format!("{:.2}", n.median / d.median),
        _ => "-".into(),
    }
}

pub fn markdown(r: &Report) -> String {
    let mut s = format!(
        "Store: {} (emulated).\n\nWorkers (xdt across workers): {}.\n\n",
        r.store, r.workers
    );
    s += "1-1 transfers\n\n\
          | size | method | n | min ms | median ms | p99 ms | MB/s (median) | store / this | this / inline | note |\n\
          |---|---|---|---|---|---|---|---|---|---|\n";
    let find = |size: u64, m: &str| {
        r.transfers
            .iter()
            .find(|o| o.size == size && o.method == m)
            .and_then(|o| o.ms.as_ref())
    };
    for c in &r.transfers {
        s += &format!(
            "| {} | {} | {} | {} | {} | {} | {} |\n",
            human(c.size),
            label(&c.method),
            ms_cols(&c.ms),
            c.mb_per_s.map_or("-".into(), |v| format!("{v:.0}")),
            ratio(find(c.size, "store"), c.ms.as_ref()),
            ratio(c.ms.as_ref(), find(c.size, "inline")),
            c.note
        );
    }
    let steps = [
        (
            "xdt",
            &PHASES[..],
            "By reference on one worker, step by step (median ms; `get` and `touch` are inside `invoke`; `invoke_empty` is the consumer's invocation with no data, its fixed cost)",
        ),
        (
            CROSS,
            &CROSS_PHASES[..],
            "Across workers, step by step (median ms; `get` (waiting for the pull) and `touch` are inside `invoke`; `pull` is worker B's own time for it; `total` = put + invoke)",
        ),
    ];
    for (method, keys, title) in steps {
        let rows: Vec<&Phases> = r.phases.iter().filter(|p| p.method == method).collect();
        if rows.is_empty() {
            continue;
        }
        s += &format!("\n{title}\n\n| size | {} |\n|---|", keys.join(" | "));
        s += &"---|".repeat(keys.len());
        s += "\n";
        for p in rows {
            s += &format!("| {} |", human(p.size));
            for k in keys {
                s += &format!(" {:.3} |", p.median_ms.get(*k).copied().unwrap_or(f64::NAN));
            }
            s += "\n";
        }
    }
    if !r.overlap.is_empty() {
        s += "\nOverlap across workers: a cold consumer (`?force=cold`), the pull started when the invocation arrives vs at `thaw.get` (ms, consumer invocation)\n\n\
              | size | n | at arrival: median | p99 | at get: median | p99 | saved (median) |\n\
              |---|---|---|---|---|---|---|\n";
        for o in &r.overlap {
            s += &format!(
                "| {} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} |\n",
                human(o.size),
                o.at_arrival.n,
                o.at_arrival.median,
                o.at_arrival.p99,
                o.at_get.median,
                o.at_get.p99,
                o.at_get.median - o.at_arrival.median
            );
        }
    }
    if !r.patterns.is_empty() {
        s += "\nPatterns (one object per consumer or producer; time until every consumer has touched every page)\n\n\
              | pattern | degree | size | method | n | min ms | median ms | p99 ms | MB/s (median, all objects) | store / this | note |\n\
              |---|---|---|---|---|---|---|---|---|---|---|\n";
        for c in &r.patterns {
            let store = r
                .patterns
                .iter()
                .find(|o| {
                    o.pattern == c.pattern && o.degree == c.degree && o.cell.method == "store"
                })
                .and_then(|o| o.cell.ms.as_ref());
            s += &format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
                c.pattern,
                c.degree,
                human(c.cell.size),
                label(&c.cell.method),
                ms_cols(&c.cell.ms),
                c.cell.mb_per_s.map_or("-".into(), |v| format!("{v:.0}")),
                ratio(store, c.cell.ms.as_ref()),
                c.cell.note
            );
        }
    }
    if !r.apps.is_empty() {
        s += "\nApplications (end to end; cost per run at published us-east-1 prices, median run)\n\n\
              | application | method | n | min ms | median ms | p99 ms | store / this | function GB-s | requests | store PUT / GET | USD functions | USD store | USD total |\n\
              |---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
        for c in &r.apps {
            let store = r
                .apps
                .iter()
                .find(|o| o.app == c.app && o.method == "store")
                .map(|o| &o.e2e_ms);
            let k = &c.cost;
            s += &format!(
                "| {} | {} | {} | {} | {:.3} | {} | {} / {} | {:.3e} | {:.3e} | {:.3e} |\n",
                c.app,
                label(&c.method),
                ms_cols(&Some(c.e2e_ms)),
                ratio(store, Some(&c.e2e_ms)),
                k.function_gb_s,
                k.requests,
                k.store_puts,
                k.store_gets,
                k.usd_functions,
                k.usd_store,
                k.usd_total
            );
        }
        s += &app_stages(&r.apps);
    }
    s
}

/// The applications' stages side by side per method (xdt against store).
fn app_stages(apps: &[AppCell]) -> String {
    let mut s = String::from(
        "\nApplications step by step (ms over the runs: median (min / p99); a called \
         function's stage: its slowest invocation per run; \"dispatch\": from the \
         driver's invoke until the function runs)\n\n\
         | application | function | stage | xdt | store (emulated) | store - xdt (medians) |\n\
         |---|---|---|---|---|---|\n",
    );
    let cell = |m: Option<&Summary>| {
        m.map_or("-".into(), |m| {
            format!("{:.1} ({:.1} / {:.1})", m.median, m.min, m.p99)
        })
    };
    for x in apps.iter().filter(|a| a.method == "xdt") {
        let store = apps.iter().find(|o| o.app == x.app && o.method == "store");
        for st in &x.stages {
            let other = store.and_then(|o| {
                o.stages
                    .iter()
                    .find(|t| t.function == st.function && t.stage == st.stage)
                    .map(|t| &t.ms)
            });
            s += &format!(
                "| {} | {} | {} | {} | {} | {} |\n",
                x.app,
                st.function,
                st.stage,
                cell(Some(&st.ms)),
                cell(other),
                other.map_or("-".into(), |o| format!("{:+.1}", o.median - st.ms.median))
            );
        }
    }
    s
}

/// The report's plots, each an SVG (file-name suffix, document): 1-1
/// latency and bandwidth per size and method, each pattern's latency per
/// degree and method, and the applications' end-to-end time.
pub fn plots(r: &Report) -> Vec<(String, String)> {
    use thaw_plot::{Bars, Lines, Scale};
    let mut methods: Vec<&str> = METHODS.to_vec();
    if r.transfers.iter().any(|c| c.method == CROSS) {
        methods.push(CROSS);
    }
    let per_size = |f: &dyn Fn(&Cell) -> Option<f64>| -> Vec<(String, Vec<(f64, f64)>)> {
        methods
            .iter()
            .map(|m| {
                let pts = r
                    .transfers
                    .iter()
                    .filter(|c| c.method == *m)
                    .filter_map(|c| Some((c.size as f64, f(c)?)))
                    .collect();
                (label(m).to_string(), pts)
            })
            .collect()
    };
    let mut out = vec![
        (
            "latency".to_string(),
            Lines {
                title: "1-1 transfer latency (median)".into(),
                x_label: "object size, bytes".into(),
                y_label: "ms".into(),
                x_scale: Scale::Log,
                y_scale: Scale::Log,
                series: per_size(&|c| c.ms.map(|m| m.median)),
            }
            .svg(),
        ),
        (
            "latency-p99".to_string(),
            Lines {
                title: "1-1 transfer latency (p99)".into(),
                x_label: "object size, bytes".into(),
                y_label: "ms".into(),
                x_scale: Scale::Log,
                y_scale: Scale::Log,
                series: per_size(&|c| c.ms.map(|m| m.p99)),
            }
            .svg(),
        ),
        (
            "bandwidth".to_string(),
            Lines {
                title: "1-1 effective bandwidth (size / median latency)".into(),
                x_label: "object size, bytes".into(),
                y_label: "MB/s".into(),
                x_scale: Scale::Log,
                y_scale: Scale::Log,
                series: per_size(&|c| c.mb_per_s),
            }
            .svg(),
        ),
    ];
    for pattern in ["scatter", "gather", "broadcast"] {
        let series: Vec<(String, Vec<(f64, f64)>)> = methods
            .iter()
            .map(|m| {
                let pts = r
                    .patterns
                    .iter()
                    .filter(|c| c.pattern == pattern && c.cell.method == *m)
                    .filter_map(|c| Some((c.degree as f64, c.cell.ms?.median)))
                    .collect();
                (label(m).to_string(), pts)
            })
            .collect();
        if series.iter().all(|(_, p)| p.is_empty()) {
            continue;
        }
        out.push((
            pattern.to_string(),
            Lines {
                title: format!("{pattern}: latency per degree (median)"),
                x_label: "degree".into(),
                y_label: "ms".into(),
                x_scale: Scale::Log,
                y_scale: Scale::Log,
                series,
            }
            .svg(),
        ));
    }
    if !r.apps.is_empty() {
        let mut apps: Vec<String> = r.apps.iter().map(|a| a.app.clone()).collect();
        apps.dedup();
        let series = ["xdt", "store"]
            .iter()
            .map(|m| {
                let v = apps
                    .iter()
                    .map(|app| {
                        r.apps
                            .iter()
                            .find(|a| &a.app == app && a.method == *m)
                            .map(|a| a.e2e_ms.median)
                    })
                    .collect();
                (label(m).to_string(), v)
            })
            .collect();
        out.push((
            "apps".to_string(),
            Bars {
                title: "Applications: end-to-end time (median)".into(),
                y_label: "ms".into(),
                scale: Scale::Linear,
                categories: apps,
                series,
            }
            .svg(),
        ));
    }
    out
}
