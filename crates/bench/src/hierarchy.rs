//! `thaw bench hierarchy`: the method of "FaaS in the Age of (sub-)µs I/O"
//! ([`STORAGE_STUDY`]) over the storage hierarchy.
//!
//! - Cold and warm starts: the restore benchmark runs on every tier in one
//!   process, in rounds of one run per tier (page cache of the snapshot
//!   dropped before every cold run, one untimed warm-up restore per
//!   strategy, a fresh start as the baseline). Each instance answers a cold
//!   invocation, a first warm one and, by default, 50 more: the study
//!   reports the 1st and the 51st warm invocation.
//! - Readahead: every setting listed (`on`: the tier's configured block
//!   readahead, the kernel's 128 KiB unless set; `off`: 0 KiB, so a page
//!   fault or buffered read brings in only the pages it asks for, as the
//!   study ran) is applied to the emulated block tiers' loop devices through
//!   sysfs and the tiers are measured again; the values found are restored
//!   at the end, also on error. DRAM and PMEM tiers have no readahead.
//! - Concurrency: `thaw bench concurrency` (`different` mode: N distinct
//!   snapshots, as the study gives every microVM its own) at N = 1, 2, 4 ...
//!   per tier and readahead setting.
//!
//! The report sets the tiers side by side: cold and warm latency with the
//! phase breakdown, the ratios between devices with the paper's beside
//! them, REAP against `mmap` per tier, memory per instance, and the scaling
//! of cold starts; `plots` draws them. Emulated tiers are marked in every
//! row and series.
use crate::concurrency::{self, Batch};
use crate::error::{BenchError, Result, SinkResult};
use crate::remote;
use crate::restore::{self, Record};
use crate::stats::summarize;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};
use thaw_error::fail;
use thaw_tiers::{Kind, TierConfig, TiersConfig};
use thaw_worker::InputSize;
use thaw_worker::{StrategyKind, Worker};

/// The storage study this benchmark reproduces, as its reports name it.
pub const STORAGE_STUDY: &str = "FaaS in the Age of (sub-)µs I/O";

/// A readahead setting of the emulated block tiers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ReadAhead {
    On,
    Off,
}

impl ReadAhead {
    pub fn parse(s: &str) -> Result<ReadAhead> {
        match s {
            "on" => Ok(ReadAhead::On),
            "off" => Ok(ReadAhead::Off),
            _ => fail!(BenchError::Config, "readahead: {s:?} is neither on nor off"),
        }
    }
}

/// The concurrency axis: N simultaneous cold starts per tier.
#[derive(Debug, Clone)]
pub struct Scaling {
    pub functions: Vec<String>,
    pub tiers: Vec<String>,
    pub strategies: Vec<StrategyKind>,
    pub levels: Vec<usize>,
    pub reps: usize,
}

#[derive(Debug, Clone)]
pub struct Options {
    pub functions: Vec<String>,
    pub tiers: Vec<String>,
    pub strategies: Vec<StrategyKind>,
    pub sizes: Vec<InputSize>,
    pub runs: usize,
    pub redeploy: bool,
    /// warm invocations per instance (51: the storage study's 51st warm)
    pub warm_calls: usize,
    /// settings measured, in order; the first is also the one of the
    /// tiers without readahead
    pub read_ahead: Vec<ReadAhead>,
    pub scaling: Option<Scaling>,
}

/// A batch of the concurrency axis with the readahead it ran under.
#[derive(Debug, Clone, Serialize)]
pub struct ScalingBatch {
    /// the tier device's readahead (emulated block tiers only)
    pub read_ahead_kb: Option<u32>,
    #[serde(flatten)]
    pub batch: Batch,
}

/// One JSON line of the study.
#[derive(Debug, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Line<'a> {
    Start(&'a Record),
    Scaling(&'a ScalingBatch),
}

#[derive(Debug, Default)]
pub struct Study {
    pub records: Vec<Record>,
    pub batches: Vec<ScalingBatch>,
}

/// Sets the emulated block tiers' readahead and puts back what it found
/// when dropped (also when the study fails half-way).
struct ReadAheadGuard<'a> {
    home: &'a Path,
    /// (tier, value found, configured "on" value)
    tiers: Vec<(TierConfig, u32, u32)>,
}

impl<'a> ReadAheadGuard<'a> {
    fn new(home: &'a Path, cfg: &TiersConfig, names: &[&String]) -> Result<Self> {
        let mut tiers = Vec::new();
        for n in names {
            let t = cfg.get(n)?;
            if t.kind == Kind::Block && t.emulated {
                let found = thaw_tiers::device::read_ahead_kb(home, t)?;
                tiers.push((
                    t.clone(),
                    found,
                    thaw_tiers::device::configured_read_ahead_kb(t),
                ));
            }
        }
        Ok(ReadAheadGuard { home, tiers })
    }

    /// Applies `ra`; returns the value per tier it applies to.
    fn set(&self, ra: ReadAhead) -> Result<BTreeMap<String, u32>> {
        let mut out = BTreeMap::new();
        for (t, _, on) in &self.tiers {
            let kb = if ra == ReadAhead::On { *on } else { 0 };
            thaw_tiers::device::set_read_ahead_kb(self.home, t, kb)?;
            out.insert(t.name.clone(), kb);
        }
        Ok(out)
    }
}

impl Drop for ReadAheadGuard<'_> {
    fn drop(&mut self) {
        for (t, found, _) in &self.tiers {
            if let Err(e) = thaw_tiers::device::set_read_ahead_kb(self.home, t, *found) {
                thaw_output::errln!("bench: tier {}: restoring readahead: {e:#}", t.name);
            }
        }
    }
}

pub fn check(o: &Options) -> Result<()> {
    if o.tiers.is_empty() {
        fail!(BenchError::Config, "name at least one tier");
    }
    if o.runs == 0 {
        fail!(BenchError::Config, "--runs must be at least 1");
    }
    if o.warm_calls == 0 {
        fail!(BenchError::Config, "--warm-calls must be at least 1");
    }
    if o.read_ahead.is_empty() {
        fail!(BenchError::Config, "--readahead: name on, off or both");
    }
    if let Some(sc) = &o.scaling {
        concurrency::check(&scaling_options(sc, &sc.functions[0], o.sizes[0]))?;
    }
    Ok(())
}

fn scaling_options(sc: &Scaling, function: &str, size: InputSize) -> concurrency::Options {
    concurrency::Options {
        function: function.into(),
        strategies: sc.strategies.clone(),
        tiers: sc.tiers.clone(),
        modes: vec!["different".into()],
        levels: sc.levels.clone(),
        reps: sc.reps,
        size,
    }
}

pub fn run(w: &Worker, o: &Options, sink: &mut dyn FnMut(Line) -> SinkResult) -> Result<Study> {
    check(o)?;
    // every tier must be there before hours of measuring start
    let cfg = TiersConfig::load(&w.home)?;
    let is_remote = |t: &str| cfg.get(t).is_ok_and(|c| c.kind == Kind::Remote);
    let scaling_tiers = o.scaling.iter().flat_map(|s| s.tiers.iter());
    for t in o.tiers.iter().chain(scaling_tiers.clone()) {
        if is_remote(t) {
            if o.scaling.as_ref().is_some_and(|s| s.tiers.contains(t)) {
                fail!(
                    BenchError::Config,
                    "tier {t}: the concurrency axis runs on local tiers"
                );
            }
        } else {
            w.tier(t)?;
        }
    }
    // the remote tier's copy comes from NVMe when it is measured, else
    // from the first local tier listed
    let local: Vec<&String> = o.tiers.iter().filter(|t| !is_remote(t)).collect();
    let source = local
        .iter()
        .find(|t| t.as_str() == "nvme")
        .or(local.first())
        .map_or("disk", |t| t.as_str());
    let mut names: Vec<&String> = local.clone();
    names.extend(scaling_tiers);
    let guard = ReadAheadGuard::new(&w.home, &cfg, &names)?;
    let mut stores = std::collections::BTreeMap::new();
    let mut study = Study::default();
    for (pass, ra) in o.read_ahead.iter().enumerate() {
        let kbs = guard.set(*ra)?;
        // after the first setting only the tiers it changes are measured again
        let measured = |t: &String| pass == 0 || kbs.contains_key(t);
        // rounds: every tier once per round, so a noisy spell on a shared
        // machine falls on all tiers alike instead of on whichever ran then
        for round in 0..o.runs {
            for t in o.tiers.iter().filter(|t| measured(t)) {
                let read_ahead_kb = kbs.get(t).copied();
                let mut numbered = |r: &Record| {
                    let r = Record {
                        run: round,
                        read_ahead_kb,
                        ..r.clone()
                    };
                    sink(Line::Start(&r))
                        .map_err(|e| thaw_error::Context::new("writing a record", e))?;
                    study.records.push(r);
                    Ok(())
                };
                if is_remote(t) {
                    if !stores.contains_key(t) {
                        stores.insert(t.clone(), remote::open_store(w, t)?);
                    }
                    let ro = remote::Options {
                        store: &stores[t],
                        warm_calls: o.warm_calls,
                        functions: &o.functions,
                        strategies: &o.strategies,
                        sizes: &o.sizes,
                        tier: t,
                        source,
                        run: round,
                    };
                    remote::run(w, &ro, &mut numbered)?;
                    continue;
                }
                let ro = restore::Options {
                    functions: o.functions.clone(),
                    strategies: o.strategies.clone(),
                    start_types: Vec::new(),
                    tier: t.clone(),
                    slow: "disk".into(),
                    sizes: o.sizes.clone(),
                    runs: 1,
                    redeploy: o.redeploy && round == 0 && pass == 0,
                    check_all: false,
                    warm_calls: o.warm_calls,
                };
                restore::run(w, &ro, &mut numbered)?;
            }
        }
        let Some(sc) = &o.scaling else { continue };
        for f in &sc.functions {
            let mut co = scaling_options(sc, f, o.sizes[0]);
            co.tiers.retain(|t| measured(t));
            if co.tiers.is_empty() {
                continue;
            }
            concurrency::run(w, &co, &mut |b| {
                let sb = ScalingBatch {
                    read_ahead_kb: kbs.get(&b.tier).copied(),
                    batch: b.clone(),
                };
                sink(Line::Scaling(&sb))
                    .map_err(|e| thaw_error::Context::new("writing a record", e))?;
                study.batches.push(sb);
                Ok(())
            })?;
        }
    }
    drop(guard);
    // restore's own record of a tier has the `fresh` baseline first: keep
    // the records in the order measured, which `report` does not rely on
    Ok(study)
}

/// A tier as measured under a readahead setting: the tier's name, with
/// " readahead off" when its device's readahead was 0.
fn variant(tier: &str, read_ahead_kb: Option<u32>) -> String {
    match read_ahead_kb {
        Some(0) => format!("{tier} readahead off"),
        _ => tier.to_string(),
    }
}

/// (function, input) -> tier variant -> strategy -> records
type Grouped<'a> =
    BTreeMap<(String, String), BTreeMap<String, BTreeMap<StrategyKind, Vec<&'a Record>>>>;

fn median(rs: &[&Record], f: impl Fn(&Record) -> f64) -> f64 {
    summarize(&rs.iter().map(|r| f(r)).collect::<Vec<_>>()).map_or(f64::NAN, |s| s.median)
}

fn geomean(xs: &[f64]) -> Option<f64> {
    let v: Vec<f64> = xs
        .iter()
        .copied()
        .filter(|x| x.is_finite() && *x > 0.0)
        .collect();
    (!v.is_empty()).then(|| (v.iter().map(|x| x.ln()).sum::<f64>() / v.len() as f64).exp())
}

/// best strategy of one (function, tier) by median cold start
fn best(by_s: &BTreeMap<StrategyKind, Vec<&Record>>) -> Option<(StrategyKind, f64)> {
    by_s.iter()
        .map(|(s, rs)| (*s, median(rs, |r| r.cold_ms)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
}

/// The study's records grouped, and the tier variants in report order.
struct View<'a> {
    g: Grouped<'a>,
    variants: Vec<String>,
    emulated: BTreeMap<String, bool>,
}

impl<'a> View<'a> {
    fn new(records: &'a [Record], tier_order: &[String]) -> View<'a> {
        let mut g: Grouped = BTreeMap::new();
        let mut emulated = BTreeMap::new();
        let mut variants = Vec::new();
        for t in tier_order {
            for ra in [None, Some(0)] {
                let v = variant(t, ra);
                let seen = records.iter().any(|r| {
                    r.tier == *t
                        && variant(&r.tier, r.read_ahead_kb) == v
                        && r.strategy.strategy().is_some()
                });
                if seen && !variants.contains(&v) {
                    variants.push(v);
                }
            }
        }
        for (r, s) in records
            .iter()
            .filter_map(|r| Some((r, r.strategy.strategy()?)))
        {
            let v = variant(&r.tier, r.read_ahead_kb);
            emulated.insert(r.tier.clone(), r.emulated);
            g.entry((r.function.clone(), r.input.clone()))
                .or_default()
                .entry(v)
                .or_default()
                .entry(s)
                .or_default()
                .push(r);
        }
        View {
            g,
            variants,
            emulated,
        }
    }

    /// "sata (emulated) readahead off"
    fn label(&self, v: &str) -> String {
        let (tier, rest) = v.split_once(' ').map_or((v, ""), |(t, r)| (t, r));
        let mut s = tier.to_string();
        if self.emulated.get(tier).copied().unwrap_or(false) {
            s += " (emulated)";
        }
        if !rest.is_empty() {
            s = format!("{s}, {rest}");
        }
        s
    }

    /// The plots' name of a variant: "sata*, RA off".
    fn short(&self, v: &str) -> String {
        let tier = v.split(' ').next().unwrap_or(v);
        let emulated = self.emulated.get(tier).copied().unwrap_or(false);
        short(tier, emulated, None, (tier != v).then_some(0))
    }

    /// Geometric mean over the functions of best-strategy median cold
    /// starts, slow over fast.
    fn ratio(&self, slow: &str, fast: &str) -> Option<f64> {
        let xs: Vec<f64> = self
            .g
            .values()
            .filter_map(|by_t| Some(best(by_t.get(slow)?)?.1 / best(by_t.get(fast)?)?.1))
            .collect();
        geomean(&xs)
    }
}

/// The device ratios thaw measures with the storage study's beside them: (slow,
/// fast, label, the paper's figure as text, its midpoint for the plot).
const PAPER_RATIOS: [(&str, &str, &str, &str, Option<f64>); 4] = [
    (
        "sata",
        "nvme",
        "SATA / NVMe",
        "5-6x (light), 3.2-4.7x (mid); readahead off",
        Some(5.5),
    ),
    (
        "nvme",
        "pmem",
        "NVMe / PMEM",
        "2.3-2.4x (light); readahead off",
        Some(2.35),
    ),
    (
        "nvme",
        "tmpfs",
        "NVMe / DRAM",
        "FaaSnap: within 3.5%; target here: <= 1.3x (light)",
        Some(1.035),
    ),
    ("hdd", "sata", "HDD / SATA", "-", None),
];

/// The markdown report over all tiers' records.
pub fn report(study: &Study, tier_order: &[String]) -> String {
    let records = &study.records;
    let view = View::new(records, tier_order);
    let (g, label) = (&view.g, |v: &str| view.label(v));
    let mut md = String::new();
    let warm_calls = records.iter().map(|r| r.warm_calls).max().unwrap_or(1);
    let _ = writeln!(
        md,
        "### Cold and warm starts per tier (medians; best strategy per tier)\n"
    );
    let _ = writeln!(
        md,
        "| function | input | tier | best | cold ms (min / median / p99) | state load | memory | first response | exec | 1st warm ms | warm #{warm_calls} ms | vs DRAM |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|---|");
    for ((f, input), by_t) in g {
        let dram = by_t.get("tmpfs").and_then(best).map(|b| b.1);
        for t in &view.variants {
            let Some(by_s) = by_t.get(t) else { continue };
            let Some((s, _)) = best(by_s) else { continue };
            let rs = &by_s[&s];
            let cold =
                summarize(&rs.iter().map(|r| r.cold_ms).collect::<Vec<_>>()).expect("non-empty");
            let _ = writeln!(
                md,
                "| {f} | {input} | {} | {s} | {:.1} / {:.1} / {:.1} | {:.2} | {:.2} | {:.1} | {:.1} | {:.1} | {:.1} | {} |",
                label(t),
                cold.min,
                cold.median,
                cold.p99,
                median(rs, |r| r.state_load_ms),
                median(rs, |r| r.memory_setup_ms + r.prefetch_ms),
                median(rs, |r| r.first_response_ms),
                median(rs, |r| r.exec_ms),
                median(rs, |r| r.warm_ms),
                median(rs, |r| r.warm_last_ms),
                dram.map_or("-".into(), |d| format!("{:.2}x", cold.median / d)),
            );
        }
    }
    let _ = writeln!(
        md,
        "\nState load: the snapshot's state read and checked; memory: the memory set-up (REAP: with its prefetch); first response: resume to the first answer, which includes the page faults of lazy strategies; exec: the handler's own time. The phases of {STORAGE_STUDY} are VMM loading, function execution and client overhead.\n"
    );
    let _ = writeln!(
        md,
        "\n### Device ratios (geometric mean over the functions, best strategy per tier)\n"
    );
    let _ = writeln!(
        md,
        "| ratio | thaw, readahead on | thaw, readahead off | {STORAGE_STUDY} |"
    );
    let _ = writeln!(md, "|---|---|---|---|");
    for (slow, fast, name, paper, _) in PAPER_RATIOS {
        let on = view.ratio(slow, fast);
        let off = view.ratio(&variant(slow, Some(0)), &variant(fast, Some(0)));
        let off = off.or_else(|| view.ratio(&variant(slow, Some(0)), fast));
        if on.is_none() && off.is_none() {
            continue;
        }
        let f = |x: Option<f64>| x.map_or("-".into(), |x| format!("{x:.2}x"));
        let _ = writeln!(
            md,
            "| {} / {} ({name}) | {} | {} | {paper} |",
            label(slow),
            label(fast),
            f(on),
            f(off)
        );
    }
    remote_table(&mut md, g, &view.variants, &label);
    // REAP against mmap from the same tier
    let _ = writeln!(
        md,
        "\n### REAP against mmap from the same tier (geometric mean of median cold starts)\n"
    );
    let _ = writeln!(md, "| tier | mmap / reap | functions | REAP paper |");
    let _ = writeln!(md, "|---|---|---|---|");
    for t in &view.variants {
        if let Some((r, n)) = reap_over_mmap(g, t) {
            let paper = match t.as_str() {
                "sata" => ">= 3.7x (SATA SSD)",
                "hdd" => ">= 5.4x (7,200 rpm HDD)",
                _ => "-",
            };
            let _ = writeln!(md, "| {} | {r:.2}x | {n} | {paper} |", label(t));
        }
    }
    memory_table(&mut md, &view);
    if !study.batches.is_empty() {
        scaling_table(&mut md, &study.batches);
    }
    md
}

/// mmap over REAP per function on one tier variant: (geometric mean, functions).
fn reap_over_mmap(g: &Grouped, t: &str) -> Option<(f64, usize)> {
    let xs: Vec<f64> = g
        .values()
        .filter_map(|by_t| {
            let by_s = by_t.get(t)?;
            Some(
                median(by_s.get(&StrategyKind::Mmap)?, |r| r.cold_ms)
                    / median(by_s.get(&StrategyKind::Reap)?, |r| r.cold_ms),
            )
        })
        .collect();
    Some((geomean(&xs)?, xs.len()))
}

/// Memory charged per instance after the first response (the page cache a
/// buffered tier's faults bring in is charged to the instance; a
/// byte-addressable tier's image is not), with the storage study's DRAM saving.
fn memory_table(md: &mut String, view: &View) {
    let _ = writeln!(
        md,
        "\n### Memory charged per instance after the first response (MiB, median)\n"
    );
    let _ = writeln!(
        md,
        "| function | input | strategy | {} | PMEM saves vs SATA |",
        view.variants
            .iter()
            .map(|v| view.label(v))
            .collect::<Vec<_>>()
            .join(" | ")
    );
    let _ = writeln!(
        md,
        "|---|---|---|{}---|",
        "---|".repeat(view.variants.len())
    );
    for ((f, input), by_t) in &view.g {
        let strategies: std::collections::BTreeSet<&StrategyKind> =
            by_t.values().flat_map(|by_s| by_s.keys()).collect();
        for s in strategies {
            let mib = |v: &str| {
                by_t.get(v)
                    .and_then(|by_s| by_s.get(s))
                    .map(|rs| median(rs, |r| r.rss_added_kb as f64 / 1024.0))
            };
            let cells: Vec<String> = view
                .variants
                .iter()
                .map(|v| mib(v).map_or("-".into(), |m| format!("{m:.1}")))
                .collect();
            let saved = match (mib("pmem"), mib("sata")) {
                (Some(p), Some(d)) if d > 0.0 => format!("{:.0}%", (1.0 - p / d) * 100.0),
                _ => "-".into(),
            };
            let _ = writeln!(
                md,
                "| {f} | {input} | {s} | {} | {saved} |",
                cells.join(" | ")
            );
        }
    }
    let _ = writeln!(md, "\n{STORAGE_STUDY}: PMEM (DCPM) as the snapshot store saves up to about 70% of the DRAM an instance uses from a SATA SSD (read-mostly working sets).");
}

/// A short name for plots and the scaling table: "sata* mmap, RA off"
/// (* emulated, RA: readahead).
fn short(tier: &str, emulated: bool, strategy: Option<&str>, read_ahead_kb: Option<u32>) -> String {
    let mut s = tier.to_string();
    if emulated {
        s += "*";
    }
    if let Some(st) = strategy {
        s = format!("{s} {st}");
    }
    if read_ahead_kb == Some(0) {
        s += ", RA off";
    }
    s
}

fn scaling_name(b: &ScalingBatch) -> String {
    short(
        &b.batch.tier,
        b.batch.emulated,
        Some(b.batch.strategy.name()),
        b.read_ahead_kb,
    )
}

/// (function, series) -> N -> median cold start
fn scaling_medians(batches: &[ScalingBatch]) -> BTreeMap<(String, String), BTreeMap<usize, f64>> {
    let mut cold: BTreeMap<(String, String), BTreeMap<usize, Vec<f64>>> = BTreeMap::new();
    for b in batches {
        cold.entry((b.batch.function.clone(), scaling_name(b)))
            .or_default()
            .entry(b.batch.n)
            .or_default()
            .extend(b.batch.starts.iter().map(|s| s.cold_ms));
    }
    cold.into_iter()
        .map(|(k, by_n)| {
            let m = by_n
                .into_iter()
                .filter_map(|(n, xs)| Some((n, summarize(&xs)?.median)))
                .collect();
            (k, m)
        })
        .collect()
}

fn scaling_table(md: &mut String, batches: &[ScalingBatch]) {
    let _ = writeln!(
        md,
        "\n### Cold-start scaling: N simultaneous cold starts of distinct snapshots (median cold ms; ok / attempted)\n"
    );
    let levels: std::collections::BTreeSet<usize> = batches.iter().map(|b| b.batch.n).collect();
    let _ = writeln!(
        md,
        "| function | tier, strategy | {} |",
        levels
            .iter()
            .map(|n| format!("N={n}"))
            .collect::<Vec<_>>()
            .join(" | ")
    );
    let _ = writeln!(md, "|---|---|{}", "---|".repeat(levels.len()));
    let meds = scaling_medians(batches);
    for ((f, series), by_n) in &meds {
        let cells: Vec<String> = levels
            .iter()
            .map(|n| {
                let (ok, tried) = batches
                    .iter()
                    .filter(|b| {
                        b.batch.function == *f && scaling_name(b) == *series && b.batch.n == *n
                    })
                    .fold((0, 0), |(o, t), b| (o + b.batch.ok, t + b.batch.n));
                by_n.get(n)
                    .map_or("-".into(), |m| format!("{m:.1} ({ok}/{tried})"))
            })
            .collect();
        let _ = writeln!(md, "| {f} | {series} | {} |", cells.join(" | "));
    }
    let _ = writeln!(
        md,
        "\n\\* emulated tier; RA off: the device's readahead at 0."
    );
    let loads: Vec<f64> = batches.iter().map(|b| b.batch.loadavg_1m).collect();
    if let Some(l) = summarize(&loads) {
        let max = loads.iter().copied().fold(f64::NAN, f64::max);
        let _ = writeln!(
            md,
            "\nLoad average (1 min) at the batches: {:.1} - {max:.1}, median {:.1}.",
            l.min, l.median
        );
    }
}

/// The study's SVG plots in `dir`: cold and warm latency per tier, the
/// device ratios beside the storage study's, and cold-start scaling per function.
pub fn plots(study: &Study, tier_order: &[String], dir: &Path) -> Result<Vec<PathBuf>> {
    use thaw_plot::{Bars, Lines, Scale};
    std::fs::create_dir_all(dir)?;
    let view = View::new(&study.records, tier_order);
    let mut written = Vec::new();
    let mut put = |name: &str, svg: String| -> Result<()> {
        let p = dir.join(name);
        thaw_plot::write(&p, &svg)?;
        written.push(p);
        Ok(())
    };
    let categories: Vec<String> = view.g.keys().map(|(f, i)| format!("{f} {i}")).collect();
    let best_of = |v: &str, pick: &dyn Fn(&[&Record]) -> f64| -> Vec<Option<f64>> {
        view.g
            .values()
            .map(|by_t| {
                let by_s = by_t.get(v)?;
                let (s, _) = best(by_s)?;
                Some(pick(&by_s[&s]))
            })
            .collect()
    };
    if !categories.is_empty() {
        let series = view
            .variants
            .iter()
            .map(|v| (view.short(v), best_of(v, &|rs| median(rs, |r| r.cold_ms))))
            .collect();
        put(
            "hierarchy-cold.svg",
            Bars {
                title: "Cold start per tier (median, best strategy; * emulated)".into(),
                y_label: "ms".into(),
                scale: Scale::Log,
                categories: categories.clone(),
                series,
            }
            .svg(),
        )?;
        let warm_calls = study
            .records
            .iter()
            .map(|r| r.warm_calls)
            .max()
            .unwrap_or(1);
        let mut warm_cats = Vec::new();
        for c in &categories {
            warm_cats.push(format!("{c} 1st"));
            warm_cats.push(format!("{c} #{warm_calls}"));
        }
        let series = view
            .variants
            .iter()
            .map(|v| {
                let first = best_of(v, &|rs| median(rs, |r| r.warm_ms));
                let last = best_of(v, &|rs| median(rs, |r| r.warm_last_ms));
                let both = first
                    .into_iter()
                    .zip(last)
                    .flat_map(|(a, b)| [a, b])
                    .collect();
                (view.short(v), both)
            })
            .collect();
        put(
            "hierarchy-warm.svg",
            Bars {
                title: format!("Warm invocations: 1st and #{warm_calls} (median; * emulated)"),
                y_label: "ms".into(),
                scale: Scale::Log,
                categories: warm_cats,
                series,
            }
            .svg(),
        )?;
        let mut cats = Vec::new();
        let (mut on, mut off, mut paper) = (Vec::new(), Vec::new(), Vec::new());
        for (slow, fast, name, _, p) in PAPER_RATIOS {
            let a = view.ratio(slow, fast);
            let b = view.ratio(&variant(slow, Some(0)), &variant(fast, Some(0)));
            let b = b.or_else(|| view.ratio(&variant(slow, Some(0)), fast));
            if a.is_none() && b.is_none() {
                continue;
            }
            cats.push(name.to_string());
            on.push(a);
            off.push(b);
            paper.push(p);
        }
        if !cats.is_empty() {
            put(
                "hierarchy-ratios.svg",
                Bars {
                    title: format!("Device ratios: thaw (emulated tiers) beside {STORAGE_STUDY}"),
                    y_label: "slowdown (x)".into(),
                    scale: Scale::Log,
                    categories: cats,
                    series: vec![
                        ("thaw, readahead on".into(), on),
                        ("thaw, readahead off".into(), off),
                        ("published".into(), paper),
                    ],
                }
                .svg(),
            )?;
        }
    }
    let meds = scaling_medians(&study.batches);
    let functions: std::collections::BTreeSet<&String> = meds.keys().map(|(f, _)| f).collect();
    for f in functions {
        let series = meds
            .iter()
            .filter(|((g, _), _)| g == f)
            .map(|((_, s), by_n)| {
                (
                    s.clone(),
                    by_n.iter().map(|(n, m)| (*n as f64, *m)).collect(),
                )
            })
            .collect();
        put(
            &format!("hierarchy-scaling-{f}.svg"),
            Lines {
                title: format!("{f}: N simultaneous cold starts (* emulated, RA: readahead)"),
                x_label: "concurrent cold starts".into(),
                y_label: "median cold start, ms".into(),
                x_scale: Scale::Log,
                y_scale: Scale::Log,
                series,
            }
            .svg(),
        )?;
    }
    Ok(written)
}

/// Streamed restores from each remote tier against the same strategy from
/// NVMe (target: within 2x for the light functions).
fn remote_table(
    md: &mut String,
    g: &Grouped,
    tier_order: &[String],
    label: &dyn Fn(&str) -> String,
) {
    let remotes: Vec<&String> = tier_order
        .iter()
        .filter(|t| {
            g.values()
                .flat_map(|by_t| by_t.get(*t))
                .flat_map(|by_s| by_s.values().flatten())
                .any(|r| r.background_ms > 0.0)
        })
        .collect();
    for rt in remotes {
        let _ = writeln!(
            md,
            "\n### {} (streamed: working set first) against NVMe, same strategy (medians)\n",
            label(rt)
        );
        let _ = writeln!(
            md,
            "| function | input | strategy | remote cold ms (min / median / p99) | fetch first | first response | background fill done | NVMe cold ms | remote / NVMe |"
        );
        let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|");
        let mut ratios = Vec::new();
        for ((f, input), by_t) in g {
            let Some(by_s) = by_t.get(rt) else { continue };
            for (s, rs) in by_s {
                let cold = summarize(&rs.iter().map(|r| r.cold_ms).collect::<Vec<_>>())
                    .expect("non-empty");
                let nvme = by_t
                    .get("nvme")
                    .and_then(|n| n.get(s))
                    .map(|n| median(n, |r| r.cold_ms));
                let ratio = nvme.map(|n| cold.median / n);
                ratios.extend(ratio);
                let _ = writeln!(
                    md,
                    "| {f} | {input} | {s} | {:.1} / {:.1} / {:.1} | {:.1} | {:.1} | {:.1} | {} | {} |",
                    cold.min,
                    cold.median,
                    cold.p99,
                    median(rs, |r| r.state_load_ms),
                    median(rs, |r| r.first_response_ms),
                    median(rs, |r| r.background_ms),
                    nvme.map_or("-".into(), |n| format!("{n:.1}")),
                    ratio.map_or("-".into(), |r| format!("{r:.2}x")),
                );
            }
        }
        if let Some(gm) = geomean(&ratios) {
            let _ = writeln!(
                md,
                "\nGeometric mean remote / NVMe: {gm:.2}x (target: <= 2x for the light functions)"
            );
        }
    }
}
