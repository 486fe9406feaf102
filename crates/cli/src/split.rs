//! `thaw split`: TOSS. Profile a function's snapshot and split its pages
//! between a fast and a slow tier.
use anyhow::Result;
use std::path::Path;
use thaw_runtime::InputSize;

#[derive(clap::Args)]
pub struct Args {
    function: String,
    /// Tier holding the snapshot and the fast file (byte-addressable: dram or pmem)
    #[arg(long, default_value = "tmpfs")]
    fast: String,
    /// Tier holding the slow file: pmem (mapped in place) or a block tier
    /// (disk, nvme, sata, hdd: its pages fault in)
    #[arg(long, default_value = "disk")]
    slow: String,
    /// Input sizes to profile with (default: all of the function's)
    #[arg(long)]
    sizes: Option<String>,
    /// Invocations per size (each one is a profiling epoch)
    #[arg(long, default_value_t = 2)]
    reps: usize,
    /// Fast-tier price per MiB relative to the slow tier [default: the
    /// tiers' configured prices]
    #[arg(long)]
    price_ratio: Option<f64>,
    /// Time a slow-tier page costs on first touch, in microseconds
    /// [default: the slow tier's probed page fault (`thaw tier probe`),
    /// else its declared 4K latency]
    #[arg(long)]
    slow_fault_us: Option<f64>,
    /// Bound on the estimated slowdown ("inf": TOSS's plain minimum-cost placement)
    #[arg(long, default_value_t = 1.10)]
    max_slowdown: f64,
}

pub fn run(home: &Path, a: Args) -> Result<()> {
    let Args {
        function,
        fast,
        slow,
        sizes,
        reps,
        price_ratio,
        slow_fault_us,
        max_slowdown,
    } = a;
    if !(price_ratio.is_none_or(|p| p.is_finite() && p > 0.0)
        && slow_fault_us.is_none_or(|u| u.is_finite() && u >= 0.0)
        && max_slowdown >= 1.0)
    {
        anyhow::bail!(
            "--price-ratio must be positive, --slow-fault-us non-negative and --max-slowdown at least 1"
        );
    }
    // the tiers first: a bad pair fails before any runtime work
    let mut costs = crate::tiers::split_costs(home, &fast, &slow)?;
    if let Some(p) = price_ratio {
        costs.price_ratio = p;
    }
    if let Some(us) = slow_fault_us {
        costs.slow_fault_us = us;
        costs.fault_source[1] = format!("{slow}: --slow-fault-us {us}");
    }
    let (fast_tier, slow_tier) = (
        thaw_store::Tier::by_name(&fast, home)?,
        thaw_store::Tier::by_name(&slow, home)?,
    );
    let w = crate::worker(home)?;
    w.check_function(&function)?;
    let sizes = match sizes {
        Some(s) => crate::split(&s)
            .iter()
            .map(|z| z.parse())
            .collect::<Result<Vec<InputSize>, _>>()?,
        None => w
            .functions()
            .iter()
            .find(|f| f.name == function)
            .map(|f| f.sizes.clone())
            .unwrap_or_else(|| vec![InputSize::I]),
    };
    let params = thaw_memory::tiering::CostParams {
        max_slowdown,
        ..thaw_bench::restore::cost_params(&costs)
    };
    let rep = w.make_tiered(&function, &fast_tier, &slow_tier, &sizes, reps, &params)?;
    let out = serde_json::json!({"split": rep, "tiers": costs});
    thaw_output::outln!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}
