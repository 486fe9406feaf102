//! `thaw bench serve`: the daemon's warm latency and throughput over HTTP against in-process, restores through the API against direct.
use anyhow::Result;
use std::path::{Path, PathBuf};

use super::emit_report;

#[derive(clap::Args)]
pub struct Args {
    /// Function of the suite, deployed through the API as a user function
    #[arg(long, default_value = "helloworld")]
    function: String,
    /// Sequential warm invocations per path
    #[arg(long, default_value_t = 2000)]
    warm_runs: usize,
    /// Restore starts per path
    #[arg(long, default_value_t = 30)]
    restore_runs: usize,
    /// Concurrent clients for the throughput run
    #[arg(long, default_value_t = 2)]
    clients: usize,
    /// Length of the throughput run
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Write the report as JSON here
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the markdown table here (it is printed either way)
    #[arg(long)]
    markdown: Option<PathBuf>,
}

pub fn run(home: &Path, a: Args) -> Result<()> {
    let o = thaw_bench_serve::serve::Options {
        function: a.function,
        warm_runs: a.warm_runs.max(1),
        restore_runs: a.restore_runs.max(1),
        clients: a.clients.max(1),
        seconds: a.seconds.max(0.1),
    };
    let r = thaw_bench_serve::serve::run(home, &o)?;
    emit_report(
        &thaw_bench_serve::serve::markdown(&r),
        &r,
        a.json,
        a.markdown,
    )
}
