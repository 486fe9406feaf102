//! `thaw-bench-kube`: `thaw bench cri` and `thaw bench kube`, which the
//! `thaw` binary runs from beside itself (`thaw-bench-kube [--home H] cri
//! ...`), so that it links no containerd harness.
use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use std::path::{Path, PathBuf};
use thaw_bench::report::emit;

#[derive(Parser)]
#[command(
    name = "thaw-bench-kube",
    version,
    about = "thaw's Kubernetes benchmarks: pods through the CRI and through a real kubelet (thaw bench cri, thaw bench kube)"
)]
struct Cli {
    /// State directory (the runtime root); default $THAW_HOME or /var/lib/thaw
    #[arg(long, global = true)]
    home: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Kubernetes' path: pod start to first HTTP response through CRI (gRPC, as the kubelet; or crictl), runc vs thaw; pods at once; a node restoring another node's snapshot
    Cri(BenchCriArgs),
    /// Kubernetes' path through a real kubelet: `kubectl scale` 0 -> 1 to the first HTTP answer via the pod IP, a function on thaw vs on runc vs a runc pod that answers at once; with --two-nodes, a node restoring another node's snapshot and the snapshot labels' affinity
    Kube(BenchKubeArgs),
}

fn main() {
    let cli = Cli::parse();
    let home = cli.home.unwrap_or_else(thaw_runtime::default_home);
    // a benchmark builds what it needs and may create a missing home
    let done = thaw_runtime::check_home(&home, true)
        .map_err(anyhow::Error::from)
        .and_then(|()| match cli.cmd {
            Cmd::Cri(a) => bench(&home, a),
            Cmd::Kube(a) => bench_kube(&home, a),
        });
    if let Err(e) = done {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

#[derive(Args, Debug)]
struct BenchCriArgs {
    /// Functions of the runc vs thaw comparison (Python suite functions)
    #[arg(long, value_delimiter = ',', default_value = "helloworld,lr_serving")]
    functions: Vec<String>,
    /// Timed pods per function and runtime (after one warm-up pod each)
    #[arg(long, default_value_t = 10)]
    runs: usize,
    /// Pods started at once for the density part (0 skips it)
    #[arg(long, default_value_t = 32)]
    pods: usize,
    /// Functions those pods run (at most 8)
    #[arg(long, default_value_t = 8)]
    pod_functions: usize,
    /// Timed pods per function on a second node that shares snapshots
    /// through the remote tier: its first pod of the function restores the
    /// published snapshot, against a local restore (0 skips it)
    #[arg(long, default_value_t = 5)]
    remote_runs: usize,
    /// How the CRI calls are made: `grpc` (one connection kept open, as the
    /// kubelet) or `crictl` (one crictl process per call)
    #[arg(long, default_value = "grpc", value_parser = ["grpc", "crictl"])]
    cri_calls: String,
    /// Whether thaw pods ask the daemon for a ready instance as they start
    /// (`false`: the first request restores it)
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    prewarm: bool,
    /// Copy the comparison node's containerd log here, written at debug
    /// level: every step of its calls timestamped, for a breakdown of where
    /// a pod's start goes (the same level for runc and thaw pods)
    #[arg(long)]
    containerd_log: Option<PathBuf>,
    /// Write the report as JSON here
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the markdown tables here (they are printed either way)
    #[arg(long)]
    markdown: Option<PathBuf>,
}

/// The directory of this binary, where the shim is built beside it.
fn shim_dir() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("locating the thaw-bench-kube binary")?;
    Ok(exe
        .parent()
        .context("the thaw-bench-kube binary has no directory")?
        .to_path_buf())
}

fn bench(home: &Path, a: BenchCriArgs) -> Result<()> {
    let o = thaw_bench_kube::cri::Options {
        runtime_home: home.to_path_buf(),
        shim_dir: shim_dir()?,
        functions: a.functions,
        runs: a.runs,
        pods: a.pods,
        pod_functions: a.pod_functions,
        remote_runs: a.remote_runs,
        calls: match a.cri_calls.as_str() {
            "crictl" => thaw_bench_kube::cri::CriCalls::Crictl,
            _ => thaw_bench_kube::cri::CriCalls::Grpc,
        },
        prewarm: a.prewarm,
        containerd_log: a.containerd_log,
    };
    let r = thaw_bench_kube::cri::run(&o)?;
    let md = thaw_bench_kube::cri::markdown(&r);
    Ok(emit(&md, &r, a.json.as_deref(), a.markdown.as_deref())?)
}

#[derive(Args, Debug)]
struct BenchKubeArgs {
    /// The Python suite function measured on thaw and on runc
    #[arg(long, default_value = "lr_serving")]
    function: String,
    /// Timed starts per pod kind (after one warm-up start each)
    #[arg(long, default_value_t = 10)]
    runs: usize,
    /// The measured pods mount the service account token (Kubernetes'
    /// default), and the runc pod the runtime root's directories; by
    /// default no pod mounts a volume, as the example Deployment
    /// (`automountServiceAccountToken: false`; the runc pod's image holds
    /// the runtime root, `thaw image build`'s base layer)
    #[arg(long)]
    token_volume: bool,
    /// Pods scaled up at once for the density part, a multiple of
    /// --pod-functions (0 skips it)
    #[arg(long, default_value_t = 32)]
    pods: usize,
    /// Functions those pods run, a Deployment each (at most 8)
    #[arg(long, default_value_t = 8)]
    pod_functions: usize,
    /// Two nodes sharing snapshots through the remote tier instead: a pod
    /// on the node that never saw the function vs that node's next pod,
    /// and the preferred node affinity on the snapshot labels vs none
    /// (--runs of each; --token-volume, --pods and --pod-functions do not apply)
    #[arg(long)]
    two_nodes: bool,
    /// Write the report as JSON here
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the markdown table here (it is printed either way)
    #[arg(long)]
    markdown: Option<PathBuf>,
}

fn bench_kube(home: &Path, a: BenchKubeArgs) -> Result<()> {
    if a.two_nodes {
        let o = thaw_bench_kube::kube_nodes::Options {
            runtime_home: home.to_path_buf(),
            shim_dir: shim_dir()?,
            function: a.function,
            runs: a.runs,
        };
        let r = thaw_bench_kube::kube_nodes::run(&o)?;
        let md = thaw_bench_kube::kube_nodes::markdown(&r);
        return Ok(emit(&md, &r, a.json.as_deref(), a.markdown.as_deref())?);
    }
    let o = thaw_bench_kube::kube::Options {
        runtime_home: home.to_path_buf(),
        shim_dir: shim_dir()?,
        function: a.function,
        runs: a.runs,
        no_volumes: !a.token_volume,
        pods: a.pods,
        pod_functions: a.pod_functions,
    };
    let r = thaw_bench_kube::kube::run(&o)?;
    let md = thaw_bench_kube::kube::markdown(&r);
    Ok(emit(&md, &r, a.json.as_deref(), a.markdown.as_deref())?)
}
