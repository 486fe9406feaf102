//! `thaw bench store`: first use of a DRAM-tier image, hash only against hash + copy.
use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value = "helloworld,lr_serving,matmul")]
    functions: String,
    #[arg(long, default_value_t = 10)]
    runs: usize,
    /// Write the markdown table here (it is printed either way)
    #[arg(long)]
    markdown: Option<PathBuf>,
}

pub fn run(w: &thaw_worker::Worker, a: Args) -> Result<()> {
    let rows = thaw_bench::store::run(w, &crate::split(&a.functions), a.runs)?;
    super::print_table(&thaw_bench::store::markdown(&rows, a.runs), a.markdown)
}
