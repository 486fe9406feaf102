//! `thaw bench restore`: cold starts from snapshots per strategy against a fresh start.
use anyhow::{Context, Result};
use std::io::Write;
use std::path::Path;
use thaw_bench::start::StartType;
use thaw_worker::StrategyKind;

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value = "helloworld,lr_serving")]
    functions: String,
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "eager,mmap,uffd"
    )]
    strategies: Vec<StrategyKind>,
    /// Baselines measured beside the strategies (fresh is always measured)
    #[arg(long, value_enum, value_delimiter = ',', default_value = "fresh")]
    start_types: Vec<StartType>,
    /// A tier name (thaw tier list)
    #[arg(long, default_value = "tmpfs")]
    tier: String,
    /// `tiered`: the tier its slow file goes on (pmem: mapped in place;
    /// disk or another block tier: faulted in); --tier holds the fast one
    #[arg(long, default_value = "disk")]
    slow: String,
    #[command(flatten)]
    run: super::RunOpts,
    /// Run the checker on every output, not just the first
    #[arg(long)]
    check_all: bool,
    /// Sandboxes built ahead of restores (namespaces, mounts, cgroups, the
    /// restorer waiting for its plan), refilled in the background and
    /// waited for before each measured restore; 0 builds each on the
    /// critical path
    #[arg(long, default_value_t = 2)]
    pool: usize,
}

pub fn run(home: &Path, a: Args) -> Result<()> {
    let Args {
        functions,
        strategies,
        start_types,
        tier,
        slow,
        run,
        check_all,
        pool,
    } = a;
    if strategies.contains(&StrategyKind::Tiered) {
        // a pair of tiers that makes no split fails before any
        // runtime work; both are probed here if they never were
        crate::tiers::split_costs(home, &tier, &slow)?;
    }
    let mut w = crate::worker(home)?;
    w.set_pool(pool)?;
    // the title names the tier's emulation; dax rows name their own
    let emulated = w.tier(&tier)?.emulated;
    let o = thaw_bench::restore::Options {
        functions: crate::split(&functions),
        strategies,
        start_types,
        tier: tier.clone(),
        slow,
        sizes: run.sizes.clone(),
        runs: run.runs,
        redeploy: run.redeploy,
        check_all,
        warm_calls: 1,
    };
    let mut sink = record_sink(run.json.as_deref())?;
    let recs = thaw_bench::restore::run(&w, &o, &mut sink)?;
    let rows = thaw_bench::restore::summarize_rows(&recs);
    let sandboxes = match pool {
        0 => "Sandboxes: built on the critical path (--pool 0)".to_string(),
        n => format!("Sandboxes: built ahead (--pool {n}, full before each restore)"),
    };
    let md = thaw_bench::restore::markdown(&rows, &tier, emulated, run.runs);
    let thp = thaw_store::shmem_thp_mode().unwrap_or_else(|| "unavailable".into());
    let images = format!("DRAM-tier image memfds: shmem THP {thp}");
    run.emit(&format!("{sandboxes}\n{images}\n\n{md}"))
}

/// Writes each benchmark record as one JSON line to `path`, if given.
fn record_sink(
    path: Option<&std::path::Path>,
) -> Result<impl FnMut(&thaw_bench::restore::Record) -> thaw_bench::SinkResult> {
    let mut out = match path {
        Some(p) => {
            Some(std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?)
        }
        None => None,
    };
    Ok(move |r: &thaw_bench::restore::Record| {
        if let Some(f) = out.as_mut() {
            writeln!(f, "{}", serde_json::to_string(r)?)?;
        }
        Ok(())
    })
}
