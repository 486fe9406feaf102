//! The two sides side by side: start-type counts and mean start latency, the
//! targets (counts within 10%, mean start latency within 15%), and the plot.
//!
//! Start types: the daemon deploys every function with a snapshot, so a start
//! without an idle instance is a `restore` there; the simulator runs with
//! `--deployed-snapshots` and calls that start `lukewarm` (`remote` cannot
//! happen: no network tier). `boot` is the simulator's `cold`. Start latency on
//! the live side is each request's latency from its intended send time minus
//! the function's own execution time (`Server-Timing: exec`), so both sides
//! measure the same thing: what starting cost, not what the function did.
use crate::error::{Result, SimliveError};
use crate::live::{Measured, ServeOptions};
use crate::trace::{Params, Trace, APP};
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::Path;
use thaw_error::ResultExt;

/// Counts within this share of the live count.
pub const COUNT_TARGET: f64 = 0.10;
/// Mean start latency within this share of the live mean.
pub const LATENCY_TARGET: f64 = 0.15;

/// The calibration file the simulator reads (docs/SIMULATOR.md's format).
pub fn calibration(t: &Trace, costs: &[Measured], boot_ms: f64, serve: &ServeOptions) -> Value {
    let mut functions = serde_json::Map::new();
    for (f, c) in t.functions.iter().zip(costs) {
        let mut spec = json!({
            "warm_ms": c.warm_ms,
            "cold_ms": boot_ms,
            "restore_ms": {"disk": c.restore_ms},
        });
        if let Some(ck) = c.checkpoint_ms {
            spec["checkpoint_ms"] = json!(ck);
        }
        if let Some(fp) = c.footprint {
            spec["idle_mb"] = json!(fp.idle_mb);
            spec["shared_mb"] = json!(fp.shared_mb);
        }
        functions.insert(format!("{APP},{}", f.name), spec);
    }
    json!({
        "version": 1,
        "source": "thaw bench simlive, same run: warm and restore replayed by thaw load against a daemon started empty (latency from the intended send time - exec, as in the replay); boot by a blocking client (round trip - exec); idle_mb and shared_mb as the daemon charged them after the last round",
        "defaults": {"cold_ms": boot_ms},
        "tiers": {"ram": {"capacity_gb": serve.memory_budget_mb as f64 / 1024.0}},
        "functions": functions,
    })
}

/// One side's figures.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Side {
    pub invocations: u64,
    pub warm: u64,
    pub restore: u64,
    pub boot: u64,
    /// Rejected (simulator) or answered with an error / not at all (live).
    pub failed: u64,
    pub mean_start_ms: f64,
    pub mean_start_by_type_ms: BTreeMap<String, f64>,
    /// Live only: lateness of the generator, p99 ms.
    pub schedule_lag_p99_ms: Option<f64>,
}

pub fn sim_side(r: &thaw_sim::run::Report) -> Side {
    let m = &r.mean_start_by_type_ms;
    let s = &r.starts;
    let restore = s.lukewarm + s.remote;
    let restore_mean = if restore > 0 {
        (m.lukewarm * s.lukewarm as f64 + m.remote * s.remote as f64) / restore as f64
    } else {
        0.0
    };
    Side {
        invocations: r.invocations,
        warm: s.warm,
        restore,
        boot: s.cold,
        failed: r.failed,
        mean_start_ms: r.mean_start_ms,
        mean_start_by_type_ms: [
            ("warm".to_string(), m.warm),
            ("restore".to_string(), restore_mean),
            ("boot".to_string(), m.cold),
        ]
        .into_iter()
        .collect(),
        schedule_lag_p99_ms: None,
    }
}

/// One answered request of a `thaw load` run.
pub struct LiveStart {
    pub function: String,
    pub start_type: String,
    /// Latency from the intended send time minus the function's own `exec`, ms.
    pub ms: f64,
}

/// Start latency of every 2xx record of a `thaw load` records file: the one
/// definition both the replay and the calibration use.
pub fn live_starts(records: &Path) -> Result<Vec<LiveStart>> {
    let f =
        std::fs::File::open(records).with_context(|| format!("opening {}", records.display()))?;
    let mut out = Vec::new();
    for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
        let line = line?;
        let v: Value = serde_json::from_str(&line)
            .with_context(|| format!("{}:{}", records.display(), i + 1))?;
        let ok = v["status"].as_str().is_some_and(|s| s.starts_with('2'));
        if !ok {
            continue;
        }
        let lat = v["latency_ms"].as_f64().ok_or_else(|| {
            SimliveError::Records(format!("{}:{}: no latency", records.display(), i + 1))
        })?;
        let exec = v["server_timing"]["exec"].as_f64().unwrap_or(0.0);
        out.push(LiveStart {
            function: v["function"].as_str().unwrap_or_default().to_string(),
            start_type: v["start_type"].as_str().unwrap_or("unknown").to_string(),
            ms: (lat - exec).max(0.0),
        });
    }
    Ok(out)
}

pub fn live_side(records: &Path, s: &thaw_load::record::Summary) -> Result<Side> {
    let starts = live_starts(records)?;
    let mut sums: BTreeMap<String, (f64, u64)> = BTreeMap::new();
    for st in &starts {
        let e = sums.entry(st.start_type.clone()).or_default();
        e.0 += st.ms;
        e.1 += 1;
    }
    let count = |k: &str| sums.get(k).map_or(0, |e| e.1);
    let total: f64 = starts.iter().map(|x| x.ms).sum();
    Ok(Side {
        invocations: s.scheduled,
        warm: count("warm"),
        restore: count("restore"),
        boot: count("boot"),
        failed: s.scheduled - s.ok,
        mean_start_ms: total / starts.len().max(1) as f64,
        mean_start_by_type_ms: sums
            .iter()
            .map(|(k, (t, n))| (k.clone(), t / *n as f64))
            .collect(),
        schedule_lag_p99_ms: Some(s.schedule_lag.p99_ms),
    })
}

#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub metric: String,
    pub sim: f64,
    pub live: f64,
    /// sim / live (None when live is 0).
    pub ratio: Option<f64>,
    /// The target on |sim - live| / live, if this row has one.
    pub target: Option<f64>,
    pub met: Option<bool>,
}

fn row(metric: &str, sim: f64, live: f64, target: Option<f64>) -> Row {
    let ratio = (live > 0.0).then(|| sim / live);
    let met = target.map(|t| match ratio {
        Some(r) => (r - 1.0).abs() <= t,
        None => sim == 0.0,
    });
    Row {
        metric: metric.into(),
        sim,
        live,
        ratio,
        target,
        met,
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    pub trace: Params,
    pub serve: ServeOptions,
    pub memory_mb: u64,
    pub max_instances: u32,
    pub strategy: thaw_strategy_kind::StartStrategy,
    pub sim: Side,
    pub live: Side,
    pub rows: Vec<Row>,
    pub targets_met: bool,
    pub calibration: Value,
    /// 1-minute load average before and after (the machine may be shared).
    pub load_average: [Option<f64>; 2],
}

impl Comparison {
    pub fn new(
        trace: &Params,
        serve: &ServeOptions,
        a: &crate::Args,
        sim: Side,
        live: Side,
        calibration: Value,
        load_average: [Option<f64>; 2],
    ) -> Comparison {
        let by = |s: &Side, k: &str| s.mean_start_by_type_ms.get(k).copied().unwrap_or(0.0);
        let rows = vec![
            row(
                "invocations",
                sim.invocations as f64,
                live.invocations as f64,
                None,
            ),
            row(
                "warm starts",
                sim.warm as f64,
                live.warm as f64,
                Some(COUNT_TARGET),
            ),
            row(
                "restore starts",
                sim.restore as f64,
                live.restore as f64,
                Some(COUNT_TARGET),
            ),
            row(
                "boot (cold) starts",
                sim.boot as f64,
                live.boot as f64,
                Some(COUNT_TARGET),
            ),
            row("failed", sim.failed as f64, live.failed as f64, None),
            row(
                "mean start latency (ms)",
                sim.mean_start_ms,
                live.mean_start_ms,
                Some(LATENCY_TARGET),
            ),
            row(
                "mean warm start (ms)",
                by(&sim, "warm"),
                by(&live, "warm"),
                None,
            ),
            row(
                "mean restore start (ms)",
                by(&sim, "restore"),
                by(&live, "restore"),
                None,
            ),
        ];
        let targets_met = rows.iter().all(|r| r.met != Some(false));
        Comparison {
            trace: trace.clone(),
            serve: serve.clone(),
            memory_mb: a.memory_mb,
            max_instances: a.max_instances,
            strategy: a.strategy,
            sim,
            live,
            rows,
            targets_met,
            calibration,
            load_average,
        }
    }

    pub fn markdown(&self) -> String {
        let t = &self.trace;
        let mut s = format!(
            "Simulated vs live: {} functions, {} min, {} invocations/s mean, seed {}; policy {}, RAM budget {} MiB ({} MiB per instance), {} restores; load average {} -> {}\n\n",
            t.functions,
            t.minutes,
            t.rps,
            t.seed,
            self.serve.policy,
            self.serve.memory_budget_mb,
            self.memory_mb,
            self.strategy,
            fmt_opt(self.load_average[0]),
            fmt_opt(self.load_average[1]),
        );
        s += "| | simulated | live | sim/live | target | met |\n|---|---:|---:|---:|---:|---|\n";
        for r in &self.rows {
            s += &format!(
                "| {} | {} | {} | {} | {} | {} |\n",
                r.metric,
                num(r.sim),
                num(r.live),
                r.ratio.map_or("-".into(), |x| format!("{x:.3}")),
                r.target
                    .map_or("".into(), |x| format!("±{:.0}%", x * 100.0)),
                match r.met {
                    Some(true) => "yes",
                    Some(false) => "**no**",
                    None => "",
                }
            );
        }
        s
    }
}

fn fmt_opt(v: Option<f64>) -> String {
    v.map_or("?".into(), |x| format!("{x:.2}"))
}

fn num(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// One SVG: start-type counts (left) and start-latency CDFs (right), both sides.
// float casts saturate (NaN, negatives to 0): the clamp wanted
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
pub fn plot(
    path: &Path,
    c: &Comparison,
    sim: &thaw_sim::run::Report,
    records: &Path,
) -> Result<()> {
    use plotters::prelude::*;
    let (sim_col, live_col) = (thaw_plot::colour(0), thaw_plot::colour(3));
    let root = SVGBackend::new(path, (1000, 450)).into_drawing_area();
    root.fill(&WHITE).map_err(thaw_plot::err)?;
    let (left, right) = root.split_horizontally(400);

    let kinds = [
        ("warm", c.sim.warm, c.live.warm),
        ("restore", c.sim.restore, c.live.restore),
        ("boot", c.sim.boot, c.live.boot),
    ];
    let top = kinds.iter().map(|k| k.1.max(k.2)).max().unwrap_or(1).max(1) as f64 * 1.15;
    let mut ch = ChartBuilder::on(&left)
        .caption("starts by type", ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..3.0, 0.0..top)
        .map_err(thaw_plot::err)?;
    ch.configure_mesh()
        .disable_x_mesh()
        .x_labels(3)
        .x_label_formatter(&|x| {
            kinds
                .get(*x as usize)
                .map_or(String::new(), |k| k.0.to_string())
        })
        .y_desc("invocations")
        .draw()
        .map_err(thaw_plot::err)?;
    for (side, col, off) in [("simulated", sim_col, 0.15), ("live", live_col, 0.5)] {
        ch.draw_series(kinds.iter().enumerate().map(|(i, k)| {
            let v = if side == "live" { k.2 } else { k.1 } as f64;
            let x = i as f64 + off;
            Rectangle::new([(x, 0.0), (x + 0.33, v)], col.filled())
        }))
        .map_err(thaw_plot::err)?
        .label(side)
        .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], col.filled()));
    }
    thaw_plot::legend(&mut ch, SeriesLabelPosition::MiddleRight)?;

    let sim_cdf: Vec<(f64, f64)> = sim
        .hist
        .cdf(400)
        .into_iter()
        .map(|(us, f)| ((us / 1000.0).max(0.01), f))
        .collect();
    let mut live: Vec<f64> = live_starts(records)?
        .into_iter()
        .map(|x| x.ms.max(0.01))
        .collect();
    live.sort_by(f64::total_cmp);
    let n = live.len().max(1);
    let step = n.div_ceil(400).max(1);
    let mut live_cdf: Vec<(f64, f64)> = live
        .iter()
        .enumerate()
        .filter(|(i, _)| i % step == step - 1 || i + 1 == n)
        .map(|(i, v)| (*v, (i + 1) as f64 / n as f64))
        .collect();
    if let Some(&first) = live.first() {
        live_cdf.insert(0, (first, 0.0));
    }
    let all = sim_cdf.iter().chain(&live_cdf).map(|p| p.0);
    let lo = all.clone().fold(f64::INFINITY, f64::min);
    let hi = all.fold(0.0f64, f64::max);
    let (lo, hi) = if lo.is_finite() && hi > lo {
        (lo / 1.2, hi * 1.2)
    } else {
        (0.1, 1000.0)
    };
    let title = format!(
        "start latency CDF (mean: sim {:.1} ms, live {:.1} ms)",
        c.sim.mean_start_ms, c.live.mean_start_ms
    );
    let mut ch = thaw_plot::frame(&right, &title)
        .build_cartesian_2d((lo..hi).log_scale(), 0.0..1.0)
        .map_err(thaw_plot::err)?;
    ch.configure_mesh()
        .x_desc("start latency (ms)")
        .y_desc("fraction of invocations")
        .draw()
        .map_err(thaw_plot::err)?;
    for (label, pts, col) in [
        ("simulated", &sim_cdf, sim_col),
        ("live", &live_cdf, live_col),
    ] {
        ch.draw_series(LineSeries::new(pts.iter().copied(), col.stroke_width(2)))
            .map_err(thaw_plot::err)?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], col.stroke_width(3)));
    }
    thaw_plot::legend(&mut ch, SeriesLabelPosition::LowerRight)?;
    root.present().map_err(thaw_plot::err)?;
    Ok(())
}
