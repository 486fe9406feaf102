//! `thaw bench egress`: cold starts with and without network egress, streaming, connect + first byte.
use anyhow::Result;
use std::path::{Path, PathBuf};

use super::emit_report;

#[derive(clap::Args)]
pub struct Args {
    /// Cold starts per variant (with egress, without)
    #[arg(long, default_value_t = 40)]
    cold_runs: usize,
    /// Size of each streamed HTTP body
    #[arg(long, default_value_t = 1024)]
    stream_mib: u64,
    #[arg(long, default_value_t = 5)]
    stream_runs: usize,
    /// Connections per path for connect + first byte
    #[arg(long, default_value_t = 300)]
    connect_runs: usize,
    /// Write the report as JSON here
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the markdown table here (it is printed either way)
    #[arg(long)]
    markdown: Option<PathBuf>,
}

pub fn run(home: &Path, a: Args) -> Result<()> {
    let o = thaw_bench_serve::egress::Options {
        cold_runs: a.cold_runs.max(1),
        stream_mib: a.stream_mib.max(1),
        stream_runs: a.stream_runs.max(1),
        connect_runs: a.connect_runs.max(1),
    };
    let r = thaw_bench_serve::egress::run(home, &o)?;
    emit_report(
        &thaw_bench_serve::egress::markdown(&r),
        &r,
        a.json,
        a.markdown,
    )
}
