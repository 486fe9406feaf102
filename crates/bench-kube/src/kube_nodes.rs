//! `thaw bench kube --two-nodes`: pod start through the kubelet on two
//! nodes sharing snapshots. Two in-process `thaw serve`s share the
//! emulated remote tier (MinIO, as `thaw bench cri --remote-runs` starts
//! it), each behind its own containerd, kubelet and kube-proxy in a network
//! namespace of its own (`deploy/kubernetes/cluster.sh` with a second
//! `--node`), and each node's labels say which images it holds snapshots
//! of (`snapshot-labels.py`). Node A's first pod deploys the function and
//! publishes its snapshot. Then each run:
//!
//! * remote and local: B forgets the function (a node that never saw
//!   it), a pod pinned to B restores A's snapshot streamed from the remote
//!   tier (one restore from the remote tier, B's metrics say), B keeps the
//!   copy on its tmpfs, and B's next pod restores that (local);
//! * locality: A forgets the function, so only B holds it locally (its
//!   label says so), and the function's Deployment without a pin starts a
//!   pod with the preferred node affinity of `hello-deployment.yaml` on the
//!   image's label and without it, in turns: the scheduler picks the node,
//!   and a pod on A fetches the snapshot from the remote tier again.
//!
//! One start is the Deployment's scale set to 1 until the first HTTP
//! answer through the pod's IP (from the node's CRI), as in `thaw bench kube`;
//! every start is a restore (idle instances go after a second).
use crate::cri::{self, Node, Store};
use crate::error::{BenchKubeError, Result};
use crate::kube::{self, Kind, Variant};
use serde::Serialize;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::atomic::AtomicU32;
use std::time::{Duration, Instant};
use thaw_bench::stats::Summary;
use thaw_client::{Client, Target};
use thaw_error::fail;
use thaw_kube_harness::cluster::{Cluster, NodeSpec};
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
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    #[serde(flatten)]
    pub run: kube::RunInfo,
    /// the pod on the node that never saw the function (a restore
    /// streamed from the remote tier), ms
    pub remote: Summary,
    /// the next pod on that node (a restore of the copy it kept), ms
    pub local: Summary,
    /// remote's median over local's
    pub remote_over_local_median: f64,
    /// the Deployment with the preferred node affinity, ms
    pub preferred: Summary,
    /// its pods the scheduler put on the node holding the snapshot locally
    pub preferred_on_holder: usize,
    /// the same Deployment without it, ms
    pub unpreferred: Summary,
    pub unpreferred_on_holder: usize,
    /// unpreferred's median over preferred's
    pub unpreferred_over_preferred_median: f64,
}

const SUBNETS: [&str; 2] = ["10.86.0.0/24", "10.86.1.0/24"];
const CLUSTER_CIDR: &str = "10.86.0.0/16";
const LABELS_WAIT: Duration = Duration::from_secs(60);

/// The node label `snapshot-labels.py` gives an image: the reference with
/// every character other than a letter, digit, `-`, `_` or `.` as `_`.
fn snapshot_label(image: &str) -> Result<String> {
    let name: String = image
        .chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '-' | '_' | '.' => c,
            _ => '_',
        })
        .collect();
    let edges_ok = name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if name.len() > 63 || !edges_ok {
        fail!(
            BenchKubeError::Config,
            "{image}: the label would be a digest (snapshot-labels.py); name the image shorter"
        );
    }
    Ok(format!("snapshot.thaw.dev/{name}"))
}

/// The preferred node affinity of `hello-deployment.yaml` for `label`.
fn affinity(label: &str) -> Value {
    let term = |weight: u32, values: &[&str]| {
        json!({"weight": weight, "preference": {"matchExpressions": [
            {"key": label, "operator": "In", "values": values}
        ]}})
    };
    json!({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        term(100, &["warm"]),
        term(50, &["tmpfs", "disk"]),
    ]}}})
}

pub fn run(o: &Options) -> Result<Report> {
    if o.runs == 0 {
        fail!(BenchKubeError::Config, "--runs must be at least 1");
    }
    let load_start = thaw_bench::concurrency::loadavg();
    let root = kube::suite_root(&o.shim_dir, &o.runtime_home, &o.function)?;
    let store = Store::up("kube")?;
    let shared = store.shared().expect("the store is up");
    let configure = |cfg: &mut thaw_server::Config| {
        cri::share_snapshots(cfg, shared.0, shared.1)?;
        // idle instances go after a second: every start is a restore
        cfg.policy = "ttl".into();
        cfg.keep_alive_s = 1;
        Ok::<(), BenchKubeError>(())
    };
    let mut report =
        thaw_server::on_temp_daemon_with(&o.runtime_home, "kube-a", configure, |_, socket_a| {
            thaw_server::on_temp_daemon_with(&o.runtime_home, "kube-b", configure, |_, socket_b| {
                let a = node(o, &root, "kube-node-a", SUBNETS[0], socket_a)?;
                let b = node(o, &root, "kube-node-b", SUBNETS[1], socket_b)?;
                let img = cri::build_images(&a, &root, &o.function)?;
                b.cri.c.import(&img.thaw_archive)?;
                let specs = [(&a, SUBNETS[0]), (&b, SUBNETS[1])].map(|(n, pod_cidr)| NodeSpec {
                    cri: &n.cri,
                    pod_cidr,
                    thaw_socket: Some(n.socket),
                });
                let base =
                    std::env::temp_dir().join(format!("thaw-kube-nodes-{}", std::process::id()));
                let _ = std::fs::remove_dir_all(&base);
                let cluster = Cluster::start_nodes(&specs, &base, CLUSTER_CIDR)?;
                let r = measure(o, [&a, &b], &cluster, &img);
                drop(cluster);
                r
            })
        })?;
    drop(store);
    report.run.loadavg_1m_start = load_start;
    report.run.loadavg_1m_end = thaw_bench::concurrency::loadavg();
    Ok(report)
}

/// A node's containerd (its own namespace and pod subnet) beside the
/// daemon at `socket`.
fn node<'a>(
    o: &Options,
    root: &'a thaw_runtime::RootInfo,
    name: &str,
    subnet: &str,
    socket: &'a std::path::Path,
) -> Result<Node<'a>> {
    let base = std::env::temp_dir().join(format!("thaw-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let mut cri = Cri::start(&base, socket, &o.shim_dir, subnet, &[], "info")?;
    // the pods' IPs polled over one connection, no crictl process
    cri.use_grpc()?;
    Ok(Node {
        cri,
        socket,
        root,
        pods: AtomicU32::new(0),
        prewarm: true,
    })
}

fn client(n: &Node) -> Client {
    Client::new(Target::Unix(n.socket.to_path_buf()))
}

/// The restores node `n` made from the remote tier (its metrics).
fn remote_restores(n: &Node) -> Result<f64> {
    let m = client(n).request("GET", "/metrics", None)?;
    Ok(String::from_utf8_lossy(&m.body)
        .lines()
        .filter(|l| {
            l.starts_with("thaw_restore_duration_seconds_count{") && l.contains("tier=\"remote\"")
        })
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum())
}

/// Node `n` forgets every function (as a node that never saw them), and
/// its snapshot labels go (the scheduler sees it holds nothing).
fn forget(n: &Node, k: &Cluster, node: &str) -> Result<()> {
    let v: Value = client(n).request("GET", "/v1/functions", None)?.json()?;
    for f in v["functions"].as_array().into_iter().flatten() {
        if let Some(name) = f["name"].as_str() {
            let r = client(n).request("DELETE", &format!("/v1/functions/{name}"), None)?;
            if r.status != 204 && r.status != 404 {
                fail!(
                    BenchKubeError::Failed,
                    "deleting {name} on {node}: {}",
                    String::from_utf8_lossy(&r.body)
                );
            }
        }
    }
    label_is(k, node, "absent", |_, held| held.is_empty())
}

/// Waits until `node`'s snapshot labels satisfy `ok` (the value of
/// `label`, every snapshot label's key).
fn label_is(
    k: &Cluster,
    node: &str,
    what: &str,
    ok: impl Fn(Option<&str>, &[&String]) -> bool,
) -> Result<()> {
    k.wait_for(
        &format!("{node}'s snapshot labels {what}"),
        LABELS_WAIT,
        || {
            let v = k.get(&["node", node]).map_err(|e| e.to_string())?;
            let labels = v["metadata"]["labels"]
                .as_object()
                .cloned()
                .unwrap_or_default();
            let held: Vec<&String> = labels
                .keys()
                .filter(|l| l.starts_with("snapshot.thaw.dev/"))
                .collect();
            let values: Vec<String> = held.iter().map(|l| format!("{l}={}", labels[*l])).collect();
            let value = held.first().and_then(|l| labels[*l].as_str());
            if ok(value, &held) {
                Ok(Some(()))
            } else {
                Err(format!("{values:?}"))
            }
        },
    )?;
    Ok(())
}

/// Waits until node `n` keeps its streamed copy on its fast tier.
fn kept_locally(n: &Node, node: &str) -> Result<()> {
    let t = Instant::now();
    loop {
        let v: Value = client(n).request("GET", "/v1/functions", None)?.json()?;
        let tiers: Vec<&Value> = v["functions"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|f| &f["snapshot_tier"])
            .collect();
        if !tiers.is_empty() && tiers.iter().all(|t| *t == "tmpfs") {
            return Ok(());
        }
        if t.elapsed() > LABELS_WAIT {
            fail!(
                BenchKubeError::Failed,
                "{node} did not keep the streamed snapshot locally: {tiers:?}"
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn measure(o: &Options, nodes: [&Node; 2], k: &Cluster, img: &cri::Images) -> Result<Report> {
    let [a, b] = nodes;
    let (na, nb) = match k.nodes.as_slice() {
        [na, nb] => (na.clone(), nb.clone()),
        other => fail!(BenchKubeError::Failed, "two nodes expected: {other:?}"),
    };
    let label = snapshot_label(&img.thaw)?;
    let pin = |node: &str| json!({"nodeSelector": {"kubernetes.io/hostname": node}});
    let apps = [
        ("on-a", pin(&na)),
        ("on-b", pin(&nb)),
        ("preferred", affinity(&label)),
        ("unpreferred", json!({})),
    ];
    for (app, placement) in &apps {
        kube::deploy_placed(a, k, app, &img.thaw, Kind::Thaw, placement.clone())?;
    }
    let timed = |app: &str| {
        let v = Variant {
            app: app.into(),
            event: img.event.clone(),
        };
        kube::start(&nodes, k, &v)
    };
    eprintln!("thaw bench kube --two-nodes: warm-up start on {na} (deploys and publishes)");
    timed("on-a")?;
    let local_label = |v: Option<&str>| matches!(v, Some("warm" | "tmpfs" | "disk"));
    let (mut local, mut remote) = (Vec::new(), Vec::new());
    let mut placed: [(Vec<f64>, usize); 2] = Default::default();
    for run in 0..o.runs {
        eprintln!("thaw bench kube --two-nodes: run {} of {}", run + 1, o.runs);
        // B never saw the function: its pod's instance is A's snapshot
        // streamed from the remote tier; B keeps the copy, and its next
        // pod restores it locally
        forget(b, k, &nb)?;
        let before = remote_restores(b)?;
        // the pod's start, and that node B restored from the remote tier
        // once in all since `before`
        let on_b = |what: &str| -> Result<f64> {
            let s = timed("on-b")?;
            if remote_restores(b)? != before + 1.0 {
                fail!(
                    BenchKubeError::Failed,
                    "{what} on {nb}: B's restores from the remote tier are not {before} + 1"
                );
            }
            Ok(s.ms)
        };
        remote.push(on_b("the first pod (a restore from the remote tier)")?);
        kept_locally(b, &nb)?;
        local.push(on_b("the second pod (a local restore)")?);
        // only B holds it locally (A forgets its own, a pod there fetches
        // it again): with and without the preferred affinity, in turns
        for j in 0..2 {
            let which = (run + j) % 2;
            forget(a, k, &na)?;
            label_is(k, &nb, "local", |v, _| local_label(v))?;
            let s = timed(["preferred", "unpreferred"][which])?;
            placed[which].0.push(s.ms);
            placed[which].1 += usize::from(s.node == 1);
        }
    }

    let (local, remote) = (cri::summary(&local)?, cri::summary(&remote)?);
    let [(preferred, preferred_on), (unpreferred, unpreferred_on)] = placed;
    let (preferred, unpreferred) = (cri::summary(&preferred)?, cri::summary(&unpreferred)?);
    Ok(Report {
        run: kube::RunInfo::of(k, &o.function)?,
        remote_over_local_median: remote.median / local.median,
        unpreferred_over_preferred_median: unpreferred.median / preferred.median,
        local,
        remote,
        preferred,
        preferred_on_holder: preferred_on,
        unpreferred,
        unpreferred_on_holder: unpreferred_on,
    })
}

/// The report as markdown.
pub fn markdown(r: &Report) -> String {
    let row = |name: &str, s: &Summary, on: Option<usize>| {
        let on = on.map_or("-".to_string(), |n| format!("{n} of {}", s.n));
        format!(
            "| {name} | {} | {:.0} | {:.0} | {:.0} | {on} |\n",
            s.n, s.min, s.median, s.p99
        )
    };
    let mut out = format!(
        "Pod start through the kubelet on two nodes sharing snapshots through the remote tier (Kubernetes {}, {}): `kubectl scale --replicas=1` to the first HTTP answer through the pod IP, ms ({} CPUs, load {:.2} -> {:.2})\n\n\
         | pod | n | min | median | p99 | on the node holding the snapshot |\n|---|---|---|---|---|---|\n",
        r.run.kubernetes,
        r.run.function,
        r.run.cpus,
        r.run.loadavg_1m_start,
        r.run.loadavg_1m_end
    );
    out += &row(
        "remote restore (pinned to a node that never saw it)",
        &r.remote,
        None,
    );
    out += &row("local restore (that node's next pod)", &r.local, None);
    out += &row(
        "preferred node affinity on the snapshot label",
        &r.preferred,
        Some(r.preferred_on_holder),
    );
    out += &row(
        "no affinity (the scheduler's choice)",
        &r.unpreferred,
        Some(r.unpreferred_on_holder),
    );
    out += &format!(
        "\nremote / local (medians): {:.2}x; no affinity / preferred (medians): {:.2}x\n",
        r.remote_over_local_median, r.unpreferred_over_preferred_median
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_follow_the_labelers_rule_and_bad_options_are_refused() {
        assert_eq!(
            snapshot_label("thaw.local/hello:latest").unwrap(),
            "snapshot.thaw.dev/thaw.local_hello_latest"
        );
        assert!(snapshot_label(&"x".repeat(64)).is_err());
        assert!(snapshot_label("_x").is_err());
        let o = Options {
            runtime_home: PathBuf::from("/nonexistent/home"),
            shim_dir: PathBuf::from("/nonexistent/dir"),
            function: "lr_serving".into(),
            runs: 0,
        };
        let e = run(&o).unwrap_err();
        assert!(e.to_string().contains("--runs"), "{e}");
        let e = run(&Options { runs: 2, ..o }).unwrap_err();
        assert!(
            e.to_string()
                .contains("/nonexistent/dir/containerd-shim-thaw-v1 is missing"),
            "{e}"
        );
    }

    #[test]
    fn the_report_names_each_placement_and_the_ratios() {
        let s = |m: f64| kube::sample_summary(5, m);
        let r = Report {
            run: kube::RunInfo::sample(),
            local: s(300.0),
            remote: s(450.0),
            remote_over_local_median: 1.5,
            preferred: s(310.0),
            preferred_on_holder: 5,
            unpreferred: s(400.0),
            unpreferred_on_holder: 2,
            unpreferred_over_preferred_median: 1.29,
        };
        let md = markdown(&r);
        assert!(
            md.contains(
                "| remote restore (pinned to a node that never saw it) | 5 | 440 | 450 | 500 | - |"
            ),
            "{md}"
        );
        assert!(
            md.contains("| no affinity (the scheduler's choice) | 5 | 390 | 400 | 450 | 2 of 5 |"),
            "{md}"
        );
        assert!(
            md.contains(
                "remote / local (medians): 1.50x; no affinity / preferred (medians): 1.29x"
            ),
            "{md}"
        );
    }
}
