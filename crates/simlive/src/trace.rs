//! A scaled-down synthetic day as an Azure 2021 trace file
//! (`app,func,end_timestamp,duration`), which `thaw sim` and `thaw load` both read.
//!
//! The shapes follow the simulator's synthetic generator (Shahrad et al., ATC'20:
//! 16% timer functions, of the rest 60% Poisson and 40% bursty with Gamma(0.25)
//! inter-arrivals, a diurnal swing, log-normal durations), scaled so that a day fits
//! a benchmark run on one small machine: the day is compressed into `minutes` (one
//! diurnal period, trough at the start, peak in the middle), the total rate is
//! `rps`, per-function rates are log-normal weights of it (sigma 1.5 instead of the
//! paper's 3.9, which would give one of 20 functions all the traffic), and every
//! function has one fixed duration (the live function sleeps exactly that long, so
//! both tools see the same busy time).
use crate::error::{Result, SimliveError};
use std::io::Write;
use std::path::Path;
use thaw_error::{fail, ResultExt};
use thaw_sim::rng::Rng;

/// What to generate.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Params {
    pub functions: u32,
    pub minutes: f64,
    /// Mean total invocations per second over the run.
    pub rps: f64,
    /// Diurnal amplitude in [0, 1): rate x (1 - A cos(2 pi t / T)).
    pub diurnal: f64,
    pub min_duration_ms: u64,
    pub max_duration_ms: u64,
    /// Cap on rate x duration of one function (its mean busy instances).
    pub max_fn_load: f64,
    pub seed: u64,
}

impl Params {
    pub fn validate(&self) -> Result<()> {
        if !(1..=200).contains(&self.functions) {
            fail!(
                SimliveError::Config,
                "--functions must be in 1..=200 (each one is a live deployed function)"
            );
        }
        if !(self.minutes.is_finite() && self.minutes > 0.0 && self.minutes <= 24.0 * 60.0) {
            fail!(SimliveError::Config, "--minutes must be in (0, 1440]");
        }
        if !(self.rps.is_finite() && self.rps > 0.0 && self.rps <= 1000.0) {
            fail!(SimliveError::Config, "--rps must be in (0, 1000]");
        }
        if !(0.0..1.0).contains(&self.diurnal) {
            fail!(SimliveError::Config, "--diurnal must be in [0, 1)");
        }
        if self.min_duration_ms == 0 || self.min_duration_ms > self.max_duration_ms {
            fail!(
                SimliveError::Config,
                "durations: need 0 < --min-duration-ms <= --max-duration-ms"
            );
        }
        if self.max_duration_ms > 60_000 {
            fail!(SimliveError::Config, "--max-duration-ms must be <= 60000");
        }
        if !(self.max_fn_load.is_finite() && self.max_fn_load > 0.0) {
            fail!(SimliveError::Config, "--max-fn-load must be > 0");
        }
        Ok(())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    Timer,
    Poisson,
    Bursty,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct FnSpec {
    pub name: String,
    pub pattern: Pattern,
    pub rate_per_s: f64,
    pub duration_ms: u64,
    pub invocations: u64,
}

pub struct Trace {
    pub functions: Vec<FnSpec>,
    /// (arrival us, function index), ordered by arrival.
    pub rows: Vec<(u64, u32)>,
}

/// The trace's app name; functions are `f00`, `f01`, ... (also their deployed names).
pub const APP: &str = "simlive";

/// Diurnal operational time: the integral of the rate shape 1 - A cos(2 pi t / T).
fn operational(t: f64, a: f64, period: f64) -> f64 {
    t - a * period / std::f64::consts::TAU * (std::f64::consts::TAU * t / period).sin()
}

/// Inverts [`operational`] (strictly increasing since A < 1) by bisection.
fn real_time(u: f64, a: f64, period: f64) -> f64 {
    let (mut lo, mut hi) = (0.0, period);
    for _ in 0..60 {
        let mid = 0.5 * (lo + hi);
        if operational(mid, a, period) < u {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

// float casts saturate (NaN, negatives to 0): the clamp wanted
// functions number far below 2^32
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
pub fn generate(p: &Params) -> Result<Trace> {
    p.validate()?;
    let mut rng = Rng::new(p.seed);
    let period = p.minutes * 60.0;
    let weights: Vec<f64> = (0..p.functions).map(|_| rng.lognormal(0.0, 1.5)).collect();
    let total: f64 = weights.iter().sum();
    let width = if p.functions > 100 { 3 } else { 2 };
    let mut functions = Vec::new();
    let mut rows = Vec::new();
    for (i, w) in weights.iter().enumerate() {
        let u = rng.f64();
        let pattern = if u < 0.16 {
            Pattern::Timer
        } else if u < 0.16 + 0.84 * 0.6 {
            Pattern::Poisson
        } else {
            Pattern::Bursty
        };
        let duration_ms = (thaw_sim::synthetic::draw_mean_duration_ms(&mut rng) as u64)
            .clamp(p.min_duration_ms, p.max_duration_ms);
        let rate = (p.rps * w / total).min(p.max_fn_load * 1000.0 / duration_ms as f64);
        let mut times = Vec::new();
        match pattern {
            Pattern::Timer => {
                let gap = 1.0 / rate;
                let mut t = rng.f64() * gap;
                while t < period {
                    times.push(t);
                    t += gap;
                }
            }
            Pattern::Poisson | Pattern::Bursty => {
                let mut op = 0.0;
                loop {
                    op += if pattern == Pattern::Poisson {
                        rng.exp() / rate
                    } else {
                        rng.gamma(0.25) / 0.25 / rate
                    };
                    if op >= period {
                        break;
                    }
                    times.push(real_time(op, p.diurnal, period));
                }
            }
        }
        for t in &times {
            rows.push(((t * 1e6).round() as u64, i as u32));
        }
        functions.push(FnSpec {
            name: format!("f{i:0width$}"),
            pattern,
            rate_per_s: rate,
            duration_ms,
            invocations: times.len() as u64,
        });
    }
    rows.sort_unstable();
    if rows.is_empty() {
        fail!(
            SimliveError::Config,
            "the trace has no invocation: raise --rps or --minutes"
        );
    }
    Ok(Trace { functions, rows })
}

/// Writes the trace as an Azure 2021 file: arrival = end - duration.
pub fn write_csv(t: &Trace, path: &Path) -> Result<()> {
    let f = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut w = std::io::BufWriter::new(f);
    writeln!(w, "app,func,end_timestamp,duration")?;
    for &(at, f) in &t.rows {
        let spec = &t.functions[f as usize];
        let dur_us = spec.duration_ms * 1000;
        writeln!(
            w,
            "{APP},{},{:.6},{:.6}",
            spec.name,
            (at + dur_us) as f64 / 1e6,
            dur_us as f64 / 1e6
        )?;
    }
    w.flush()
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> Params {
        Params {
            functions: 20,
            minutes: 20.0,
            rps: 2.0,
            diurnal: 0.5,
            min_duration_ms: 10,
            max_duration_ms: 2000,
            max_fn_load: 1.0,
            seed: 7,
        }
    }

    #[test]
    fn the_day_has_its_rate_its_swing_and_is_reproducible() {
        let p = params();
        let t = generate(&p).unwrap();
        let n = t.rows.len() as f64;
        let expected: f64 = t.functions.iter().map(|f| f.rate_per_s).sum::<f64>() * 1200.0;
        // bursty processes vary a lot over a short run; the Poisson part alone
        // would be within a few %
        assert!((n / expected - 1.0).abs() < 0.25, "{n} vs {expected}");
        assert!(t.rows.windows(2).all(|w| w[0] <= w[1]));
        assert!(t.rows.last().unwrap().0 < 1_200_000_000);
        // the diurnal peak is in the middle: the middle half holds more than half
        let non_timer: Vec<u64> = t
            .rows
            .iter()
            .filter(|r| t.functions[r.1 as usize].pattern != Pattern::Timer)
            .map(|r| r.0)
            .collect();
        let mid = non_timer
            .iter()
            .filter(|&&at| (300_000_000..900_000_000).contains(&at))
            .count();
        assert!(
            mid as f64 > 0.6 * non_timer.len() as f64,
            "{mid} of {}",
            non_timer.len()
        );
        for f in &t.functions {
            assert!((10..=2000).contains(&f.duration_ms));
            assert!(f.rate_per_s * f.duration_ms as f64 / 1000.0 <= 1.0 + 1e-9);
        }
        let again = generate(&p).unwrap();
        assert_eq!(again.rows, t.rows);
    }

    #[test]
    fn the_file_round_trips_through_the_simulator_parser() {
        let p = Params {
            functions: 4,
            minutes: 1.0,
            ..params()
        };
        let t = generate(&p).unwrap();
        let path = std::env::temp_dir().join(format!("simlive-trace-{}.csv", std::process::id()));
        write_csv(&t, &path).unwrap();
        let mut src = thaw_sim::azure2021::Azure2021::open(&path, 1, Some(128), 0).unwrap();
        let mut got = Vec::new();
        while let Some(item) = thaw_sim::source::Source::next_item(&mut src).unwrap() {
            match item {
                thaw_sim::source::Item::Inv(inv) => {
                    let name = thaw_sim::source::Source::fn_name(&src, inv.f)
                        .unwrap()
                        .to_string();
                    got.push((inv.t, name, inv.dur));
                }
                thaw_sim::source::Item::Bad(b) => panic!("{b}"),
            }
        }
        let _ = std::fs::remove_file(&path);
        let want: Vec<_> = t
            .rows
            .iter()
            .map(|&(at, f)| {
                let s = &t.functions[f as usize];
                (at, format!("{APP},{}", s.name), s.duration_ms * 1000)
            })
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn bad_parameters_are_refused() {
        for bad in [
            Params {
                functions: 0,
                ..params()
            },
            Params {
                minutes: 0.0,
                ..params()
            },
            Params {
                rps: f64::NAN,
                ..params()
            },
            Params {
                diurnal: 1.0,
                ..params()
            },
            Params {
                min_duration_ms: 0,
                ..params()
            },
            Params {
                min_duration_ms: 3000,
                ..params()
            },
        ] {
            assert!(generate(&bad).is_err(), "{bad:?}");
        }
    }
}
