//! `thaw bench cri`: pod start to first HTTP response through the CRI, as
//! the kubelet drives it (RunPodSandbox, CreateContainer, StartContainer,
//! PodSandboxStatus over gRPC on one connection, or one `crictl` process
//! per call; then an HTTP POST to the pod's IP and `$PORT` until it
//! answers), for the same function under `runc` (an image whose container
//! runs the function in a fresh Python process behind a small HTTP server)
//! and under `thaw` (the function image; the shim asks the node's daemon
//! for an instance at the pod's sandbox when the pod's template ran the
//! function before, else at the container's Create, and the front
//! forwards requests to it). Pods are named as a Deployment names them,
//! so a function's pods after its first share a template.
//!
//! Both run the same Python from the same runtime root: thaw's sandbox
//! chroots into it; the runc container gets its directories bind-mounted
//! read-only (neither side pulls a Python image). Each node is a private
//! containerd with its own pod network in its own network namespace (the
//! shared harness, `thaw_kube_harness::containerd`) beside an in-process `thaw serve`
//! on a temporary home; its daemon keeps idle instances for one second
//! (`ttl`), and every thaw pod waits until none is idle, so each pod is
//! served by one restore made for it (at its sandbox or Create, or with
//! `--prewarm false` for its first request), never by an instance left by
//! another pod.
//!
//! Three parts: runc vs thaw per function (interleaved runs, after one
//! warm-up pod each: the first thaw pod deploys and snapshots), on a node
//! that keeps its snapshots locally; N pods of M functions started at
//! once; and, with two more nodes sharing snapshots through the emulated
//! remote tier (MinIO), a pod on a node that never saw the function (its
//! daemon streams the snapshot the publishing node's deploy published)
//! against a pod restoring the copy that node then keeps locally.
mod images;
mod pods;
mod report;

use crate::error::{BenchKubeError, Result};
pub(crate) use images::{build_images, build_rooted_runc, import, root_dirs, RootedRunc};
pub(crate) use pods::{answer_value, no_idle};
use pods::{client, parse, pod_start, restores, restores_since, thaw_pod_start, Phases};
use report::shim_steps;
pub use report::{markdown, ShimStep};
use serde::Serialize;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU32;
use std::time::{Duration, Instant};
use thaw_bench::stats::{summarize, Summary};
use thaw_error::{fail, ResultExt};
use thaw_kube_harness::containerd::Cri;
pub use thaw_kube_harness::containerd::CriCalls;

/// What `thaw bench cri` measures.
pub struct Options {
    /// where the runtime root is
    pub runtime_home: PathBuf,
    /// the directory holding `containerd-shim-thaw-v1`
    pub shim_dir: PathBuf,
    /// functions of the runc vs thaw comparison
    pub functions: Vec<String>,
    /// timed pods per function and runtime
    pub runs: usize,
    /// pods started at once (0 skips the density part)
    pub pods: usize,
    /// functions those pods run
    pub pod_functions: usize,
    /// timed pods per function on the second node (0 skips it)
    pub remote_runs: usize,
    /// how the CRI calls are made (gRPC, as the kubelet, or crictl)
    pub calls: CriCalls,
    /// thaw pods' shims ask for a ready instance at the container's
    /// Create (annotation `dev.thaw.prewarm`)
    pub prewarm: bool,
    /// where to copy the comparison node's containerd log, written at
    /// debug level (every step of its calls timestamped)
    pub containerd_log: Option<PathBuf>,
}

/// Functions the density part draws from, in order.
pub(crate) const DENSITY_FUNCTIONS: [&str; 8] = [
    "helloworld",
    "float_operation",
    "json_serdes",
    "pyaes",
    "chameleon",
    "linpack",
    "matmul",
    "compress",
];
/// Memory of every thaw pod (annotation `dev.thaw.memory-mb`).
const POD_MEMORY_MB: u64 = 256;
/// The input size every pod's first request carries.
const SIZE: &str = "I";
/// How long a pod may take to answer its first request.
const ANSWER_WAIT: Duration = Duration::from_secs(180);

#[derive(Debug, Clone, Serialize)]
pub struct PodStart {
    pub ms: f64,
    /// the daemon's `thaw-start-type` / `thaw-tier` (thaw pods): `warm`
    /// when the instance the shim asked for at Create was ready
    pub start_type: Option<String>,
    pub tier: Option<String>,
    /// the restores the daemon made during the pod's start (one: the
    /// pod's instance), by `strategy:tier`
    pub restores: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct FunctionRow {
    pub function: String,
    /// the first pods (not in the figures): thaw's deploys and snapshots
    pub first_runc_ms: f64,
    pub first_thaw_ms: f64,
    pub runc: Summary,
    pub thaw: Summary,
    /// runc's median over thaw's
    pub speedup_median: f64,
    pub speedup_min: f64,
    /// each phase's median
    pub runc_phases: Phases,
    pub thaw_phases: Phases,
    pub thaw_starts: Vec<PodStart>,
}

#[derive(Debug, Clone, Serialize)]
pub struct DensityRow {
    pub runtime: String,
    pub pods: usize,
    pub functions: usize,
    pub answered: usize,
    pub first_response: Summary,
    /// all pods started to the last one answering
    pub wall_ms: f64,
    /// restores the daemon made meanwhile (thaw)
    pub restores: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct RemoteRow {
    pub function: String,
    /// a node that never saw the function: deploy (no snapshot taken) and
    /// a restore streamed from the remote tier
    pub remote: Summary,
    /// the same node, the copy it kept on its fast tier
    pub local: Summary,
    pub remote_over_local: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub date_unix: u64,
    /// `grpc` or `crictl`
    pub calls: String,
    pub prewarm: bool,
    /// the shim's steps in the comparison's thaw pods (its log), ms
    pub shim_steps: Vec<ShimStep>,
    pub cpus: usize,
    pub loadavg_1m_start: f64,
    pub loadavg_1m_end: f64,
    pub size: String,
    pub functions: Vec<FunctionRow>,
    pub density: Vec<DensityRow>,
    pub remote: Vec<RemoteRow>,
}

/// One node: containerd with its pod network, and its daemon's socket.
pub(crate) struct Node<'a> {
    pub(crate) cri: Cri,
    pub(crate) socket: &'a Path,
    pub(crate) root: &'a thaw_runtime::RootInfo,
    pub(crate) pods: AtomicU32,
    pub(crate) prewarm: bool,
}

/// A function's two images and its first request.
pub(crate) struct Images {
    pub(crate) function: String,
    pub(crate) thaw: String,
    /// the thaw image's archive (another node imports it too)
    pub(crate) thaw_archive: PathBuf,
    pub(crate) runc: String,
    pub(crate) event: String,
}

fn check(o: &Options) -> Result<()> {
    if o.runs == 0 {
        fail!(BenchKubeError::Config, "--runs must be at least 1");
    }
    if o.functions.is_empty() {
        fail!(BenchKubeError::Config, "--functions names no function");
    }
    if o.pods > 0 && !(1..=DENSITY_FUNCTIONS.len()).contains(&o.pod_functions) {
        fail!(
            BenchKubeError::Config,
            "--pod-functions must be in 1..={} (the density part's functions: {})",
            DENSITY_FUNCTIONS.len(),
            DENSITY_FUNCTIONS.join(", ")
        );
    }
    if o.pods > 256 {
        fail!(BenchKubeError::Config, "--pods must be at most 256");
    }
    check_shim(&o.shim_dir)
}

/// Each pod thread's result (a panic as a failure).
pub(crate) fn join_all<T>(
    handles: Vec<std::thread::ScopedJoinHandle<'_, Result<T>>>,
) -> Vec<Result<T>> {
    handles
        .into_iter()
        .map(|h| {
            h.join()
                .unwrap_or_else(|_| Err(BenchKubeError::Failed("a pod's thread panicked".into())))
        })
        .collect()
}

/// The shim must be built beside thaw.
pub(crate) fn check_shim(shim_dir: &Path) -> Result<()> {
    let shim = shim_dir.join("containerd-shim-thaw-v1");
    if !shim.is_file() {
        fail!(
            BenchKubeError::Config,
            "{} is missing: build it beside thaw (cargo build --release -p thaw-shim)",
            shim.display()
        );
    }
    Ok(())
}

/// A node's daemon configuration: snapshots shared through the remote
/// tier when `store` is given; idle instances kept one second; room for
/// the density part's pods.
fn configure(
    cfg: &mut thaw_server::Config,
    o: &Options,
    store: Option<(&Path, &thaw_tiers::TierConfig)>,
) -> Result<()> {
    if let Some((store_home, tier)) = store {
        share_snapshots(cfg, store_home, tier)?;
    }
    cfg.policy = "ttl".into();
    cfg.keep_alive_s = 1;
    let per_function =
        u32::try_from(o.pods.div_ceil(o.pod_functions.max(1)).max(1)).unwrap_or(u32::MAX);
    cfg.limits.instances_per_function = cfg.limits.instances_per_function.max(per_function);
    cfg.limits.max_instances_per_function = cfg.limits.max_instances_per_function.max(per_function);
    cfg.memory_budget_mb = cfg
        .memory_budget_mb
        .max((o.pods as u64 + 4) * POD_MEMORY_MB);
    Ok(())
}

/// A node's daemon sharing snapshots through the remote tier of the
/// store on `store_home` (its fast tier tmpfs).
pub(crate) fn share_snapshots(
    cfg: &mut thaw_server::Config,
    store_home: &Path,
    tier: &thaw_tiers::TierConfig,
) -> Result<()> {
    thaw_tiers::remote::join(&cfg.home, store_home, tier)?;
    cfg.snapshot_tiers = thaw_server::config::SnapshotTiers::parse("tmpfs,remote")?;
    cfg.shared_snapshots = true;
    Ok(())
}

/// The emulated object store the two nodes share, on a home of its own
/// (torn down, then the home removed).
pub(crate) struct Store {
    store: Option<thaw_tiers::remote::EmulatedStore>,
    home: PathBuf,
}

impl Store {
    /// The store on a temporary home named after `bench`.
    pub(crate) fn up(bench: &str) -> Result<Store> {
        let home =
            std::env::temp_dir().join(format!("thaw-bench-{bench}-store-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&home);
        std::fs::create_dir_all(&home)?;
        let mut s = Store { store: None, home };
        s.store = Some(
            thaw_tiers::remote::EmulatedStore::up(&s.home)
                .context("the shared remote tier (MinIO)")?,
        );
        Ok(s)
    }

    /// Its home and remote tier, for [`share_snapshots`].
    pub(crate) fn shared(&self) -> Option<(&Path, &thaw_tiers::TierConfig)> {
        Some((self.home.as_path(), &self.store.as_ref()?.tier))
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        drop(self.store.take());
        let _ = std::fs::remove_dir_all(&self.home);
    }
}

/// Runs the benchmark on temporary homes (removed afterwards).
pub fn run(o: &Options) -> Result<Report> {
    check(o)?;
    let load_start = thaw_bench::concurrency::loadavg();
    let root = thaw_runtime::ensure_root(&o.runtime_home, &mut |m| eprintln!("runtime: {m}"))?;
    for f in o.functions.iter().map(String::as_str).chain(
        DENSITY_FUNCTIONS
            .iter()
            .copied()
            .take(if o.pods > 0 { o.pod_functions } else { 0 }),
    ) {
        if !root
            .path
            .join(format!("opt/thaw/functions/{f}.py"))
            .is_file()
        {
            fail!(
                BenchKubeError::Failed,
                "{f} is not a Python function of the suite (thaw runtime functions)"
            );
        }
    }
    let store = match o.remote_runs {
        0 => None,
        _ => Some(Store::up("cri")?),
    };
    let shared = store.as_ref().and_then(Store::shared);
    let mut report = thaw_server::on_temp_daemon_with(
        &o.runtime_home,
        "cri-a",
        // the comparison's and the density part's node keeps its snapshots
        // locally (its slow tier is the disk): a node serving the function
        |cfg| configure(cfg, o, None),
        |_, socket_a| {
            let base =
                std::env::temp_dir().join(format!("thaw-cri-containerd-a-{}", std::process::id()));
            let a = node(&base, socket_a, &root, o, "10.88.0.0/24")?;
            let mut images = Vec::new();
            for f in &o.functions {
                images.push(build_images(&a, &root, f)?);
            }
            let mut functions = Vec::new();
            for img in &images {
                eprintln!(
                    "thaw bench cri: {} (runc vs thaw, {} runs)",
                    img.function, o.runs
                );
                functions.push(compare(&a, img, o.runs)?);
            }
            let shim_steps = shim_steps(&a.cri.c.log())?;
            let density = match o.pods {
                0 => Vec::new(),
                n => density(&a, &root, n, o.pod_functions)?,
            };
            if let Some(p) = &o.containerd_log {
                std::fs::write(p, a.cri.c.log())
                    .with_context(|| format!("writing {}", p.display()))?;
            }
            let remote = match shared {
                None => Vec::new(),
                Some(sh) => shared_nodes(o, &root, &images, sh)?,
            };
            Ok(Report {
                calls: calls_name(o.calls).into(),
                prewarm: o.prewarm,
                shim_steps,
                date_unix: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs()),
                cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
                loadavg_1m_start: load_start,
                loadavg_1m_end: 0.0,
                size: SIZE.into(),
                functions,
                density,
                remote,
            })
        },
    )?;
    report.loadavg_1m_end = thaw_bench::concurrency::loadavg();
    drop(store);
    Ok(report)
}

/// The remote part: a node that publishes each function's snapshot (its
/// first pod deploys it), and a second node sharing snapshots with it
/// through the remote tier, where the pods are timed.
fn shared_nodes(
    o: &Options,
    root: &thaw_runtime::RootInfo,
    images: &[Images],
    shared: (&Path, &thaw_tiers::TierConfig),
) -> Result<Vec<RemoteRow>> {
    let on_node = |name: &str, subnet: &str, f: &dyn Fn(&Node) -> Result<Vec<RemoteRow>>| {
        thaw_server::on_temp_daemon_with(
            &o.runtime_home,
            name,
            |cfg| configure(cfg, o, Some(shared)),
            |_, socket| {
                let base = std::env::temp_dir()
                    .join(format!("thaw-cri-containerd-{name}-{}", std::process::id()));
                let n = node(&base, socket, root, o, subnet)?;
                for img in images {
                    n.cri.c.import(&img.thaw_archive)?;
                }
                f(&n)
            },
        )
    };
    on_node("cri-p", "10.90.0.0/24", &|p| {
        for img in images {
            pod_start(p, "thaw", &img.thaw, &img.event)?;
        }
        on_node("cri-b", "10.89.0.0/24", &|b| {
            let mut rows = Vec::new();
            for img in images {
                eprintln!(
                    "thaw bench cri: {} (remote vs local restore on a second node)",
                    img.function
                );
                rows.push(remote(b, img, o.remote_runs)?);
            }
            Ok(rows)
        })
    })
}

fn calls_name(c: CriCalls) -> &'static str {
    match c {
        CriCalls::Grpc => "grpc",
        CriCalls::Crictl => "crictl",
    }
}

fn node<'a>(
    base: &Path,
    socket: &'a Path,
    root: &'a thaw_runtime::RootInfo,
    o: &Options,
    subnet: &str,
) -> Result<Node<'a>> {
    let _ = std::fs::remove_dir_all(base);
    let level = match o.containerd_log {
        Some(_) => "debug",
        None => "info",
    };
    let mut cri = Cri::start(base, socket, &o.shim_dir, subnet, &[], level)?;
    if o.calls == CriCalls::Grpc {
        cri.use_grpc()?;
    }
    Ok(Node {
        cri,
        socket,
        root,
        pods: AtomicU32::new(0),
        prewarm: o.prewarm,
    })
}

pub(crate) fn summary(xs: &[f64]) -> Result<Summary> {
    summarize(xs).ok_or_else(|| BenchKubeError::Failed("no runs".into()))
}

/// runc vs thaw for one function: a warm-up pod each, then `runs`
/// interleaved pairs; every answer checked against runc's first.
fn compare(n: &Node, img: &Images, runs: usize) -> Result<FunctionRow> {
    let (first_runc, want, _) = pod_start(n, "runc", &img.runc, &img.event)?;
    let want = answer_value("runc", &want)?;
    let (first_thaw, got, _) = pod_start(n, "thaw", &img.thaw, &img.event)?;
    if answer_value("thaw", &got)? != want {
        fail!(
            BenchKubeError::Failed,
            "{}: thaw answered {got}, runc {want}",
            img.function
        );
    }
    let (mut runc, mut thaw, mut starts) = (Vec::new(), Vec::new(), Vec::new());
    let (mut runc_phases, mut thaw_phases) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let (ms, a, p) = pod_start(n, "runc", &img.runc, &img.event)?;
        runc_phases.push(p);
        if answer_value("runc", &a)? != want {
            fail!(
                BenchKubeError::Failed,
                "{}: runc answered {a}, then {want}",
                img.function
            );
        }
        runc.push(ms);
        no_idle(n)?;
        let (ms, a, p, s) = thaw_pod_start(n, &img.thaw, &img.event)?;
        thaw_phases.push(p);
        if answer_value("thaw", &a)? != want {
            fail!(
                BenchKubeError::Failed,
                "{}: thaw answered {a}, runc {want}",
                img.function
            );
        }
        // no instance was idle before the pod: it is served by the one
        // instance restored for it (at Create, or for the request)
        if s.restores.len() != 1 || !matches!(s.start_type.as_deref(), Some("restore" | "warm")) {
            fail!(
                BenchKubeError::Failed,
                "{}: a thaw pod was not served by the one instance restored for it (restores {:?}): {a}",
                img.function,
                s.restores
            );
        }
        starts.push(s);
        thaw.push(ms);
    }
    let (r, t) = (summary(&runc)?, summary(&thaw)?);
    Ok(FunctionRow {
        function: img.function.clone(),
        first_runc_ms: first_runc,
        first_thaw_ms: first_thaw,
        speedup_median: r.median / t.median,
        speedup_min: r.min / t.min,
        runc: r,
        thaw: t,
        runc_phases: Phases::median(&runc_phases),
        thaw_phases: Phases::median(&thaw_phases),
        thaw_starts: starts,
    })
}

/// `pods` pods of `functions` functions started at once, per runtime
/// (runc first); every pod must answer.
fn density(
    n: &Node,
    root: &thaw_runtime::RootInfo,
    pods: usize,
    functions: usize,
) -> Result<Vec<DensityRow>> {
    let mut images = Vec::new();
    for f in &DENSITY_FUNCTIONS[..functions] {
        let img = build_images(n, root, f)?;
        // warm-up: thaw's deploy and snapshot, runc's page cache
        pod_start(n, "runc", &img.runc, &img.event)?;
        pod_start(n, "thaw", &img.thaw, &img.event)?;
        images.push(img);
    }
    let mut rows = Vec::new();
    for runtime in ["runc", "thaw"] {
        no_idle(n)?;
        eprintln!("thaw bench cri: {pods} pods of {functions} functions at once on {runtime}");
        let before = restores(n)?;
        let t0 = Instant::now();
        let results: Vec<Result<(f64, String, Phases)>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..pods)
                .map(|i| {
                    let img = &images[i % functions];
                    let image = if runtime == "runc" {
                        &img.runc
                    } else {
                        &img.thaw
                    };
                    s.spawn(move || pod_start(n, runtime, image, &img.event))
                })
                .collect();
            join_all(handles)
        });
        let wall_ms = t0.elapsed().as_secs_f64() * 1e3;
        let restores = restores_since(&before, &restores(n)?).0.len();
        let mut ms = Vec::new();
        let mut failures = Vec::new();
        for r in results {
            match r {
                Ok((t, a, _)) if parse(&a).0 == 200 => ms.push(t),
                Ok((_, a, _)) => failures.push(a.lines().next().unwrap_or("").to_string()),
                Err(e) => failures.push(format!("{e:#}")),
            }
        }
        if let Some(f) = failures.first() {
            fail!(
                BenchKubeError::Failed,
                "{} of {pods} {runtime} pods did not answer; the first: {f}",
                failures.len()
            );
        }
        rows.push(DensityRow {
            runtime: runtime.into(),
            pods,
            functions,
            answered: ms.len(),
            first_response: summary(&ms)?,
            wall_ms,
            restores,
        });
    }
    Ok(rows)
}

/// The function's name on a node's daemon (the shim's `img-...`).
fn deployed(n: &Node) -> Result<Vec<String>> {
    let r = client(n).request("GET", "/v1/functions", None)?;
    let v: Value = r.json()?;
    Ok(v["functions"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|f| f["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default())
}

/// Waits until the node keeps its streamed copy of `name` on its fast tier.
fn kept_locally(n: &Node, name: &str) -> Result<()> {
    let t = Instant::now();
    loop {
        let v: Value = client(n)
            .request("GET", &format!("/v1/functions/{name}"), None)?
            .json()?;
        if v["snapshot_tier"] == "tmpfs" {
            return Ok(());
        }
        if t.elapsed() > Duration::from_secs(60) {
            fail!(
                BenchKubeError::Failed,
                "{name}: the streamed snapshot was not kept on this node: {v}"
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Whether the pod was served by the one instance restored for it, from
/// `tier`.
fn restored_from(s: &PodStart, tier: &str) -> bool {
    matches!(s.start_type.as_deref(), Some("restore" | "warm"))
        && matches!(s.restores.as_slice(), [r] if r.ends_with(&format!(":{tier}")))
}

/// On the second node: a pod of a function the node does not have (its
/// daemon's deploy finds node A's published snapshot and streams it),
/// then a pod restoring the copy the node kept; the function is deleted
/// from the node between rounds.
fn remote(n: &Node, img: &Images, runs: usize) -> Result<RemoteRow> {
    let (mut remote, mut local) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        for f in deployed(n)? {
            client(n).request("DELETE", &format!("/v1/functions/{f}"), None)?;
        }
        let (ms, a, _, s) = thaw_pod_start(n, &img.thaw, &img.event)?;
        answer_value("thaw", &a)?;
        if !restored_from(&s, "remote") {
            fail!(
                BenchKubeError::Failed,
                "{}: the new node's first pod was not a restore from the remote tier: {a}",
                img.function
            );
        }
        remote.push(ms);
        let names = deployed(n)?;
        let [name] = names.as_slice() else {
            fail!(
                BenchKubeError::Failed,
                "the node holds {names:?}, not one function"
            );
        };
        kept_locally(n, name)?;
        no_idle(n)?;
        let (ms, a, _, s) = thaw_pod_start(n, &img.thaw, &img.event)?;
        answer_value("thaw", &a)?;
        if !restored_from(&s, "tmpfs") {
            fail!(
                BenchKubeError::Failed,
                "{}: the node's second pod was not a local restore: {a}",
                img.function
            );
        }
        local.push(ms);
        no_idle(n)?;
    }
    let (r, l) = (summary(&remote)?, summary(&local)?);
    Ok(RemoteRow {
        function: img.function.clone(),
        remote_over_local: r.median / l.median,
        remote: r,
        local: l,
    })
}

#[cfg(test)]
mod tests {
    use super::pods::server_timing;
    use super::*;
    use serde_json::json;

    #[test]
    fn answers_are_parsed() {
        let a = "HTTP/1.1 200 OK\r\nThaw-Start-Type: restore\r\nthaw-tier: tmpfs\r\n\r\n{\"x\": 1}";
        let (status, header, body) = parse(a);
        assert_eq!(status, 200);
        assert_eq!(header("thaw-start-type").as_deref(), Some("restore"));
        assert_eq!(header("Thaw-Tier").as_deref(), Some("tmpfs"));
        assert_eq!(header("missing"), None);
        assert_eq!(body, "{\"x\": 1}");
        assert_eq!(answer_value("t", a).unwrap(), json!({"x": 1}));
        assert!(answer_value("t", "HTTP/1.1 502 Bad\r\n\r\n{}").is_err());
        assert_eq!(parse("garbage").0, 0);
    }

    #[test]
    fn timings_restores_and_shim_steps_are_read() {
        let a = "HTTP/1.1 200 OK\r\nserver-timing: queue;dur=0.010, restore;dur=12.5, exec;dur=1.5, total;dur=14.25\r\n\r\n{}";
        let t = server_timing(a);
        assert_eq!((t("restore"), t("exec"), t("total")), (12.5, 1.5, 14.25));
        assert_eq!(t("missing"), 0.0);
        assert_eq!(server_timing("HTTP/1.1 200 OK\r\n\r\n{}")("total"), 0.0);
        let reading =
            |c: f64, s: f64| std::collections::BTreeMap::from([("reap:disk".to_string(), (c, s))]);
        let (made, ms) = restores_since(&reading(2.0, 0.5), &reading(3.0, 0.52));
        assert_eq!(made, vec!["reap:disk".to_string()]);
        assert!((ms - 20.0).abs() < 1e-6, "{ms}");
        assert!(restores_since(&reading(3.0, 0.5), &reading(3.0, 0.5))
            .0
            .is_empty());
        let log = "time=\"x\" level=info msg=\"thaw timing: create abc spec=0.09ms mount=0.97ms\"\n\
                   noise\n\
                   time=\"y\" level=info msg=\"thaw timing: create def spec=0.11ms mount=3.00ms lookup=bad\"\n\
                   time=\"z\" level=info msg=\"thaw timing: start abc spawn=1.31ms\"\n";
        let steps = shim_steps(log).unwrap();
        let names: Vec<&str> = steps.iter().map(|s| s.step.as_str()).collect();
        assert_eq!(names, ["create spec", "create mount", "start spawn"]);
        assert_eq!(steps[1].ms.n, 2);
        assert_eq!((steps[1].ms.min, steps[1].ms.p99), (0.97, 3.0));
    }

    #[test]
    fn bad_options_are_refused() {
        let o = Options {
            runtime_home: PathBuf::from("/nonexistent"),
            shim_dir: PathBuf::from("/nonexistent"),
            functions: vec!["helloworld".into()],
            runs: 0,
            pods: 0,
            pod_functions: 8,
            remote_runs: 0,
            calls: CriCalls::Grpc,
            prewarm: true,
            containerd_log: None,
        };
        assert!(check(&o).unwrap_err().to_string().contains("--runs"));
        let o = Options {
            runs: 1,
            pods: 4,
            pod_functions: 9,
            ..o
        };
        assert!(check(&o)
            .unwrap_err()
            .to_string()
            .contains("--pod-functions"));
        let o = Options {
            pod_functions: 2,
            ..o
        };
        assert!(check(&o)
            .unwrap_err()
            .to_string()
            .contains("containerd-shim-thaw-v1"));
    }
}
