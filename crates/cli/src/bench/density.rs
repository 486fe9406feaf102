//! `thaw bench density`: idle instances one node holds, measured memory beside the kernel's.
use anyhow::{bail, Result};
use std::path::{Path, PathBuf};

use super::emit_report;

#[derive(clap::Args)]
pub struct Args {
    /// Hello-world functions deployed
    #[arg(long, default_value_t = 40)]
    functions: u32,
    /// Instances prewarmed per function (at most 64, the prewarm limit)
    #[arg(long, default_value_t = 50)]
    per_function: u32,
    /// MiB of state each function makes at import (random bytes)
    #[arg(long, default_value_t = 0)]
    state_mb: u32,
    /// Write the report as JSON here
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the markdown table here (it is printed either way)
    #[arg(long)]
    markdown: Option<PathBuf>,
}

pub fn run(home: &Path, a: Args) -> Result<()> {
    if a.functions == 0 || !(1..=64).contains(&a.per_function) || a.state_mb > 4096 {
        bail!("--functions must be > 0, --per-function in 1..=64 and --state-mb at most 4096");
    }
    let o = thaw_bench_serve::capacity::DensityOptions {
        functions: a.functions,
        per_function: a.per_function,
        state_mb: a.state_mb,
    };
    let r = thaw_bench_serve::capacity::density(home, &o)?;
    let md = thaw_bench_serve::capacity::density_markdown(&r);
    emit_report(&md, &r, a.json, a.markdown)
}
