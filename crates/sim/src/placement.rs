//! `thaw sim --placement FILE`: replays snapshot placement over a workload.
//!
//! FILE (written by `thaw place --json`) holds measured function profiles and
//! the tiers' profiles and prices. Every function of the workload takes one of
//! the measured profiles (by a hash of its name: a mixed workload), its
//! deployed snapshot is put on a tier, and a restore costs what the placement
//! model estimates for that tier (fixed cost + memory part; the execution
//! time is the trace's). The keep-alive policy runs as in any other run, with
//! every function deployed (`--deployed-snapshots`). Arms, all on the same
//! input: each function's own choice (`place`), the fleet placement
//! (`place_fleet`, weighted by the cold starts each function had in the first
//! arm), and every tier that can hold every profile. Storage cost = each
//! snapshot's size x its tier's price x the simulated time.

use crate::error::{Result, SimError};
use crate::run::{run, Report, RunOptions};
use crate::source::{Item, Source};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;
use thaw_error::{fail, ResultExt};
use thaw_policy::placement::{self, FunctionProfile, Placement, TierOption};
use thaw_policy::{
    Action, Config, Engine, FnCost, FnId, Footprint, InstanceId, Outcome, Policy, PolicyError,
    Start, Time, Usage, XferId,
};

pub const FILE_VERSION: u32 = 1;

/// The profiles file: what `thaw place --json` measured.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct ProfilesFile {
    pub version: u32,
    #[serde(default)]
    pub source: Option<String>,
    pub tiers: Vec<TierOption>,
    pub functions: Vec<FunctionProfile>,
}

/// A function of the workload with measured profile `p`. The execution
/// time is left out: the input supplies every invocation's duration, so
/// what placement weighs here is the restore alone.
fn workload_function(
    p: &FunctionProfile,
    name: &str,
    cold_starts_per_hour: f64,
) -> FunctionProfile {
    FunctionProfile {
        name: name.to_string(),
        exec_ms: 0.0,
        cold_starts_per_hour,
        ..p.clone()
    }
}

impl ProfilesFile {
    pub fn load(path: &Path) -> Result<ProfilesFile> {
        let raw = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let f: ProfilesFile = serde_json::from_slice(&raw)
            .with_context(|| format!("{}: not a profiles file", path.display()))?;
        f.check()
            .with_context(|| format!("{}: bad profiles file", path.display()))?;
        Ok(f)
    }

    fn check(&self) -> Result<()> {
        if self.version != FILE_VERSION {
            fail!(
                SimError::Config,
                "version {} (this thaw reads {FILE_VERSION})",
                self.version
            );
        }
        if self.tiers.is_empty() || self.functions.is_empty() {
            fail!(
                SimError::Config,
                "it needs at least one tier and one function"
            );
        }
        let finite = |v: f64, what: &str, who: &str| -> Result<()> {
            if !(v.is_finite() && v >= 0.0) {
                fail!(
                    SimError::Config,
                    "{who}: {what} must be a finite number >= 0, got {v}"
                );
            }
            Ok(())
        };
        for t in &self.tiers {
            finite(t.price_per_gb_month, "price_per_gb_month", &t.name)?;
            finite(t.free_mib, "free_mib", &t.name)?;
            finite(t.access_us, "access_us", &t.name)?;
            if !(t.read_mbps.is_finite() && t.read_mbps > 0.0) {
                fail!(SimError::Config, "{}: read_mbps must be > 0", t.name);
            }
        }
        for f in &self.functions {
            for (v, what) in [
                (f.image_mib, "image_mib"),
                (f.ws_mib, "ws_mib"),
                (f.exec_ms, "exec_ms"),
                (f.fixed_ms, "fixed_ms"),
                (f.cold_starts_per_hour, "cold_starts_per_hour"),
            ] {
                finite(v, what, &f.name)?;
            }
        }
        Ok(())
    }
}

/// The engine with each function's restore cost set by id before its first
/// arrival (synthetic inputs have no names to look costs up by), counting
/// every function's non-warm starts on the way.
struct PlacedEngine<'a> {
    inner: &'a mut Engine,
    costs: Vec<FnCost>,
    restores: Vec<u64>,
}

impl PlacedEngine<'_> {
    /// `arrive` on the engine, `f`'s cost set before its first restore and
    /// its non-warm starts counted.
    fn placed(&mut self, f: FnId, arrive: impl FnOnce(&mut Engine) -> Outcome) -> Outcome {
        let i = f.0 as usize;
        if i >= self.restores.len() {
            self.restores.resize(i + 1, 0);
        }
        if self.restores[i] == 0 {
            // until its first restore the cost may not be set yet; setting
            // the same cost again is harmless
            if let Some(c) = self.costs.get(i) {
                self.inner.set_cost(f, *c);
            }
        }
        let o = arrive(self.inner);
        if let Outcome::Started { start, .. } = o {
            if start != Start::Warm {
                self.restores[i] += 1;
            }
        }
        o
    }
}

impl Policy for PlacedEngine<'_> {
    fn arrive(&mut self, now: Time, f: FnId, mem_mb: u32, out: &mut Vec<Action>) -> Outcome {
        self.placed(f, |e| e.arrive(now, f, mem_mb, out))
    }
    fn arrive_queued(&mut self, now: Time, f: FnId, mem_mb: u32, out: &mut Vec<Action>) -> Outcome {
        self.placed(f, |e| e.arrive_queued(now, f, mem_mb, out))
    }
    fn finish(
        &mut self,
        now: Time,
        instance: InstanceId,
        out: &mut Vec<Action>,
    ) -> Result<(), PolicyError> {
        self.inner.finish(now, instance, out)
    }
    fn transfer_done(&mut self, now: Time, id: XferId, out: &mut Vec<Action>) {
        self.inner.transfer_done(now, id, out)
    }
    fn advance(&mut self, now: Time, out: &mut Vec<Action>) {
        self.inner.advance(now, out)
    }
    fn next_deadline(&self) -> Option<Time> {
        self.inner.next_deadline()
    }
    fn usage(&self) -> Usage {
        self.inner.usage()
    }
    fn set_cost(&mut self, f: FnId, cost: FnCost) {
        self.inner.set_cost(f, cost)
    }

    fn set_footprint(&mut self, f: FnId, fp: Footprint, out: &mut Vec<Action>) {
        self.inner.set_footprint(f, fp, out)
    }
}

/// One arm of the study.
#[derive(Serialize, Debug, Clone)]
pub struct Arm {
    pub arm: String,
    /// functions per tier
    pub tiers: Vec<(String, u64)>,
    pub emulated_tiers: bool,
    pub restores: u64,
    pub mean_start_ms: f64,
    pub mean_restore_ms: f64,
    pub p99_start_ms: f64,
    pub storage_usd: f64,
    /// storage cost x mean start latency: lower is better
    pub merit: f64,
    /// functions whose restore is estimated slower than `--max-slowdown`
    /// times their fastest tier's (a fixed tier ignores the bound)
    pub over_bound: u64,
    #[serde(skip)]
    pub restores_by_fn: Vec<u64>,
}

/// FNV-1a, so a function keeps its profile across runs and builds.
// a remainder of n fits usize
#[allow(clippy::cast_possible_truncation)]
fn profile_of(name: &str, n: usize) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h % n as u64) as usize
}

/// Every function's trace name, by id (one pass over the input).
fn function_names(src: &mut dyn Source) -> Result<Vec<String>> {
    let mut names: Vec<Option<String>> = Vec::new();
    while let Some(item) = src.next_item()? {
        if let Item::Inv(inv) = item {
            let i = inv.f as usize;
            if i >= names.len() {
                names.resize(i + 1, None);
            }
            if names[i].is_none() {
                // synthetic functions have no trace name: their id stands in
                names[i] = Some(
                    src.fn_name(inv.f)
                        .map_or_else(|| format!("f{}", inv.f), str::to_string),
                );
            }
        }
    }
    // ids the input never used still get a name, so indices stay dense
    Ok(names
        .into_iter()
        .enumerate()
        .map(|(i, n)| n.unwrap_or_else(|| format!("f{i}")))
        .collect())
}

/// Runs every arm; `open` gives a fresh stream of the same input each time.
pub fn study(
    file: &ProfilesFile,
    max_slowdown: f64,
    cfg: Config,
    opts: &RunOptions,
    open: &dyn Fn() -> Result<Box<dyn Source>>,
) -> Result<Vec<Arm>> {
    if !(max_slowdown.is_finite() && max_slowdown >= 1.0) {
        fail!(SimError::Config, "--max-slowdown must be at least 1");
    }
    if cfg.kind.tiered() {
        fail!(SimError::Config, "the placement study places the deployed snapshot itself: use ttl, lru-mem or greedy-dual, not a tiered policy");
    }
    let cfg = Config {
        deployed_snapshots: true,
        ..cfg
    };
    let cfg = &cfg;
    let tiers = &file.tiers;
    let names = function_names(open()?.as_mut())?;
    if names.is_empty() {
        fail!(SimError::Config, "the input yielded no invocations");
    }
    let prof: Vec<usize> = names
        .iter()
        .map(|n| profile_of(n, file.functions.len()))
        .collect();

    // each measured profile's own choice (rate-free)
    let own: Vec<Placement> = file
        .functions
        .iter()
        .map(|p| placement::place(&workload_function(p, &p.name, 0.0), tiers, max_slowdown))
        .collect();
    let mut arms = Vec::new();
    // each measured profile's fastest qualifying restore, for the bound
    let fastest_of: Vec<f64> = own.iter().map(Placement::fastest_ms).collect();
    let fastest = |i: usize| fastest_of[prof[i]];
    let study = Study {
        max_slowdown,
        names: &names,
        fastest: &fastest,
        tiers,
        cfg,
        opts,
        open,
    };
    let first = study.arm("per function (own choice)", |i| {
        pick(&own[prof[i]], own[prof[i]].tier.as_deref())
    })?;
    let hours = first.1.sim_seconds / 3600.0;
    let fleet_profiles: Vec<FunctionProfile> = (0..names.len())
        .map(|i| {
            let r = first.0.restores_by_fn.get(i).copied().unwrap_or(0) as f64;
            let rate = if hours > 0.0 { r / hours } else { 0.0 };
            workload_function(&file.functions[prof[i]], &names[i], rate)
        })
        .collect();
    let fleet = placement::place_fleet(&fleet_profiles, tiers, max_slowdown);
    arms.push(first.0);
    arms.push(
        study
            .arm("fleet placement", |i| {
                pick(&fleet[i], fleet[i].tier.as_deref())
            })?
            .0,
    );
    for t in tiers {
        // a fixed tier must hold every measured profile
        if own.iter().any(|p| {
            pick(p, Some(&t.name))
                .and_then(|e| e.rejected.clone())
                .is_some()
        }) {
            thaw_output::errln!(
                "thaw sim: all on {}: skipped, it cannot hold every profile",
                t.name
            );
            continue;
        }
        let label = format!(
            "all on {}{}",
            t.name,
            if t.emulated { " (emulated)" } else { "" }
        );
        arms.push(study.arm(&label, |i| pick(&own[prof[i]], Some(&t.name)))?.0);
    }
    Ok(arms)
}

fn pick<'a>(p: &'a Placement, tier: Option<&str>) -> Option<&'a placement::Estimate> {
    tier.and_then(|t| p.estimates.iter().find(|e| e.tier == t))
}

/// What every arm of one study shares.
struct Study<'a> {
    max_slowdown: f64,
    names: &'a [String],
    /// a function's fastest qualifying restore, for the bound
    fastest: &'a dyn Fn(usize) -> f64,
    tiers: &'a [TierOption],
    cfg: &'a Config,
    opts: &'a RunOptions,
    open: &'a dyn Fn() -> Result<Box<dyn Source>>,
}

impl Study<'_> {
    /// Runs the input with each function `i` on the tier `choice(i)`.
    // float casts saturate (NaN, negatives to 0): the clamp wanted
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    fn arm<'p>(
        &self,
        label: &str,
        choice: impl Fn(usize) -> Option<&'p placement::Estimate>,
    ) -> Result<(Arm, Report)> {
        let Study {
            max_slowdown,
            names,
            fastest,
            tiers,
            cfg,
            opts,
            open,
        } = *self;
        let mut costs = Vec::with_capacity(names.len());
        let mut per_tier: HashMap<&str, u64> = HashMap::new();
        let mut storage_per_month = 0.0;
        let mut over_bound = 0;
        for (i, n) in names.iter().enumerate() {
            let Some(e) = choice(i) else {
                fail!(SimError::Config, "{label}: no tier for {n}");
            };
            if e.cold_ms > fastest(i) * max_slowdown {
                over_bound += 1;
            }
            // without the execution time (see `workload_function`)
            let restore_ms = e.cold_ms;
            costs.push(FnCost {
                restore_disk_us: (restore_ms * 1000.0).round() as u64,
                ..cfg.cost
            });
            *per_tier.entry(e.tier.as_str()).or_default() += 1;
            storage_per_month += e.cost_per_month;
        }
        // costs go by id here, not by name
        let o = RunOptions {
            fn_costs: HashMap::new(),
            ..opts.clone()
        };
        let mut engine = Engine::new(cfg.clone())?;
        let mut placed = PlacedEngine {
            inner: &mut engine,
            costs,
            restores: Vec::new(),
        };
        let report = run(open()?.as_mut(), &mut placed, &o)?;
        let restores = report.started - report.starts.warm;
        let months = report.sim_seconds / (730.0 * 3600.0);
        let storage_usd = storage_per_month * months;
        let mut tiers_used: Vec<(String, u64)> = per_tier
            .into_iter()
            .map(|(t, n)| (t.to_string(), n))
            .collect();
        tiers_used.sort();
        let emulated_tiers = tiers_used
            .iter()
            .any(|(t, _)| tiers.iter().any(|o| &o.name == t && o.emulated));
        let arm = Arm {
            arm: label.to_string(),
            tiers: tiers_used,
            emulated_tiers,
            restores,
            mean_start_ms: report.mean_start_ms,
            mean_restore_ms: report.mean_start_by_type_ms.lukewarm,
            p99_start_ms: report.p99_start_ms,
            storage_usd,
            merit: storage_usd * report.mean_start_ms,
            over_bound,
            restores_by_fn: placed.restores,
        };
        Ok((arm, report))
    }
}

/// The study as a markdown table.
pub fn table(arms: &[Arm]) -> String {
    let mut s = String::from(
        "| arm | tiers (functions) | restores | mean start | mean restore | p99 start | storage $ | $ x ms | over the bound |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    for a in arms {
        let tiers: Vec<String> = a.tiers.iter().map(|(t, n)| format!("{t} {n}")).collect();
        s.push_str(&format!(
            "| {} | {} | {} | {:.3} ms | {:.2} ms | {:.2} ms | {:.6} | {:.6} | {} |\n",
            a.arm,
            tiers.join(", "),
            a.restores,
            a.mean_start_ms,
            a.mean_restore_ms,
            a.p99_start_ms,
            a.storage_usd,
            a.merit,
            a.over_bound
        ));
    }
    s
}
