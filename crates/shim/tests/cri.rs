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
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A private containerd serving CRI in its own network namespace, with a
/// pod network, the pause image and the crictl client.
struct Cri {
    netns: TestNetns,
    c: Containerd,
    crictl: PathBuf,
}

fn crictl_binary() -> PathBuf {
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join("crictl"));
    let go_bin = std::env::var_os("HOME").map(|h| Path::new(&h).join("go/bin/crictl"));
    on_path
        .chain(go_bin)
        .find(|p| p.is_file())
        .expect("crictl is missing (scripts/setup.sh --tests installs cri-tools' crictl)")
}

/// A static binary that prints its first argument, then waits for
/// SIGTERM/SIGINT and exits 0: the pod's pause process under runc and the
/// sidecar of the tests.
fn idle_binary(dir: &Path) -> Vec<u8> {
    let src = dir.join("idle.c");
    std::fs::write(
        &src,
        r#"#include <signal.h>
#include <stdio.h>
#include <unistd.h>
static void bye(int s) { (void)s; _exit(0); }
int main(int argc, char **argv) {
    signal(SIGTERM, bye);
    signal(SIGINT, bye);
    if (argc > 1) { printf("%s\n", argv[1]); fflush(stdout); }
    for (;;) pause();
}
"#,
    )
    .unwrap();
    let out = dir.join("idle");
    let o = Command::new("gcc")
        .args(["-static", "-O2", "-o"])
        .arg(&out)
        .arg(&src)
        .output()
        .expect("gcc (scripts/setup.sh installs it)");
    assert!(
        o.status.success(),
        "gcc -static: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    std::fs::read(out).unwrap()
}

impl Cri {
    fn start(base: &Path, daemon: &Daemon) -> Cri {
        for plugin in ["bridge", "host-local", "loopback"] {
            assert!(
                Path::new(CNI_BIN).join(plugin).exists(),
                "the CNI plugin {plugin} is missing from {CNI_BIN} (scripts/setup.sh --tests installs containernetworking-plugins)"
            );
        }
        let crictl = crictl_binary();
        let netns = TestNetns::new();
        std::fs::create_dir_all(base.join("cni")).unwrap();
        // the bridge and the pods' addresses exist only in the test's netns
        std::fs::write(
            base.join("cni/10-thaw-test.conflist"),
            serde_json::to_string_pretty(&serde_json::json!({
                "cniVersion": "0.4.0",
                "name": "thaw-test",
                "plugins": [{
                    "type": "bridge",
                    "bridge": "thawbr0",
                    "isGateway": true,
                    "ipMasq": false,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": "10.88.0.0/24"}]],
                        "dataDir": base.join("ipam"),
                    },
                }],
            }))
            .unwrap(),
        )
        .unwrap();
        std::fs::write(
            base.join("crictl.yaml"),
            format!(
                "runtime-endpoint: unix://{s}\nimage-endpoint: unix://{s}\ntimeout: 120\n",
                s = base.join("containerd.sock").display()
            ),
        )
        .unwrap();
        let c = Containerd::start_in(base, &daemon.socket(), Some(&netns), "k8s.io");
        let idle = idle_binary(base);
        for (reference, entry) in [(PAUSE_IMAGE, "pause"), (SIDECAR_IMAGE, "idle")] {
            let built = thaw_server::image::build_native(
                &[(entry, &idle, 0o755)],
                &[&format!("/{entry}")],
                reference,
            )
            .unwrap();
            let archive = base.join(format!("{entry}.oci.tar"));
            std::fs::write(&archive, &built.archive).unwrap();
            c.ok(&["images", "import", archive.to_str().unwrap()]);
        }
        Cri { netns, c, crictl }
    }

    fn crictl(&self, args: &[&str]) -> Output {
        Command::new(&self.crictl)
            .arg("--config")
            .arg(self.c.dir.join("crictl.yaml"))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("running crictl")
    }

    /// `crictl ARGS` must succeed; its stdout, trimmed.
    fn ok(&self, args: &[&str]) -> String {
        let o = self.crictl(args);
        assert!(
            o.status.success(),
            "crictl {args:?}: {}\n{}\ncontainerd's log: {}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr),
            std::fs::read_to_string(self.c.dir.join("containerd.log")).unwrap_or_default()
        );
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }

    /// `crictl ARGS` must fail; its stderr.
    fn fails(&self, args: &[&str]) -> String {
        let o = self.crictl(args);
        assert!(!o.status.success(), "crictl {args:?} should fail: {o:?}");
        String::from_utf8_lossy(&o.stderr).into_owned()
    }

    /// `crictl COMMAND -o json ID`.
    fn json(&self, command: &str, id: &str) -> Value {
        serde_json::from_str(&self.ok(&[command, "-o", "json", id])).unwrap()
    }

    /// A config file for `crictl runp` / `create`.
    fn config(&self, name: &str, v: Value) -> String {
        let p = self.c.dir.join(format!("{name}.json"));
        std::fs::write(&p, v.to_string()).unwrap();
        p.to_string_lossy().into_owned()
    }

    /// `crictl runp --runtime thaw` of a pod named `name` with these
    /// annotations: its id and its config file.
    fn run_pod(&self, name: &str, annotations: Value) -> (String, String) {
        let logs = self.c.dir.join("logs").join(name);
        let config = self.config(
            &format!("pod-{name}"),
            serde_json::json!({
                "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"), "attempt": 1},
                "hostname": name,
                "log_directory": logs,
                "annotations": annotations,
                "linux": {},
            }),
        );
        let id = self.ok(&["runp", "--runtime", "thaw", &config]);
        (id, config)
    }

    /// `crictl create` + `start` of a container of `image` in the pod.
    fn run_container(
        &self,
        pod: &(String, String),
        name: &str,
        image: &str,
        args: &[&str],
    ) -> String {
        let config = self.config(
            &format!("ctr-{}-{name}", &pod.0[..12]),
            serde_json::json!({
                "metadata": {"name": name},
                "image": {"image": image},
                "args": args,
                "envs": [{"key": "PORT", "value": "8080"}],
                "log_path": format!("{name}.log"),
                "linux": {},
            }),
        );
        let id = self.ok(&["create", "--no-pull", &pod.0, &config, &pod.1]);
        self.ok(&["start", &id]);
        id
    }

    fn pod_ip(&self, pod: &str) -> String {
        let v = self.json("inspectp", pod);
        v["status"]["network"]["ip"]
            .as_str()
            .filter(|ip| !ip.is_empty())
            .unwrap_or_else(|| panic!("the pod has no IP: {v}"))
            .to_string()
    }

    /// The pid of a running container, as containerd reports it.
    fn pid(&self, container: &str) -> u32 {
        let v = self.json("inspect", container);
        v["info"]["pid"]
            .as_u64()
            .unwrap_or_else(|| panic!("no pid in {v}")) as u32
    }

    /// `crictl logs` once it shows `expect` (logs are copied asynchronously).
    fn logs_showing(&self, container: &str, expect: &str) -> String {
        let t = Instant::now();
        loop {
            let o = self.crictl(&["logs", container]);
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

    /// Stops and removes the pod (its containers go with it).
    fn remove_pod(&self, pod: &str) {
        self.ok(&["stopp", pod]);
        self.ok(&["rmp", pod]);
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
        self.c.assert_nothing_left(&[], &daemon.home);
    }
}

impl Drop for Cri {
    /// A failed test's pods go too (their processes, mounts and the CNI
    /// plugin's state), before containerd stops.
    fn drop(&mut self) {
        let _ = self.crictl(&["rmp", "--all", "--force"]);
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
    let cri = Cri::start(&base, &daemon);
    let image = import_function(&cri.c, "greeter", GREETER);

    let pod = cri.run_pod("hello", serde_json::json!({"dev.thaw.memory-mb": "256"}));
    let fun = cri.run_container(&pod, "fn", &image, &[]);
    let side = cri.run_container(&pod, "sidecar", SIDECAR_IMAGE, &["sidecar up"]);
    let ip = cri.pod_ip(&pod.0);
    // the function answers on the pod's IP, from the test's network
    let answer = cri.netns.post_to(&ip, 8080, r#"{"name": "pod"}"#);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("hi pod"), "{answer}");
    let running = cri.ok(&["ps", "-q", "--state", "running"]);
    assert!(
        running.contains(&fun) && running.contains(&side),
        "{running}"
    );
    // the function's front and the runc sidecar share the pod's network
    // namespace (the one the CRI plugin made), not the host's
    let (fun_pid, side_pid) = (cri.pid(&fun), cri.pid(&side));
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
            && shim_cmd.contains(&format!("-id {}", pod.0)),
        "{shim_cmd}"
    );
    // the runc container's cgroup stats reach the CRI
    let stats = cri.json("stats", &side);
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
    cri.remove_pod(&pod.0);

    // a second pod of the function: no deploy, its first request a restore
    // from the snapshot the first pod's deploy took (or the instance the
    // first pod left warm)
    let pod2 = cri.run_pod("hello2", serde_json::json!({"dev.thaw.memory-mb": "256"}));
    let fun2 = cri.run_container(&pod2, "fn", &image, &[]);
    let ip2 = cri.pod_ip(&pod2.0);
    let answer = cri.netns.post_to(&ip2, 8080, r#"{"name": "again"}"#);
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
    let fun2_pid = cri.pid(&fun2);
    cri.remove_pod(&pod2.0);
    cri.assert_nothing_left(&daemon, &[fun_pid, side_pid, fun2_pid]);
}

#[test]
fn bad_pods_and_a_daemon_down_fail_clearly_in_crictl_and_leave_nothing() {
    let base = std::env::temp_dir().join(unique("cribad"));
    let mut daemon = Daemon::start(base.with_extension("home"));
    let cri = Cri::start(&base, &daemon);
    let image = import_function(&cri.c, "greeter", GREETER);
    let broken = import_function(&cri.c, "broken", "raise ImportError('broken on purpose')\n");
    let start_fails = |pod: &(String, String), name: &str, image: &str, envs: Value| {
        let config = cri.config(
            &format!("bad-{name}"),
            serde_json::json!({"metadata": {"name": name}, "image": {"image": image}, "envs": envs, "linux": {}}),
        );
        // the CRI plugin makes the task (the shim's Create) at `start`
        let id = cri.ok(&["create", "--no-pull", &pod.0, &config, &pod.1]);
        cri.fails(&["start", &id])
    };
    let create = |pod: &(String, String), name: &str| start_fails(pod, name, &image, json!([]));
    // a pod annotation that is not a number: the container does not start,
    // and the reason names it
    let pod = cri.run_pod("badmem", serde_json::json!({"dev.thaw.memory-mb": "lots"}));
    let err = create(&pod, "fn");
    assert!(
        err.contains("dev.thaw.memory-mb") && err.contains("lots"),
        "{err}"
    );
    // a value the daemon refuses: its reason
    let pod2 = cri.run_pod("hugemem", serde_json::json!({"dev.thaw.memory-mb": "1"}));
    let err = create(&pod2, "fn");
    assert!(err.contains("memory_mb"), "{err}");
    // a handler whose module fails to import: the daemon's deploy refuses it
    let plain = cri.run_pod("plain", json!({}));
    let err = start_fails(&plain, "broken", &broken, json!([]));
    assert!(err.contains("broken on purpose"), "{err}");
    // an image without a handler is no function: runc runs it, and the
    // function image has no `serve` to run
    let no_handler = json!([{"key": "THAW_HANDLER", "value": ""}]);
    let err = start_fails(&plain, "nohandler", &image, no_handler);
    assert!(err.contains("names no THAW_HANDLER"), "{err}");
    cri.remove_pod(&plain.0);
    cri.remove_pod(&pod.0);
    cri.remove_pod(&pod2.0);
    // the node's daemon down: the reason names the socket
    daemon.stop();
    let pod3 = cri.run_pod("down", serde_json::json!({}));
    let err = create(&pod3, "fn");
    assert!(err.contains("does not answer"), "{err}");
    cri.remove_pod(&pod3.0);
    cri.assert_nothing_left(&daemon, &[]);
}
