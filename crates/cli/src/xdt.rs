//! `thaw bench xdt`.
use anyhow::Result;
use clap::Args;
use std::path::{Path, PathBuf};

#[derive(Args, Debug)]
pub struct BenchXdtArgs {
    /// Object sizes in bytes
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "10000,1000000,10000000,100000000"
    )]
    sizes: Vec<u64>,
    /// Timed transfers per size and method (after one warm-up)
    #[arg(long, default_value_t = 20)]
    runs: usize,
    /// Write the cells as JSON here
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the markdown table here (it is printed either way)
    #[arg(long)]
    markdown: Option<PathBuf>,
}

pub fn bench(home: &Path, a: BenchXdtArgs) -> Result<()> {
    let o = thaw_server::xdt_bench::Options {
        sizes: a.sizes,
        runs: a.runs.max(1),
    };
    let cells = thaw_server::xdt_bench::run(home, &o)?;
    let md = thaw_server::xdt_bench::markdown(&cells);
    crate::serve::emit_report(&md, &cells, a.json, a.markdown)
}
