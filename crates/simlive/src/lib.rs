//! thaw-simlive: does the simulator predict the worker? (`thaw bench simlive`.)
//!
//! One run: generate a scaled-down synthetic day ([`trace`]) as an Azure 2021
//! trace file; start `thaw serve` on a throw-away home, deploy the trace's
//! functions (each sleeps its fixed duration), measure their restore and warm
//! costs by a short calibration replay through `thaw load` itself (the replay's
//! own client and latency definition) and one boot cost ([`live`]); replay the file through `thaw sim`
//! (same policy, RAM budget, tiers, calibrated with those costs, every function
//! deployed with a snapshot as on the daemon) and through `thaw load` against
//! the daemon restarted empty; compare start-type counts and mean start latency
//! ([`compare`]): a table (markdown), JSON and one SVG plot.
pub mod compare;
pub mod error;
pub mod keepalive;
pub mod live;
pub mod trace;

use crate::error::{Result, SimliveError};
use std::path::{Path, PathBuf};
use thaw_error::{fail, ResultExt};

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Functions in the synthetic day (each is deployed to the daemon).
    #[arg(long, default_value_t = 20)]
    pub functions: u32,
    /// Length of the compressed day, minutes (the test uses 2).
    #[arg(long, default_value_t = 20.0)]
    pub minutes: f64,
    /// Mean total invocations per second.
    #[arg(long, default_value_t = 1.5)]
    pub rps: f64,
    /// Diurnal amplitude in [0, 1).
    #[arg(long, default_value_t = 0.5)]
    pub diurnal: f64,
    #[arg(long, default_value_t = 10)]
    pub min_duration_ms: u64,
    #[arg(long, default_value_t = 2000)]
    pub max_duration_ms: u64,
    /// Cap on one function's rate x duration.
    #[arg(long, default_value_t = 1.0)]
    pub max_fn_load: f64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// ttl, lru-mem or tiered-lru (the greedy-dual policies rank by costs the
    /// daemon does not measure yet, so the two sides would not run the same policy).
    #[arg(long, default_value = "lru-mem")]
    pub policy: String,
    /// Declared memory of every function, MiB (what both policies account).
    #[arg(long, default_value_t = 128)]
    pub memory_mb: u64,
    /// RAM budget for instances, MiB (default: half the functions' instances fit).
    #[arg(long)]
    pub memory_budget_mb: Option<u64>,
    /// ttl: keep-alive window, seconds.
    #[arg(long, default_value_t = 600)]
    pub keep_alive_s: u64,
    /// Per-function instance cap on the daemon (the simulator has none: keep it
    /// above the trace's concurrency).
    #[arg(long, default_value_t = 64)]
    pub max_instances: u32,
    /// Restore strategy of the deployed functions.
    #[arg(long, default_value = "mmap")]
    pub strategy: thaw_strategy_kind::StartStrategy,
    /// Calibration rounds: one restore and three warm starts per function
    /// replayed through `thaw load` on a daemon started empty; forced boots
    /// of a probe.
    #[arg(long, default_value_t = 3)]
    pub calibration_runs: usize,
    /// Output directory: trace.csv, calibration-trace.csv, calibration-N.jsonl,
    /// calibration.json, sim.json, live.json,
    /// live.jsonl, simlive.json, simlive.md, simlive.svg, serve.log.
    #[arg(long, default_value = "simlive-out")]
    pub out: PathBuf,
    /// The daemon's state home (default: a temporary one, removed afterwards).
    #[arg(long)]
    pub serve_home: Option<PathBuf>,
}

impl Args {
    /// A replayed request's timeout (its function's longest run and a
    /// minute) and the replay's seed.
    fn replay_limits(&self) -> (f64, u64) {
        (self.max_duration_ms as f64 / 1000.0 + 60.0, self.seed)
    }
}

/// Removes a temporary daemon home on every exit path.
pub(crate) struct TempHome(pub(crate) PathBuf);

impl Drop for TempHome {
    fn drop(&mut self) {
        if let Err(e) = thaw_server::remove_home(&self.0) {
            thaw_output::errln!("thaw bench simlive: removing {}: {e:#}", self.0.display());
        }
    }
}

fn note(msg: &str) {
    note_for("simlive", msg);
}

/// A progress line of `thaw bench BENCH` on stderr.
pub(crate) fn note_for(bench: &str, msg: &str) {
    thaw_output::errln!("thaw bench {bench}: {msg}");
}

pub(crate) fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Runs the whole comparison; `runtime_home` holds the runtime root.
pub fn run(runtime_home: &Path, a: &Args) -> Result<compare::Comparison> {
    if !matches!(a.policy.as_str(), "ttl" | "lru-mem" | "tiered-lru") {
        fail!(
            SimliveError::Config,
            "--policy {}: use ttl, lru-mem or tiered-lru (greedy-dual ranks by start costs the daemon does not measure)",
            a.policy
        );
    }
    if a.calibration_runs == 0 || a.calibration_runs > 100 {
        fail!(
            SimliveError::Config,
            "--calibration-runs must be in 1..=100"
        );
    }
    if !(16..=8192).contains(&a.memory_mb) {
        fail!(SimliveError::Config, "--memory-mb must be in 16..=8192");
    }
    let params = trace::Params {
        functions: a.functions,
        minutes: a.minutes,
        rps: a.rps,
        diurnal: a.diurnal,
        min_duration_ms: a.min_duration_ms,
        max_duration_ms: a.max_duration_ms,
        max_fn_load: a.max_fn_load,
        seed: a.seed,
    };
    let serve = live::ServeOptions {
        policy: a.policy.clone(),
        memory_budget_mb: a
            .memory_budget_mb
            .unwrap_or((a.functions as u64 * a.memory_mb / 2).max(a.memory_mb)),
        keep_alive_s: a.keep_alive_s,
        memory_accounting: None,
    };
    if serve.memory_budget_mb < a.memory_mb {
        fail!(
            SimliveError::Config,
            "--memory-budget-mb must hold at least one instance ({} MiB)",
            a.memory_mb
        );
    }
    let tr = trace::generate(&params)?;
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let out = |f: &str| a.out.join(f);
    let trace_path = out("trace.csv");
    trace::write_csv(&tr, &trace_path)?;
    note(&format!(
        "{} invocations of {} functions over {} min in {}",
        tr.rows.len(),
        tr.functions.len(),
        a.minutes,
        trace_path.display()
    ));
    let load_before = load_average();

    let (home, _temp) = match &a.serve_home {
        Some(h) => {
            std::fs::create_dir_all(h).with_context(|| format!("creating {}", h.display()))?;
            (h.clone(), None)
        }
        None => {
            let h = std::env::temp_dir().join(format!(
                "thaw-simlive-{}-{}",
                std::process::id(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos())
            ));
            std::fs::create_dir(&h).with_context(|| format!("creating {}", h.display()))?;
            (h.clone(), Some(TempHome(h)))
        }
    };
    let thaw = std::env::current_exe().context("finding the thaw binary")?;
    let log = out("serve.log");

    // Deploy and calibrate on a daemon that holds every function's instance
    // (see `live::calibration_trace`) ...
    let names: Vec<&str> = tr.functions.iter().map(|f| f.name.as_str()).collect();
    let roomy = live::ServeOptions {
        policy: "lru-mem".into(),
        memory_budget_mb: a.memory_mb * (tr.functions.len() as u64 + 1),
        keep_alive_s: a.keep_alive_s,
        memory_accounting: None,
    };
    let mut d = live::Daemon::start(&thaw, &home, runtime_home, &roomy, &log)?;
    let mut c = d.client();
    let mut checkpoints = Vec::new();
    for f in &tr.functions {
        let dep = live::deploy(
            &mut c,
            &f.name,
            f.duration_ms,
            a.memory_mb,
            a.max_instances,
            a.strategy,
        )?;
        checkpoints.push(dep.checkpoint_ms);
    }
    let boot_ms = live::measure_boot(&mut c, a.memory_mb, a.calibration_runs)?;
    d.stop()?;
    // ... through `thaw load` itself, so that warm and restore costs are the
    // same quantity as in the replay (latency from the intended send time,
    // minus exec, the same client), one round per daemon started empty ...
    let ctr = live::calibration_trace(&tr);
    let ctr_path = out("calibration-trace.csv");
    trace::write_csv(&ctr, &ctr_path)?;
    let end_s = ctr.rows.last().map_or(0, |r| r.0) as f64 / 1e6;
    note(&format!(
        "calibrating: {} rounds of {} requests through thaw load ({:.0} s each)",
        a.calibration_runs,
        ctr.rows.len(),
        end_s
    ));
    let mut starts = Vec::new();
    // what the daemon charges each function's instances, after the last
    // round (the simulator charges the same)
    let mut footprints = vec![None; names.len()];
    for round in 1..=a.calibration_runs {
        let d = live::Daemon::start(&thaw, &home, runtime_home, &roomy, &log)?;
        let records = out(&format!("calibration-{round}.jsonl"));
        replay(
            &d.socket,
            &ctr_path,
            &names,
            end_s + 5.0,
            a.replay_limits(),
            &records,
            &[],
        )?;
        let mut c = d.client();
        for (fp, name) in footprints.iter_mut().zip(&names) {
            *fp = live::footprint(&mut c, name)?.or(*fp);
        }
        drop(d);
        starts.extend(compare::live_starts(&records)?);
    }
    let costs: Vec<live::Measured> = live::calibrated(&starts, &names)?
        .into_iter()
        .zip(checkpoints)
        .zip(footprints)
        .map(
            |(((warm_ms, restore_ms), checkpoint_ms), footprint)| live::Measured {
                warm_ms,
                restore_ms,
                checkpoint_ms,
                footprint,
            },
        )
        .collect();
    note(&format!(
        "deployed and calibrated {} functions",
        costs.len()
    ));
    let calibration = compare::calibration(&tr, &costs, boot_ms, &serve);
    let calib_path = out("calibration.json");
    std::fs::write(
        &calib_path,
        serde_json::to_string_pretty(&calibration)? + "\n",
    )
    .with_context(|| format!("writing {}", calib_path.display()))?;

    // ... the simulator on the same file ...
    let sim_args: Vec<String> = [
        "--trace",
        &trace_path.to_string_lossy(),
        "--format",
        "azure2021",
        "--mem-mb",
        &a.memory_mb.to_string(),
        "--policy",
        &a.policy,
        "--ram-gb",
        &(serve.memory_budget_mb as f64 / 1024.0).to_string(),
        "--disk-gb",
        &(thaw_server::Config::default().disk_budget_mb as f64 / 1024.0).to_string(),
        "--net-gb",
        "0",
        "--threshold",
        &thaw_server::Config::default().threshold.to_string(),
        "--keep-alive-s",
        &a.keep_alive_s.to_string(),
        "--calibration",
        &calib_path.to_string_lossy(),
        "--deployed-snapshots",
        // the daemon queues what its RAM budget cannot hold yet
        "--wait-for-ram",
        "--seed",
        &a.seed.to_string(),
        "--quiet",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let (sa, sm, _) = thaw_sim::cli::parse(&sim_args)?
        .ok_or_else(|| SimliveError::Config("thaw sim arguments: no run asked for".into()))?;
    let (sim_cfg, sim) = thaw_sim::cli::execute(&sa, &sm, false)?
        .pop()
        .ok_or_else(|| SimliveError::Records("thaw sim ran nothing".into()))?;
    let sim_summary = thaw_sim::output::summary(&sim_cfg, &sim);
    std::fs::write(
        out("sim.json"),
        serde_json::to_string_pretty(&sim_summary)? + "\n",
    )
    .context("writing sim.json")?;

    // ... and the same file against the daemon, restarted with no instance.
    let d2 = live::Daemon::start(&thaw, &home, runtime_home, &serve, &log)?;
    note(&format!(
        "replaying {} requests against the daemon ({} min)",
        tr.rows.len(),
        a.minutes
    ));
    let plots = out("live-plots");
    let live_summary = replay(
        &d2.socket,
        &trace_path,
        &names,
        a.minutes * 60.0 + 1.0,
        a.replay_limits(),
        &out("live.jsonl"),
        &[
            "--json".into(),
            out("live.json").to_string_lossy().into_owned(),
            "--plots".into(),
            plots.to_string_lossy().into_owned(),
        ],
    )?;
    drop(d2);
    let live = compare::live_side(&out("live.jsonl"), &live_summary)?;

    let cmp = compare::Comparison::new(
        &params,
        &serve,
        a,
        compare::sim_side(&sim),
        live,
        calibration,
        [load_before, load_average()],
    );
    std::fs::write(
        out("simlive.json"),
        serde_json::to_string_pretty(&cmp)? + "\n",
    )
    .context("writing simlive.json")?;
    std::fs::write(out("simlive.md"), cmp.markdown()).context("writing simlive.md")?;
    compare::plot(&out("simlive.svg"), &cmp, &sim, &out("live.jsonl"))?;
    Ok(cmp)
}

/// Replays `trace` (Azure 2021 format, functions mapped by name) with
/// `thaw load` against the daemon on `socket`, records to `records`.
pub(crate) fn replay(
    socket: &Path,
    trace: &Path,
    names: &[&str],
    seconds: f64,
    (timeout_s, seed): (f64, u64),
    records: &Path,
    extra: &[String],
) -> Result<thaw_load::record::Summary> {
    let args: Vec<String> = [
        "--target",
        &format!("unix:{}", socket.display()),
        "--trace",
        &trace.to_string_lossy(),
        "--format",
        "azure2021",
        "--map-by-name",
        "--functions",
        &names.join(","),
        "--duration-s",
        &seconds.to_string(),
        "--timeout-s",
        &timeout_s.to_string(),
        "--seed",
        &seed.to_string(),
        "--records",
        &records.to_string_lossy(),
        "--quiet",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain(extra.iter().cloned())
    .collect();
    let argv = std::iter::once("thaw load".to_string()).chain(args);
    let la = <thaw_load::cli::Args as clap::Parser>::try_parse_from(argv)
        .map_err(|e| SimliveError::Config(format!("thaw load arguments: {e}")))?;
    Ok(thaw_load::cli::execute(&la)?)
}

/// `thaw bench simlive`: runs, prints the table, says where the files are.
pub fn main(runtime_home: &Path, a: &Args) -> Result<()> {
    let cmp = run(runtime_home, a)?;
    thaw_output::out!("{}", cmp.markdown());
    note(&format!(
        "results in {} (simlive.md, simlive.json, simlive.svg)",
        a.out.display()
    ));
    Ok(())
}
