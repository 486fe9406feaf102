//! `thaw bench estimates`: placement's cold-start estimates against the restores the daemon serves.
use anyhow::Result;
use std::path::{Path, PathBuf};

use super::emit_report;

#[derive(clap::Args)]
pub struct Args {
    /// Suite functions, comma-separated (each with a built-in sample event)
    #[arg(long, default_value = "helloworld,matmul,linpack")]
    functions: String,
    /// Tiers to deploy on, comma-separated [default: the daemon's snapshot tiers]
    #[arg(long)]
    tiers: Option<String>,
    /// Restore starts per function and tier: the first half recalibrates, the second is measured
    #[arg(long, default_value_t = 20)]
    runs: usize,
    /// Write the report as JSON here
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the markdown table here (it is printed either way)
    #[arg(long)]
    markdown: Option<PathBuf>,
}

pub fn run(home: &Path, a: Args) -> Result<()> {
    let o = thaw_bench_serve::estimates::Options {
        functions: crate::split(&a.functions),
        tiers: a.tiers.as_deref().map(crate::split).unwrap_or_default(),
        runs: a.runs,
    };
    let r = thaw_bench_serve::estimates::run(home, &o)?;
    emit_report(
        &thaw_bench_serve::estimates::markdown(&r),
        &r,
        a.json,
        a.markdown,
    )
}
