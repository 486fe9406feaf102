//! `thaw bench keepalive`: the keep-alive effect of charging idle instances
//! what they hold. One Azure Functions 2021 trace replayed through `thaw load`
//! against the daemon twice, on the same functions and RAM budget: once with
//! `memory_accounting = "declared"` (every instance charged its `memory_mb`)
//! and once `"measured"` (an idle instance charged its own pages, the
//! snapshot's once per function); the start types of every request counted.
//!
//! Each trace function is deployed as the function `simlive` deploys (it
//! sleeps its median duration in the trace, at most `max_duration_ms`); the
//! trace is compressed `time_scale` times (arrivals only, durations kept).
use crate::error::{Result, SimliveError};
use crate::live::{self, ServeOptions};
use crate::trace::{FnSpec, Pattern, Trace};
use crate::{load_average, replay, TempHome};
use serde::Serialize;
use std::path::{Path, PathBuf};
use thaw_error::{fail, ResultExt};
use thaw_sim::source::{Item, Source};

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// An Azure Functions 2021 trace (app,func,end_timestamp,duration),
    /// e.g. crates/sim/tests/data/traces/azure2021_200.csv
    #[arg(long)]
    pub trace: PathBuf,
    /// Trace seconds played per wall second (arrivals only)
    #[arg(long, default_value_t = 10.0)]
    pub time_scale: f64,
    /// The daemon's RAM budget for instances, MiB
    #[arg(long, default_value_t = 2048)]
    pub memory_budget_mb: u64,
    /// Declared memory of every function, MiB (the daemon's default)
    #[arg(long, default_value_t = 512)]
    pub memory_mb: u64,
    /// Keep-alive policy of both daemons
    #[arg(long, default_value = "lru-mem")]
    pub policy: String,
    /// A function sleeps its median duration in the trace, at most this long
    #[arg(long, default_value_t = 2000)]
    pub max_duration_ms: u64,
    /// Replays per accounting, alternating which goes first
    #[arg(long, default_value_t = 1)]
    pub runs: usize,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Output directory: trace.csv, ACCOUNTING-N.jsonl, keepalive.json, keepalive.md, serve.log
    #[arg(long, default_value = "keepalive-out")]
    pub out: PathBuf,
}

fn note(msg: &str) {
    crate::note_for("keepalive", msg);
}

/// One replay's start types.
#[derive(Clone, Debug, Serialize)]
pub struct Replay {
    pub accounting: String,
    pub run: usize,
    pub starts: crate::compare::Side,
}

impl Replay {
    pub fn cold(&self) -> u64 {
        self.starts.restore + self.starts.boot
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub trace: PathBuf,
    pub functions: usize,
    pub invocations: usize,
    pub time_scale: f64,
    pub memory_budget_mb: u64,
    pub memory_mb: u64,
    pub policy: String,
    pub replays: Vec<Replay>,
    /// 1-minute load average before and after (the machine may be shared)
    pub load_average: [Option<f64>; 2],
}

/// The trace as the functions to deploy and the arrivals to replay.
// float casts saturate (NaN, negatives to 0): the clamp wanted
// memory_mb is checked 16..=8192 by validate first
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn read_trace(a: &Args) -> Result<Trace> {
    let mut src =
        thaw_sim::azure2021::Azure2021::open(&a.trace, a.seed, Some(a.memory_mb as u32), 0)?;
    let mut rows = Vec::new();
    let mut durations: Vec<Vec<u64>> = Vec::new();
    while let Some(item) = src.next_item()? {
        let inv = match item {
            Item::Inv(inv) => inv,
            Item::Bad(b) => fail!(SimliveError::Config, "{b}"),
        };
        let f = inv.f as usize;
        if f >= 200 {
            fail!(
                SimliveError::Config,
                "{}: more than 200 functions (each one is a live deployed function)",
                a.trace.display()
            );
        }
        if durations.len() <= f {
            durations.resize(f + 1, Vec::new());
        }
        durations[f].push(inv.dur / 1000);
        rows.push(((inv.t as f64 / a.time_scale).round() as u64, inv.f));
    }
    if rows.is_empty() {
        fail!(SimliveError::Config, "{}: no invocation", a.trace.display());
    }
    let width = if durations.len() > 100 { 3 } else { 2 };
    let functions = durations
        .iter_mut()
        .enumerate()
        .map(|(i, d)| {
            d.sort_unstable();
            FnSpec {
                name: format!("f{i:0width$}"),
                pattern: Pattern::Poisson,
                rate_per_s: 0.0,
                duration_ms: d[d.len() / 2].clamp(10, a.max_duration_ms),
                invocations: d.len() as u64,
            }
        })
        .collect();
    Ok(Trace { functions, rows })
}

fn validate(a: &Args) -> Result<()> {
    if !(a.time_scale.is_finite() && a.time_scale > 0.0 && a.time_scale <= 3600.0) {
        fail!(SimliveError::Config, "--time-scale must be in (0, 3600]");
    }
    if !(16..=8192).contains(&a.memory_mb) || a.memory_budget_mb < a.memory_mb {
        fail!(
            SimliveError::Config,
            "--memory-mb must be in 16..=8192 and --memory-budget-mb hold one instance"
        );
    }
    if !(10..=60_000).contains(&a.max_duration_ms) {
        fail!(
            SimliveError::Config,
            "--max-duration-ms must be in 10..=60000"
        );
    }
    if a.runs == 0 || a.runs > 20 {
        fail!(SimliveError::Config, "--runs must be in 1..=20");
    }
    Ok(())
}

pub fn run(runtime_home: &Path, a: &Args) -> Result<Report> {
    validate(a)?;
    let tr = read_trace(a)?;
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let out = |f: &str| a.out.join(f);
    let trace_path = out("trace.csv");
    crate::trace::write_csv(&tr, &trace_path)?;
    let seconds = tr.rows.last().map_or(0, |r| r.0) as f64 / 1e6 + 1.0;
    note(&format!(
        "{} invocations of {} functions, {seconds:.0} s a replay",
        tr.rows.len(),
        tr.functions.len()
    ));
    let load_before = load_average();
    let home = std::env::temp_dir().join(format!("thaw-keepalive-{}", std::process::id()));
    std::fs::create_dir(&home).with_context(|| format!("creating {}", home.display()))?;
    let _temp = TempHome(home.clone());
    let thaw = std::env::current_exe().context("finding the thaw binary")?;
    let log = out("serve.log");
    let serve = |memory_budget_mb, accounting: Option<&str>| ServeOptions {
        policy: a.policy.clone(),
        memory_budget_mb,
        keep_alive_s: 600,
        memory_accounting: accounting.map(String::from),
    };
    // deployed on a daemon that holds them all, replayed on ones started empty
    let roomy = serve(a.memory_mb * (tr.functions.len() as u64 + 1), None);
    let mut d = live::Daemon::start(&thaw, &home, runtime_home, &roomy, &log)?;
    let mut c = d.client();
    for f in &tr.functions {
        let strategy =
            thaw_strategy_kind::StartStrategy::Restore(thaw_strategy_kind::StrategyKind::Mmap);
        live::deploy(&mut c, &f.name, f.duration_ms, a.memory_mb, 64, strategy)?;
    }
    d.stop()?;
    let names: Vec<&str> = tr.functions.iter().map(|f| f.name.as_str()).collect();
    let timeout_s = a.max_duration_ms as f64 / 1000.0 + 60.0;
    let mut replays = Vec::new();
    for run in 0..a.runs {
        let mut order = ["declared", "measured"];
        if run % 2 == 1 {
            order.reverse();
        }
        for accounting in order {
            let o = serve(a.memory_budget_mb, Some(accounting));
            let d = live::Daemon::start(&thaw, &home, runtime_home, &o, &log)?;
            note(&format!("run {}: {accounting} accounting", run + 1));
            let records = out(&format!("{accounting}-{}.jsonl", run + 1));
            let summary = replay(
                &d.socket,
                &trace_path,
                &names,
                seconds,
                (timeout_s, a.seed),
                &records,
                &[],
            )?;
            drop(d);
            replays.push(Replay {
                accounting: accounting.into(),
                run: run + 1,
                starts: crate::compare::live_side(&records, &summary)?,
            });
        }
    }
    let report = Report {
        trace: a.trace.clone(),
        functions: tr.functions.len(),
        invocations: tr.rows.len(),
        time_scale: a.time_scale,
        memory_budget_mb: a.memory_budget_mb,
        memory_mb: a.memory_mb,
        policy: a.policy.clone(),
        replays,
        load_average: [load_before, load_average()],
    };
    std::fs::write(
        out("keepalive.json"),
        serde_json::to_string_pretty(&report)? + "\n",
    )
    .context("writing keepalive.json")?;
    std::fs::write(out("keepalive.md"), markdown(&report)).context("writing keepalive.md")?;
    Ok(report)
}

pub fn markdown(r: &Report) -> String {
    let mut s = format!(
        "{} ({} functions, {} invocations, {}x time scale), budget {} MiB, memory_mb {}, policy {}\n\n\
         | accounting | run | invocations | warm | restore | boot | cold (restore + boot) | failed | mean start ms |\n\
         |---|---|---|---|---|---|---|---|---|\n",
        r.trace.display(),
        r.functions,
        r.invocations,
        r.time_scale,
        r.memory_budget_mb,
        r.memory_mb,
        r.policy
    );
    for x in &r.replays {
        let st = &x.starts;
        s += &format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {:.1} |\n",
            x.accounting,
            x.run,
            st.invocations,
            st.warm,
            st.restore,
            st.boot,
            x.cold(),
            st.failed,
            st.mean_start_ms
        );
    }
    s
}

/// `thaw bench keepalive`: runs, prints the table, says where the files are.
pub fn main(runtime_home: &Path, a: &Args) -> Result<()> {
    let r = run(runtime_home, a)?;
    thaw_output::out!("{}", markdown(&r));
    note(&format!("results in {}", a.out.display()));
    Ok(())
}
