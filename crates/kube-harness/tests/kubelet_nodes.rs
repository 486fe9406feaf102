//! Two nodes on one machine (`deploy/kubernetes/cluster.sh` with a second
//! `--node`): each its own network namespace, containerd, thaw daemon,
//! kubelet, kube-proxy and pod subnet, one API server. The two daemons
//! share snapshots through the remote tier (MinIO in a namespace of its
//! own, as `thaw tier setup --tiers remote` makes it), and each node's
//! labels say which images it holds snapshots of (`snapshot-labels.py`),
//! which the example Deployment's preferred node affinity follows. Pods
//! answer from the other node's namespace too, and a ClusterIP Service
//! spreads over the pods of both nodes.
mod common;

use common::kube::*;
use common::*;
use serde_json::Value;
use std::time::Duration;
use thaw_kube_harness::cluster::{Cluster, NodeSpec};
use thaw_kube_harness::containerd::Cri;

const HELLO: &str = r#"
import time

def handler(event):
    event = event or {}
    time.sleep(event.get("sleep", 0))
    print("served", event.get("name"))
    return {"hello": event.get("name", "world")}
"#;
/// The label `snapshot-labels.py` gives thaw.local/hello:latest.
const LABEL: &str = "snapshot.thaw.dev/thaw.local_hello_latest";
const LONG: Duration = Duration::from_secs(240);
/// The label every pinned Deployment's pods carry: the Service's selector.
const SERVED_BY: (&str, &str) = ("serves", "hello");

/// One node: its daemon and its containerd (in a namespace of its own).
struct Node {
    daemon: Daemon,
    cri: Cri,
    subnet: &'static str,
}

/// The Ready pods labelled `app`, once there are `n` (none deleting).
fn ready_pods(k: &Cluster, app: &str, n: usize) -> Vec<Value> {
    must(k.wait_for(&format!("{n} Ready pods of {app}"), LONG, || {
        let v = k
            .get(&["pods", "-l", &format!("app={app}")])
            .map_err(|e| e.to_string())?;
        let pods = v["items"].as_array().cloned().unwrap_or_default();
        let settled = pods
            .iter()
            .all(|p| is_ready(p) && p["metadata"]["deletionTimestamp"].is_null());
        if pods.len() == n && settled {
            Ok(Some(pods))
        } else {
            Err(summary(&pods))
        }
    }))
}

/// The node's value of [`LABEL`], waited for until `want` accepts it.
fn label_becomes(k: &Cluster, node: &str, what: &str, want: impl Fn(Option<&str>) -> bool) {
    must(k.wait_for(
        &format!("{node}'s {LABEL} {what}"),
        Duration::from_secs(60),
        || {
            let n = k.get(&["node", node]).map_err(|e| e.to_string())?;
            let v = n["metadata"]["labels"][LABEL].as_str().map(str::to_string);
            seen(want(v.as_deref()), format!("{v:?}"))
        },
    ));
}

/// A Deployment of `image` on the thaw RuntimeClass, pinned to `node`
/// (made at 0 replicas by `kubectl create`, then given its pod spec and 1
/// replica with one patch).
fn pinned(k: &Cluster, app: &str, image: &str, node: &str) {
    must(k.run(&[
        "create",
        "deployment",
        app,
        "--image",
        image,
        "--replicas=0",
    ]));
    let probe = serde_json::json!({"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 1});
    let container = serde_json::json!({
        "name": "fn", "image": image, "imagePullPolicy": "Never",
        "env": [{"name": "PORT", "value": "8080"}], "readinessProbe": probe,
    });
    // the example's settings: one function for both
    let annotations = serde_json::json!({"dev.thaw.memory-mb": "256"});
    let labels = serde_json::json!({"app": app, SERVED_BY.0: SERVED_BY.1});
    let patch = serde_json::json!({"spec": {"replicas": 1, "template": {
        "metadata": {"annotations": annotations, "labels": labels},
        "spec": {
            "runtimeClassName": "thaw",
            "nodeSelector": {"kubernetes.io/hostname": node},
            "terminationGracePeriodSeconds": 1,
            "containers": [container],
        },
    }}});
    let patch = patch.to_string();
    must(k.run(&["patch", "deployment", app, "--type", "merge", "-p", &patch]));
}

/// A request to `pod`'s IP from `node`'s namespace: the answer.
fn ask(node: &Node, pod: &Value, who: &str) -> String {
    ask_sleeping(node, pod, who, 0.0)
}

/// [`ask`], the function sleeping `sleep` seconds before it answers.
fn ask_sleeping(node: &Node, pod: &Value, who: &str, sleep: f64) -> String {
    let ip = pod["status"]["podIP"].as_str().unwrap();
    let answer = post(
        &node.cri.netns,
        ip,
        8080,
        &format!(r#"{{"name": "{who}", "sleep": {sleep}}}"#),
    );
    assert!(
        answer.starts_with("HTTP/1.1 200") && answer.contains(&format!(r#""hello":"{who}""#)),
        "{answer}"
    );
    answer
}

/// A ClusterIP Service over the pinned Deployments' pods (one on each
/// node): `n` requests to its address from each node's namespace are each
/// served by one pod (its log has the request's print), and every pod
/// served some of each node's.
fn spread_over_nodes(k: &Cluster, nodes: &[Node], pods: &[Value], n: usize) {
    must(k.run(&["create", "service", "clusterip", "both", "--tcp=80:8080"]));
    let selector = serde_json::json!([{"op": "replace", "path": "/spec/selector",
        "value": {SERVED_BY.0: SERVED_BY.1}}]);
    let selector = selector.to_string();
    must(k.run(&[
        "patch", "service", "both", "--type", "json", "-p", &selector,
    ]));
    let mut ips: Vec<String> = pods
        .iter()
        .map(|p| p["status"]["podIP"].as_str().unwrap().to_string())
        .collect();
    ips.sort();
    must(k.wait_for(
        "the Service's endpoints: both pods",
        Duration::from_secs(60),
        || {
            let v = k
                .get(&["endpointslices", "-l", "kubernetes.io/service-name=both"])
                .map_err(|e| e.to_string())?;
            let mut listed: Vec<String> = v["items"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|s| s["endpoints"].as_array().cloned().unwrap_or_default())
                .filter_map(|e| e["addresses"][0].as_str().map(str::to_string))
                .collect();
            listed.sort();
            seen(listed == ips, format!("{listed:?}"))
        },
    ));
    let svc = must(k.get(&["service", "both"]));
    let cluster_ip = svc["spec"]["clusterIP"].as_str().unwrap().to_string();
    let names: Vec<Vec<String>> = (0..nodes.len())
        .map(|from| (0..n).map(|i| format!("svc-{from}-{i}")).collect())
        .collect();
    for (node, whos) in nodes.iter().zip(&names) {
        for who in whos {
            let answer = post(
                &node.cri.netns,
                &cluster_ip,
                80,
                &format!(r#"{{"name": "{who}"}}"#),
            );
            assert!(answer.contains(&format!(r#""hello":"{who}""#)), "{answer}");
        }
    }
    // served[pod][from]: how many of node `from`'s requests the pod served,
    // once every request is in exactly one pod's log
    let served = must(k.wait_for(
        "every Service request in one pod's log",
        Duration::from_secs(30),
        || {
            let logs: Vec<String> = pods
                .iter()
                .map(|p| k.run(&["logs", &name(p)]).map_err(|e| e.to_string()))
                .collect::<Result<_, _>>()?;
            let count = |log: &str, who: &str| {
                let line = format!("served {who}");
                log.lines().filter(|l| *l == line).count()
            };
            let once = names
                .iter()
                .flatten()
                .all(|who| logs.iter().map(|l| count(l, who)).sum::<usize>() == 1);
            let served: Vec<Vec<usize>> = logs
                .iter()
                .map(|l| {
                    names
                        .iter()
                        .map(|ns| ns.iter().filter(|w| count(l, w) == 1).count())
                        .collect()
                })
                .collect();
            if once {
                Ok(Some(served))
            } else {
                Err(format!("served so far (pod x from-node): {served:?}"))
            }
        },
    ));
    assert!(
        served.iter().flatten().all(|&c| c > 0),
        "each pod served some of each node's requests (pod x from-node): {served:?}"
    );
    must(k.run(&["delete", "service", "both"]));
}

/// The node's daemon deletes every function it has.
fn forget(d: &Daemon) {
    for f in d.functions() {
        d.delete(&f);
    }
}

/// The restores a node's daemon made from its local tiers.
fn local_restores(d: &Daemon) -> f64 {
    restores_from(d, "tmpfs") + restores_from(d, "disk")
}

#[test]
fn a_pod_on_a_second_node_restores_the_first_nodes_snapshot_from_the_remote_tier_and_deployments_prefer_nodes_holding_it(
) {
    let base = std::env::temp_dir().join(unique("kube2"));
    let store = SharedStore::up(base.with_extension("store"));
    let nodes: Vec<Node> = [("a", "10.88.0.0/24"), ("b", "10.88.1.0/24")]
        .into_iter()
        .map(|(tag, subnet)| {
            let daemon = store.node(base.with_extension(format!("home-{tag}")));
            let cri = must(Cri::start(
                &base.with_extension(tag),
                &daemon.socket(),
                &shim_dir(),
                subnet,
                &[],
                "info",
            ));
            check_config(&cri.c);
            Node {
                daemon,
                cri,
                subnet,
            }
        })
        .collect();
    let (a, b) = (&nodes[0], &nodes[1]);
    let image = import_function_into(&[&a.cri.c, &b.cri.c], "hello", HELLO);
    let sockets: Vec<_> = nodes.iter().map(|n| n.daemon.socket()).collect();
    let specs: Vec<NodeSpec> = nodes
        .iter()
        .zip(&sockets)
        .map(|(n, s)| NodeSpec {
            cri: &n.cri,
            pod_cidr: n.subnet,
            thaw_socket: Some(s),
        })
        .collect();
    let k8s_base = base.with_extension("k8s");
    let mut k = must(Cluster::start_nodes(&specs, &k8s_base, "10.88.0.0/16"));
    assert_eq!(k.nodes.len(), 2, "{:?}", k.nodes);
    let (na, nb) = (k.nodes[0].clone(), k.nodes[1].clone());
    for n in [&na, &nb] {
        label_becomes(&k, n, "absent", |v| v.is_none());
    }

    // node A: its pod's deploy takes the snapshot and publishes it; the
    // node's label says it holds the image warm
    pinned(&k, "on-a", &image, &na);
    let pod_a = &ready_pods(&k, "on-a", 1)[0];
    assert_eq!(pod_a["spec"]["nodeName"], na.as_str());
    ask(a, pod_a, "a");
    let functions = a.daemon.functions();
    assert_eq!(functions.len(), 1, "{functions:?}");
    let name = functions[0].clone();
    assert_eq!(
        a.daemon.function(&name)["shared"]["role"],
        "published",
        "{}",
        a.daemon.function(&name)
    );
    label_becomes(&k, &na, "warm", |v| v == Some("warm"));
    label_becomes(&k, &nb, "absent", |v| v.is_none());

    // node B never saw the function: its first pod's instance is A's
    // snapshot streamed from the remote tier, once
    assert_eq!(restores_from(&b.daemon, "remote"), 0.0);
    pinned(&k, "on-b", &image, &nb);
    let pod_b = &ready_pods(&k, "on-b", 1)[0];
    assert_eq!(pod_b["spec"]["nodeName"], nb.as_str());
    ask(b, pod_b, "b");
    let on_b = b.daemon.function(&name);
    assert_eq!(on_b["shared"]["role"], "fetched", "{on_b}");
    assert_eq!(on_b["snapshot"]["init_ms"], 0.0, "no init on B: {on_b}");
    assert_eq!(
        b.daemon
            .metric("thaw_shared_snapshots_total{outcome=\"fetched\"} "),
        1.0
    );
    assert_eq!(
        restores_from(&b.daemon, "remote"),
        1.0,
        "{}",
        b.daemon.metrics()
    );
    // the stream kept on B's fast tier: later restores are local
    must(k.wait_for(
        "B's copy kept on its fast tier",
        Duration::from_secs(60),
        || {
            let f = b.daemon.function(&name);
            seen(
                f["snapshot_tier"] == "tmpfs",
                f["snapshot_tier"].to_string(),
            )
        },
    ));
    // pod traffic across the nodes: each pod answers the other node's
    // namespace, and a Service spreads over the pods of both nodes
    ask(b, pod_a, "b-to-a");
    ask(a, pod_b, "a-to-b");
    spread_over_nodes(&k, &nodes, &[pod_a.clone(), pod_b.clone()], 24);
    let local_before = local_restores(&b.daemon);
    must(k.run(&["scale", "deployment", "on-b", "--replicas=3"]));
    // a request to each pod at once, each held a second: three instances
    let pods = ready_pods(&k, "on-b", 3);
    std::thread::scope(|s| {
        for (i, p) in pods.iter().enumerate() {
            assert_eq!(p["spec"]["nodeName"], nb.as_str());
            s.spawn(move || ask_sleeping(b, p, &format!("b{i}"), 1.0));
        }
    });
    assert_eq!(
        restores_from(&b.daemon, "remote"),
        1.0,
        "one restore from the remote tier: {}",
        b.daemon.metrics()
    );
    assert!(
        local_restores(&b.daemon) > local_before,
        "the new pods' instances restored locally: {}",
        b.daemon.metrics()
    );
    label_becomes(&k, &nb, "warm", |v| v == Some("warm"));

    // locality: B loses the function (its label goes); the example
    // Deployment, with its preferred node affinity, goes to A each time
    for app in ["on-a", "on-b"] {
        must(k.run(&["delete", "deployment", app, "--wait=true"]));
        ready_pods(&k, app, 0);
    }
    forget(&b.daemon);
    label_becomes(&k, &nb, "gone", |v| v.is_none());
    label_becomes(&k, &na, "still there", |v| v.is_some());
    let manifest = std::fs::read_to_string(repo_file("deploy/kubernetes/hello-deployment.yaml"))
        .unwrap()
        .replace("replicas: 2", "replicas: 0");
    let manifest_file = k8s_base.join("hello.yaml");
    std::fs::write(&manifest_file, &manifest).unwrap();
    must(k.run(&["apply", "-f", manifest_file.to_str().unwrap()]));
    // each start: scaled to 1, answered, scaled to 0 and gone
    let goes_to = |node: &str, n: &Node| {
        for i in 0..3 {
            must(k.run(&["scale", "deployment", "hello", "--replicas=1"]));
            let pods = ready_pods(&k, "hello", 1);
            let labels = |n: &str| must(k.get(&["node", n]))["metadata"]["labels"][LABEL].clone();
            assert_eq!(
                pods[0]["spec"]["nodeName"],
                node,
                "start {i}: labels {} {}\n{}{}",
                labels(&k.nodes[0]),
                labels(&k.nodes[1]),
                k.component_log("snapshot-labels-1"),
                k.component_log("snapshot-labels-2")
            );
            ask(n, &pods[0], &format!("hello{i}"));
            must(k.run(&["scale", "deployment", "hello", "--replicas=0"]));
            ready_pods(&k, "hello", 0);
        }
    };
    goes_to(&na, a);

    // and follows the snapshot: A loses it, B fetches it again (a pod
    // pinned there), and the example's pods go to B
    forget(&a.daemon);
    label_becomes(&k, &na, "gone", |v| v.is_none());
    pinned(&k, "on-b", &image, &nb);
    ready_pods(&k, "on-b", 1);
    label_becomes(&k, &nb, "held locally", |v| {
        matches!(v, Some("warm" | "tmpfs"))
    });
    must(k.run(&["delete", "deployment", "on-b", "--wait=true"]));
    ready_pods(&k, "on-b", 0);
    goes_to(&nb, b);

    // the cluster ends its pods and leaves nothing
    must(k.stop());
    drop(k);
    for n in &nodes {
        must(n.cri.run(&["rmp", "--all", "--force"]));
        assert_nothing_left(&n.cri.c, &[], &n.daemon.home);
    }
    assert!(processes_naming(&[&k8s_base], 0).is_empty());
    assert!(!k8s_base.exists());
}

#[test]
fn the_snapshot_labeler_refuses_bad_arguments_with_a_message() {
    let script = repo_file("deploy/kubernetes/snapshot-labels.py");
    let node = ["--node", "n", "--thaw-socket", "/s", "--kubectl"];
    for (args, says) in [
        (&node[..2], "the following arguments are required"),
        (
            &[&node[..], &["/nonexistent/kubectl"]].concat()[..],
            "no kubectl at /nonexistent/kubectl",
        ),
        (
            &[&node[..], &["/bin/true", "--every", "0"]].concat()[..],
            "--every must be between 0.1 and 3600 seconds",
        ),
    ] {
        let o = std::process::Command::new(&script)
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}
