//! `thaw load ...`: arguments, the schedule they describe, the run, the outputs.

use crate::client::{check_function_name, Client, Target};
use crate::error::{LoadError, Result};
use crate::record::{text_table, Sink, Summary, Tally};
use crate::run::{run, RunOptions};
use crate::schedule::{self, Bounds, Deployed, Iat, Schedule, Step, Stream, TraceReplay};
use clap::{Parser, ValueEnum};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use thaw_error::{fail, ResultExt};

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Azure2019,
    Azure2021,
}

/// Open-loop load generator for `POST /v1/functions/{name}/invoke`.
///
/// Requests leave at their scheduled times whether or not earlier ones have
/// answered, and latency is measured from the scheduled time, so a stalled
/// target shows its stall. See docs/LOAD.md.
#[derive(Parser, Debug, Clone)]
#[command(name = "thaw load", version)]
pub struct Args {
    /// http://127.0.0.1:PORT, http://localhost:PORT, http://[::1]:PORT or unix:/PATH (loopback only).
    #[arg(long)]
    pub target: String,
    /// Deployed functions to invoke, comma-separated (each burst picks one uniformly).
    #[arg(long, value_delimiter = ',')]
    pub functions: Vec<String>,
    /// Total rate in requests (bursts) per second.
    #[arg(long, conflicts_with_all = ["rps_steps", "fn_rates", "trace"])]
    pub rps: Option<f64>,
    /// Rate steps, comma-separated, each held for --step-s seconds.
    #[arg(long, value_delimiter = ',', requires = "step_s", conflicts_with_all = ["fn_rates", "trace"])]
    pub rps_steps: Vec<f64>,
    #[arg(long)]
    pub step_s: Option<f64>,
    /// Per-function rates: NAME=RPS,... (independent processes, merged).
    #[arg(long, value_delimiter = ',', conflicts_with = "trace")]
    pub fn_rates: Vec<String>,
    /// Inter-arrival times.
    #[arg(long, value_enum, default_value_t = Iat::Exponential)]
    pub iat: Iat,
    /// Requests per arrival, sent at once to one function (STeLLAR bursts).
    #[arg(long, default_value_t = 1)]
    pub burst_size: u32,

    /// Replay a trace: a directory (azure2019) or a CSV file (azure2021).
    #[arg(long, requires = "format")]
    pub trace: Option<PathBuf>,
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    /// Trace seconds per wall second (60: a trace minute per second).
    #[arg(long, default_value_t = 1.0)]
    pub time_scale: f64,
    /// Keep each trace invocation with this probability.
    #[arg(long, default_value_t = 1.0)]
    pub sample: f64,
    /// Keep only the first N functions the trace invokes.
    #[arg(long)]
    pub trace_functions: Option<usize>,
    /// Skip the trace's first seconds (trace time).
    #[arg(long, default_value_t = 0.0)]
    pub skip_s: f64,
    /// Classes of the deployed functions for mapping trace functions:
    /// NAME=MEM_MB:DURATION_MS,... (without, trace functions are spread by hash).
    #[arg(long, value_delimiter = ',')]
    pub classes: Vec<String>,
    /// Skip and count malformed trace lines instead of failing on the first.
    #[arg(long)]
    pub skip_malformed: bool,
    /// Send trace function APP,FUNC to the deployed function named FUNC (no
    /// class mapping; a trace function without one is an error).
    #[arg(long, conflicts_with = "classes")]
    pub map_by_name: bool,

    /// Stop after this many requests.
    #[arg(long)]
    pub requests: Option<usize>,
    /// Stop scheduling at this many seconds.
    #[arg(long)]
    pub duration_s: Option<f64>,
    /// Requests scheduled in the first seconds are sent but not summarised.
    #[arg(long, default_value_t = 0.0)]
    pub warmup_s: f64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Request body (the event): JSON, or @FILE.
    #[arg(long, default_value = "{}")]
    pub data: String,
    #[arg(long, default_value_t = 30.0)]
    pub timeout_s: f64,
    #[arg(long, default_value_t = 5.0)]
    pub connect_timeout_s: f64,

    /// One JSON object per request.
    #[arg(long)]
    pub records: Option<PathBuf>,
    /// One CSV row per request.
    #[arg(long)]
    pub csv: Option<PathBuf>,
    /// The summary as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write latency-cdf.svg and latency-over-time.svg into this directory.
    #[arg(long)]
    pub plots: Option<PathBuf>,
    /// No progress line and no table on stdout.
    #[arg(long)]
    pub quiet: bool,
}

/// Largest request body.
const MAX_BODY: usize = 1 << 20;

fn seconds(v: f64, flag: &str, allow_zero: bool) -> Result<Duration> {
    let ok = v.is_finite() && v <= 1e7 && (v > 0.0 || (allow_zero && v == 0.0));
    if !ok {
        fail!(
            LoadError::Config,
            "--{flag} must be a number of seconds {}, got {v}",
            if allow_zero { ">= 0" } else { "> 0" }
        );
    }
    Ok(Duration::from_secs_f64(v))
}

fn body(data: &str) -> Result<bytes::Bytes> {
    let raw = match data.strip_prefix('@') {
        Some(p) => {
            let f = std::fs::File::open(p).with_context(|| format!("--data: opening {p}"))?;
            let mut buf = Vec::new();
            std::io::Read::read_to_end(&mut std::io::Read::take(f, MAX_BODY as u64 + 1), &mut buf)
                .with_context(|| format!("--data: reading {p}"))?;
            buf
        }
        None => data.as_bytes().to_vec(),
    };
    if raw.len() > MAX_BODY {
        fail!(LoadError::Config, "--data is larger than {MAX_BODY} bytes");
    }
    serde_json::from_slice::<serde::de::IgnoredAny>(&raw)
        .map_err(|e| LoadError::Config(format!("--data is not JSON: {e}")))?;
    Ok(raw.into())
}

fn name_value(s: &str, flag: &str) -> Result<(String, String)> {
    let (n, v) = s
        .split_once('=')
        .ok_or_else(|| LoadError::Config(format!("--{flag} {s:?}: expected NAME=VALUE")))?;
    check_function_name(n)?;
    Ok((n.to_string(), v.to_string()))
}

fn number(s: &str, what: &str) -> Result<f64> {
    s.trim()
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())
        .ok_or_else(|| LoadError::Config(format!("{what} {s:?} is not a number")))
}

/// The schedule the arguments describe.
// function counts come from the command line, far below 2^32
// float casts saturate (NaN, negatives to 0): the clamp wanted
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
pub fn schedule_of(a: &Args) -> Result<Schedule> {
    let bounds = Bounds {
        requests: a.requests,
        duration_us: a
            .duration_s
            .map(|d| {
                seconds(d, "duration-s", false)
                    .map(|d| d.as_micros().try_into().unwrap_or(u64::MAX))
            })
            .transpose()?,
    };
    let mut functions = a.functions.clone();
    for (n, _) in a
        .fn_rates
        .iter()
        .map(|s| name_value(s, "fn-rates"))
        .collect::<Result<Vec<_>>>()?
    {
        if !functions.contains(&n) {
            functions.push(n);
        }
    }
    if functions.is_empty() {
        fail!(
            LoadError::Config,
            "no function: --functions a,b or --fn-rates a=RPS"
        );
    }
    for f in &functions {
        check_function_name(f)?;
    }
    if let Some(path) = &a.trace {
        let mut classes = std::collections::HashMap::new();
        for s in &a.classes {
            let (n, v) = name_value(s, "classes")?;
            let (m, d) = v.split_once(':').ok_or_else(|| {
                LoadError::Config(format!("--classes {s:?}: expected NAME=MEM_MB:DURATION_MS"))
            })?;
            let (m, d) = (number(m, "memory")?, number(d, "duration")?);
            if m <= 0.0 || d <= 0.0 {
                fail!(
                    LoadError::Config,
                    "--classes {s:?}: memory and duration must be > 0"
                );
            }
            if !functions.contains(&n) {
                fail!(
                    LoadError::Config,
                    "--classes names {n}, which is not in --functions"
                );
            }
            classes.insert(n, (m, d));
        }
        let deployed: Vec<Deployed> = functions
            .iter()
            .map(|n| Deployed {
                name: n.clone(),
                class: classes.get(n).copied(),
            })
            .collect();
        let mut src: Box<dyn thaw_sim::source::Source> = match a.format {
            Some(Format::Azure2019) => Box::new(thaw_sim::azure2019::Azure2019::open(
                path,
                thaw_sim::azure2019::Options {
                    seed: a.seed,
                    spread: thaw_sim::azure2019::Spread::Uniform,
                    fixed_mem: None,
                    start_minute: 0,
                    minutes: None,
                },
            )?),
            Some(Format::Azure2021) => {
                Box::new(thaw_sim::azure2021::Azure2021::open(path, a.seed, None, 0)?)
            }
            None => fail!(
                LoadError::Config,
                "--trace needs --format azure2019|azure2021"
            ),
        };
        let replay = TraceReplay {
            time_scale: a.time_scale,
            sample: a.sample,
            max_functions: a.trace_functions,
            skip_s: a.skip_s,
            skip_malformed: a.skip_malformed,
            by_name: a.map_by_name,
        };
        let s = schedule::from_trace(src.as_mut(), &deployed, &replay, bounds, a.seed)?;
        if s.items.is_empty() {
            fail!(
                LoadError::Config,
                "the trace yields no request within the bounds"
            );
        }
        return Ok(s);
    }
    let all: Vec<u32> = (0..functions.len() as u32).collect();
    let streams: Vec<Stream> = if !a.fn_rates.is_empty() {
        a.fn_rates
            .iter()
            .map(|s| {
                let (n, v) = name_value(s, "fn-rates")?;
                let idx = functions.iter().position(|f| *f == n).expect("added above") as u32;
                Ok(Stream {
                    steps: vec![Step {
                        rps: number(&v, "rate")?,
                        secs: f64::INFINITY,
                    }],
                    targets: vec![idx],
                })
            })
            .collect::<Result<_>>()?
    } else if !a.rps_steps.is_empty() {
        let secs = seconds(a.step_s.unwrap_or(0.0), "step-s", false)?.as_secs_f64();
        vec![Stream {
            steps: a.rps_steps.iter().map(|&rps| Step { rps, secs }).collect(),
            targets: all,
        }]
    } else if let Some(rps) = a.rps {
        vec![Stream {
            steps: vec![Step {
                rps,
                secs: f64::INFINITY,
            }],
            targets: all,
        }]
    } else {
        fail!(
            LoadError::Config,
            "no workload: --rps, --rps-steps with --step-s, --fn-rates, or --trace"
        );
    };
    // Steps end the run by themselves; a plain rate needs a bound.
    let bounds =
        if a.rps_steps.is_empty() || bounds.requests.is_some() || bounds.duration_us.is_some() {
            bounds
        } else {
            let total: f64 = streams[0].steps.iter().map(|s| s.secs).sum();
            Bounds {
                requests: None,
                duration_us: Some((total * 1e6) as u64),
            }
        };
    schedule::synthetic(functions, &streams, a.iat, a.burst_size, bounds, a.seed)
}

fn workload_of(a: &Args) -> serde_json::Value {
    serde_json::json!({
        "functions": a.functions, "rps": a.rps, "rps_steps": a.rps_steps, "step_s": a.step_s,
        "fn_rates": a.fn_rates, "iat": a.iat, "burst_size": a.burst_size,
        "trace": a.trace.as_ref().map(|p| p.display().to_string()), "format": a.format,
        "time_scale": a.time_scale, "sample": a.sample, "trace_functions": a.trace_functions,
        "skip_s": a.skip_s, "classes": a.classes,
        "requests": a.requests, "duration_s": a.duration_s, "warmup_s": a.warmup_s,
    })
}

/// Runs `thaw load` with parsed arguments; returns the summary.
pub fn execute(a: &Args) -> Result<Summary> {
    let target = Target::parse(&a.target)?;
    let opts = RunOptions {
        body: body(&a.data)?,
        timeout: seconds(a.timeout_s, "timeout-s", false)?,
        connect_timeout: seconds(a.connect_timeout_s, "connect-timeout-s", false)?,
        warmup: seconds(a.warmup_s, "warmup-s", true)?,
        progress: !a.quiet,
    };
    let schedule = schedule_of(a)?;
    if let Some(d) = &a.plots {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    let mut sink = Sink::open(a.records.as_deref(), a.csv.as_deref())?;
    let mut tally = Tally::default();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    let client = Arc::new(Client::new(target.clone()));
    rt.block_on(run(client, &schedule, &opts, &mut sink, &mut tally))?;
    // Connections still held by the pool close with the runtime.
    rt.shutdown_timeout(Duration::from_secs(1));
    let summary = tally.summary(
        target.to_string(),
        workload_of(a),
        a.seed,
        schedule.trace.clone(),
    );
    if let Some(p) = &a.json {
        let text = serde_json::to_string_pretty(&summary).context("encoding the summary")?;
        std::fs::write(p, text + "\n").with_context(|| format!("writing {}", p.display()))?;
    }
    if let Some(d) = &a.plots {
        let title = format!("thaw load against {target}");
        crate::plot::cdf(
            &d.join("latency-cdf.svg"),
            &tally,
            &format!("{title}: latency CDF"),
        )?;
        crate::plot::over_time(
            &d.join("latency-over-time.svg"),
            &tally,
            &format!("{title}: latency over time"),
        )?;
    }
    if !a.quiet {
        thaw_output::out!("{}", text_table(&summary));
    }
    Ok(summary)
}
