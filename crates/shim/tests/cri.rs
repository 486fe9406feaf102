//! The kubelet's own calls, made with `crictl` against a private containerd
//! whose CRI plugin runs pods on the `thaw` runtime: a pod network from
//! Debian's CNI plugins (bridge + host-local) with the bridge inside a
//! network namespace the test makes (containerd runs in it, so nothing
//! touches the host's network), a pause image and a sidecar image built
//! here from a static binary (nothing is pulled).
mod common;

use common::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use thaw_shim::harness::{Cri, Pod};

/// A private containerd serving CRI in its own network namespace (the
/// shared harness), with the sidecar image imported.
fn start_cri(base: &Path, daemon: &Daemon) -> Cri {
    let cri = Cri::start(
        base,
        &daemon.socket(),
        &shim_dir(),
        "10.88.0.0/24",
        &[(SIDECAR_IMAGE, "idle")],
    )
    .unwrap_or_else(|e| panic!("{e:#}"));
    check_config(&cri.c);
    cri
}

/// What the tests ask of the CRI: each call must do what it says.
trait CriTest {
    fn fails(&self, args: &[&str]) -> String;
    fn json_of(&self, command: &str, id: &str) -> Value;
    fn cfg(&self, name: &str, v: Value) -> String;
    fn pod(&self, name: &str, annotations: Value) -> Pod;
    fn container(&self, pod: &Pod, name: &str, image: &str, args: &[&str]) -> String;
    fn ip(&self, pod: &str) -> String;
    fn pid_of(&self, container: &str) -> u32;
    fn logs_showing(&self, container: &str, expect: &str) -> String;
    fn remove(&self, pod: &str);
    fn assert_nothing_left(&self, daemon: &Daemon, pids: &[u32]);
}

fn must<T>(r: thaw_shim::harness::Result<T>) -> T {
    r.unwrap_or_else(|e| panic!("{e:#}"))
}

impl CriTest for Cri {
    /// `crictl ARGS` must fail; its stderr.
    fn fails(&self, args: &[&str]) -> String {
        let o = must(self.crictl(args));
        assert!(!o.status.success(), "crictl {args:?} should fail: {o:?}");
        String::from_utf8_lossy(&o.stderr).into_owned()
    }

    fn json_of(&self, command: &str, id: &str) -> Value {
        must(self.json(command, id))
    }

    fn cfg(&self, name: &str, v: Value) -> String {
        must(self.config(name, v))
    }

    fn pod(&self, name: &str, annotations: Value) -> Pod {
        must(self.run_pod(name, "thaw", annotations))
    }

    fn container(&self, pod: &Pod, name: &str, image: &str, args: &[&str]) -> String {
        must(self.run_container(pod, name, image, args, &[], &[]))
    }

    fn ip(&self, pod: &str) -> String {
        must(self.pod_ip(pod))
    }

    fn pid_of(&self, container: &str) -> u32 {
        must(self.pid(container))
    }

    /// `crictl logs` once it shows `expect` (logs are copied asynchronously).
    fn logs_showing(&self, container: &str, expect: &str) -> String {
        let t = Instant::now();
        loop {
            let o = must(self.crictl(&["logs", container]));
            let text = String::from_utf8_lossy(&o.stdout).into_owned()
                + &String::from_utf8_lossy(&o.stderr);
            if text.contains(expect) {
                return text;
            }
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "crictl logs {container} never showed {expect:?}: {text}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn remove(&self, pod: &str) {
        must(self.remove_pod(pod))
    }

    /// No pod or container is left in the CRI, and none of the shim's or
    /// the pods' processes (`pids`) runs.
    fn assert_nothing_left(&self, daemon: &Daemon, pids: &[u32]) {
        assert_eq!(self.ok(&["pods", "-q"]), "", "pods left");
        assert_eq!(self.ok(&["ps", "-a", "-q"]), "", "containers left");
        let t = Instant::now();
        while let Some(p) = pids
            .iter()
            .find(|p| Path::new(&format!("/proc/{p}")).exists())
        {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "the pod's process {p} is still there"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        assert_nothing_left(&self.c, &[], &daemon.home);
    }
}

const SIDECAR_IMAGE: &str = "thaw.local/sidecar:test";

fn parent_of(pid: u32) -> u32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // after the command's closing parenthesis: state, then the parent's pid
    stat.rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap()
}

fn netns_of(pid: u32) -> PathBuf {
    std::fs::read_link(format!("/proc/{pid}/ns/net")).unwrap()
}

#[test]
fn a_pod_serves_its_function_beside_a_runc_sidecar_and_a_second_pod_restores() {
    let base = std::env::temp_dir().join(unique("cri"));
    let daemon = Daemon::start(base.with_extension("home"));
    let cri = start_cri(&base, &daemon);
    let image = import_function(&cri.c, "greeter", GREETER);

    let pod = cri.pod("hello", serde_json::json!({"dev.thaw.memory-mb": "256"}));
    let fun = cri.container(&pod, "fn", &image, &[]);
    let side = cri.container(&pod, "sidecar", SIDECAR_IMAGE, &["sidecar up"]);
    let ip = cri.ip(&pod.id);
    // the function answers on the pod's IP, from the test's network
    let answer = post(&cri.netns, &ip, 8080, r#"{"name": "pod"}"#);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("hi pod"), "{answer}");
    let running = cri.ok(&["ps", "-q", "--state", "running"]);
    assert!(
        running.contains(&fun) && running.contains(&side),
        "{running}"
    );
    // the function's front and the runc sidecar share the pod's network
    // namespace (the one the CRI plugin made), not the host's
    let (fun_pid, side_pid) = (cri.pid_of(&fun), cri.pid_of(&side));
    assert_eq!(netns_of(fun_pid), netns_of(side_pid));
    assert_ne!(netns_of(fun_pid), netns_of(std::process::id()));
    // the sidecar is runc's container (its own pid namespace), not a front
    let side_cmd = std::fs::read(format!("/proc/{side_pid}/cmdline")).unwrap();
    assert!(String::from_utf8_lossy(&side_cmd).starts_with("/idle"));
    // one shim serves the pod: it is the parent of both (the subreaper of
    // runc's container), and it was started for the pod's sandbox
    let shim = parent_of(fun_pid);
    assert_eq!(parent_of(side_pid), shim);
    let shim_cmd =
        String::from_utf8_lossy(&std::fs::read(format!("/proc/{shim}/cmdline")).unwrap())
            .replace('\0', " ");
    assert!(
        shim_cmd.contains("containerd-shim-thaw-v1")
            && shim_cmd.contains(&format!("-id {}", pod.id)),
        "{shim_cmd}"
    );
    // the runc container's cgroup stats reach the CRI
    let stats = cri.json_of("stats", &side);
    let memory = &stats["stats"][0]["memory"]["workingSetBytes"]["value"];
    assert!(
        memory
            .as_u64()
            .or_else(|| memory.as_str().and_then(|m| m.parse().ok()))
            .is_some_and(|m| m > 0),
        "the sidecar's memory: {stats}"
    );
    assert!(cri.logs_showing(&side, "sidecar up").contains("sidecar up"));
    assert!(cri
        .logs_showing(&fun, "greeting pod")
        .contains("greeting pod"));
    let functions = daemon.functions();
    assert_eq!(functions.len(), 1, "{functions:?}");
    let info = daemon.function(&functions[0]);
    assert_eq!(info["memory_mb"], 256, "the pod's annotation: {info}");
    cri.ok(&["stop", &fun]);
    cri.ok(&["stop", &side]);
    cri.remove(&pod.id);

    // a second pod of the function: no deploy, its first request a restore
    // from the snapshot the first pod's deploy took (or the instance the
    // first pod left warm)
    let pod2 = cri.pod("hello2", serde_json::json!({"dev.thaw.memory-mb": "256"}));
    let fun2 = cri.container(&pod2, "fn", &image, &[]);
    let ip2 = cri.ip(&pod2.id);
    let answer = post(&cri.netns, &ip2, 8080, r#"{"name": "again"}"#);
    assert!(answer.contains("hi again"), "{answer}");
    let start = answer
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("thaw-start-type: ")
                .map(str::to_string)
        })
        .unwrap_or_else(|| panic!("no start type: {answer}"));
    assert!(matches!(start.trim(), "restore" | "warm"), "{start}");
    assert_eq!(daemon.functions(), functions, "one deploy for both pods");
    let metrics = daemon.metrics();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("thaw_restore_duration_seconds_count") && !l.ends_with(" 0")),
        "the daemon restored the function: {metrics}"
    );
    let fun2_pid = cri.pid_of(&fun2);
    cri.remove(&pod2.id);
    cri.assert_nothing_left(&daemon, &[fun_pid, side_pid, fun2_pid]);
}

#[test]
fn bad_pods_and_a_daemon_down_fail_clearly_in_crictl_and_leave_nothing() {
    let base = std::env::temp_dir().join(unique("cribad"));
    let mut daemon = Daemon::start(base.with_extension("home"));
    let cri = start_cri(&base, &daemon);
    let image = import_function(&cri.c, "greeter", GREETER);
    let broken = import_function(&cri.c, "broken", "raise ImportError('broken on purpose')\n");
    let start_fails = |pod: &Pod, name: &str, image: &str, envs: Value| {
        let config = cri.cfg(
            &format!("bad-{name}"),
            serde_json::json!({"metadata": {"name": name}, "image": {"image": image}, "envs": envs, "linux": {}}),
        );
        // the CRI plugin makes the task (the shim's Create) at `start`
        let id = cri.ok(&["create", "--no-pull", &pod.id, &config, &pod.config]);
        cri.fails(&["start", &id])
    };
    let create = |pod: &Pod, name: &str| start_fails(pod, name, &image, json!([]));
    // a pod annotation that is not a number: the container does not start,
    // and the reason names it
    let pod = cri.pod("badmem", serde_json::json!({"dev.thaw.memory-mb": "lots"}));
    let err = create(&pod, "fn");
    assert!(
        err.contains("dev.thaw.memory-mb") && err.contains("lots"),
        "{err}"
    );
    // a value the daemon refuses: its reason
    let pod2 = cri.pod("hugemem", serde_json::json!({"dev.thaw.memory-mb": "1"}));
    let err = create(&pod2, "fn");
    assert!(err.contains("memory_mb"), "{err}");
    // a handler whose module fails to import: the daemon's deploy refuses it
    let plain = cri.pod("plain", json!({}));
    let err = start_fails(&plain, "broken", &broken, json!([]));
    assert!(err.contains("broken on purpose"), "{err}");
    // an image without a handler is no function: runc runs it, and the
    // function image has no `serve` to run
    let no_handler = json!([{"key": "THAW_HANDLER", "value": ""}]);
    let err = start_fails(&plain, "nohandler", &image, no_handler);
    assert!(err.contains("names no THAW_HANDLER"), "{err}");
    cri.remove(&plain.id);
    cri.remove(&pod.id);
    cri.remove(&pod2.id);
    // the node's daemon down: the reason names the socket
    daemon.stop();
    let pod3 = cri.pod("down", serde_json::json!({}));
    let err = create(&pod3, "fn");
    assert!(err.contains("does not answer"), "{err}");
    cri.remove(&pod3.id);
    cri.assert_nothing_left(&daemon, &[]);
}

/// A number from the daemon's Prometheus text: the sum of the series
/// whose line starts with `prefix`.
fn metric(daemon: &Daemon, prefix: &str) -> f64 {
    daemon
        .metrics()
        .lines()
        .filter_map(|l| l.strip_prefix(prefix))
        .filter_map(|v| v.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
fn a_started_pod_has_its_instance_restored_before_its_first_request_over_grpc() {
    let base = std::env::temp_dir().join(unique("criwarm"));
    let daemon = Daemon::start(base.with_extension("home"));
    let mut cri = start_cri(&base, &daemon);
    // the kubelet's way: gRPC calls on one connection, no crictl
    must(cri.use_grpc());
    assert_eq!(cri.calls(), thaw_shim::harness::CriCalls::Grpc);
    let image = import_function(&cri.c, "greeter", GREETER);
    let restores = || metric(&daemon, "thaw_restore_duration_seconds_count{");
    assert_eq!(restores(), 0.0, "a fresh daemon");
    let pod = cri.pod("ready", json!({}));
    let fun = cri.container(&pod, "fn", &image, &[]);
    // the deploy snapshots the function; the front then asks for an
    // instance: one restore, before any request was sent
    let t = Instant::now();
    while restores() < 1.0 {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "no instance was restored for the started pod: {}",
            daemon.metrics()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let ip = cri.ip(&pod.id);
    let answer = post(&cri.netns, &ip, 8080, r#"{"name": "ready"}"#);
    assert!(answer.contains("hi ready"), "{answer}");
    assert!(
        answer
            .to_ascii_lowercase()
            .contains("thaw-start-type: warm"),
        "the first request found the instance ready: {answer}"
    );
    assert_eq!(restores(), 1.0, "one restore for the pod");
    // a call containerd refuses is a clear error, not a hang
    let err = cri.pod_ip("no-such-pod").unwrap_err().to_string();
    assert!(
        err.contains("PodSandboxStatus") && err.contains("not found"),
        "{err}"
    );
    let fun_pid = cri.pid_of(&fun);
    cri.remove(&pod.id);
    cri.assert_nothing_left(&daemon, &[fun_pid]);
}
