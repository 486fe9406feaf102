//! `thaw bench ...`: one module per benchmark; this one holds the
//! subcommand list and what every benchmark shares (inputs, runs, reports).
use anyhow::{Context, Result};
use clap::Subcommand;
use std::path::{Path, PathBuf};
use thaw_runtime::InputSize;

mod burst;
mod concurrency;
mod cri;
mod density;
mod egress;
mod estimates;
mod hierarchy;
mod lambda;
mod restore;
mod serve;
mod state_decode;
mod store;
mod xdt;

#[derive(Subcommand)]
pub enum BenchCmd {
    /// First use of a DRAM-tier image: hash only (baseline) vs. hash + copy into a sealed memfd
    Store(store::Args),
    /// Decode time of each function's snapshot process state (header, checksum, parse, checks)
    StateDecode(state_decode::Args),
    /// N simultaneous cold starts (N = 1, 2, 4, ...) per strategy, tier and mode
    Concurrency(concurrency::Args),
    /// The study of "FaaS in the Age of (sub-)µs I/O" over the storage hierarchy: cold/warm starts per tier, device ratios, REAP vs mmap
    Hierarchy(hierarchy::Args),
    /// The daemon: warm latency and throughput over HTTP vs. in-process, restore via the API vs. direct
    Serve(serve::Args),
    /// Placement's cold-start estimates against the restores the daemon serves, at deploy and recalibrated, per function and tier
    Estimates(estimates::Args),
    /// Idle instances one node holds: hello-world functions prewarmed, measured memory per instance beside the kernel's, declared accounting as the baseline
    Density(density::Args),
    /// Requests sent at once to a function with no live instance, against a prewarm of the same count
    Burst(burst::Args),
    /// Network egress: cold start with and without, streaming from a test host, connect + first byte vs a plain process
    Egress(egress::Args),
    /// Lambda's API through boto3 against thaw's own API on one Python hello
    /// world: cold (restore) invokes alternating, warm req/s from N threads
    Lambda(lambda::Args),
    /// Simulated vs live: one synthetic day through `thaw sim` and through `thaw load` against a `thaw serve` it starts
    Simlive(thaw_simlive::Args),
    /// Keep-alive live: an Azure 2021 trace replayed through `thaw load` against the daemon with idle instances charged their declared memory, then what they hold; start types counted
    Keepalive(thaw_simlive::keepalive::Args),
    /// XDT: 1-1 transfers between functions by reference vs. inline in the event
    Xdt(xdt::BenchXdtArgs),
    /// Kubernetes' path: pod start to first HTTP response through CRI (gRPC, as the kubelet; or crictl), runc vs thaw; pods at once; a node restoring another node's snapshot
    Cri(cri::BenchCriArgs),
    /// Kubernetes' path through a real kubelet: `kubectl scale` 0 -> 1 to the first HTTP answer via the pod IP, a function on thaw vs on runc vs a runc pod that answers at once; with --two-nodes, a node restoring another node's snapshot and the snapshot labels' affinity
    Kube(cri::BenchKubeArgs),
    /// Cold starts from snapshots per strategy vs. a fresh start
    Restore(restore::Args),
}

pub fn run(home: &Path, cmd: BenchCmd) -> Result<()> {
    let worker = || crate::worker(home);
    match cmd {
        BenchCmd::Store(a) => store::run(&worker()?, a),
        BenchCmd::StateDecode(a) => state_decode::run(&worker()?, a),
        BenchCmd::Concurrency(a) => concurrency::run(&worker()?, a),
        BenchCmd::Hierarchy(a) => hierarchy::run(&worker()?, a),
        BenchCmd::Serve(a) => serve::run(home, a),
        BenchCmd::Estimates(a) => estimates::run(home, a),
        BenchCmd::Density(a) => density::run(home, a),
        BenchCmd::Burst(a) => burst::run(home, a),
        BenchCmd::Egress(a) => egress::run(home, a),
        BenchCmd::Lambda(a) => lambda::run(home, a),
        BenchCmd::Simlive(a) => Ok(thaw_simlive::main(home, &a)?),
        BenchCmd::Keepalive(a) => Ok(thaw_simlive::keepalive::main(home, &a)?),
        BenchCmd::Xdt(a) => xdt::bench(home, a),
        BenchCmd::Cri(a) => cri::bench(home, a),
        BenchCmd::Kube(a) => cri::bench_kube(home, a),
        BenchCmd::Restore(a) => restore::run(home, a),
    }
}

/// What every benchmark takes: inputs, repetitions, outputs.
#[derive(clap::Args)]
pub struct RunOpts {
    /// Input sizes, comma-separated
    #[arg(long, value_enum, value_delimiter = ',', default_value = "I")]
    pub sizes: Vec<InputSize>,
    #[arg(long, default_value_t = 10)]
    pub runs: usize,
    /// Write one JSON object per run here
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write the markdown report here (it is printed either way)
    #[arg(long)]
    pub markdown: Option<PathBuf>,
    /// Take fresh snapshots first
    #[arg(long)]
    pub redeploy: bool,
}

impl RunOpts {
    /// Prints the report and writes it where asked.
    pub fn emit(&self, md: &str) -> Result<()> {
        thaw_output::outln!("{md}");
        if let Some(p) = &self.markdown {
            std::fs::write(p, md).with_context(|| format!("writing {}", p.display()))?;
        }
        Ok(())
    }
}

/// Prints a benchmark's markdown table and writes it and the JSON report
/// where asked.
pub fn emit_report(
    md: &str,
    report: &impl serde::Serialize,
    json: Option<PathBuf>,
    markdown: Option<PathBuf>,
) -> Result<()> {
    Ok(thaw_bench::report::emit(
        md,
        report,
        json.as_deref(),
        markdown.as_deref(),
    )?)
}

/// Prints a benchmark's markdown table and writes it to `markdown` if given.
fn print_table(md: &str, markdown: Option<PathBuf>) -> Result<()> {
    emit_report(md, &(), None, markdown)
}
