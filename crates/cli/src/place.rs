//! `thaw place FN|--all [--explain]`: measures each function's profile with
//! real restores, reads the tiers' profiles (probed where `thaw tier probe`
//! ran, declared otherwise), headroom and prices, and runs the placement
//! code of `crates/policy`.
use anyhow::{bail, Result};
use std::path::Path;
use thaw_policy::placement::{self, FunctionProfile, Placement, TierOption};
use thaw_tiers::{device, TiersConfig};
use thaw_worker::RestoreRequest;

pub struct Options {
    pub functions: Vec<String>,
    pub explain: bool,
    pub cold_starts_per_hour: f64,
    pub max_slowdown: f64,
    /// tier the profile is measured on
    pub profile_tier: String,
    /// where to write the profiles for `thaw sim --placement`
    pub json: Option<std::path::PathBuf>,
}

/// Tiers that are ready, with their measured profile where there is one.
pub fn tier_options(home: &Path, cfg: &TiersConfig) -> Result<Vec<TierOption>> {
    let probes = thaw_tiers::probe::load(home);
    let mut out = Vec::new();
    for t in &cfg.tiers {
        if !device::status(home, t)?.ready {
            continue;
        }
        let used = device::used_bytes(home, t)?;
        let free_mib = t.capacity_bytes.saturating_sub(used) as f64 / (1 << 20) as f64;
        out.push(thaw_server::placement::tier_option(t, &probes, free_mib));
    }
    Ok(out)
}

/// Restores `function` with REAP (recording its working set first if
/// needed) and measures what placement needs.
fn profile(
    w: &thaw_worker::Worker,
    function: &str,
    tier: &str,
    rate: f64,
) -> Result<FunctionProfile> {
    let t = w.tier(tier)?;
    let snap = w.snapshot(function, &t)?;
    let mut last = None;
    // the first restore may only record the working set
    for _ in 0..2 {
        snap.drop_page_cache()?;
        let (mut sb, rep) =
            w.restore(RestoreRequest::new(&snap, thaw_worker::StrategyKind::Reap))?;
        thaw_worker::invoke(
            &mut sb,
            thaw_worker::InputSize::I,
            thaw_worker::INVOKE_TIMEOUT,
        )?;
        let warm = thaw_worker::invoke(
            &mut sb,
            thaw_worker::InputSize::I,
            thaw_worker::INVOKE_TIMEOUT,
        )?;
        last = Some((rep, warm));
    }
    let (rep, warm) = last.expect("two restores ran");
    if rep.figures.ws_mode != thaw_worker::WsMode::Prefetch {
        bail!(
            "{function}: no REAP working set after a recording restore ({:?})",
            rep.figures.ws_mode
        );
    }
    Ok(FunctionProfile {
        name: function.into(),
        image_mib: snap.manifest.memory.len as f64 / (1 << 20) as f64,
        ws_mib: rep.figures.ws_bytes as f64 / (1 << 20) as f64,
        exec_ms: warm.latency_ms,
        fixed_ms: (rep.total_ms - rep.figures.prefetch_ms).max(0.0),
        cold_starts_per_hour: rate,
    })
}

pub fn run(home: &Path, o: &Options) -> Result<()> {
    if !(o.max_slowdown.is_finite() && o.max_slowdown >= 1.0) {
        bail!("--max-slowdown must be at least 1");
    }
    if !(o.cold_starts_per_hour.is_finite() && o.cold_starts_per_hour >= 0.0) {
        bail!("--rate must be a non-negative number");
    }
    let cfg = TiersConfig::load(home)?;
    let tiers = tier_options(home, &cfg)?;
    if tiers.is_empty() {
        bail!("no tier is ready (thaw tier list)");
    }
    let w = crate::worker(home)?;
    let mut placed: Vec<(FunctionProfile, Placement)> = Vec::new();
    for f in &o.functions {
        w.check_function(f)?;
        let p = profile(&w, f, &o.profile_tier, o.cold_starts_per_hour)
            .map_err(|e| e.context(format!("profiling {f}")))?;
        let pl = placement::place(&p, &tiers, o.max_slowdown);
        print_one(&pl, &tiers, o.explain);
        placed.push((p, pl));
    }
    if placed.len() > 1 {
        compare_fixed(&placed, &tiers, o.max_slowdown);
    }
    if let Some(path) = &o.json {
        use thaw_sim::placement::{ProfilesFile, FILE_VERSION};
        let file = ProfilesFile {
            version: FILE_VERSION,
            source: Some(format!(
                "thaw place, profiles measured with reap on {}; emulated tiers are marked",
                o.profile_tier
            )),
            tiers: tiers.clone(),
            functions: placed.iter().map(|(p, _)| p.clone()).collect(),
        };
        thaw_sim::output::write_file(path, &(serde_json::to_string_pretty(&file)? + "\n"))?;
    }
    Ok(())
}

fn print_one(pl: &Placement, tiers: &[TierOption], explain: bool) {
    thaw_output::outln!(
        "{}\t{}\t{}",
        pl.function,
        pl.tier.as_deref().unwrap_or("NONE"),
        pl.strategy.map_or("-", |s| s.name())
    );
    if !explain {
        return;
    }
    for line in &pl.explanation {
        thaw_output::outln!("    {line}");
    }
    for (e, t) in pl.estimates.iter().zip(tiers) {
        thaw_output::outln!(
            "    {:<8} {:<8} {:<5} memory {:>8.2} ms  cold {:>8.2} ms  ${:.4}/month  {}",
            e.tier,
            if t.emulated { "emulated" } else { "real" },
            e.strategy,
            e.memory_ms,
            e.cold_ms,
            e.cost_per_month,
            e.rejected.as_deref().unwrap_or("")
        );
    }
}

/// The suite placed per function against every tier used for all of them:
/// storage cost, mean estimated cold start, their product, and how many
/// functions end up slower than `max_slowdown` x their fastest tier.
fn compare_fixed(placed: &[(FunctionProfile, Placement)], tiers: &[TierOption], max_slowdown: f64) {
    thaw_output::outln!("\n| placement | $/month | mean cold start (est.) | $ x ms | functions over {max_slowdown}x their fastest tier |");
    thaw_output::outln!("|---|---|---|---|---|");
    let fastest: Vec<f64> = placed.iter().map(|(_, p)| p.fastest_ms()).collect();
    let row = |name: &str, picks: Vec<Option<&placement::Estimate>>| {
        if picks.iter().any(|p| p.is_none()) {
            thaw_output::outln!("| {name} | - | - | - | does not fit every function |");
            return;
        }
        let cost: f64 = picks.iter().flatten().map(|e| e.cost_per_month).sum();
        let lat = picks.iter().flatten().map(|e| e.cold_ms).sum::<f64>() / picks.len() as f64;
        let over = picks
            .iter()
            .flatten()
            .zip(&fastest)
            .filter(|(e, f)| e.cold_ms > *f * max_slowdown)
            .count();
        thaw_output::outln!(
            "| {name} | {cost:.4} | {lat:.2} ms | {:.4} | {over} |",
            cost * lat
        );
    };
    row(
        "per function (thaw place)",
        placed
            .iter()
            .map(|(_, p)| {
                p.estimates
                    .iter()
                    .find(|e| Some(&e.tier) == p.tier.as_ref())
            })
            .collect(),
    );
    for t in tiers {
        row(
            &format!(
                "all on {}{}",
                t.name,
                if t.emulated { " (emulated)" } else { "" }
            ),
            placed
                .iter()
                .map(|(_, p)| {
                    p.estimates
                        .iter()
                        .find(|e| e.tier == t.name && e.rejected.is_none())
                })
                .collect(),
        );
    }
}

/// `thaw place`'s command line.
#[derive(clap::Args)]
pub struct Args {
    /// Functions, comma-separated (or --all)
    functions: Option<String>,
    /// The whole suite
    #[arg(long)]
    all: bool,
    /// Print every tier's estimate and the reasoning
    #[arg(long)]
    explain: bool,
    /// Expected cold starts per hour per function
    #[arg(long, default_value_t = 60.0)]
    rate: f64,
    /// A tier qualifies if its estimated cold start is within this factor of the fastest
    #[arg(long, default_value_t = 1.3)]
    max_slowdown: f64,
    /// Tier the profile is measured on
    #[arg(long, default_value = "disk")]
    profile_tier: String,
    /// Write the measured profiles and the tiers to this file, for
    /// `thaw sim --placement FILE`
    #[arg(long)]
    json: Option<std::path::PathBuf>,
}

/// Parses the command line's function list and runs placement.
pub fn run_cmd(home: &Path, a: Args) -> Result<()> {
    let functions = match (a.functions, a.all) {
        (Some(f), false) => crate::split(&f),
        (None, true) => crate::worker(home)?
            .functions()
            .iter()
            .map(|f| f.name.clone())
            .collect(),
        _ => bail!("name functions or pass --all (not both)"),
    };
    run(
        home,
        &Options {
            functions,
            explain: a.explain,
            cold_starts_per_hour: a.rate,
            max_slowdown: a.max_slowdown,
            profile_tier: a.profile_tier,
            json: a.json,
        },
    )
}
