//! `thaw bench burst`: requests sent at once to a function with no live instance, against a prewarm.
use anyhow::{bail, Result};
use std::path::{Path, PathBuf};

use super::emit_report;

#[derive(clap::Args)]
pub struct Args {
    /// Requests sent at once, one burst per size and run
    #[arg(long, value_delimiter = ',', default_value = "64,256")]
    sizes: Vec<usize>,
    /// Runs per size (each beside a prewarm of the same count)
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// The function's max_instances
    #[arg(long, default_value_t = 64)]
    max_instances: u32,
    /// The function's memory_mb (default: the daemon's)
    #[arg(long)]
    memory_mb: Option<u32>,
    /// Send every request with ?force=cold, so each restores an instance of
    /// its own rather than reusing one that went idle
    #[arg(long)]
    cold: bool,
    /// Write the report as JSON here
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the markdown table here (it is printed either way)
    #[arg(long)]
    markdown: Option<PathBuf>,
}

pub fn run(home: &Path, a: Args) -> Result<()> {
    if a.runs == 0 || a.sizes.iter().any(|&n| n == 0 || n > 4096) {
        bail!("--runs must be > 0 and every size in 1..=4096");
    }
    let o = thaw_bench_serve::capacity::BurstOptions {
        sizes: a.sizes,
        runs: a.runs,
        max_instances: a.max_instances,
        memory_mb: a.memory_mb,
        cold: a.cold,
    };
    let r = thaw_bench_serve::capacity::burst(home, &o)?;
    let md = thaw_bench_serve::capacity::burst_markdown(&r);
    emit_report(&md, &r, a.json, a.markdown)
}
