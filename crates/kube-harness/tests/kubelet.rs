//! A real kubelet runs thaw pods: `deploy/kubernetes/cluster.sh` brings up
//! etcd, kube-apiserver, the controller manager, the scheduler, kubelet and
//! kube-proxy (iptables mode) of one pinned Kubernetes release on a private
//! containerd with the thaw runtime, all in a network namespace the test
//! makes (the containerd's, with its CNI bridge), and the guide's example
//! Deployment goes through the kubelet's whole pod lifecycle. The cluster's
//! binaries are built once (`deploy/kubernetes/tools.sh`, which
//! `scripts/setup.sh --tests` runs) and cached under `$THAW_HOME/tools`.
mod common;

use common::kube::*;
use common::*;
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use thaw_kube_harness::cluster::Cluster;
use thaw_kube_harness::containerd::Cri;

/// The example's function: what it prints shows in `kubectl logs`.
const HELLO: &str = r#"
def handler(event):
    print("hello from the function", event)
    return {"hello": (event or {}).get("name", "world")}
"#;

const SIDECAR_IMAGE: &str = "thaw.local/sidecar:test";
const POD_CIDR: &str = "10.88.0.0/24";

/// What the kubelet sets at its start; the script restores them.
const KUBELET_SYSCTLS: [&str; 6] = [
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
];

fn sysctls() -> Vec<String> {
    KUBELET_SYSCTLS
        .iter()
        .map(|s| std::fs::read_to_string(format!("/proc/sys/{s}")).unwrap())
        .collect()
}

const LONG: Duration = Duration::from_secs(240);

/// The cluster's view of the example's pods.
struct Hello<'a>(&'a Cluster);

impl Hello<'_> {
    fn pods(&self) -> Vec<Value> {
        let v = must(self.0.get(&["pods", "-l", "app=hello"]));
        v["items"].as_array().cloned().unwrap_or_default()
    }

    /// Waits until the Deployment has `n` pods, every one Ready (and, with
    /// `restarted`, a container of one of them restarted).
    fn ready(&self, n: usize, restarted: bool) -> Vec<Value> {
        must(self.0.wait_for(
            &format!("{n} Ready pods of the Deployment hello"),
            LONG,
            || {
                let pods = self.pods();
                let ready = pods.iter().filter(|p| is_ready(p)).count();
                let restarts_ok = !restarted || pods.iter().any(|p| restarts(p) >= 1);
                let deleting = pods
                    .iter()
                    .any(|p| !p["metadata"]["deletionTimestamp"].is_null());
                if pods.len() == n && ready == n && restarts_ok && !deleting {
                    Ok(Some(pods))
                } else {
                    let events = self.0.run(&["get", "events", "-o", "wide"]);
                    Err(format!(
                        "{} pods, {ready} Ready: {}\nevents: {}",
                        pods.len(),
                        summary(&pods),
                        events.unwrap_or_else(|e| e.to_string())
                    ))
                }
            },
        ))
    }
}

fn restarts(pod: &Value) -> u64 {
    pod["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| c["restartCount"].as_u64().unwrap_or(0))
        .min()
        .unwrap_or(0)
}

/// Pod cgroups the kubelet made below its cgroup root (in the memory
/// hierarchy), which a deleted pod must not leave.
fn pod_cgroups(cluster: &Cluster) -> Vec<String> {
    let root = format!(
        "/sys/fs/cgroup/memory/thaw-kube-{}/kubepods",
        cluster.pid().unwrap()
    );
    let mut found = Vec::new();
    let mut dirs = vec![std::path::PathBuf::from(root)];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                let n = e.file_name().to_string_lossy().into_owned();
                if n.starts_with("pod") {
                    found.push(e.path().display().to_string());
                }
                dirs.push(e.path());
            }
        }
    }
    found
}

/// Mounts below `dir`.
fn mounts_below(dir: &Path) -> Vec<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| l.contains(&format!("{}/", dir.display())))
        .map(str::to_string)
        .collect()
}

#[test]
fn a_kubelet_runs_the_example_deployment_on_thaw_through_probes_scaling_services_and_delete() {
    let before = sysctls();
    let base = std::env::temp_dir().join(unique("kubelet"));
    let daemon = Daemon::start(base.with_extension("home"));
    let cri = must(Cri::start(
        &base,
        &daemon.socket(),
        &shim_dir(),
        POD_CIDR,
        &[(SIDECAR_IMAGE, "idle")],
        "info",
    ));
    check_config(&cri.c);
    assert_eq!(
        import_function(&cri.c, "hello", HELLO),
        "thaw.local/hello:latest",
        "the example Deployment's image"
    );
    let k8s_base = base.with_extension("k8s");
    let mut k = must(Cluster::start(&cri, &k8s_base, POD_CIDR));
    let script_pid = k.pid().unwrap();
    // the kubelet set its kernel settings (the script puts them back)
    assert_eq!(
        std::fs::read_to_string("/proc/sys/vm/overcommit_memory").unwrap(),
        "1\n"
    );
    let hello = Hello(&k);

    // the guide's example: a Deployment of 2 on the thaw RuntimeClass, HTTP
    // readiness and liveness probes on $PORT, and its Service
    let manifest = repo_file("deploy/kubernetes/hello-deployment.yaml");
    must(k.run(&["apply", "-f", manifest.to_str().unwrap()]));
    let pods = hello.ready(2, false);
    for p in &pods {
        assert_eq!(p["spec"]["runtimeClassName"], "thaw");
        assert_eq!(p["spec"]["nodeName"], k.node.as_str());
        let probe = &p["spec"]["containers"][0]["livenessProbe"]["httpGet"];
        assert_eq!(probe["port"], 8080, "{probe}");
    }
    let functions = daemon.functions();
    assert_eq!(functions.len(), 1, "one deploy for the pods: {functions:?}");
    // a request to each pod's IP is the function's answer, and its print
    // is in that pod's `kubectl logs`
    for p in &pods {
        let ip = p["status"]["podIP"].as_str().unwrap();
        let pod = name(p);
        let answer = post(&cri.netns, ip, 8080, &format!(r#"{{"name": "{pod}"}}"#));
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.contains(&format!(r#""hello":"{pod}""#)), "{answer}");
        let expect = format!("hello from the function {{'name': '{pod}'}}");
        must(k.wait_for(
            &format!("kubectl logs {pod} showing {expect:?}"),
            Duration::from_secs(20),
            || {
                let logs = k.run(&["logs", &pod]).map_err(|e| e.to_string())?;
                seen(logs.contains(&expect), logs)
            },
        ));
    }

    // the Service through kube-proxy's rules: requests to its cluster IP
    // from the node reach both replicas (each pod's log has what it served)
    let svc = must(k.get(&["service", "hello"]));
    let cluster_ip = svc["spec"]["clusterIP"].as_str().unwrap().to_string();
    for i in 0..24 {
        let answer = post(
            &cri.netns,
            &cluster_ip,
            80,
            &format!(r#"{{"name": "svc-{i}"}}"#),
        );
        assert!(
            answer.contains(&format!(r#""hello":"svc-{i}""#)),
            "{answer}"
        );
    }
    let served: Vec<usize> = pods
        .iter()
        .map(|p| {
            let logs = must(k.run(&["logs", &name(p)]));
            (0..24)
                .filter(|i| logs.contains(&format!("'svc-{i}'}}")))
                .count()
        })
        .collect();
    assert!(
        served.iter().all(|&n| n > 0),
        "every replica served some of the Service's requests: {served:?}"
    );
    // a NodePort reaches them from the node's address
    must(k.run(&[
        "expose",
        "deployment",
        "hello",
        "--name",
        "hello-nodeport",
        "--type",
        "NodePort",
        "--port",
        "80",
        "--target-port",
        "8080",
    ]));
    let np = must(k.get(&["service", "hello-nodeport"]));
    let node_port = u16::try_from(np["spec"]["ports"][0]["nodePort"].as_u64().unwrap()).unwrap();
    let node = must(k.get(&["node", &k.node]));
    let node_ip = node["status"]["addresses"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["type"] == "InternalIP")
        .unwrap()["address"]
        .as_str()
        .unwrap()
        .to_string();
    let answer = post(&cri.netns, &node_ip, node_port, r#"{"name": "nodeport"}"#);
    assert!(answer.contains(r#""hello":"nodeport""#), "{answer}");

    // `kubectl exec` into a thaw container: a clear refusal
    let pod0 = name(&pods[0]);
    let exec = must(k.kubectl(&["exec", &pod0, "--", "true"]));
    let exec_err = String::from_utf8_lossy(&exec.stderr);
    assert!(!exec.status.success(), "{exec:?}");
    assert!(
        exec_err.contains("thaw: exec into a function's container is not supported"),
        "{exec_err}"
    );

    // the node loses the function: the probes fail (the daemon answers
    // 404), the kubelet restarts a container, whose Create deploys it again
    // (and the other pod's probes pass again)
    daemon.delete(&functions[0]);
    let restarted = hello.ready(2, true);
    assert_eq!(daemon.functions(), functions, "deployed again");
    let p = restarted.iter().find(|p| restarts(p) >= 1).unwrap();
    let events = must(k.run(&[
        "get",
        "events",
        "--field-selector",
        &format!("involvedObject.name={}", name(p)),
        "-o",
        "jsonpath={.items[*].message}",
    ]));
    assert!(
        events.contains("Liveness probe failed: HTTP probe failed with statuscode: 404")
            && events.contains("failed liveness probe, will be restarted"),
        "{events}"
    );

    // scale to 8, to 0 (one API request, as an autoscaler's and the
    // benchmark's), to 8
    must(k.run(&["scale", "deployment", "hello", "--replicas=8"]));
    hello.ready(8, false);
    must(k.scale("hello", 0));
    hello.ready(0, false);
    let missing = k.scale("no-such-deployment", 1).unwrap_err().to_string();
    assert!(
        missing.contains("scaling no-such-deployment to 1: HTTP/1.1 404"),
        "{missing}"
    );
    must(k.run(&["scale", "deployment", "hello", "--replicas=8"]));
    let eight = hello.ready(8, false);
    let ip = eight[7]["status"]["podIP"].as_str().unwrap();
    assert!(post(&cri.netns, ip, 8080, r#"{"name": "eighth"}"#).contains(r#""hello":"eighth""#));
    assert_eq!(daemon.functions(), functions, "no deploy for the new pods");

    // drain: the kubelet ends every pod (their replacements wait, Pending,
    // for a node that takes pods), then the node takes them again
    must(k.run(&[
        "drain",
        &k.node,
        "--ignore-daemonsets",
        "--delete-emptydir-data",
        "--timeout=180s",
    ]));
    must(k.wait_for(
        "the drained node running no container",
        Duration::from_secs(60),
        || {
            let running = cri.ok(&["ps", "-q", "--state", "running"]);
            let pods = hello.pods();
            let pending = pods.iter().all(|p| p["status"]["phase"] == "Pending");
            seen(
                running.is_empty() && pods.len() == 8 && pending,
                format!("containers {running:?}, pods {}", summary(&pods)),
            )
        },
    ));
    must(k.run(&["uncordon", &k.node]));
    hello.ready(8, false);

    // a pod with a runc sidecar beside the thaw container
    let sidecar_pod = k8s_base.with_extension("sidecar.yaml");
    std::fs::write(
        &sidecar_pod,
        format!(
            r#"apiVersion: v1
kind: Pod
metadata:
  name: with-sidecar
spec:
  runtimeClassName: thaw
  containers:
    - name: fn
      image: thaw.local/hello:latest
      imagePullPolicy: Never
      env: [{{name: PORT, value: "8080"}}]
      readinessProbe: {{httpGet: {{path: /, port: 8080}}, periodSeconds: 2}}
    - name: sidecar
      image: {SIDECAR_IMAGE}
      imagePullPolicy: Never
      args: ["sidecar up"]
"#
        ),
    )
    .unwrap();
    must(k.run(&["apply", "-f", sidecar_pod.to_str().unwrap()]));
    must(k.run(&[
        "wait",
        "--for=condition=Ready",
        "pod/with-sidecar",
        "--timeout=180s",
    ]));
    let logs = must(k.run(&["logs", "with-sidecar", "-c", "sidecar"]));
    assert_eq!(logs, "sidecar up");
    let side = must(k.get(&["pod", "with-sidecar"]));
    let ip = side["status"]["podIP"].as_str().unwrap();
    assert!(post(&cri.netns, ip, 8080, r#"{"name": "side"}"#).contains(r#""hello":"side""#));
    let sidecar_exec = must(k.kubectl(&["exec", "with-sidecar", "-c", "sidecar", "--", "/idle"]));
    assert!(!sidecar_exec.status.success(), "{sidecar_exec:?}");
    assert!(
        String::from_utf8_lossy(&sidecar_exec.stderr)
            .contains("thaw: exec into a runc container of a thaw pod is not supported"),
        "{sidecar_exec:?}"
    );
    let _ = std::fs::remove_file(&sidecar_pod);

    // delete: every pod ends, and nothing of theirs is left on the node
    must(k.run(&["delete", "pod", "with-sidecar", "--wait=true"]));
    must(k.run(&["delete", "-f", manifest.to_str().unwrap(), "--wait=true"]));
    must(k.run(&["delete", "service", "hello-nodeport"]));
    hello.ready(0, false);
    must(
        k.wait_for("no pod running in the CRI", Duration::from_secs(60), || {
            let ready = cri.ok(&["pods", "-q", "--state", "ready"]);
            let running = cri.ok(&["ps", "-q", "--state", "running"]);
            seen(
                ready.is_empty() && running.is_empty(),
                format!("pods {ready:?}, containers {running:?}"),
            )
        }),
    );
    must(k.wait_for(
        "no pod cgroup and no pod volume mount",
        Duration::from_secs(60),
        || {
            let cgroups = pod_cgroups(&k);
            let mounts = mounts_below(&k.dir.join("kubelet/pods"));
            seen(
                cgroups.is_empty() && mounts.is_empty(),
                format!("{cgroups:?} {mounts:?}"),
            )
        },
    ));
    // the cluster stopped with its workloads running: the script deletes
    // them first, so the kubelet ends their pods (nothing of theirs stays)
    must(k.run(&["apply", "-f", manifest.to_str().unwrap()]));
    hello.ready(2, false);
    must(k.stop());
    drop(k);
    // the pods' sandboxes go with the CRI's own removal
    must(cri.run(&["rmp", "--all", "--force"]));
    assert_nothing_left(&cri.c, &[], &daemon.home);

    // the cluster left nothing: processes, mounts, cgroups, log links,
    // kernel settings
    assert_eq!(sysctls(), before, "{KUBELET_SYSCTLS:?}");
    assert!(processes_naming(&[&k8s_base], 0).is_empty());
    assert!(mounts_below(&k8s_base).is_empty());
    for c in std::fs::read_dir("/sys/fs/cgroup").unwrap().flatten() {
        let p = c.path().join(format!("thaw-kube-{script_pid}"));
        assert!(!p.exists(), "{} left", p.display());
    }
    for l in std::fs::read_dir("/var/log/containers")
        .into_iter()
        .flatten()
        .flatten()
    {
        let target = std::fs::read_link(l.path()).unwrap_or_default();
        assert!(
            !target.starts_with(&k8s_base),
            "{} left",
            l.path().display()
        );
    }
    assert!(!k8s_base.exists());
}

#[test]
fn the_cluster_script_refuses_bad_arguments_with_a_message() {
    let script = repo_file("deploy/kubernetes/cluster.sh");
    let dir = std::env::temp_dir().join(unique("cluster-args"));
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.to_str().unwrap();
    for (args, says) in [
        (vec![], "usage: "),
        (vec!["--netns"], "--netns needs a value"),
        (vec!["--nets", "x"], "unknown option --nets"),
        (
            vec![
                "--netns",
                "x",
                "--containerd",
                "/s",
                "--dir",
                d,
                "--node",
                "y,/s",
            ],
            "--node y,/s: expected NETNS,CONTAINERD,POD_CIDR[,THAW_SOCKET]",
        ),
        (
            vec![
                "--netns",
                "thaw-no-such-ns",
                "--containerd",
                "/nonexistent.sock",
                "--dir",
                d,
            ],
            "no network namespace thaw-no-such-ns",
        ),
    ] {
        let o = Command::new(&script).args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
