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
use thaw_kube_harness::containerd::{Cri, Pod};

/// A private containerd serving CRI in its own network namespace (the
/// shared harness), with the sidecar image imported.
fn start_cri(base: &Path, daemon: &Daemon) -> Cri {
    start_cri_on(base, daemon, "10.88.0.0/24")
}

/// [`start_cri`] with the pods' addresses in `subnet`.
fn start_cri_on(base: &Path, daemon: &Daemon, subnet: &str) -> Cri {
    let cri = Cri::start(
        base,
        &daemon.socket(),
        &shim_dir(),
        subnet,
        &[(SIDECAR_IMAGE, "idle")],
        "info",
    )
    .unwrap_or_else(|e| panic!("{e:#}"));
    check_config(&cri.c);
    cri
}

/// A daemon and its CRI on directories named after `tag`, with the image
/// of the function `name` (source `src`) imported.
fn one_node(tag: &str, name: &str, src: &str) -> (Daemon, Cri, String) {
    let base = std::env::temp_dir().join(unique(tag));
    let daemon = Daemon::start(base.with_extension("home"));
    let cri = start_cri(&base, &daemon);
    let image = import_function(&cri.c, name, src);
    (daemon, cri, image)
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

fn must<T>(r: thaw_kube_harness::containerd::Result<T>) -> T {
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
    let (daemon, cri, image) = one_node("cri", "greeter", GREETER);

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
    daemon.assert_restored();
    let fun2_pid = cri.pid_of(&fun2);
    cri.remove(&pod2.id);
    cri.assert_nothing_left(&daemon, &[fun_pid, side_pid, fun2_pid]);
}

#[test]
fn an_own_root_pod_serves_and_bad_pods_and_a_daemon_down_fail_clearly_in_crictl() {
    let base = std::env::temp_dir().join(unique("cribad"));
    let mut daemon = Daemon::start_importing_from(base.with_extension("home"), vec![base.clone()]);
    let cri = start_cri(&base, &daemon);

    // a function image carrying its own root filesystem (thaw's runtime
    // root as `thaw image build` layers it, and a file thaw's runtime root
    // lacks): its pod answers through the pod's address from that root
    let marker = files_layer(
        &base.join("marker"),
        &[("etc/thaw-image-marker", "from the image")],
    );
    let rooted = import_rooted_function(
        &cri.c,
        "rooted",
        READS_THE_IMAGE,
        &[runtime_layer(), marker],
    );
    let own = cri.pod("ownroot", json!({}));
    let fun = cri.container(&own, "fn", &rooted, &[]);
    let answer = post(&cri.netns, &cri.ip(&own.id), 8080, "null");
    assert!(
        answer.contains(r#""marker":"from the image""#) && answer.contains(r#""agent":true"#),
        "{answer}"
    );
    let functions = daemon.functions();
    assert_eq!(functions.len(), 1, "{functions:?}");
    assert_eq!(daemon.imported_roots(), 1, "one imported root");
    let rooted_pid = cri.pid_of(&fun);
    cri.remove(&own.id);

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
    // an own root without Python (nor Node.js): the container does not
    // start, the reason names the missing program, and the daemon keeps
    // nothing of it
    let bare = files_layer(&base.join("bare"), &[("etc/os-release", "ID=bare\n")]);
    let nopython = import_rooted_function(&cri.c, "nopython", GREETER, &[bare]);
    let np = cri.pod("nopython", json!({}));
    let err = start_fails(&np, "nopython", &nopython, json!([]));
    assert!(err.contains("/usr/bin/python3"), "the reason: {err}");
    assert_eq!(daemon.functions(), functions, "nothing deployed");
    assert_eq!(
        daemon.imported_roots(),
        1,
        "nothing kept of the refused root"
    );
    cri.remove(&np.id);
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
    cri.assert_nothing_left(&daemon, &[rooted_pid]);
}

/// The value of the answer's header `name` (lowercase).
fn header(answer: &str, name: &str) -> Option<String> {
    let (head, _) = answer.split_once("\r\n\r\n")?;
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
    })
}

/// The only function `daemon` has that is not in `known`.
fn new_function(daemon: &Daemon, known: &[String]) -> String {
    let fresh: Vec<String> = daemon
        .functions()
        .into_iter()
        .filter(|f| !known.contains(f))
        .collect();
    assert_eq!(fresh.len(), 1, "{fresh:?}");
    fresh[0].clone()
}

#[test]
fn two_nodes_share_a_functions_snapshot_through_the_remote_tier() {
    let base = std::env::temp_dir().join(unique("cri2"));
    let store = SharedStore::up(base.with_extension("store"));
    let a = store.node(base.with_extension("home-a"));
    let b = store.node(base.with_extension("home-b"));
    let cri_a = start_cri_on(&base.with_extension("a"), &a, "10.88.0.0/24");
    let cri_b = start_cri_on(&base.with_extension("b"), &b, "10.89.0.0/24");
    let client = thaw_tiers::objects::RemoteStore::open(&store.home, &store.tier).unwrap();
    let image = import_function_into(&[&cri_a.c, &cri_b.c], "greeter", GREETER);

    // node A: its first pod's deploy takes the snapshot and publishes it
    let pa = cri_a.pod("node-a", json!({}));
    let fa = cri_a.container(&pa, "fn", &image, &[]);
    let answer = post(&cri_a.netns, &cri_a.ip(&pa.id), 8080, r#"{"name": "a"}"#);
    assert!(answer.contains("hi a"), "{answer}");
    let name = new_function(&a, &[]);
    let on_a = a.function(&name);
    assert_eq!(on_a["shared"]["role"], "published", "{on_a}");

    // node B, which never saw the function: its deploy takes no snapshot
    // (no init), and its pod's instance is a restore of A's, streamed from
    // the remote tier (made as the front starts, or by the first request)
    let pb = cri_b.pod("node-b", json!({}));
    let fb = cri_b.container(&pb, "fn", &image, &[]);
    let answer = post(&cri_b.netns, &cri_b.ip(&pb.id), 8080, r#"{"name": "b"}"#);
    assert!(
        answer.starts_with("HTTP/1.1 200") && answer.contains("hi b"),
        "{answer}"
    );
    let start = header(&answer, "thaw-start-type");
    assert!(
        matches!(start.as_deref(), Some("restore" | "warm"))
            && header(&answer, "thaw-tier").as_deref() == Some("remote"),
        "{answer}"
    );
    assert_eq!(new_function(&b, &[]), name, "one name on both nodes");
    let on_b = b.function(&name);
    assert_eq!(
        (&on_b["shared"]["role"], &on_b["shared"]["key"]),
        (&json!("fetched"), &on_a["shared"]["key"]),
        "{on_b}"
    );
    assert_eq!(on_b["snapshot"]["init_ms"], 0.0, "no init on B: {on_b}");
    assert_eq!(
        b.metric("thaw_shared_snapshots_total{outcome=\"fetched\"} "),
        1.0
    );
    assert!(restores_from(&b, "remote") >= 1.0, "{}", b.metrics());
    assert!(cri_b.logs_showing(&fb, "greeting b").contains("greeting b"));

    // a snapshot published from another kind of machine (a forged CPU
    // feature): B refuses it and says why (its GET, its log and the
    // container's), takes its own and serves; the published copy stays
    let forged = import_function_into(
        &[&cri_a.c, &cri_b.c],
        "forged",
        "def handler(event):\n    return {'forged': event}\n",
    );
    let pa2 = cri_a.pod("node-a2", json!({}));
    let fa2 = cri_a.container(&pa2, "fn", &forged, &[]);
    let fname = new_function(&a, std::slice::from_ref(&name));
    let key = a.function(&fname)["shared"]["key"]
        .as_str()
        .unwrap()
        .to_string();
    let copy = thaw_server::shared::published_copy(&client, &key)
        .unwrap()
        .expect("A published it");
    thaw_server::shared::rewrite_manifest(&client, &copy, |m| {
        m["machine"]["cpu_features"]["7.0.ebx"] = json!(u32::MAX)
    })
    .unwrap();
    let pb2 = cri_b.pod("node-b2", json!({}));
    let fb2 = cri_b.container(&pb2, "fn", &forged, &[]);
    let refused = b.function(&fname);
    assert_eq!(refused["shared"]["role"], "refused", "{refused}");
    let why = refused["shared"]["reason"].as_str().unwrap();
    assert!(
        why.contains("cannot resume here") && why.contains("7.0.ebx"),
        "{why}"
    );
    // B's own snapshot, wherever B's placement put it
    assert!(
        refused["snapshot"]["checkpoint_ms"].as_f64().unwrap() > 0.0
            && refused["snapshot"]["dir"]
                .as_str()
                .unwrap()
                .starts_with(&*b.home.to_string_lossy()),
        "B took its own: {refused}"
    );
    let logs = cri_b.logs_showing(&fb2, "7.0.ebx");
    assert!(logs.contains("cannot resume here"), "{logs}");
    let answer = post(&cri_b.netns, &cri_b.ip(&pb2.id), 8080, "4");
    assert!(answer.contains(r#"{"forged":4}"#), "{answer}");
    assert_eq!(
        b.metric("thaw_shared_snapshots_total{outcome=\"refused\"} "),
        1.0
    );
    assert_eq!(
        thaw_server::shared::published_copy(&client, &key).unwrap(),
        Some(copy),
        "the published copy stays"
    );

    let pids = [
        cri_a.pid_of(&fa),
        cri_a.pid_of(&fa2),
        cri_b.pid_of(&fb),
        cri_b.pid_of(&fb2),
    ];
    for pod in [&pa, &pa2] {
        cri_a.remove(&pod.id);
    }
    for pod in [&pb, &pb2] {
        cri_b.remove(&pod.id);
    }
    cri_a.assert_nothing_left(&a, &pids);
    cri_b.assert_nothing_left(&b, &pids);
}

/// `crictl create` + `start` of a container of `image` in the pod with
/// the CRI's `linux` settings (its `resources`, as the kubelet sets them
/// from the pod's): the container's id, or why `start` failed.
fn start_with_linux(
    cri: &Cri,
    pod: &Pod,
    name: &str,
    image: &str,
    linux: Value,
) -> Result<String, String> {
    let config = cri.cfg(
        &format!("lim-{}-{name}", &pod.id[..12]),
        json!({
            "metadata": {"name": name},
            "image": {"image": image},
            "envs": [{"key": "PORT", "value": "8080"}],
            "log_path": format!("{name}.log"),
            "linux": linux,
        }),
    );
    let id = cri.ok(&["create", "--no-pull", &pod.id, &config, &pod.config]);
    let o = must(cri.crictl(&["start", &id]));
    match o.status.success() {
        true => Ok(id),
        false => Err(String::from_utf8_lossy(&o.stderr).into_owned()),
    }
}

/// A handler that spends `burn_ms` of CPU time and says how long that took.
const BURNER: &str = r#"
import time
def handler(event):
    event = event or {}
    t0, c0 = time.monotonic(), time.process_time()
    while time.process_time() - c0 < event.get("burn_ms", 0) / 1000:
        pass
    return {"cpu_ms": (time.process_time() - c0) * 1000, "wall_ms": (time.monotonic() - t0) * 1000}
"#;

/// The number in a CRI stats field (crictl writes uint64 values as
/// strings or numbers).
fn stat_value(v: &Value) -> u64 {
    v.as_u64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or(0)
}

#[test]
fn the_pods_limits_bound_the_function_and_crictl_stats_reports_it() {
    let (daemon, cri, image) = one_node("crilim", "burner", BURNER);
    // what the kubelet sets for limits of 192Mi and 500m
    let limits = json!({"resources": {
        "memory_limit_in_bytes": 192u64 << 20,
        "cpu_period": 100_000,
        "cpu_quota": 50_000,
        "cpu_shares": 512,
    }});

    let pod = cri.pod("limited", json!({}));
    let id = start_with_linux(&cri, &pod, "fn", &image, limits.clone())
        .unwrap_or_else(|e| panic!("{e}"));
    let name = new_function(&daemon, &[]);
    let info = daemon.function(&name);
    // 512 shares (a request of half a CPU): runc's cgroup v2 weight 20
    assert_eq!(
        (&info["memory_mb"], &info["cpu_millis"], &info["cpu_weight"]),
        (&json!(192), &json!(500), &json!(20)),
        "the container's limits: {info}"
    );
    let answer = post(&cri.netns, &cri.ip(&pod.id), 8080, r#"{"burn_ms": 300}"#);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let body: Value = serde_json::from_str(answer.split_once("\r\n\r\n").unwrap().1).unwrap();
    let (cpu_ms, wall_ms) = (
        body["cpu_ms"].as_f64().unwrap(),
        body["wall_ms"].as_f64().unwrap(),
    );
    // half a CPU: 300 ms of CPU take at least five 100 ms periods (the
    // first one's 50 ms may come at once); a loaded machine only adds
    assert!(
        cpu_ms >= 300.0 && wall_ms >= 1.5 * cpu_ms,
        "not held to half a CPU: {body}"
    );

    // the instance's cgroup has the quota; the daemon counts its CPU time,
    // measured by the instance's thread after its reply (at once, or within
    // its next second's measure)
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let stats = loop {
        let stats = daemon.stats(&name);
        let counted = stats["usage"]["cpu_ns"].as_u64().unwrap_or(0) >= 250_000_000;
        if counted || std::time::Instant::now() > deadline {
            break stats;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let usage = &stats["usage"];
    assert_eq!(usage["cpu_millis"], 500, "{stats}");
    assert_eq!(
        usage["cpu_weight"], 20,
        "the weight its cgroup has: {stats}"
    );
    assert_eq!(stats["memory_limit_bytes"], 192u64 << 20, "{stats}");
    assert!(usage["instances"].as_u64().unwrap() >= 1, "{stats}");
    assert!(usage["cpu_ns"].as_u64().unwrap() >= 250_000_000, "{stats}");
    // crictl stats of the function's container: its instances' figures
    let crictl = cri.json_of("stats", &id);
    let s = &crictl["stats"][0];
    assert_eq!(s["attributes"]["id"], json!(id), "{crictl}");
    assert!(
        stat_value(&s["memory"]["workingSetBytes"]["value"]) > 0,
        "the function's memory: {crictl}"
    );
    assert!(
        stat_value(&s["cpu"]["usageCoreNanoSeconds"]["value"]) >= 250_000_000,
        "the function's CPU time: {crictl}"
    );
    let fun_pid = cri.pid_of(&id);
    cri.remove(&pod.id);

    // a memory setting that does not fit in the container's limit: the
    // container does not start, and the reason names both
    let pod2 = cri.pod("toobig", json!({"dev.thaw.memory-mb": "512"}));
    let err = start_with_linux(&cri, &pod2, "fn", &image, limits).unwrap_err();
    assert!(
        err.contains("dev.thaw.memory-mb = 512") && err.contains("does not fit"),
        "{err}"
    );
    cri.remove(&pod2.id);
    cri.assert_nothing_left(&daemon, &[fun_pid]);
}

#[test]
fn a_pod_whose_function_is_busy_on_the_daemon_starts_once_it_is_free() {
    let base = std::env::temp_dir().join(unique("cribusy"));
    // the daemon answers 503 busy after 300 ms behind the function's lock
    let daemon = Daemon::start_with(base.with_extension("home"), |c| c.limits.lock_wait_ms = 300);
    let cri = start_cri(&base, &daemon);
    let image = import_function(&cri.c, "greeter", GREETER);
    let pod = cri.pod("first", json!({}));
    let fun = cri.container(&pod, "fn", &image, &[]);
    let name = new_function(&daemon, &[]);
    let fun_pid = cri.pid_of(&fun);
    cri.remove(&pod.id);
    // the next pod of the image deploys the function again, while another
    // deploy of it (or a snapshot move's switch) holds its lock for 3 s
    let held = daemon.delete_and_hold(&name);
    let t = Instant::now();
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(3));
        drop(held);
    });
    let pod2 = cri.pod("second", json!({}));
    let fun2 = cri.container(&pod2, "fn", &image, &[]);
    assert!(
        t.elapsed() >= Duration::from_secs(3),
        "created while the function's lock was held"
    );
    release.join().unwrap();
    assert_eq!(new_function(&daemon, &[]), name);
    let answer = post(&cri.netns, &cri.ip(&pod2.id), 8080, r#"{"name": "busy"}"#);
    assert!(answer.contains("hi busy"), "{answer}");
    let fun2_pid = cri.pid_of(&fun2);
    cri.remove(&pod2.id);
    cri.assert_nothing_left(&daemon, &[fun_pid, fun2_pid]);
}

#[test]
fn a_started_pod_has_its_instance_restored_before_its_first_request_over_grpc() {
    let base = std::env::temp_dir().join(unique("criwarm"));
    let daemon = Daemon::start(base.with_extension("home"));
    let mut cri = start_cri(&base, &daemon);
    // the kubelet's way: gRPC calls on one connection, no crictl
    must(cri.use_grpc());
    assert_eq!(cri.calls(), thaw_kube_harness::containerd::CriCalls::Grpc);
    let image = import_function(&cri.c, "greeter", GREETER);
    let restores = || daemon.metric("thaw_restore_duration_seconds_count{");
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

/// Pods of one template (named as a Deployment names them): the next pod's
/// sandbox has the function its template ran restored before any of its
/// containers exists, and its container takes that instance; a pod of no
/// known template, or one that turns prewarming off, asks for nothing.
#[test]
fn a_pods_sandbox_has_the_function_its_template_ran_restored_before_its_containers() {
    let base = std::env::temp_dir().join(unique("critmpl"));
    let daemon = Daemon::start_with(base.with_extension("home"), |c| {
        c.policy = "ttl".into();
        c.keep_alive_s = 1;
    });
    let mut cri = start_cri(&base, &daemon);
    must(cri.use_grpc());
    let image = import_function(&cri.c, "greeter", GREETER);
    let restores = || daemon.metric("thaw_restore_duration_seconds_count{");
    let until = |what: &str, done: &dyn Fn() -> bool| {
        let t = Instant::now();
        while !done() {
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "{what}: {}",
                daemon.metrics()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let no_idle = || {
        until("the idle instance stays past its keep-alive", &|| {
            daemon.metric("thaw_instances{state=\"idle\"}") == 0.0
        })
    };
    // the template's first pod: its container's Create asks for the instance
    let first = cri.pod("greeter-5f7d8c-aaaaa", json!({}));
    let fun = cri.container(&first, "fn", &image, &[]);
    until("no restore for the first pod", &|| restores() >= 1.0);
    let answer = post(&cri.netns, &cri.ip(&first.id), 8080, r#"{"name": "one"}"#);
    assert!(answer.contains("hi one"), "{answer}");
    let mut pids = vec![cri.pid_of(&fun)];
    cri.remove(&first.id);
    no_idle();

    // its next pod: the sandbox alone has an instance restored
    let before = restores();
    let second = cri.pod("greeter-5f7d8c-bbbbb", json!({}));
    until("the sandbox asked for no instance", &|| restores() > before);
    let fun = cri.container(&second, "fn", &image, &[]);
    let answer = post(&cri.netns, &cri.ip(&second.id), 8080, r#"{"name": "two"}"#);
    assert!(answer.contains("hi two"), "{answer}");
    assert!(
        answer
            .to_ascii_lowercase()
            .contains("thaw-start-type: warm"),
        "the first request found the instance ready: {answer}"
    );
    assert_eq!(
        restores(),
        before + 1.0,
        "one restore for the pod: its sandbox's, which its container took"
    );
    pids.push(cri.pid_of(&fun));
    cri.remove(&second.id);
    no_idle();

    // a pod of no template, and one of this template without prewarming
    let before = restores();
    let alone = cri.pod("standalone", json!({}));
    let off = cri.pod("greeter-5f7d8c-ccccc", json!({"dev.thaw.prewarm": "false"}));
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(restores(), before, "their sandboxes asked for nothing");
    cri.remove(&alone.id);
    cri.remove(&off.id);
    cri.assert_nothing_left(&daemon, &pids);
}
