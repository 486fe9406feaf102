//! `thaw bench hierarchy`: seed 000's method over the storage hierarchy.
//! The restore benchmark runs on every tier in one process, in rounds of one
//! run per tier (page cache of the snapshot dropped before every cold run,
//! one untimed warm-up restore per strategy, a fresh start as the
//! baseline), and the report sets the tiers side by side: cold and warm
//! latency with the phase breakdown, the ratios between devices with the
//! paper's beside them, and REAP against `mmap` per tier. Emulated tiers are
//! marked in every row.
use crate::remote;
use crate::restore::{self, Record};
use crate::stats::summarize;
use anyhow::{bail, Result};
use std::collections::BTreeMap;
use std::fmt::Write;
use thaw_worker::{StrategyKind, Worker};

#[derive(Debug, Clone)]
pub struct Options {
    pub functions: Vec<String>,
    pub tiers: Vec<String>,
    pub strategies: Vec<StrategyKind>,
    pub sizes: Vec<String>,
    pub runs: usize,
    pub redeploy: bool,
}

pub fn run(
    w: &Worker,
    o: &Options,
    sink: &mut dyn FnMut(&Record) -> Result<()>,
) -> Result<Vec<Record>> {
    if o.tiers.is_empty() {
        bail!("name at least one tier");
    }
    // every tier must be there before hours of measuring start
    let cfg = thaw_tiers::TiersConfig::load(&w.home)?;
    let is_remote = |t: &str| cfg.get(t).is_ok_and(|c| c.kind == thaw_tiers::Kind::Remote);
    for t in o.tiers.iter().filter(|t| !is_remote(t)) {
        w.tier(t)?;
    }
    // the remote tier's copy comes from NVMe when it is measured, else
    // from the first local tier listed
    let local: Vec<&String> = o.tiers.iter().filter(|t| !is_remote(t)).collect();
    let source = local
        .iter()
        .find(|t| t.as_str() == "nvme")
        .or(local.first())
        .map_or("disk", |t| t.as_str());
    if o.runs == 0 {
        bail!("--runs must be at least 1");
    }
    // rounds: every tier once per round, so a noisy spell on a shared
    // machine falls on all tiers alike instead of on whichever ran then
    let mut all = Vec::new();
    for round in 0..o.runs {
        for t in &o.tiers {
            let mut numbered = |r: &Record| {
                sink(&Record {
                    run: round,
                    ..r.clone()
                })
            };
            if is_remote(t) {
                let ro = remote::Options {
                    functions: &o.functions,
                    strategies: &o.strategies,
                    sizes: &o.sizes,
                    tier: t,
                    source,
                    run: round,
                };
                all.extend(remote::run(w, &ro, &mut numbered)?);
                continue;
            }
            let ro = restore::Options {
                functions: o.functions.clone(),
                strategies: o.strategies.clone(),
                start_types: Vec::new(),
                tier: t.clone(),
                sizes: o.sizes.clone(),
                runs: 1,
                redeploy: o.redeploy && round == 0,
                check_all: false,
            };
            all.extend(
                restore::run(w, &ro, &mut numbered)?
                    .into_iter()
                    .map(|r| Record { run: round, ..r }),
            );
        }
    }
    Ok(all)
}

/// (function, input) -> tier -> strategy -> records
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

/// The markdown report over all tiers' records.
pub fn report(records: &[Record], tier_order: &[String]) -> String {
    let mut g: Grouped = BTreeMap::new();
    let mut emulated: BTreeMap<&str, bool> = BTreeMap::new();
    for (r, s) in records
        .iter()
        .filter_map(|r| Some((r, r.strategy.strategy()?)))
    {
        emulated.insert(&r.tier, r.emulated);
        g.entry((r.function.clone(), r.input.clone()))
            .or_default()
            .entry(r.tier.clone())
            .or_default()
            .entry(s)
            .or_default()
            .push(r);
    }
    let label = |t: &str| {
        if emulated.get(t).copied().unwrap_or(false) {
            format!("{t} (emulated)")
        } else {
            t.to_string()
        }
    };
    // best strategy per (function, tier) by median cold start
    let best = |by_s: &BTreeMap<StrategyKind, Vec<&Record>>| -> Option<(StrategyKind, f64)> {
        by_s.iter()
            .map(|(s, rs)| (*s, median(rs, |r| r.cold_ms)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
    };
    let mut md = String::new();
    let _ = writeln!(
        md,
        "### Cold and warm starts per tier (medians; best strategy per tier)\n"
    );
    let _ = writeln!(
        md,
        "| function | input | tier | best | cold ms (min / median / p99) | state load | memory | first response | warm ms | vs DRAM |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|");
    for ((f, input), by_t) in &g {
        let dram = by_t.get("tmpfs").and_then(best).map(|b| b.1);
        for t in tier_order {
            let Some(by_s) = by_t.get(t) else { continue };
            let Some((s, _)) = best(by_s) else { continue };
            let rs = &by_s[&s];
            let cold =
                summarize(&rs.iter().map(|r| r.cold_ms).collect::<Vec<_>>()).expect("non-empty");
            let _ = writeln!(
                md,
                "| {f} | {input} | {} | {s} | {:.1} / {:.1} / {:.1} | {:.2} | {:.2} | {:.1} | {:.1} | {} |",
                label(t),
                cold.min,
                cold.median,
                cold.p99,
                median(rs, |r| r.state_load_ms),
                median(rs, |r| r.memory_setup_ms + r.prefetch_ms),
                median(rs, |r| r.first_response_ms),
                median(rs, |r| r.warm_ms),
                dram.map_or("-".into(), |d| format!("{:.2}x", cold.median / d)),
            );
        }
    }
    // device ratios, geometric mean over functions of best-strategy medians
    let ratio = |slow: &str, fast: &str| -> Option<f64> {
        let xs: Vec<f64> = g
            .values()
            .filter_map(|by_t| {
                let a = best(by_t.get(slow)?)?.1;
                let b = best(by_t.get(fast)?)?.1;
                Some(a / b)
            })
            .collect();
        geomean(&xs)
    };
    let _ = writeln!(
        md,
        "\n### Device ratios (geometric mean over the functions, best strategy per tier)\n"
    );
    let _ = writeln!(md, "| ratio | thaw | seed 000 |");
    let _ = writeln!(md, "|---|---|---|");
    for (slow, fast, paper) in [
        ("sata", "nvme", "5.2-8.2x (light), 3.2-7.5x (mid)"),
        ("nvme", "pmem", "about 2.3-2.4x"),
        (
            "nvme",
            "tmpfs",
            "FaaSnap: within 3.5%; target here: <= 1.3x for light functions",
        ),
        ("hdd", "sata", "-"),
    ] {
        if let Some(r) = ratio(slow, fast) {
            let _ = writeln!(
                md,
                "| {} / {} | {r:.2}x | {paper} |",
                label(slow),
                label(fast)
            );
        }
    }
    remote_table(&mut md, &g, tier_order, &label);
    // REAP against mmap from the same tier
    let _ = writeln!(
        md,
        "\n### REAP against mmap from the same tier (geometric mean of median cold starts)\n"
    );
    let _ = writeln!(md, "| tier | mmap / reap | functions | REAP paper |");
    let _ = writeln!(md, "|---|---|---|---|");
    for t in tier_order {
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
        if let Some(r) = geomean(&xs) {
            let paper = match t.as_str() {
                "sata" => ">= 3.7x (SATA SSD)",
                "hdd" => ">= 5.4x (7,200 rpm HDD)",
                _ => "-",
            };
            let _ = writeln!(md, "| {} | {r:.2}x | {} | {paper} |", label(t), xs.len());
        }
    }
    md
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
