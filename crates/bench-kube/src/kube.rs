//! `thaw bench kube`: pod start through a real kubelet. A single-node
//! cluster (`deploy/kubernetes/cluster.sh`, [`thaw_kube_harness::cluster`]) on a
//! private containerd beside an in-process `thaw serve`, and three
//! Deployments at 0 replicas: the function on the `thaw` RuntimeClass, the
//! same function on runc (a fresh Python behind a small HTTP server, as
//! `thaw bench cri` runs it), and the floor, a runc pod of a static binary
//! that answers HTTP at once (containerd's and the kubelet's own work for
//! a pod, with nothing of a runtime's). One start is the Deployment's
//! scale set to 1 (one PATCH through a `kubectl proxy` kept running, as an
//! autoscaler's request) until the first HTTP answer through the pod's IP,
//! the IP from the node's CRI as soon as the pod's sandbox is ready (one
//! gRPC call every 2 ms); beside it, when a watch through the API server
//! reported the IP (after the kubelet's status report) and the answer to a
//! request sent then. Then the Deployment goes back to 0 and the pod is
//! gone (and, for thaw, no idle instance is left, so every start is a
//! restore). Runs are interleaved, after a warm-up start each
//! (thaw's first deploys and snapshots the function). Then, with `pods`,
//! that many pods of `pod_functions` functions (a Deployment each) are
//! scaled up with one `kubectl scale`, on runc and then on thaw, and each
//! pod's first answer is timed (its IP from the CRI). Every pod has the
//! service account token volume pods get by default (the runc pod also the
//! runtime root's directories): the kubelet starts no pod with volumes
//! before its volume manager saw them mounted, which it polls for every
//! 300 ms, so each pod kind waits the same. With `no_volumes` the measured
//! pods have none (no token; the runc pod's image holds the runtime root),
//! so none waits.
use crate::cri::{self, Images, Node};
use crate::error::{BenchKubeError, Result};
use serde::Serialize;
use serde_json::{json, Value};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::AtomicU32;
use std::sync::mpsc;
use std::time::{Duration, Instant};
use thaw_bench::stats::Summary;
use thaw_error::{fail, ResultExt};
use thaw_kube_harness::cluster::Cluster;
use thaw_kube_harness::containerd::Cri;

pub struct Options {
    /// where the runtime root is
    pub runtime_home: PathBuf,
    /// the directory holding `containerd-shim-thaw-v1`
    pub shim_dir: PathBuf,
    /// the Python suite function measured
    pub function: String,
    /// timed starts per variant
    pub runs: usize,
    /// the measured pods mount no volume: no service account token, and
    /// the runc pod's image holds the runtime root instead of its mounts
    pub no_volumes: bool,
    /// pods scaled up at once for the density part (0 skips it)
    pub pods: usize,
    /// functions those pods run, one Deployment each (`pods` a multiple)
    pub pod_functions: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct DensityRow {
    pub runtime: String,
    pub pods: usize,
    pub functions: usize,
    /// each pod: the scale until its first answer (IP from the CRI), ms
    pub first_answer: Summary,
    /// the scale until the last pod answered, ms
    pub wall_ms: f64,
}

/// When, where and on what a benchmark through the kubelet ran.
#[derive(Debug, Clone, Serialize)]
pub struct RunInfo {
    pub date_unix: u64,
    pub cpus: usize,
    pub loadavg_1m_start: f64,
    pub loadavg_1m_end: f64,
    /// the API server's version
    pub kubernetes: String,
    pub function: String,
}

impl RunInfo {
    /// Now, on cluster `k`, for `function` (the load is filled in by the
    /// caller, at the start and the end of the whole run).
    pub(crate) fn of(k: &Cluster, function: &str) -> Result<RunInfo> {
        let version: Value = serde_json::from_str(&k.run(&["version", "-o", "json"])?)?;
        Ok(RunInfo {
            date_unix: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            loadavg_1m_start: 0.0,
            loadavg_1m_end: 0.0,
            kubernetes: version["serverVersion"]["gitVersion"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            function: function.to_string(),
        })
    }
}

/// One pod kind's starts, ms from the scale request.
#[derive(Debug, Clone, Serialize)]
pub struct PodStarts {
    /// the warm-up start's first answer (not in the figures)
    pub first_ms: f64,
    /// until the API server answered the scale request
    pub scaled: Summary,
    /// until the node's CRI had the pod's sandbox ready, with its IP
    pub cri_ip: Summary,
    /// until the first answer through that IP: the pod start
    pub answer: Summary,
    /// until a watch through the API server saw the pod's IP (the
    /// kubelet's status report)
    pub api_ip: Summary,
    /// until the answer to a request sent once the API server reported the
    /// IP (and the pod had answered first): what a client that learns the
    /// IP from the API sees
    pub api_answer: Summary,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    #[serde(flatten)]
    pub run: RunInfo,
    /// the measured pods mounted no volume (the default; `--token-volume`: they did)
    pub no_volumes: bool,
    pub floor: PodStarts,
    pub runc: PodStarts,
    pub thaw: PodStarts,
    /// `pods` pods of `pod_functions` functions scaled up at once
    pub density: Vec<DensityRow>,
    /// thaw's median over the floor's (the answers through the CRI's IP)
    pub thaw_over_floor_median: f64,
    /// runc's median over thaw's (the same)
    pub runc_over_thaw_median: f64,
    /// the same two through the IP the API server reported
    pub api_thaw_over_floor_median: f64,
    pub api_runc_over_thaw_median: f64,
}

const SUBNET: &str = "10.87.0.0/24";
const FLOOR_IMAGE: &str = "thaw.local/floor:bench";
/// How long a start may take to answer.
const ANSWER_WAIT: Duration = Duration::from_secs(180);

/// A static HTTP server that answers every request at once (`{}`).
const FLOOR_C: &str = r#"#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
int main(void) {
    static const char ok[] = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}";
    int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(8080)};
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(s, (struct sockaddr *)&a, sizeof a) || listen(s, 64)) return 1;
    for (;;) {
        char buf[4096];
        int c = accept(s, 0, 0);
        if (c < 0) continue;
        (void)read(c, buf, sizeof buf);
        (void)write(c, ok, sizeof ok - 1);
        /* the rest of the request is read, not reset */
        shutdown(c, SHUT_WR);
        while (read(c, buf, sizeof buf) > 0) {}
        close(c);
    }
}
"#;

/// One measured Deployment: its name and the event its first request
/// carries.
pub(crate) struct Variant {
    pub(crate) app: String,
    pub(crate) event: String,
}

pub fn run(o: &Options) -> Result<Report> {
    if o.runs == 0 {
        fail!(BenchKubeError::Config, "--runs must be at least 1");
    }
    if o.pods > 0
        && (!(1..=cri::DENSITY_FUNCTIONS.len()).contains(&o.pod_functions)
            || !o.pods.is_multiple_of(o.pod_functions)
            || o.pods > 256)
    {
        fail!(
            BenchKubeError::Config,
            "--pod-functions must be in 1..={} and divide --pods (at most 256)",
            cri::DENSITY_FUNCTIONS.len()
        );
    }
    let load_start = thaw_bench::concurrency::loadavg();
    let root = suite_root(&o.shim_dir, &o.runtime_home, &o.function)?;
    let mut report = thaw_server::on_temp_daemon_with(
        &o.runtime_home,
        "kube",
        |cfg| {
            // idle instances go after a second: every start is a restore
            cfg.policy = "ttl".into();
            cfg.keep_alive_s = 1;
            let per_function =
                u32::try_from((o.pods / o.pod_functions.max(1)).max(1)).unwrap_or(u32::MAX);
            let l = &mut cfg.limits;
            l.instances_per_function = l.instances_per_function.max(per_function);
            l.max_instances_per_function = l.max_instances_per_function.max(per_function);
            cfg.memory_budget_mb = cfg.memory_budget_mb.max((o.pods as u64 + 4) * 256);
            Ok::<(), BenchKubeError>(())
        },
        |_, socket| {
            let base = std::env::temp_dir().join(format!("thaw-kube-node-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&base);
            let mut cri = Cri::start(&base, socket, &o.shim_dir, SUBNET, &[], "info")?;
            // the pods' IPs polled over one connection, no crictl process
            cri.use_grpc()?;
            let n = Node {
                cri,
                socket,
                root: &root,
                pods: AtomicU32::new(0),
                prewarm: true,
            };
            let img = cri::build_images(&n, &root, &o.function)?;
            import_floor(&n, &base)?;
            let cluster = Cluster::start(&n.cri, &base.with_extension("k8s"), SUBNET)?;
            let r = measure(o, &n, &cluster, &img).and_then(|mut r| {
                if o.pods > 0 {
                    r.density = density(o, &n, &cluster)?;
                }
                Ok(r)
            });
            drop(cluster);
            r
        },
    )?;
    report.run.loadavg_1m_start = load_start;
    report.run.loadavg_1m_end = thaw_bench::concurrency::loadavg();
    Ok(report)
}

/// The runtime root (made if missing) once the shim is there and
/// `function` is one of the root's Python suite functions.
pub(crate) fn suite_root(
    shim_dir: &Path,
    runtime_home: &Path,
    function: &str,
) -> Result<thaw_runtime::RootInfo> {
    cri::check_shim(shim_dir)?;
    let root = thaw_runtime::ensure_root(runtime_home, &mut |m| eprintln!("runtime: {m}"))?;
    let source = root.path.join(format!("opt/thaw/functions/{function}.py"));
    if !source.is_file() {
        fail!(
            BenchKubeError::Config,
            "{function} is not a Python function of the suite (thaw runtime functions)"
        );
    }
    Ok(root)
}

/// Builds the floor's binary (gcc -static) and imports its image.
fn import_floor(n: &Node, base: &Path) -> Result<()> {
    let bin = thaw_kube_harness::containerd::static_binary(base, "floor", FLOOR_C)?;
    let built =
        thaw_server::image::build_native(&[("floor", &bin, 0o755)], &["/floor"], FLOOR_IMAGE)?;
    cri::import(n, "floor", &built.archive)?;
    Ok(())
}

/// How a measured Deployment's pods run.
#[derive(Clone, Copy)]
pub(crate) enum Kind<'a> {
    /// runc, the runtime root's directories mounted read-only
    Runc,
    /// the thaw RuntimeClass
    Thaw,
    /// runc, the image alone
    Plain,
    /// runc, an image holding the runtime root, run as it says
    Rooted(&'a cri::RootedRunc),
}

/// Applies the Deployment `app` of `image` at 0 replicas.
fn deploy(n: &Node, k: &Cluster, app: &str, image: &str, kind: Kind) -> Result<()> {
    deploy_placed(n, k, app, image, kind, json!({}))
}

/// [`deploy`], with `placement`'s fields (`nodeSelector`, `affinity`,
/// `automountServiceAccountToken`) added to the pod's spec.
pub(crate) fn deploy_placed(
    n: &Node,
    k: &Cluster,
    app: &str,
    image: &str,
    kind: Kind,
    placement: Value,
) -> Result<()> {
    let mut pod = json!({
        "containers": [{
            "name": "fn",
            "image": image,
            "imagePullPolicy": "Never",
            "env": [{"name": "PORT", "value": "8080"}],
        }],
        "terminationGracePeriodSeconds": 1,
    });
    let mut annotations = json!({});
    match kind {
        Kind::Plain => {}
        Kind::Rooted(r) => {
            let c = &mut pod["containers"][0];
            c["command"] = json!(r.command);
            let env = c["env"].as_array_mut().expect("an env list");
            env.extend(r.env.iter().map(|(k, v)| json!({"name": k, "value": v})));
        }
        Kind::Thaw => {
            pod["runtimeClassName"] = json!("thaw");
            annotations = json!({"dev.thaw.memory-mb": "256"});
        }
        Kind::Runc => {
            let dirs = cri::root_dirs(n.root)?;
            pod["volumes"] = dirs
                .iter()
                .map(|d| json!({"name": volume(d), "hostPath": {"path": n.root.path.join(d)}}))
                .collect();
            pod["containers"][0]["volumeMounts"] = dirs
                .iter()
                .map(|d| json!({"name": volume(d), "mountPath": format!("/{d}"), "readOnly": true}))
                .collect();
        }
    }
    if let (Some(spec), Some(extra)) = (pod.as_object_mut(), placement.as_object()) {
        spec.extend(extra.clone());
    }
    let d = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": app},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": app}},
            "template": {
                "metadata": {"labels": {"app": app}, "annotations": annotations},
                "spec": pod,
            },
        },
    });
    let file = k.dir.join(format!("{app}.json"));
    std::fs::write(&file, d.to_string())?;
    k.run(&["apply", "-f", &file.to_string_lossy()])?;
    Ok(())
}

/// The three Deployments (0 replicas), then the interleaved starts.
fn measure(o: &Options, n: &Node, k: &Cluster, img: &Images) -> Result<Report> {
    if o.no_volumes {
        // the kubelet starts a pod with a volume only once its volume
        // manager saw it mounted, polling every 300 ms: none here
        let none = json!({"automountServiceAccountToken": false});
        let cache = o.runtime_home.join("images");
        let rooted = cri::build_rooted_runc(n, n.root, &o.function, &cache)?;
        deploy_placed(n, k, "floor", FLOOR_IMAGE, Kind::Plain, none.clone())?;
        let runc = Kind::Rooted(&rooted);
        deploy_placed(n, k, "fn-runc", &rooted.image, runc, none.clone())?;
        deploy_placed(n, k, "fn-thaw", &img.thaw, Kind::Thaw, none)?;
    } else {
        deploy(n, k, "floor", FLOOR_IMAGE, Kind::Plain)?;
        deploy(n, k, "fn-runc", &img.runc, Kind::Runc)?;
        deploy(n, k, "fn-thaw", &img.thaw, Kind::Thaw)?;
    }
    let variants = [
        Variant {
            app: "floor".into(),
            event: String::new(),
        },
        Variant {
            app: "fn-runc".into(),
            event: img.event.clone(),
        },
        Variant {
            app: "fn-thaw".into(),
            event: img.event.clone(),
        },
    ];
    let mut first = [0.0; 3];
    for (i, v) in variants.iter().enumerate() {
        eprintln!("thaw bench kube: warm-up start of {}", v.app);
        first[i] = start(&[n], k, v)?.ms;
    }
    let mut starts: [Vec<Started>; 3] = Default::default();
    for run in 0..o.runs {
        eprintln!("thaw bench kube: run {} of {}", run + 1, o.runs);
        // each run starts with another variant
        for j in 0..3 {
            let i = (run + j) % 3;
            starts[i].push(start(&[n], k, &variants[i])?);
        }
    }
    let [floor, runc, thaw] = [0, 1, 2].map(|i| pod_starts(first[i], &starts[i]));
    let (floor, runc, thaw) = (floor?, runc?, thaw?);
    Ok(Report {
        run: RunInfo::of(k, &o.function)?,
        no_volumes: o.no_volumes,
        thaw_over_floor_median: thaw.answer.median / floor.answer.median,
        runc_over_thaw_median: runc.answer.median / thaw.answer.median,
        api_thaw_over_floor_median: thaw.api_answer.median / floor.api_answer.median,
        api_runc_over_thaw_median: runc.api_answer.median / thaw.api_answer.median,
        floor,
        runc,
        thaw,
        density: Vec::new(),
    })
}

/// One pod kind's summaries.
fn pod_starts(first_ms: f64, s: &[Started]) -> Result<PodStarts> {
    let of = |f: fn(&Started) -> f64| cri::summary(&s.iter().map(f).collect::<Vec<_>>());
    Ok(PodStarts {
        first_ms,
        scaled: of(|s| s.scaled_ms)?,
        cri_ip: of(|s| s.ip_ms)?,
        answer: of(|s| s.ms)?,
        api_ip: of(|s| s.api_ip_ms)?,
        api_answer: of(|s| s.api_ms)?,
    })
}

/// A volume's name for a root directory (a DNS label).
fn volume(dir: &str) -> String {
    format!("root-{}", dir.to_lowercase().replace('_', "-"))
}

/// One timed start, ms from the scale request: until the API server
/// answered it, until the node's CRI had the pod's sandbox ready with its
/// IP, until the first answer through that IP, until the API server
/// reported the IP, until the answer to a request sent then; and the node
/// that ran the pod.
pub(crate) struct Started {
    pub(crate) scaled_ms: f64,
    pub(crate) ip_ms: f64,
    pub(crate) ms: f64,
    pub(crate) api_ip_ms: f64,
    pub(crate) api_ms: f64,
    /// its index in the cluster's nodes
    pub(crate) node: usize,
}

/// One start of `v` on whichever of `nodes` (the cluster's, in order)
/// runs its pod: its scale set to 1 until the pod's first answer (asked
/// from that node's network namespace); then back to 0, the pod gone and
/// no idle instance left on any node.
pub(crate) fn start(nodes: &[&Node], k: &Cluster, v: &Variant) -> Result<Started> {
    let app = v.app.as_str();
    let selector = format!("app={app}");
    let watch = ApiWatch::start(k, &selector)?;
    // the watch is connected before the clock starts
    std::thread::sleep(Duration::from_millis(500));
    let t0 = Instant::now();
    let since = |t: Instant| t.duration_since(t0).as_secs_f64() * 1e3;
    k.scale(app, 1)?;
    let scaled_ms = since(Instant::now());
    let (node, ip) = cri_pod_ip(nodes, app, t0)?;
    let ip_ms = since(Instant::now());
    let left = ANSWER_WAIT.saturating_sub(t0.elapsed());
    let answer = nodes[node].cri.netns.post_to(&ip, 8080, &v.event, left)?;
    let ms = since(Instant::now());
    cri::answer_value(app, &answer)?;
    // a client that learns the IP from the API server asks once it is there
    let left = ANSWER_WAIT.saturating_sub(t0.elapsed());
    let (api_node, api_ip, seen_at) = watch.first(left)?;
    if (api_node, api_ip.as_str()) != (node, ip.as_str()) {
        fail!(
            BenchKubeError::Failed,
            "{app}'s pod: the API server reported {api_ip} on node {api_node}, the CRI had {ip} on node {node}"
        );
    }
    let left = ANSWER_WAIT.saturating_sub(t0.elapsed());
    let answer = nodes[node].cri.netns.post_to(&ip, 8080, &v.event, left)?;
    let api_ms = since(Instant::now());
    cri::answer_value(app, &answer)?;
    k.scale(app, 0)?;
    k.wait_for(&format!("{app}'s pod gone"), ANSWER_WAIT, || {
        let pods = k
            .run(&["get", "pods", "-l", &selector, "-o", "name"])
            .map_err(|e| e.to_string())?;
        Ok(pods.is_empty().then_some(()))
    })?;
    for n in nodes {
        cri::no_idle(n)?;
    }
    Ok(Started {
        scaled_ms,
        ip_ms,
        ms,
        api_ip_ms: since(seen_at),
        api_ms,
        node,
    })
}

/// `kubectl get pods --watch` of one Deployment's pods, read on a thread
/// of its own: the first node and IP the API server reported, and when.
struct ApiWatch {
    child: std::process::Child,
    first: mpsc::Receiver<(usize, String, Instant)>,
}

impl ApiWatch {
    fn start(k: &Cluster, selector: &str) -> Result<ApiWatch> {
        let mut child = Command::new(k.dir.join("kubectl"))
            .args(["get", "pods", "-l", selector, "--watch", "-o"])
            .arg("jsonpath={.spec.nodeName}{\" \"}{.status.podIP}{\"\\n\"}")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("running kubectl get --watch")?;
        let lines = std::io::BufReader::new(child.stdout.take().expect("piped"));
        let nodes = k.nodes.clone();
        let (tx, first) = mpsc::channel();
        std::thread::spawn(move || {
            let seen = lines
                .lines()
                .map_while(std::result::Result::ok)
                .find_map(|l| {
                    let (node, ip) = l.trim().split_once(' ')?;
                    let i = nodes.iter().position(|n| n == node)?;
                    (!ip.is_empty()).then(|| (i, ip.to_string()))
                });
            if let Some((i, ip)) = seen {
                let _ = tx.send((i, ip, Instant::now()));
            }
        });
        Ok(ApiWatch { child, first })
    }

    /// The first report of a node and IP, waited for up to `limit`.
    fn first(&self, limit: Duration) -> Result<(usize, String, Instant)> {
        match self.first.recv_timeout(limit) {
            Ok(seen) => Ok(seen),
            Err(_) => fail!(
                BenchKubeError::Failed,
                "the API server reported no IP for the pod within {limit:?}"
            ),
        }
    }
}

impl Drop for ApiWatch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The node (index in `nodes`) and IP of the ready pod sandbox of the
/// Deployment `app` in a node's CRI (polled from `t0`, every 2 ms, for up
/// to [`ANSWER_WAIT`]).
fn cri_pod_ip(nodes: &[&Node], app: &str, t0: Instant) -> Result<(usize, String)> {
    loop {
        for (i, n) in nodes.iter().enumerate() {
            if let Some(ip) = n.cri.ready_pod_ip("app", app)? {
                return Ok((i, ip));
            }
        }
        if t0.elapsed() > ANSWER_WAIT {
            fail!(BenchKubeError::Failed, "no ready pod of {app} in the CRI");
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// `o.pods` pods of `o.pod_functions` functions (a Deployment each),
/// scaled up with one `kubectl scale`, on runc then on thaw (after a
/// warm-up start of each Deployment: thaw's deploys, runc's page cache).
fn density(o: &Options, n: &Node, k: &Cluster) -> Result<Vec<DensityRow>> {
    let functions = &cri::DENSITY_FUNCTIONS[..o.pod_functions];
    let mut events = std::collections::HashMap::new();
    for f in functions {
        let img = cri::build_images(n, n.root, f)?;
        for (kind, name, image) in [
            (Kind::Runc, "runc", &img.runc),
            (Kind::Thaw, "thaw", &img.thaw),
        ] {
            let app = format!("d-{name}-{}", f.replace('_', "-"));
            deploy(n, k, &app, image, kind)?;
            let v = Variant {
                app,
                event: img.event.clone(),
            };
            start(&[n], k, &v)?;
            events.insert(v.app, v.event);
        }
    }
    let mut rows = Vec::new();
    for runtime in ["runc", "thaw"] {
        eprintln!(
            "thaw bench kube: {} pods of {} functions at once on {runtime}",
            o.pods, o.pod_functions
        );
        let apps: Vec<String> = functions
            .iter()
            .map(|f| format!("deployment/d-{runtime}-{}", f.replace('_', "-")))
            .collect();
        let replicas = format!("--replicas={}", o.pods / o.pod_functions);
        let mut args = vec!["scale", &replicas];
        args.extend(apps.iter().map(String::as_str));
        let t0 = Instant::now();
        k.run(&args)?;
        // each ready pod's first answer, on a thread of its own
        let ms = std::thread::scope(|s| -> Result<Vec<f64>> {
            let mut seen = std::collections::HashSet::new();
            let mut threads = Vec::new();
            while seen.len() < o.pods {
                if t0.elapsed() > ANSWER_WAIT {
                    fail!(
                        BenchKubeError::Failed,
                        "{} of {} {runtime} pods ready after {ANSWER_WAIT:?}",
                        seen.len(),
                        o.pods
                    );
                }
                for id in n.cri.run(&["pods", "--state", "ready", "-q"])?.lines() {
                    if !seen.insert(id.to_string()) {
                        continue;
                    }
                    let v = n.cri.json("inspectp", id)?;
                    let ip = v["status"]["network"]["ip"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string();
                    let app = v["status"]["labels"]["app"].as_str().unwrap_or_default();
                    let event = events.get(app).cloned().unwrap_or_default();
                    threads.push(s.spawn(move || -> Result<f64> {
                        let left = ANSWER_WAIT.saturating_sub(t0.elapsed());
                        let answer = n.cri.netns.post_to(&ip, 8080, &event, left)?;
                        let ms = t0.elapsed().as_secs_f64() * 1e3;
                        cri::answer_value("a density pod", &answer)?;
                        Ok(ms)
                    }));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            cri::join_all(threads).into_iter().collect()
        })?;
        let wall_ms = ms.iter().copied().fold(0.0, f64::max);
        rows.push(DensityRow {
            runtime: runtime.into(),
            pods: o.pods,
            functions: o.pod_functions,
            first_answer: cri::summary(&ms)?,
            wall_ms,
        });
        let mut args = vec!["scale", "--replicas=0"];
        args.extend(apps.iter().map(String::as_str));
        k.run(&args)?;
        k.wait_for("the density pods gone", ANSWER_WAIT, || {
            let pods = n
                .cri
                .run(&["pods", "--state", "ready", "-q"])
                .map_err(|e| e.to_string())?;
            let api = k
                .run(&["get", "pods", "-o", "name"])
                .map_err(|e| e.to_string())?;
            Ok((pods.is_empty() && api.is_empty()).then_some(()))
        })?;
        cri::no_idle(n)?;
    }
    Ok(rows)
}

/// The report as markdown.
pub fn markdown(r: &Report) -> String {
    let row = |name: &str, p: &PodStarts| {
        let (a, api) = (&p.answer, &p.api_answer);
        format!(
            "| {name} | {} | {:.0} / {:.0} / {:.0} | {:.0} | {:.0} | {:.0} | {:.0} / {:.0} / {:.0} | {:.0} |\n",
            a.n,
            a.min,
            a.median,
            a.p99,
            p.scaled.median,
            p.cri_ip.median,
            p.api_ip.median,
            api.min,
            api.median,
            api.p99,
            p.first_ms
        )
    };
    let mut out = format!(
        "Pod start through the kubelet (Kubernetes {}): the Deployment's scale set to 1 (one API request) to the first HTTP answer through the pod IP, ms from the request ({} CPUs, load {:.2} -> {:.2}); {}. \
         Answer: the IP from the node's CRI once the sandbox is ready; API: the IP as a watch through the API server saw it (the kubelet's status report), and the answer to a request sent then.\n\n\
         | pod | n | answer min / median / p99 | scale answered (median) | sandbox ready in the CRI (median) | IP in the API (median) | answer via the API's IP min / median / p99 | first (warm-up) |\n\
         |---|---|---|---|---|---|---|---|\n",
        r.run.kubernetes,
        r.run.cpus,
        r.run.loadavg_1m_start,
        r.run.loadavg_1m_end,
        if r.no_volumes {
            "no pod mounts a volume (no service account token; the runc pod's image holds the runtime root)"
        } else {
            "every pod mounts the service account token (the runc pod also the runtime root's directories)"
        }
    );
    out += &row("floor (runc, static HTTP binary)", &r.floor);
    out += &row(&format!("{} on runc", r.run.function), &r.runc);
    out += &row(&format!("{} on thaw", r.run.function), &r.thaw);
    out += &format!(
        "\nthaw / floor (medians): {:.2}x; runc / thaw (medians): {:.2}x; through the API's IP: {:.2}x and {:.2}x\n",
        r.thaw_over_floor_median,
        r.runc_over_thaw_median,
        r.api_thaw_over_floor_median,
        r.api_runc_over_thaw_median
    );
    if !r.density.is_empty() {
        out += "\nPods scaled up at once (one `kubectl scale` of a Deployment per function), each pod's first answer (IP from the node's CRI), ms\n\n\
                | runtime | pods | functions | min | p50 | p99 | last |\n|---|---|---|---|---|---|---|\n";
        for d in &r.density {
            let s = &d.first_answer;
            out += &format!(
                "| {} | {} | {} | {:.0} | {:.0} | {:.0} | {:.0} |\n",
                d.runtime, d.pods, d.functions, s.min, s.median, s.p99, d.wall_ms
            );
        }
    }
    out
}

/// A summary of `n` runs around `median` (min 10 below, p99 50 above),
/// and a run's description, for the reports' tests.
#[cfg(test)]
pub(crate) fn sample_summary(n: usize, median: f64) -> Summary {
    Summary {
        n,
        min: median - 10.0,
        median,
        p99: median + 50.0,
        mean: median,
    }
}

#[cfg(test)]
impl RunInfo {
    pub(crate) fn sample() -> RunInfo {
        RunInfo {
            date_unix: 0,
            cpus: 2,
            loadavg_1m_start: 1.0,
            loadavg_1m_end: 2.0,
            kubernetes: "v1.32.13".into(),
            function: "lr_serving".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(runs: usize, shim_dir: &Path) -> Options {
        Options {
            runtime_home: PathBuf::from("/nonexistent/home"),
            shim_dir: shim_dir.to_path_buf(),
            function: "lr_serving".into(),
            runs,
            no_volumes: false,
            pods: 0,
            pod_functions: 8,
        }
    }

    #[test]
    fn bad_options_are_refused_before_anything_starts() {
        let e = run(&options(0, Path::new("/nonexistent"))).unwrap_err();
        assert!(matches!(e, BenchKubeError::Config(_)), "{e}");
        assert!(e.to_string().contains("--runs"), "{e}");
        let e = run(&options(3, Path::new("/nonexistent/dir"))).unwrap_err();
        assert!(
            e.to_string()
                .contains("/nonexistent/dir/containerd-shim-thaw-v1 is missing"),
            "{e}"
        );
    }

    #[test]
    fn the_report_names_each_pod_kind_and_the_ratios() {
        let s = |m: f64| sample_summary(10, m);
        let kind = |first_ms: f64, answer: f64, api_answer: f64| PodStarts {
            first_ms,
            scaled: s(20.0),
            cri_ip: s(answer - 30.0),
            answer: s(answer),
            api_ip: s(api_answer - 5.0),
            api_answer: s(api_answer),
        };
        let r = Report {
            run: RunInfo::sample(),
            no_volumes: true,
            floor: kind(1.0, 400.0, 1300.0),
            runc: kind(2.0, 1200.0, 1400.0),
            thaw: kind(3.0, 300.0, 1290.0),
            density: Vec::new(),
            thaw_over_floor_median: 0.75,
            runc_over_thaw_median: 4.0,
            api_thaw_over_floor_median: 0.99,
            api_runc_over_thaw_median: 1.09,
        };
        let md = markdown(&r);
        assert!(
            md.contains("to the first HTTP answer through the pod IP"),
            "{md}"
        );
        assert!(md.contains("no pod mounts a volume"), "{md}");
        assert!(
            md.contains("| lr_serving on thaw | 10 | 290 / 300 / 350 | 20 | 270 | 1285 | 1280 / 1290 / 1340 | 3 |"),
            "{md}"
        );
        assert!(
            md.contains("| lr_serving on runc | 10 | 1190 / 1200 / 1250 | 20 | 1170 | 1395 | 1390 / 1400 / 1450 | 2 |"),
            "{md}"
        );
        assert!(
            md.contains("thaw / floor (medians): 0.75x; runc / thaw (medians): 4.00x; through the API's IP: 0.99x and 1.09x"),
            "{md}"
        );
    }
}
