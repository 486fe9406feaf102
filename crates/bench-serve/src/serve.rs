//! `thaw bench serve`: the daemon against the worker it wraps, side by side
//! in one run (docs/BENCHMARKS.md):
//!
//! * warm: sequential invocations of one warm instance, in-process
//!   (`invoke_event` on the sandbox) and through HTTP on the Unix socket;
//! * throughput: concurrent clients hitting warm instances for a while;
//! * restore: a restore start through the API (`?force=cold`) and the same
//!   restore (+ after-restore step + invocation) done by the worker directly,
//!   interleaved.
use crate::error::{BenchServeError, OrFail, Result};
use base64::Engine as _;
use serde::Serialize;
use serde_json::json;
use std::time::{Duration, Instant};
use thaw_bench::stats::{summarize, Summary};
use thaw_error::{fail, ResultExt};
use thaw_worker::{RestoreRequest, StartStrategy};

use thaw_client::{Client, Target};

pub struct Options {
    /// Function from the runtime's suite, deployed as a user function.
    pub function: String,
    pub warm_runs: usize,
    pub restore_runs: usize,
    pub clients: usize,
    pub seconds: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub function: String,
    pub warm_inprocess_ms: Summary,
    pub warm_api_ms: Summary,
    /// median API - median in-process
    pub api_overhead_ms: f64,
    pub throughput_rps: f64,
    pub throughput_clients: usize,
    pub throughput_latency_ms: Summary,
    pub restore_direct_ms: Summary,
    pub restore_api_ms: Summary,
    /// median API restore / median direct restore
    pub restore_ratio: f64,
    /// API / direct within each interleaved pair: load that drifts over
    /// the run moves both halves of a pair alike
    pub restore_pair_ratio: Summary,
    pub strategy: StartStrategy,
    pub tier: String,
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

fn stats(xs: &[f64]) -> Result<Summary> {
    summarize(xs).or_fail("no samples")
}

/// Runs the benchmark on a temporary state home; the runtime root comes
/// from `runtime_home`.
pub fn run(runtime_home: &std::path::Path, o: &Options) -> Result<Report> {
    thaw_server::on_temp_daemon(runtime_home, "serve", |app, socket| measure(app, socket, o))
}

fn measure(app: &thaw_server::App, socket: &std::path::Path, o: &Options) -> Result<Report> {
    let src_path = app
        .worker
        .root
        .path
        .join(format!("opt/thaw/functions/{}.py", o.function));
    let src =
        std::fs::read(&src_path).with_context(|| format!("reading {}", src_path.display()))?;
    let target = Target::Unix(socket.to_path_buf());
    let mut c = Client::new(target.clone());
    let req = json!({
        "name": "bench",
        "handler": format!("{}.handler", o.function),
        "code": {"format": "file", "filename": format!("{}.py", o.function),
                 "data_base64": base64::engine::general_purpose::STANDARD.encode(&src)},
        // room for every restore start: an eviction's teardown (kill, reap,
        // cgroup removal) would otherwise overlap the next timed restore,
        // while the direct path tears down outside its timing
        "max_instances": u32::try_from((o.clients.max(1) + o.restore_runs + 1).min(64)).unwrap_or(64),
        "memory_mb": 64,
    });
    let r = c.request("POST", "/v1/functions", Some(&serde_json::to_vec(&req)?))?;
    if r.status != 201 {
        fail!(
            BenchServeError::Failed,
            "deploy failed: {} {}",
            r.status,
            String::from_utf8_lossy(&r.body)
        );
    }
    let v = thaw_server::api_lookup(app, "bench")?;
    let snap = v
        .placed()
        .and_then(|p| p.stored.local().cloned())
        .or_fail("deployed without a local snapshot")?;
    let strategy = v
        .rec
        .strategy
        .restore()
        .or_fail("deployed with fresh starts (no snapshot to restore)")?;
    let event = json!({"name": "bench"});
    let body = serde_json::to_vec(&event)?;
    let invoke = |c: &mut Client, q: &str| -> Result<f64> {
        let t = Instant::now();
        let r = c.request(
            "POST",
            &format!("/v1/functions/bench/invoke{q}"),
            Some(&body),
        )?;
        let dt = ms(t);
        if r.status != 200 {
            fail!(
                BenchServeError::Failed,
                "invoke: {} {}",
                r.status,
                String::from_utf8_lossy(&r.body)
            );
        }
        Ok(dt)
    };
    let timeout = Duration::from_secs(30);

    // warm, interleaved: in-process on our own instance, then via the API
    let (mut sb, _) = app.worker.restore(
        RestoreRequest::new(&snap, strategy)
            .function(&v.func)
            .pool(None),
    )?;
    invoke(&mut c, "")?;
    let (mut inproc, mut api) = (Vec::new(), Vec::new());
    for _ in 0..o.warm_runs {
        let t = Instant::now();
        let r = thaw_worker::invoke_event(&mut sb, &event, timeout)?;
        inproc.push(ms(t));
        if let Err(e) = r.output {
            fail!(BenchServeError::Failed, "in-process invoke failed: {e}");
        }
        api.push(invoke(&mut c, "")?);
    }
    drop(sb);

    // throughput: `clients` connections, each with its own warm instance
    let deadline = Instant::now() + Duration::from_secs_f64(o.seconds);
    let per_client: Vec<Result<Vec<f64>>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..o.clients.max(1))
            .map(|_| {
                let target = target.clone();
                let invoke = &invoke;
                s.spawn(move || {
                    let mut c = Client::new(target);
                    let mut lat = Vec::new();
                    while Instant::now() < deadline {
                        lat.push(invoke(&mut c, "")?);
                    }
                    Ok(lat)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| fail!(BenchServeError::Failed, "client thread panicked"))
            })
            .collect()
    });
    let mut all = Vec::new();
    for r in per_client {
        all.extend(r?);
    }
    let rps = all.len() as f64 / o.seconds;

    // restore starts: direct (worker) and through the API, interleaved
    // (the order alternates, so neither path always runs right after the
    // other's sandbox teardown)
    let (mut direct, mut via_api) = (Vec::new(), Vec::new());
    for i in 0..o.restore_runs {
        if i % 2 == 1 {
            via_api.push(invoke(&mut c, "?force=cold")?);
        }
        let t = Instant::now();
        // made ready as the daemon makes every restore
        let (mut sb, _) = app.worker.restore(
            RestoreRequest::new(&snap, strategy)
                .function(&v.func)
                .pool(None),
        )?;
        thaw_worker::after_restore(&mut sb, &format!("direct-{i}"), timeout)?;
        let r = thaw_worker::invoke_event(&mut sb, &event, timeout)?;
        direct.push(ms(t));
        if let Err(e) = r.output {
            fail!(BenchServeError::Failed, "direct restore invoke failed: {e}");
        }
        drop(sb);
        if i % 2 == 0 {
            via_api.push(invoke(&mut c, "?force=cold")?);
        }
    }
    let pairs: Vec<f64> = via_api.iter().zip(&direct).map(|(a, d)| a / d).collect();
    let warm_inprocess_ms = stats(&inproc)?;
    let warm_api_ms = stats(&api)?;
    let restore_direct_ms = stats(&direct)?;
    let restore_api_ms = stats(&via_api)?;
    Ok(Report {
        function: o.function.clone(),
        api_overhead_ms: warm_api_ms.median - warm_inprocess_ms.median,
        warm_inprocess_ms,
        warm_api_ms,
        throughput_rps: rps,
        throughput_clients: o.clients,
        throughput_latency_ms: stats(&all)?,
        restore_ratio: restore_api_ms.median / restore_direct_ms.median,
        restore_pair_ratio: stats(&pairs)?,
        restore_direct_ms,
        restore_api_ms,
        strategy: v.rec.strategy,
        tier: v.rec.tier.clone(),
    })
}

pub fn markdown(r: &Report) -> String {
    let row = |name: &str, s: &Summary| {
        format!(
            "| {name} | {} | {:.3} | {:.3} | {:.3} |\n",
            s.n, s.min, s.median, s.p99
        )
    };
    let mut m = format!(
        "thaw bench serve: {} ({} from {}), measured side by side in one run\n\n\
         | path | n | min ms | median ms | p99 ms |\n|---|---|---|---|---|\n",
        r.function, r.strategy, r.tier
    );
    m += &row("warm, in-process (worker)", &r.warm_inprocess_ms);
    m += &row("warm, HTTP over the Unix socket", &r.warm_api_ms);
    m += &row(
        &format!("warm, HTTP, {} concurrent clients", r.throughput_clients),
        &r.throughput_latency_ms,
    );
    m += &row("restore start, worker directly", &r.restore_direct_ms);
    m += &row("restore start, HTTP (?force=cold)", &r.restore_api_ms);
    m += &format!(
        "\nAPI overhead (median, warm): {:.3} ms; throughput: {:.0} requests/s with {} clients; \
         restore through the API / direct: {:.2}x (medians); per interleaved pair: \
         min {:.2}x, median {:.2}x, p99 {:.2}x\n",
        r.api_overhead_ms,
        r.throughput_rps,
        r.throughput_clients,
        r.restore_ratio,
        r.restore_pair_ratio.min,
        r.restore_pair_ratio.median,
        r.restore_pair_ratio.p99
    );
    m
}
