//! `thaw sim [sweep] ...`: argument parsing, the run matrix, outputs.

use crate::azure2019::{self, Azure2019, Spread};
use crate::azure2021::Azure2021;
use crate::calib::Calibration;
use crate::error::{Result, SimError};
use crate::output::{self, RunConfig};
use crate::run::{run, Prices, Report, RunOptions};
use crate::source::Source;
use crate::synthetic::{Params, Synthetic};
use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use thaw_error::{fail, ResultExt};
use thaw_policy::{Config, Engine, FnCost, PolicyKind};

/// Largest `--mem-mb` (1 TiB): one function bigger than any worker's RAM.
const MAX_MEM_MB: i64 = 1 << 20;

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq)]
pub enum Format {
    Azure2019,
    Azure2021,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq)]
pub enum SpreadArg {
    Even,
    Uniform,
}

/// Trace-driven simulator of keep-alive and tier-caching policies.
///
/// `thaw sim [OPTIONS]` runs one configuration; `thaw sim sweep [OPTIONS]` runs every
/// combination of the comma-separated values given to --policy, --ram-gb,
/// --disk-gb, --net-gbit and --disk-read-gbps, and writes one table.
/// See docs/SIMULATOR.md.
#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct SimCmd {
    #[command(subcommand)]
    pub sweep: Option<Sweep>,
    #[command(flatten)]
    pub args: Args,
}

#[derive(Subcommand, Debug)]
pub enum Sweep {
    /// Run every combination of the comma-separated values given to --policy,
    /// --ram-gb, --disk-gb, --net-gbit and --disk-read-gbps; one table
    Sweep(Args),
}

/// `thaw sim` on its own (tests, the `sim` example, simlive): the same
/// arguments as the `thaw` binary's subcommand.
#[derive(Parser, Debug)]
#[command(name = "thaw sim", version)]
struct Standalone {
    #[command(flatten)]
    cmd: SimCmd,
}

/// The simulator's options (one run, or each point of a sweep).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Generate a synthetic Azure-like workload (the default input).
    #[arg(long, conflicts_with = "trace")]
    pub synthetic: bool,
    /// Trace: a directory (azure2019) or a CSV file (azure2021).
    #[arg(long)]
    pub trace: Option<PathBuf>,
    #[arg(long, value_enum, requires = "trace")]
    pub format: Option<Format>,
    /// Synthetic: number of functions.
    #[arg(long, default_value_t = 10_000)]
    pub functions: u32,
    /// Synthetic: simulated hours.
    #[arg(long, default_value_t = 2.0)]
    pub hours: f64,
    /// Synthetic: multiply every function's rate.
    #[arg(long, default_value_t = 1.0)]
    pub rate_scale: f64,
    /// Synthetic: diurnal amplitude in [0, 1).
    #[arg(long, default_value_t = 0.5)]
    pub diurnal: f64,
    /// Synthetic: cap on one function's mean rate (invocations per minute).
    #[arg(long, default_value_t = 1000.0)]
    pub max_rate_per_min: f64,
    /// Synthetic: cap on rate x mean duration of one function (busy instances).
    #[arg(long, default_value_t = 1.0)]
    pub max_fn_load: f64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// azure2019: how a minute's count is spread within the minute.
    #[arg(long, value_enum, default_value_t = SpreadArg::Even)]
    pub spread: SpreadArg,
    /// azure2019: first minute to replay (0-based, across day files).
    #[arg(long, default_value_t = 0)]
    pub start_minute: u64,
    /// azure2019: number of minutes to replay (default: all).
    #[arg(long)]
    pub minutes: Option<u64>,
    /// Memory (MB) for every function of a trace, instead of the trace's or a draw
    /// (1 to 1048576).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=MAX_MEM_MB))]
    pub mem_mb: Option<u32>,
    /// azure2021: buffer this many seconds of arrivals to tolerate unsorted rows.
    #[arg(long, default_value_t = 0.0)]
    pub reorder_window_s: f64,
    /// Stop at the first malformed line instead of skipping it.
    #[arg(long)]
    pub strict: bool,
    /// Invocations running at once; more wait (queueing delay). Default: no cap.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_concurrency: Option<u32>,
    /// An arrival RAM cannot hold while invocations run waits for one to
    /// end (as `thaw serve` queues it) instead of failing.
    #[arg(long)]
    pub wait_for_ram: bool,

    /// With --wait-for-ram: how long a waiting arrival, with no invocation
    /// ending meanwhile, waits for running instances' RAM before idle
    /// instances are given up for it (`thaw serve` waits as long); 0 gives
    /// them up at once.
    #[arg(long, default_value_t = thaw_policy::MEMORY_PATIENCE as f64 / 1000.0)]
    pub ram_patience_ms: f64,

    /// Policy: ttl, lru-mem, tiered-lru, greedy-dual, tiered-greedy-dual.
    #[arg(long, value_delimiter = ',', default_value = "tiered-lru")]
    pub policy: Vec<String>,
    #[arg(long, value_delimiter = ',', default_value = "32")]
    pub ram_gb: Vec<f64>,
    /// Disk tier capacity; 0 disables the tier.
    #[arg(long, value_delimiter = ',', default_value = "50")]
    pub disk_gb: Vec<f64>,
    /// Network tier capacity; 0 disables the tier.
    #[arg(long, default_value_t = 1_048_576.0)]
    pub net_gb: f64,
    #[arg(long, value_delimiter = ',', default_value = "10")]
    pub net_gbit: Vec<f64>,
    #[arg(long, value_delimiter = ',', default_value = "4")]
    pub disk_read_gbps: Vec<f64>,
    #[arg(long, default_value_t = 2.0)]
    pub disk_write_gbps: f64,
    /// Tiered: idle instances above this fraction of RAM are demoted.
    #[arg(long, default_value_t = 0.9)]
    pub threshold: f64,
    /// ttl: keep-alive window in seconds.
    #[arg(long, default_value_t = 600.0)]
    pub keep_alive_s: f64,
    #[arg(long, default_value_t = 250.0)]
    pub cold_ms: f64,
    #[arg(long, default_value_t = 100.0)]
    pub restore_ms: f64,
    #[arg(long, default_value_t = 350.0)]
    pub checkpoint_ms: f64,
    #[arg(long, default_value_t = 0.0)]
    pub warm_ms: f64,
    /// Every function starts deployed with a snapshot on the disk tier (as under
    /// `thaw serve`): a start without an idle instance is a restore, never a boot.
    #[arg(long)]
    pub deployed_snapshots: bool,
    /// Calibration file (JSON, see docs/SIMULATOR.md); explicit flags win over it.
    #[arg(long)]
    pub calibration: Option<PathBuf>,
    /// Prices in USD per GB-hour.
    #[arg(long)]
    pub price_ram: Option<f64>,
    #[arg(long)]
    pub price_disk: Option<f64>,
    #[arg(long)]
    pub price_net: Option<f64>,

    /// Placement study: replay snapshot placement with the measured profiles in
    /// this file (`thaw place --json`): each function's own choice, the fleet
    /// placement and every fixed tier, on the same input (see docs/SIMULATOR.md).
    #[arg(long, conflicts_with = "deployed_snapshots")]
    pub placement: Option<PathBuf>,
    /// Placement study: a tier qualifies for a function if its estimated cold
    /// start is within this factor of the function's fastest tier.
    #[arg(long, default_value_t = 1.3, requires = "placement")]
    pub max_slowdown: f64,

    /// Write the JSON summary (sweep: an array of summaries).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write a CSV table (one row per run).
    #[arg(long)]
    pub csv: Option<PathBuf>,
    /// Write an SVG plot of the start-latency CDF(s).
    #[arg(long)]
    pub svg: Option<PathBuf>,
    /// No progress lines and no summary on stdout.
    #[arg(long)]
    pub quiet: bool,
}

// float casts saturate (NaN, negatives to 0): the clamp wanted
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn ms_to_us(v: f64, what: &str) -> Result<u64> {
    if !(v.is_finite() && v >= 0.0) {
        fail!(
            SimError::Config,
            "--{what} must be a finite number >= 0, got {v}"
        );
    }
    Ok((v * 1000.0).round() as u64)
}

// float casts saturate (NaN, negatives to 0): the clamp wanted
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn gb_to_mb(v: f64, what: &str) -> Result<u64> {
    if !(v.is_finite() && v >= 0.0) {
        fail!(
            SimError::Config,
            "--{what} must be a finite number >= 0, got {v}"
        );
    }
    Ok((v * 1024.0).round() as u64)
}

/// One point of the run matrix.
struct Point {
    cfg: Config,
    echo: RunConfig,
}

struct Plan {
    points: Vec<Point>,
    opts: RunOptions,
}

fn given(m: &ArgMatches, id: &str) -> bool {
    m.value_source(id) == Some(ValueSource::CommandLine)
}

fn plan(a: &Args, m: &ArgMatches, sweep: bool) -> Result<Plan> {
    let calib = a
        .calibration
        .as_deref()
        .map(Calibration::load)
        .transpose()?;
    let mut base = FnCost {
        warm_us: ms_to_us(a.warm_ms, "warm-ms")?,
        cold_us: ms_to_us(a.cold_ms, "cold-ms")?,
        restore_disk_us: ms_to_us(a.restore_ms, "restore-ms")?,
        restore_net_us: ms_to_us(a.restore_ms, "restore-ms")?,
        checkpoint_us: ms_to_us(a.checkpoint_ms, "checkpoint-ms")?,
    };
    let mut prices = Prices::default();
    let mut fn_costs = Default::default();
    let mut fn_footprints = Default::default();
    // Tier values from the calibration file, unless the flag was given.
    let mut net_gb = a.net_gb;
    let mut disk_write = a.disk_write_gbps;
    let (mut ram_gb, mut disk_gb, mut net_gbit, mut disk_read) = (
        a.ram_gb.clone(),
        a.disk_gb.clone(),
        a.net_gbit.clone(),
        a.disk_read_gbps.clone(),
    );
    if let Some(c) = &calib {
        let explicit = base;
        base = c.defaults.apply(base, "defaults")?;
        // Flags given on the command line win over the file.
        if given(m, "warm_ms") {
            base.warm_us = explicit.warm_us;
        }
        if given(m, "cold_ms") {
            base.cold_us = explicit.cold_us;
        }
        if given(m, "restore_ms") {
            base.restore_disk_us = explicit.restore_disk_us;
            base.restore_net_us = explicit.restore_net_us;
        }
        if given(m, "checkpoint_ms") {
            base.checkpoint_us = explicit.checkpoint_us;
        }
        fn_costs = c.function_costs(base)?;
        fn_footprints = c.function_footprints()?;
        let t = &c.tiers;
        let pick = |flag: &str, file: Option<f64>, cur: Vec<f64>| match file {
            Some(v) if !given(m, flag) => vec![v],
            _ => cur,
        };
        ram_gb = pick("ram_gb", t.ram.capacity_gb, ram_gb);
        disk_gb = pick("disk_gb", t.disk.capacity_gb, disk_gb);
        disk_read = pick(
            "disk_read_gbps",
            t.disk.read_mb_s.map(|v| v / 1024.0),
            disk_read,
        );
        net_gbit = pick("net_gbit", t.net.mb_s.map(|v| v * 8.0 / 1024.0), net_gbit);
        if let (Some(v), false) = (t.disk.write_mb_s, given(m, "disk_write_gbps")) {
            disk_write = v / 1024.0;
        }
        if let (Some(v), false) = (t.net.capacity_gb, given(m, "net_gb")) {
            net_gb = v;
        }
        prices.ram = t.ram.price_gb_hour.unwrap_or(prices.ram);
        prices.disk = t.disk.price_gb_hour.unwrap_or(prices.disk);
        prices.net = t.net.price_gb_hour.unwrap_or(prices.net);
    }
    prices.ram = a.price_ram.unwrap_or(prices.ram);
    prices.disk = a.price_disk.unwrap_or(prices.disk);
    prices.net = a.price_net.unwrap_or(prices.net);
    if [prices.ram, prices.disk, prices.net]
        .iter()
        .any(|p| !(p.is_finite() && *p >= 0.0))
    {
        fail!(SimError::Config, "prices must be finite numbers >= 0");
    }

    let policies: Vec<PolicyKind> = a
        .policy
        .iter()
        .map(|p| p.parse::<PolicyKind>().map_err(SimError::from))
        .collect::<Result<_>>()?;
    if !sweep {
        for (name, n) in [
            ("policy", policies.len()),
            ("ram-gb", ram_gb.len()),
            ("disk-gb", disk_gb.len()),
            ("net-gbit", net_gbit.len()),
            ("disk-read-gbps", disk_read.len()),
        ] {
            if n != 1 {
                fail!(
                    SimError::Config,
                    "--{name} has {n} values: use `thaw sim sweep` to run several"
                );
            }
        }
    }
    let input = input_label(a);
    let mut points = Vec::new();
    for &kind in &policies {
        for &ram in &ram_gb {
            for &disk in &disk_gb {
                for &gbit in &net_gbit {
                    for &read in &disk_read {
                        let cfg = Config {
                            kind,
                            ram_mb: gb_to_mb(ram, "ram-gb")?,
                            disk_mb: gb_to_mb(disk, "disk-gb")?,
                            net_mb: gb_to_mb(net_gb, "net-gb")?,
                            threshold: a.threshold,
                            keep_alive_us: ms_to_us(a.keep_alive_s * 1000.0, "keep-alive-s")?,
                            disk_read_mb_s: read * 1024.0,
                            disk_write_mb_s: disk_write * 1024.0,
                            net_mb_s: gbit / 8.0 * 1024.0,
                            cost: base,
                            deployed_snapshots: a.deployed_snapshots,
                        };
                        // Every point is checked before the first one runs.
                        cfg.validate().with_context(|| {
                            format!("{kind}, ram {ram} GB, disk {disk} GB, net {gbit} Gbit/s, disk read {read} GB/s")
                        })?;
                        let echo = RunConfig {
                            policy: kind.name().to_string(),
                            input: input.clone(),
                            seed: a.seed,
                            ram_gb: ram,
                            disk_gb: disk,
                            net_gb,
                            threshold: a.threshold,
                            keep_alive_s: a.keep_alive_s,
                            disk_read_gb_s: read,
                            disk_write_gb_s: disk_write,
                            net_gbit_s: gbit,
                            cold_ms: base.cold_us as f64 / 1000.0,
                            restore_ms: base.restore_disk_us as f64 / 1000.0,
                            checkpoint_ms: base.checkpoint_us as f64 / 1000.0,
                            max_concurrency: a.max_concurrency.unwrap_or(0),
                            deployed_snapshots: a.deployed_snapshots,
                            calibration: a.calibration.as_ref().map(|p| p.display().to_string()),
                        };
                        points.push(Point { cfg, echo });
                    }
                }
            }
        }
    }
    let opts = RunOptions {
        max_concurrency: a.max_concurrency.unwrap_or(0),
        wait_for_ram: a.wait_for_ram,
        ram_patience: ms_to_us(a.ram_patience_ms, "ram-patience-ms")?,
        strict: a.strict,
        progress: !a.quiet,
        record_starts: false,
        fn_costs,
        fn_footprints,
        prices,
    };
    Ok(Plan { points, opts })
}

fn input_label(a: &Args) -> String {
    match (&a.trace, a.format) {
        (Some(p), Some(f)) => format!("{f:?}:{}", p.display()).to_lowercase(),
        _ => format!(
            "synthetic:functions={},hours={},rate_scale={},diurnal={},max_fn_load={},seed={}",
            a.functions, a.hours, a.rate_scale, a.diurnal, a.max_fn_load, a.seed
        ),
    }
}

/// Opens a fresh stream of the configured input (each sweep point replays it).
// float casts saturate (NaN, negatives to 0): the clamp wanted
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
pub fn open_source(a: &Args) -> Result<Box<dyn Source>> {
    use crate::SimError;
    use thaw_error::fail;
    match (&a.trace, a.format) {
        (Some(_), None) => fail!(
            SimError::Config,
            "--trace needs --format azure2019|azure2021"
        ),
        (Some(dir), Some(Format::Azure2019)) => Ok(Box::new(Azure2019::open(
            dir,
            azure2019::Options {
                seed: a.seed,
                spread: match a.spread {
                    SpreadArg::Even => Spread::Even,
                    SpreadArg::Uniform => Spread::Uniform,
                },
                fixed_mem: a.mem_mb,
                start_minute: a.start_minute,
                minutes: a.minutes,
            },
        )?)),
        (Some(file), Some(Format::Azure2021)) => {
            if !(a.reorder_window_s.is_finite() && a.reorder_window_s >= 0.0) {
                fail!(SimError::Config, "--reorder-window-s must be >= 0");
            }
            Ok(Box::new(Azure2021::open(
                file,
                a.seed,
                a.mem_mb,
                (a.reorder_window_s * 1e6) as u64,
            )?))
        }
        (None, _) => Ok(Box::new(Synthetic::new(Params {
            functions: a.functions,
            hours: a.hours,
            seed: a.seed,
            rate_scale: a.rate_scale,
            diurnal: a.diurnal,
            max_rate_per_min: a.max_rate_per_min,
            max_fn_load: a.max_fn_load,
            ..Params::default()
        })?)),
    }
}

/// Parses `args` (after `sim`): `Ok(None)` when help or version was printed.
pub fn parse(args: &[String]) -> Result<Option<(Args, ArgMatches, bool)>> {
    let argv = std::iter::once("thaw sim".to_string()).chain(args.iter().cloned());
    let Some(m) = help_or(Standalone::command().try_get_matches_from(argv))? else {
        return Ok(None);
    };
    let cmd = Standalone::from_arg_matches(&m).map_err(|e| SimError::Config(format!("{e}")))?;
    Ok(Some(resolve(cmd.cmd, m)))
}

/// The options that apply, the matches they came from (to tell flags given
/// from defaults) and whether this is a sweep.
fn resolve(cmd: SimCmd, m: ArgMatches) -> (Args, ArgMatches, bool) {
    match (cmd.sweep, m.subcommand_matches("sweep")) {
        (Some(Sweep::Sweep(a)), Some(sm)) => (a, sm.clone(), true),
        _ => (cmd.args, m, false),
    }
}

/// A clap parse result for a subcommand run in-process: help and version are
/// printed and give `Ok(None)`; other errors become one clean message.
pub fn help_or<T>(parsed: Result<T, clap::Error>) -> Result<Option<T>> {
    match parsed {
        Ok(v) => Ok(Some(v)),
        Err(e)
            if matches!(
                e.kind(),
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
            ) =>
        {
            thaw_output::out!("{e}");
            Ok(None)
        }
        // The caller prefixes "error:" itself.
        Err(e) => fail!(
            SimError::Config,
            "{}",
            e.render()
                .to_string()
                .trim_end()
                .trim_start_matches("error: ")
        ),
    }
}

/// Runs every point of the plan; returns (config, report) pairs.
pub fn execute(a: &Args, m: &ArgMatches, sweep: bool) -> Result<Vec<(RunConfig, Report)>> {
    let plan = plan(a, m, sweep)?;
    // Open the input once before running, so a missing file fails fast.
    open_source(a)?;
    let mut results = Vec::new();
    let n = plan.points.len();
    for (i, p) in plan.points.into_iter().enumerate() {
        if !a.quiet && n > 1 {
            thaw_output::errln!(
                "thaw sim: run {}/{n}: {} ram {} GB disk {} GB net {} Gbit/s read {} GB/s",
                i + 1,
                p.echo.policy,
                p.echo.ram_gb,
                p.echo.disk_gb,
                p.echo.net_gbit_s,
                p.echo.disk_read_gb_s
            );
        }
        let mut src = open_source(a)?;
        let mut engine = Engine::new(p.cfg)?;
        let report = run(src.as_mut(), &mut engine, &plan.opts)?;
        // Warnings go to stderr even with --quiet: they say the figures mean nothing.
        for w in &report.warnings {
            thaw_output::errln!("thaw sim: warning: {w}");
        }
        results.push((p.echo, report));
    }
    Ok(results)
}

/// Runs `thaw sim ARGS...` given as strings (ARGS exclude "sim").
pub fn main(args: &[String]) -> Result<()> {
    match parse(args)? {
        Some((a, m, sweep)) => run_parsed(&a, &m, sweep),
        None => Ok(()),
    }
}

/// Runs the `thaw` binary's `sim` subcommand; `m` holds its matches.
pub fn run_cmd(cmd: SimCmd, m: &ArgMatches) -> Result<()> {
    let (a, m, sweep) = resolve(cmd, m.clone());
    run_parsed(&a, &m, sweep)
}

fn run_parsed(a: &Args, m: &ArgMatches, sweep: bool) -> Result<()> {
    if let Some(path) = &a.placement {
        return placement_study(a, m, sweep, path);
    }
    let results = execute(a, m, sweep)?;
    if let Some(path) = &a.json {
        let sums: Vec<_> = results.iter().map(|(c, r)| output::summary(c, r)).collect();
        let text = if sweep {
            serde_json::to_string_pretty(&sums).context("encoding the summaries")?
        } else {
            serde_json::to_string_pretty(&sums[0]).context("encoding the summary")?
        };
        output::write_file(path, &(text + "\n"))?;
    }
    let mut table = String::from(output::CSV_HEADER);
    table.push('\n');
    for (c, r) in &results {
        table.push_str(&output::csv_row(c, r));
        table.push('\n');
    }
    if let Some(path) = &a.csv {
        output::write_file(path, &table)?;
    }
    if let Some(path) = &a.svg {
        let series: Vec<(String, &Report)> = results
            .iter()
            .map(|(c, r)| {
                let label = if results.len() == 1 {
                    c.policy.clone()
                } else {
                    format!("{} {}G/{}G", c.policy, c.ram_gb, c.disk_gb)
                };
                (label, r)
            })
            .collect();
        output::write_file(path, &output::svg_cdf("start latency CDF", &series))?;
    }
    if !a.quiet {
        if sweep {
            thaw_output::out!("{table}");
        } else if let Some((c, r)) = results.first() {
            thaw_output::outln!(
                "{}",
                serde_json::to_string_pretty(&serde_json::json!({
                    "policy": c.policy,
                    "invocations": r.invocations,
                    "starts": r.starts,
                    "failed": r.failed,
                    "mean_start_ms": r.mean_start_ms,
                    "p50_start_ms": r.p50_start_ms,
                    "p99_start_ms": r.p99_start_ms,
                    "p999_start_ms": r.p999_start_ms,
                    "cost_usd_total": r.cost_usd_total,
                    "malformed_lines": r.malformed_lines,
                    "invocations_per_second": r.invocations_per_second,
                }))
                .context("encoding the summary")?
            );
        }
    }
    Ok(())
}

/// `thaw sim --placement FILE`: the arms of the placement study as a table.
fn placement_study(a: &Args, m: &ArgMatches, sweep: bool, path: &std::path::Path) -> Result<()> {
    if sweep {
        fail!(
            SimError::Config,
            "--placement runs its own arms: use it without `sweep`"
        );
    }
    let file = crate::placement::ProfilesFile::load(path)?;
    let plan = plan(a, m, false)?;
    let cfg = plan.points[0].cfg.clone();
    let arms = crate::placement::study(&file, a.max_slowdown, cfg, &plan.opts, &|| open_source(a))?;
    if let Some(p) = &a.json {
        output::write_file(
            p,
            &(serde_json::to_string_pretty(&arms).context("encoding the arms")? + "\n"),
        )?;
    }
    if !a.quiet {
        thaw_output::out!("{}", crate::placement::table(&arms));
    }
    Ok(())
}
