//! The send schedule: every request's intended time and function, computed before
//! the first request leaves, so the run is open-loop by construction and a
//! malformed trace fails before anything is sent.
//!
//! Synthetic workloads follow STeLLAR and k6's arrival-rate executors: an
//! inter-arrival process (`exponential` = Poisson, `uniform` on [0, 2/rate],
//! `equidistant`) at a rate, or at a sequence of rate steps; each arrival is a
//! burst of `burst` requests to one function. Several functions either share one
//! process (each burst picks one, uniformly) or have rates of their own
//! (independent processes, merged). Trace workloads replay the simulator's Azure
//! parsers (`thaw_sim::azure2019`, `thaw_sim::azure2021`), time-scaled and sampled,
//! with each trace function mapped onto a deployed function by memory and duration
//! class. Every draw comes from one seeded generator (`thaw_sim::rng`).

use crate::error::{LoadError, Result};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use thaw_error::fail;
use thaw_sim::rng::{hash_str, Rng};
use thaw_sim::source::{Item, Source};

/// Upper bound on a schedule's length: the schedule is held in memory.
pub const MAX_REQUESTS: usize = 10_000_000;

/// One request to send: `at_us` after the run's start, to `functions[function]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Planned {
    pub at_us: u64,
    pub function: u32,
}

#[derive(Clone, Debug, Default)]
pub struct Schedule {
    /// Deployed function names the plan refers to by index.
    pub functions: Vec<String>,
    /// Sorted by `at_us`.
    pub items: Vec<Planned>,
    /// Trace replay only: what the sampling kept and dropped.
    pub trace: Option<TraceStats>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Iat {
    Exponential,
    Uniform,
    Equidistant,
}

/// A rate held for a time (`secs` = infinity for the last step of a plain rate).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Step {
    pub rps: f64,
    pub secs: f64,
}

/// An arrival process and who its arrivals go to.
#[derive(Clone, Debug)]
pub struct Stream {
    pub steps: Vec<Step>,
    /// Indexes into the schedule's functions; each burst picks one uniformly.
    pub targets: Vec<u32>,
}

/// When to stop: whichever bound comes first (at least one must be set).
#[derive(Clone, Copy, Debug, Default)]
pub struct Bounds {
    pub requests: Option<usize>,
    pub duration_us: Option<u64>,
}

impl Bounds {
    fn check(&self) -> Result<()> {
        if self.requests.is_none() && self.duration_us.is_none() {
            fail!(
                LoadError::Config,
                "give a bound: --requests N and/or --duration-s S"
            );
        }
        if self.requests == Some(0) || self.duration_us == Some(0) {
            fail!(LoadError::Config, "--requests and --duration-s must be > 0");
        }
        Ok(())
    }

    fn limit(&self) -> usize {
        self.requests.unwrap_or(MAX_REQUESTS).min(MAX_REQUESTS)
    }
}

/// Gaps of one arrival process, in microseconds, at a given rate.
fn gap_us(iat: Iat, rps: f64, rng: &mut Rng) -> f64 {
    let mean = 1e6 / rps;
    match iat {
        Iat::Exponential => rng.exp() * mean,
        Iat::Uniform => rng.f64() * 2.0 * mean,
        Iat::Equidistant => mean,
    }
}

/// Arrival times of one stream, in microseconds (fractional, so equidistant gaps
/// do not drift by rounding).
struct Arrivals {
    iat: Iat,
    steps: Vec<Step>,
    step: usize,
    step_start: f64,
    t: f64,
}

impl Arrivals {
    /// The next arrival, or None after the last step.
    fn next(&mut self, rng: &mut Rng) -> Option<f64> {
        loop {
            let s = *self.steps.get(self.step)?;
            let end = self.step_start + s.secs * 1e6;
            if s.rps > 0.0 {
                let t = self.t + gap_us(self.iat, s.rps, rng);
                if t < end {
                    self.t = t;
                    return Some(t);
                }
            }
            // The rate changes at the step's end; the process restarts there.
            self.step += 1;
            self.step_start = end;
            self.t = end;
            if !end.is_finite() {
                return None;
            }
        }
    }
}

pub fn check_steps(steps: &[Step]) -> Result<()> {
    if steps.is_empty() {
        fail!(
            LoadError::Config,
            "no rate given: --rps, --rps-steps or --fn-rates"
        );
    }
    for s in steps {
        if !(s.rps.is_finite() && s.rps >= 0.0 && s.rps <= 1e6) {
            fail!(
                LoadError::Config,
                "a rate must be in [0, 1000000] requests/s, got {}",
                s.rps
            );
        }
        if s.secs.is_nan() || s.secs <= 0.0 {
            fail!(
                LoadError::Config,
                "a rate step must last > 0 s, got {}",
                s.secs
            );
        }
    }
    if steps.iter().all(|s| s.rps == 0.0) {
        fail!(LoadError::Config, "every rate is 0: nothing to send");
    }
    Ok(())
}

/// A synthetic schedule: the streams merged in time order, up to the bounds.
// float casts saturate (NaN, negatives to 0): the clamp wanted; a remainder of len fits usize
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
pub fn synthetic(
    functions: Vec<String>,
    streams: &[Stream],
    iat: Iat,
    burst: u32,
    bounds: Bounds,
    seed: u64,
) -> Result<Schedule> {
    bounds.check()?;
    if burst == 0 {
        fail!(LoadError::Config, "--burst-size must be >= 1");
    }
    if streams.is_empty() || functions.is_empty() {
        fail!(LoadError::Config, "no function to send to");
    }
    for s in streams {
        check_steps(&s.steps)?;
        if s.targets.is_empty() || s.targets.iter().any(|&f| f as usize >= functions.len()) {
            fail!(LoadError::Config, "a stream targets no deployed function");
        }
    }
    let mut rng = Rng::new(seed);
    let mut procs: Vec<Arrivals> = streams
        .iter()
        .map(|s| Arrivals {
            iat,
            steps: s.steps.clone(),
            step: 0,
            step_start: 0.0,
            t: 0.0,
        })
        .collect();
    // Next arrival per stream, merged by a heap keyed on (time, stream).
    let mut heap = BinaryHeap::new();
    for (i, p) in procs.iter_mut().enumerate() {
        if let Some(t) = p.next(&mut rng) {
            heap.push(Reverse((t.round() as u64, i)));
        }
    }
    let limit = bounds.limit();
    let mut items = Vec::new();
    while let Some(Reverse((at_us, i))) = heap.pop() {
        if bounds.duration_us.is_some_and(|d| at_us >= d) {
            break;
        }
        let targets = &streams[i].targets;
        let function = targets[(rng.next_u64() % targets.len() as u64) as usize];
        for _ in 0..burst {
            if items.len() == limit {
                break;
            }
            items.push(Planned { at_us, function });
        }
        if items.len() == limit {
            if bounds.requests.is_none() {
                fail!(
                    LoadError::Config,
                    "the schedule exceeds {MAX_REQUESTS} requests: lower the rate or the duration"
                );
            }
            break;
        }
        if let Some(t) = procs[i].next(&mut rng) {
            heap.push(Reverse((t.round() as u64, i)));
        }
    }
    Ok(Schedule {
        functions,
        items,
        trace: None,
    })
}

/// A deployed function's memory (MB) and typical duration (ms), for class mapping.
#[derive(Clone, Debug, PartialEq)]
pub struct Deployed {
    pub name: String,
    pub class: Option<(f64, f64)>,
}

/// How a trace is replayed.
#[derive(Clone, Debug)]
pub struct TraceReplay {
    /// Trace seconds per wall second (60: a trace minute in one second).
    pub time_scale: f64,
    /// Keep each invocation with this probability (thins the rate).
    pub sample: f64,
    /// Keep only the first N trace functions the trace invokes.
    pub max_functions: Option<usize>,
    /// Skip the trace's first seconds (trace time).
    pub skip_s: f64,
    /// Malformed lines are skipped and counted instead of failing.
    pub skip_malformed: bool,
    /// Send trace function `APP,FUNC` (2021) or `OWNER,APP,FUNC` (2019) to the
    /// deployed function named FUNC instead of mapping by class; a trace
    /// function without its namesake is an error (the simulated-vs-live run
    /// replays one trace through both tools with the same functions).
    pub by_name: bool,
}

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct TraceStats {
    pub trace_functions: usize,
    pub functions_dropped: usize,
    pub invocations_read: u64,
    pub invocations_sampled_out: u64,
    pub malformed_lines: u64,
    /// (trace function, deployed function) for every mapped trace function.
    pub mapping: Vec<(String, String)>,
}

/// Memory class: powers of two of MB. Duration class: decades of ms.
fn class_of(mem_mb: f64, dur_ms: f64) -> (f64, f64) {
    (mem_mb.max(1.0).log2(), dur_ms.max(0.1).log10())
}

/// The deployed function closest in class to a trace function (ties, and
/// functions without a class, are spread by a hash of the trace name).
// float casts saturate (NaN, negatives to 0): the clamp wanted
// deployed functions number far below 2^32
// a remainder of len fits usize
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
pub fn map_function(
    deployed: &[Deployed],
    trace_name: &str,
    mem_mb: u32,
    dur_us: u64,
    seed: u64,
) -> u32 {
    let (m, d) = class_of(mem_mb as f64, dur_us as f64 / 1000.0);
    let dist = |x: &Deployed| match x.class {
        Some((xm, xd)) => {
            let (cm, cd) = class_of(xm, xd);
            ((cm - m).abs().round() + (cd - d).abs().round()) as u64
        }
        None => 0,
    };
    let best = deployed.iter().map(dist).min().unwrap_or(0);
    let tied: Vec<u32> = (0..deployed.len() as u32)
        .filter(|&i| dist(&deployed[i as usize]) == best)
        .collect();
    tied[(hash_str(seed, trace_name) % tied.len() as u64) as usize]
}

/// The deployed function named like the last field of a trace function's name.
// deployed functions number far below 2^32
#[allow(clippy::cast_possible_truncation)]
fn namesake(deployed: &[Deployed], trace_name: &str) -> Result<u32> {
    let func = trace_name.rsplit(',').next().unwrap_or(trace_name);
    deployed
        .iter()
        .position(|d| d.name == func)
        .map(|i| i as u32)
        .ok_or_else(|| {
            LoadError::Config(format!("trace function {trace_name:?}: no deployed function named {func:?} (--map-by-name)"))
        })
}

/// A trace replay schedule. A malformed line is an error naming file:line
/// (unless `skip_malformed`); I/O errors are always fatal.
// float casts saturate (NaN, negatives to 0): the clamp wanted
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
pub fn from_trace(
    src: &mut dyn Source,
    deployed: &[Deployed],
    replay: &TraceReplay,
    bounds: Bounds,
    seed: u64,
) -> Result<Schedule> {
    bounds.check()?;
    if deployed.is_empty() {
        fail!(
            LoadError::Config,
            "no deployed function to map the trace onto: --functions"
        );
    }
    if !(replay.time_scale.is_finite() && replay.time_scale > 0.0 && replay.time_scale <= 1e6) {
        fail!(LoadError::Config, "--time-scale must be in (0, 1000000]");
    }
    if !(replay.sample > 0.0 && replay.sample <= 1.0) {
        fail!(LoadError::Config, "--sample must be in (0, 1]");
    }
    if !(replay.skip_s.is_finite() && replay.skip_s >= 0.0) {
        fail!(LoadError::Config, "--skip-s must be >= 0");
    }
    let mut rng = Rng::new(seed);
    let skip_us = (replay.skip_s * 1e6) as u64;
    let limit = bounds.limit();
    let mut stats = TraceStats::default();
    // Per trace function id: its deployed function, or None when dropped.
    let mut map: Vec<Option<Option<u32>>> = Vec::new();
    let mut items = Vec::new();
    while let Some(item) = src.next_item()? {
        let inv = match item {
            Item::Inv(inv) => inv,
            Item::Bad(b) => {
                if !replay.skip_malformed {
                    fail!(LoadError::Malformed, "{b}");
                }
                stats.malformed_lines += 1;
                continue;
            }
        };
        if inv.t < skip_us {
            continue;
        }
        let at_us = ((inv.t - skip_us) as f64 / replay.time_scale).round() as u64;
        if bounds.duration_us.is_some_and(|d| at_us >= d) {
            break;
        }
        stats.invocations_read += 1;
        let f = inv.f as usize;
        if map.len() <= f {
            map.resize(f + 1, None);
        }
        if map[f].is_none() {
            let name = src.fn_name(inv.f).unwrap_or("").to_string();
            map[f] = Some(
                if replay
                    .max_functions
                    .is_some_and(|n| stats.trace_functions >= n)
                {
                    stats.functions_dropped += 1;
                    None
                } else {
                    stats.trace_functions += 1;
                    let d = if replay.by_name {
                        namesake(deployed, &name)?
                    } else {
                        map_function(deployed, &name, inv.mem_mb, inv.dur, seed)
                    };
                    stats
                        .mapping
                        .push((name, deployed[d as usize].name.clone()));
                    Some(d)
                },
            );
        }
        let target = map[f].flatten();
        let Some(function) = target else { continue };
        if replay.sample < 1.0 && rng.f64() >= replay.sample {
            stats.invocations_sampled_out += 1;
            continue;
        }
        items.push(Planned { at_us, function });
        if items.len() == limit {
            if bounds.requests.is_none() {
                fail!(LoadError::Config, "the replay exceeds {MAX_REQUESTS} requests: use --sample, --time-scale or --duration-s");
            }
            break;
        }
    }
    Ok(Schedule {
        functions: deployed.iter().map(|d| d.name.clone()).collect(),
        items,
        trace: Some(stats),
    })
}
