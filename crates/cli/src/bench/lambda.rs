//! `thaw bench lambda`: Lambda's API through boto3, custom runtimes, and AWS's Runtime Interface Emulator beside thaw.
use anyhow::Result;
use std::path::{Path, PathBuf};

use super::emit_report;

#[derive(clap::Args)]
pub struct Args {
    /// Cold invokes per API (alternating)
    #[arg(long, default_value_t = 40)]
    cold_runs: usize,
    /// Seconds of warm load on each API (in two halves, alternating with the other API)
    #[arg(long, default_value_t = 20.0)]
    seconds: f64,
    /// Client threads of the warm load
    #[arg(long, default_value_t = 8)]
    threads: usize,
    /// Fresh start / restore pairs of each custom runtime (Go, Rust); 0 skips them
    #[arg(long, default_value_t = 30)]
    custom_runs: usize,
    /// Only the custom runtimes (no boto3 phases)
    #[arg(long, conflicts_with = "peers_only")]
    custom_only: bool,
    /// Cold rounds beside AWS's Runtime Interface Emulator (each function
    /// restored on thaw, started on RIE); 0 skips the peer
    #[arg(long, default_value_t = 20)]
    peer_runs: usize,
    /// Warm calls of each function on thaw and on RIE
    #[arg(long, default_value_t = 200)]
    peer_warm_calls: usize,
    /// The peer's daemon's `limits.sandbox_pool` (sandboxes built ahead of a
    /// version's restores once it was restored; 0: each restore builds its own)
    #[arg(long, default_value_t = 1)]
    peer_sandbox_pool: usize,
    /// Only the peer (RIE beside thaw)
    #[arg(long)]
    peers_only: bool,
    /// Write the report as JSON here
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the markdown table here (it is printed either way)
    #[arg(long)]
    markdown: Option<PathBuf>,
}

pub fn run(home: &Path, a: Args) -> Result<()> {
    use thaw_bench_serve::lambda;
    let o = lambda::Options {
        cold_runs: a.cold_runs.max(1),
        warm_seconds: a.seconds.max(1.0),
        threads: a.threads.clamp(1, 64),
    };
    let api = match a.custom_only || a.peers_only {
        true => None,
        false => Some(lambda::run(home, &o)?),
    };
    let custom = match a.custom_runs {
        _ if a.peers_only => Vec::new(),
        0 => Vec::new(),
        n => {
            // snapshots on tmpfs, as the daemon's DRAM tier
            let scratch = PathBuf::from(format!(
                "/dev/shm/thaw-bench-lambda-custom-{}",
                std::process::id()
            ));
            thaw_store::secure::ensure_private_dir(&scratch)?;
            let r = thaw_bench_serve::lambda_provided::run(home, &scratch, n);
            let _ = thaw_store::secure::remove_tree(&scratch);
            r?
        }
    };
    let peers = match a.peer_runs {
        _ if a.custom_only => None,
        0 => None,
        runs => Some(thaw_bench_serve::lambda_peers::run(
            home,
            &thaw_bench_serve::lambda_peers::Options {
                runs,
                warm_calls: a.peer_warm_calls.max(1),
                sandbox_pool: a.peer_sandbox_pool,
            },
        )?),
    };
    let mut md = api.as_ref().map(lambda::markdown).unwrap_or_default();
    if !custom.is_empty() {
        md += &format!("\n{}", thaw_bench_serve::lambda_provided::markdown(&custom));
    }
    if let Some(p) = &peers {
        md += &format!("\n{}", thaw_bench_serve::lambda_peers::markdown(p));
    }
    #[derive(serde::Serialize)]
    struct LambdaBench {
        api: Option<lambda::Report>,
        custom: Vec<thaw_bench_serve::lambda_provided::ProvidedReport>,
        peers: Option<thaw_bench_serve::lambda_peers::PeersReport>,
    }
    emit_report(&md, &LambdaBench { api, custom, peers }, a.json, a.markdown)
}
