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
mod cross;
mod report;

use crate::error::{BenchServeError, OrFail, Result};
use base64::Engine as _;
use cross::cross_worker;
pub use cross::Overlap;
pub use report::{markdown, plots};
use serde::Serialize;
use serde_json::{json, Value};
use thaw_bench::stats::{summarize, Summary};
use thaw_error::fail;

use thaw_client::{Client, Target};

const FUNCTIONS: &str = include_str!("../xdt_bench.py");

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
