//! Synthetic Azure-like workload, following the characterisation of Shahrad et al.,
//! "Serverless in the Wild" (USENIX ATC'20). Parameters (all in [`Params`]):
//!
//! - Popularity: each function's mean rate is log-normal, ln(invocations per minute)
//!   ~ N(-3.6, 3.9^2), capped at `max_rate_per_min`. These two numbers place ~45% of
//!   functions at most once an hour and ~18% more than once a minute, the paper's
//!   headline fractions; rates span many orders of magnitude as in its Fig. 5.
//! - Triggers and inter-arrivals: 16% of functions are timers (the paper's share of
//!   timer functions): strictly periodic. Of the rest, 60% are Poisson (CV 1) and 40%
//!   bursty, with Gamma(0.25) inter-arrival times (CV 2): the paper finds many
//!   functions far from Poisson on both sides.
//! - Diurnal load: non-timer rates are multiplied by 1 + a sin(2 pi (t/24h - 1/4))
//!   (a = `diurnal`, trough at t = 0 h, peak at 12 h), the daily swing of its Fig. 3.
//! - Duration: per-function mean execution time log-normal, ln(seconds) ~
//!   N(-0.38, 2.36^2) (the paper's log-normal fit of average execution time),
//!   clamped to [1 ms, 10 min]; per invocation that mean times a log-normal factor
//!   with sigma 0.5 and mean 1.
//! - Load per function: the mean duration is shortened so that rate x mean duration
//!   (the function's average number of busy instances) is at most `max_fn_load`
//!   (default 1). Drawn independently, a few popular long functions would need
//!   hundreds of GB of running instances; in the trace the popular functions are
//!   short ones (queue and event triggers). This is our assumption, not the paper's.
//! - Memory: per function a Burr XII(c = 11.652, k = 0.221, lambda = 107.083) MB
//!   draw (the paper's fit of allocated app memory), clamped to [32, 4096] MB.
//!
//! Memory use is O(functions): one heap entry per function.

use crate::error::{Result, SimError};
use crate::rng::Rng;
use crate::source::{Inv, Item, Source};
use std::cmp::Reverse;
use std::collections::binary_heap::PeekMut;
use std::collections::BinaryHeap;
use thaw_error::fail;
use thaw_policy::Time;

/// Bounds on the synthetic workload's knobs: beyond them a run would not end in
/// any useful time, or would need memory for functions nobody simulates.
pub const MAX_FUNCTIONS: u32 = 10_000_000;
pub const MAX_HOURS: f64 = 8760.0;
pub const MAX_RATE_SCALE: f64 = 1000.0;
pub const MAX_FN_RATE_PER_MIN: f64 = 6e6;

#[derive(Clone, Debug, PartialEq)]
pub struct Params {
    pub functions: u32,
    pub hours: f64,
    pub seed: u64,
    pub rate_mu: f64,
    pub rate_sigma: f64,
    pub max_rate_per_min: f64,
    /// Multiplies every rate (load knob).
    pub rate_scale: f64,
    pub timer_share: f64,
    pub bursty_share: f64,
    pub diurnal: f64,
    pub max_fn_load: f64,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            functions: 10_000,
            hours: 2.0,
            seed: 1,
            rate_mu: -3.6,
            rate_sigma: 3.9,
            max_rate_per_min: 1000.0,
            rate_scale: 1.0,
            timer_share: 0.16,
            bursty_share: 0.4,
            diurnal: 0.5,
            max_fn_load: 1.0,
        }
    }
}

impl Params {
    pub fn validate(&self) -> Result<()> {
        if !(1..=MAX_FUNCTIONS).contains(&self.functions) {
            fail!(
                SimError::Config,
                "--functions must be in [1, {MAX_FUNCTIONS}]"
            );
        }
        if !(self.hours.is_finite() && self.hours > 0.0 && self.hours <= MAX_HOURS) {
            fail!(
                SimError::Config,
                "--hours must be in (0, {MAX_HOURS}] (one year)"
            );
        }
        if !(self.rate_scale.is_finite()
            && self.rate_scale > 0.0
            && self.rate_scale <= MAX_RATE_SCALE)
        {
            fail!(
                SimError::Config,
                "--rate-scale must be in (0, {MAX_RATE_SCALE}]"
            );
        }
        if !(0.0..1.0).contains(&self.diurnal) {
            fail!(SimError::Config, "--diurnal must be in [0, 1)");
        }
        if !(self.max_fn_load.is_finite() && self.max_fn_load > 0.0) {
            fail!(SimError::Config, "--max-fn-load must be > 0");
        }
        if !(self.max_rate_per_min.is_finite() && self.max_rate_per_min > 0.0) {
            fail!(SimError::Config, "max rate must be > 0");
        }
        // The clock ticks in microseconds: one function cannot arrive faster.
        if self.max_rate_per_min * self.rate_scale > MAX_FN_RATE_PER_MIN {
            fail!(SimError::Config,
                "--max-rate-per-min x --rate-scale is {} per minute; at most {MAX_FN_RATE_PER_MIN} (one arrival per 10 us)",
                self.max_rate_per_min * self.rate_scale
            );
        }
        Ok(())
    }
}

// clamped to 32..=4096 first
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
pub fn draw_mem_mb(r: &mut Rng) -> u32 {
    r.burr(11.652, 0.221, 107.083).clamp(32.0, 4096.0).round() as u32
}

pub fn draw_mean_duration_ms(r: &mut Rng) -> f64 {
    (r.lognormal(-0.38, 2.36) * 1000.0).clamp(1.0, 600_000.0)
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Timer,
    Poisson,
    Bursty,
}

struct Func {
    kind: Kind,
    /// Mean inter-arrival time, us.
    iat: f64,
    mean_dur_ms: f64,
    mem_mb: u32,
}

pub struct Synthetic {
    rng: Rng,
    funcs: Vec<Func>,
    heap: BinaryHeap<Reverse<(Time, u32)>>,
    horizon: Time,
    now: Time,
    /// Diurnal rate multiplier per minute of the day (a table: no sin per event).
    load: Vec<f64>,
}

impl Synthetic {
    // float casts saturate (NaN, negatives to 0): the clamp wanted
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    pub fn new(p: Params) -> Result<Synthetic> {
        p.validate()?;
        let mut rng = Rng::new(p.seed);
        let horizon = (p.hours * 3600e6) as Time;
        let mut funcs = Vec::with_capacity(p.functions as usize);
        let mut heap = BinaryHeap::with_capacity(p.functions as usize);
        for f in 0..p.functions {
            let per_min = rng
                .lognormal(p.rate_mu, p.rate_sigma)
                .min(p.max_rate_per_min)
                * p.rate_scale;
            let iat = 60e6 / per_min;
            let u = rng.f64();
            let kind = if u < p.timer_share {
                Kind::Timer
            } else if u < p.timer_share + (1.0 - p.timer_share) * p.bursty_share {
                Kind::Bursty
            } else {
                Kind::Poisson
            };
            let func = Func {
                kind,
                iat,
                mean_dur_ms: draw_mean_duration_ms(&mut rng).min(p.max_fn_load * iat / 1000.0),
                mem_mb: draw_mem_mb(&mut rng),
            };
            // First arrival: a uniform phase within one mean inter-arrival time.
            let first = rng.f64() * iat;
            if first < horizon as f64 {
                heap.push(Reverse((first as Time, f)));
            }
            funcs.push(func);
        }
        let load = (0..1440)
            .map(|m| 1.0 + p.diurnal * (std::f64::consts::TAU * (m as f64 / 1440.0 - 0.25)).sin())
            .collect();
        Ok(Synthetic {
            load,
            rng,
            funcs,
            heap,
            horizon,
            now: 0,
        })
    }
}

impl Source for Synthetic {
    // float casts saturate (NaN, negatives to 0): the clamp wanted
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    fn next_item(&mut self) -> Result<Option<Item>> {
        // Replace the heap top in place: one sift instead of a pop and a push.
        let Some(mut top) = self.heap.peek_mut() else {
            return Ok(None);
        };
        let Reverse((t, f)) = *top;
        let fi = f as usize;
        let minute = ((t / 60_000_000) % 1440) as usize;
        let func = &self.funcs[fi];
        let gap = match func.kind {
            Kind::Timer => func.iat,
            Kind::Poisson => func.iat * self.rng.exp() / self.load[minute],
            Kind::Bursty => func.iat * self.rng.gamma(0.25) / 0.25 / self.load[minute],
        };
        let next = t as f64 + gap.max(1.0);
        if next < self.horizon as f64 {
            *top = Reverse((next as Time, f));
        } else {
            PeekMut::pop(top);
        }
        self.now = t;
        // Log-normal factor with mean 1: exp(0.5 N - 0.125).
        let dur_ms = func.mean_dur_ms * self.rng.lognormal(-0.125, 0.5);
        Ok(Some(Item::Inv(Inv {
            t,
            f,
            mem_mb: func.mem_mb,
            dur: (dur_ms * 1000.0).round().max(1.0) as Time,
        })))
    }

    fn fn_name(&self, _f: u32) -> Option<&str> {
        None
    }

    fn progress(&self) -> Option<f64> {
        Some(self.now as f64 / self.horizon.max(1) as f64)
    }
}
