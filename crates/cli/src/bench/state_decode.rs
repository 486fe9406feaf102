//! `thaw bench state-decode`: decode time of each function's snapshot process state.
use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value = "helloworld,node_helloworld")]
    functions: String,
    #[arg(long, default_value_t = 1000)]
    runs: usize,
    /// Write the markdown table here (it is printed either way)
    #[arg(long)]
    markdown: Option<PathBuf>,
}

pub fn run(w: &thaw_worker::Worker, a: Args) -> Result<()> {
    let rows = thaw_bench::state_decode::run(w, &crate::split(&a.functions), a.runs)?;
    super::print_table(
        &thaw_bench::state_decode::markdown(&rows, a.runs),
        a.markdown,
    )
}
