//! `thaw bench density` and `thaw bench burst`: what one node holds and how
//! fast it starts instances, through the daemon's API with its defaults
//! (docs/BENCHMARKS.md).
//!
//! * density: `functions` hello-world functions prewarmed `per_function`
//!   times each; the idle instances the node keeps, the memory the daemon
//!   measures for them beside what the kernel reports (resident pages and
//!   the fall of MemAvailable), under the daemon's default accounting and,
//!   as the baseline, under `memory_accounting = "declared"`;
//! * burst: N requests sent at once to a function with no live instance,
//!   against the baseline of a prewarm of the same count, alternated over
//!   repeated runs in one daemon.
use crate::error::{BenchServeError, Result};
use base64::Engine as _;
use serde::Serialize;
use serde_json::{json, Value};
use std::path::Path;
use std::sync::Barrier;
use std::time::Instant;
use thaw_bench::stats::{summarize, Summary};
use thaw_client::{Client, Target};
use thaw_error::fail;

const HELLO: &str = "def handler(event):\n    return {\"hello\": event}\n";

/// The hello world holding `state_mb` MiB of state made at import (random
/// bytes: no page of it is zero or like another).
fn hello_with_state(state_mb: u32) -> String {
    match state_mb {
        0 => HELLO.to_string(),
        mb => format!("import os\nSTATE = os.urandom({mb} << 20)\n\n{HELLO}"),
    }
}
const MIB: f64 = (1u64 << 20) as f64;

fn call(c: &mut Client, method: &str, path: &str, body: &Value) -> Result<Value> {
    let body = serde_json::to_vec(body)?;
    Ok(crate::request_ok(c, method, path, Some(&body))?.json()?)
}

/// Deploys `code` as `name`; what is not given is the daemon's default.
fn deploy_code(
    c: &mut Client,
    name: &str,
    max_instances: u32,
    code: &str,
    memory_mb: Option<u32>,
) -> Result<()> {
    let mut req = json!({
        "name": name,
        "handler": "hello.handler",
        "code": {"format": "file", "filename": "hello.py",
                 "data_base64": base64::engine::general_purpose::STANDARD.encode(code)},
        "max_instances": max_instances,
    });
    if let Some(mb) = memory_mb {
        req["memory_mb"] = json!(mb);
    }
    call(c, "POST", "/v1/functions", &req).map(drop)
}

fn remove(c: &mut Client, name: &str) -> Result<()> {
    let r = c.request("DELETE", &format!("/v1/functions/{name}"), None)?;
    if r.status != 200 && r.status != 204 {
        fail!(BenchServeError::Failed, "removing {name}: {}", r.status);
    }
    Ok(())
}

fn mem_available_bytes() -> Result<u64> {
    let m = std::fs::read_to_string("/proc/meminfo")?;
    m.lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb << 10)
        .ok_or_else(|| BenchServeError::Failed("no MemAvailable in /proc/meminfo".into()))
}

pub struct DensityOptions {
    pub functions: u32,
    pub per_function: u32,
    /// MiB of state each function makes at import (0: a plain hello world)
    pub state_mb: u32,
}

/// One accounting's figures.
#[derive(Debug, Clone, Serialize)]
pub struct Density {
    pub accounting: String,
    pub budget_mib: u64,
    /// instances the prewarms started, and the errors they answered
    pub started: u64,
    pub prewarm_errors: Vec<String>,
    /// idle instances held after every prewarm
    pub idle: u64,
    pub prewarm_seconds: f64,
    /// the instances' own pages, as the daemon measures and charges them
    pub private_mib_per_instance: f64,
    /// their cgroup charge or RSS (whichever is more), mapped snapshot
    /// pages included in each
    pub resident_mib_per_instance: f64,
    /// the fall of MemAvailable from before the deploys, per instance
    pub mem_available_mib_per_instance: f64,
    /// what the budget charges them all (shared pages once per function)
    pub budgeted_mib: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct DensityReport {
    pub functions: u32,
    pub per_function: u32,
    pub state_mb: u32,
    pub runs: Vec<Density>,
}

pub fn density(runtime_home: &Path, o: &DensityOptions) -> Result<DensityReport> {
    let mut runs = Vec::new();
    // the baseline first: the old accounting, on a daemon of its own
    for accounting in ["declared", "measured"] {
        let r = thaw_server::on_temp_daemon_with(
            runtime_home,
            &format!("density-{accounting}"),
            |cfg| {
                cfg.memory_accounting = accounting.into();
                Ok::<_, BenchServeError>(())
            },
            |app, socket| fill(app, socket, o, accounting),
        )?;
        runs.push(r);
    }
    Ok(DensityReport {
        functions: o.functions,
        per_function: o.per_function,
        state_mb: o.state_mb,
        runs,
    })
}

fn fill(
    app: &thaw_server::App,
    socket: &Path,
    o: &DensityOptions,
    accounting: &str,
) -> Result<Density> {
    let mut c = Client::new(Target::Unix(socket.to_path_buf()));
    let before = mem_available_bytes()?;
    let names: Vec<String> = (0..o.functions).map(|i| format!("hello{i}")).collect();
    let code = hello_with_state(o.state_mb);
    for n in &names {
        deploy_code(&mut c, n, o.per_function, &code, None)?;
    }
    let t = Instant::now();
    let (mut started, mut prewarm_errors) = (0, Vec::new());
    for n in &names {
        let body = json!({"count": o.per_function});
        let v = call(&mut c, "PUT", &format!("/v1/functions/{n}/prewarm"), &body)?;
        started += v["started"].as_u64().unwrap_or(0);
        for e in v["errors"].as_array().into_iter().flatten() {
            prewarm_errors.push(format!("{n}: {}", e.as_str().unwrap_or("?")));
        }
    }
    let prewarm_seconds = t.elapsed().as_secs_f64();
    // every instance measured since it went idle (each is read every second)
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let after = mem_available_bytes()?;
    let list = call(&mut c, "GET", "/v1/functions", &Value::Null)?;
    let (mut idle, mut private, mut resident) = (0u64, 0u64, 0u64);
    for f in list["functions"].as_array().into_iter().flatten() {
        let i = &f["instances"];
        idle += i["idle"].as_u64().unwrap_or(0);
        private += i["private_bytes"].as_u64().unwrap_or(0);
        resident += i["memory_bytes"].as_u64().unwrap_or(0);
    }
    if idle == 0 {
        fail!(BenchServeError::Failed, "no instance stayed idle");
    }
    let per = |b: u64| b as f64 / MIB / idle as f64;
    Ok(Density {
        accounting: accounting.into(),
        budget_mib: app.cfg.memory_budget_mb,
        started,
        prewarm_errors,
        idle,
        prewarm_seconds,
        private_mib_per_instance: per(private),
        resident_mib_per_instance: per(resident),
        mem_available_mib_per_instance: per(before.saturating_sub(after)),
        budgeted_mib: app.instances.budgeted_bytes() as f64 / MIB,
    })
}

pub fn density_markdown(r: &DensityReport) -> String {
    let mut s = format!(
        "{} hello-world functions ({} MiB of state each) x {} prewarmed instances, the daemon's defaults otherwise\n\n\
         | accounting | budget MiB | started | prewarm errors | idle held | prewarms s | private MiB/inst | resident MiB/inst | MemAvailable fall MiB/inst | budgeted MiB |\n\
         |---|---|---|---|---|---|---|---|---|---|\n",
        r.functions, r.state_mb, r.per_function
    );
    for d in &r.runs {
        s += &format!(
            "| {} | {} | {} | {} | {} | {:.1} | {:.2} | {:.2} | {:.2} | {:.0} |\n",
            d.accounting,
            d.budget_mib,
            d.started,
            d.prewarm_errors.len(),
            d.idle,
            d.prewarm_seconds,
            d.private_mib_per_instance,
            d.resident_mib_per_instance,
            d.mem_available_mib_per_instance,
            d.budgeted_mib
        );
    }
    s
}

pub struct BurstOptions {
    pub sizes: Vec<usize>,
    pub runs: usize,
    pub max_instances: u32,
    /// the function's memory_mb (None: the daemon's default)
    pub memory_mb: Option<u32>,
    /// send every request with `?force=cold`: each one restores an instance
    /// of its own instead of waiting for one that goes idle
    pub cold: bool,
}

/// One burst size over every run.
#[derive(Debug, Clone, Serialize)]
pub struct Burst {
    pub requests: usize,
    /// answered 200, over all runs
    pub ok: usize,
    pub sent: usize,
    /// requests / wall time of the burst, one per run
    pub starts_per_s: Summary,
    /// latency of every request of every run
    pub latency_ms: Summary,
    /// new instances each burst restored (the rest reused one that went idle)
    pub restores: Summary,
    /// the baseline: instances / wall time of a prewarm of the same count
    /// (at most `max_instances`), one per run
    pub prewarm_per_s: Summary,
    /// burst starts/s / prewarm restores/s within each run
    pub ratio: Summary,
}

#[derive(Debug, Clone, Serialize)]
pub struct BurstReport {
    pub runs: usize,
    pub max_instances: u32,
    pub memory_mb: Option<u32>,
    pub cold: bool,
    pub budget_mib: u64,
    pub bursts: Vec<Burst>,
}

pub fn burst(runtime_home: &Path, o: &BurstOptions) -> Result<BurstReport> {
    if o.sizes.is_empty() || o.runs == 0 {
        fail!(BenchServeError::Config, "need a burst size and a run");
    }
    thaw_server::on_temp_daemon(runtime_home, "burst", |app, socket| {
        let mut bursts = Vec::new();
        for &n in &o.sizes {
            bursts.push(burst_of(socket, n, o)?);
        }
        Ok::<_, BenchServeError>(BurstReport {
            runs: o.runs,
            max_instances: o.max_instances,
            memory_mb: o.memory_mb,
            cold: o.cold,
            budget_mib: app.cfg.memory_budget_mb,
            bursts,
        })
    })
}

fn stats(xs: &[f64]) -> Result<Summary> {
    summarize(xs).ok_or_else(|| BenchServeError::Failed("no samples".into()))
}

fn burst_of(socket: &Path, n: usize, o: &BurstOptions) -> Result<Burst> {
    let target = Target::Unix(socket.to_path_buf());
    let mut c = Client::new(target.clone());
    let (mut rates, mut prewarms, mut ratios, mut restores) = (vec![], vec![], vec![], vec![]);
    let (mut latencies, mut ok) = (Vec::new(), 0);
    for run in 0..o.runs {
        // alternate which goes first: neither always follows the other's teardown
        let mut rate = 0.0;
        let mut prewarm = 0.0;
        for step in 0..2 {
            let name = format!("b{n}r{run}s{step}");
            deploy_code(&mut c, &name, o.max_instances, HELLO, o.memory_mb)?;
            if (step + run) % 2 == 0 {
                let count = n.min(o.max_instances as usize);
                let t = Instant::now();
                let body = json!({"count": count});
                let v = call(
                    &mut c,
                    "PUT",
                    &format!("/v1/functions/{name}/prewarm"),
                    &body,
                )?;
                let started = v["started"].as_u64().unwrap_or(0);
                prewarm = started as f64 / t.elapsed().as_secs_f64();
            } else {
                let (lat, answered, restored, wall) = at_once(&target, &name, n, o.cold)?;
                ok += answered;
                latencies.extend(lat);
                restores.push(restored as f64);
                rate = n as f64 / wall;
            }
            remove(&mut c, &name)?;
        }
        rates.push(rate);
        prewarms.push(prewarm);
        ratios.push(rate / prewarm);
    }
    Ok(Burst {
        requests: n,
        ok,
        sent: n * o.runs,
        starts_per_s: stats(&rates)?,
        latency_ms: stats(&latencies)?,
        restores: stats(&restores)?,
        prewarm_per_s: stats(&prewarms)?,
        ratio: stats(&ratios)?,
    })
}

/// `n` invocations of `name` released together; (latencies in ms,
/// answered 200, restore starts, wall seconds from the release to the last answer).
fn at_once(
    target: &Target,
    name: &str,
    n: usize,
    cold: bool,
) -> Result<(Vec<f64>, usize, usize, f64)> {
    let gate = Barrier::new(n + 1);
    let force = if cold { "?force=cold" } else { "" };
    let path = format!("/v1/functions/{name}/invoke{force}");
    let (answers, wall) = std::thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|i| {
                let (target, gate, path) = (target.clone(), &gate, &path);
                s.spawn(move || {
                    let mut c = Client::new(target);
                    let body = i.to_string();
                    gate.wait();
                    let t = Instant::now();
                    let r = c.request("POST", path, Some(body.as_bytes()));
                    let ms = t.elapsed().as_secs_f64() * 1e3;
                    r.map(|r| (ms, r.status, r.header("thaw-start-type").map(String::from)))
                })
            })
            .collect();
        gate.wait();
        let t = Instant::now();
        let answers: Vec<_> = hs.into_iter().map(|h| h.join()).collect();
        (answers, t.elapsed().as_secs_f64())
    });
    let (mut lat, mut ok, mut restored) = (Vec::new(), 0, 0);
    for a in answers {
        let (ms, status, start) =
            a.map_err(|_| BenchServeError::Failed("a client thread panicked".into()))??;
        lat.push(ms);
        ok += (status == 200) as usize;
        restored += (start.as_deref() == Some("restore")) as usize;
    }
    Ok((lat, ok, restored, wall))
}

pub fn burst_markdown(r: &BurstReport) -> String {
    let mut s = format!(
        "Requests sent at once to a function with no live instance{} (max_instances {}, memory_mb {}, the daemon's defaults otherwise: budget {} MiB), {} runs, each beside a prewarm of the same count (at most max_instances)\n\n\
         | requests | 200s | starts/s min / median / p99 | prewarm restores/s median | burst / prewarm median | latency ms min | p50 | p99 | restores median |\n\
         |---|---|---|---|---|---|---|---|---|\n",
        if r.cold { ", each with `?force=cold`" } else { "" },
        r.max_instances,
        r.memory_mb.map_or("default".to_string(), |m| m.to_string()),
        r.budget_mib,
        r.runs
    );
    for b in &r.bursts {
        s += &format!(
            "| {} | {}/{} | {:.0} / {:.0} / {:.0} | {:.0} | {:.2} | {:.1} | {:.1} | {:.1} | {:.0} |\n",
            b.requests,
            b.ok,
            b.sent,
            b.starts_per_s.min,
            b.starts_per_s.median,
            b.starts_per_s.p99,
            b.prewarm_per_s.median,
            b.ratio.median,
            b.latency_ms.min,
            b.latency_ms.median,
            b.latency_ms.p99,
            b.restores.median
        );
    }
    s
}
