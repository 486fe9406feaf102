//! A real Kubernetes cluster on harnesses' containerds
//! (`deploy/kubernetes/cluster.sh`: etcd, kube-apiserver, the controller
//! manager and the scheduler of one pinned release in the first node's
//! network namespace, and a kubelet and kube-proxy in each node's
//! containerd's), driven with its kubectl: what the kubelet tests and
//! `thaw bench kube` run on. The script runs as a child
//! until [`Cluster::stop`], which must find it exit cleanly (it removes
//! everything it made).
use crate::containerd::{output_of, succeeded, Cri, HarnessError, Result};
use serde_json::Value;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use thaw_error::{fail, ResultExt};

/// The script and what it sources and applies, as the repository has them
/// (written next to the cluster's directory, so a built binary needs no
/// checkout).
const SCRIPTS: [(&str, &str); 4] = [
    (
        "cluster.sh",
        include_str!("../../../deploy/kubernetes/cluster.sh"),
    ),
    (
        "tools.sh",
        include_str!("../../../deploy/kubernetes/tools.sh"),
    ),
    (
        "snapshot-labels.py",
        include_str!("../../../deploy/kubernetes/snapshot-labels.py"),
    ),
    (
        "runtimeclass.yaml",
        include_str!("../../../deploy/kubernetes/runtimeclass.yaml"),
    ),
];

/// How long the cluster may take to come up once its binaries are built.
const START_LIMIT: Duration = Duration::from_secs(300);

/// A running cluster: its script's process and directory.
pub struct Cluster {
    child: Option<Child>,
    /// The cluster's directory (certificates, kubeconfigs, state, logs).
    pub dir: PathBuf,
    /// The first node's name.
    pub node: String,
    /// Every node's name, the first node's first.
    pub nodes: Vec<String>,
    base: PathBuf,
    /// `kubectl proxy` on a unix socket, once [`Cluster::scale`] started it
    proxy: Mutex<Option<Child>>,
}

/// One node of a cluster: its harness (containerd, network namespace),
/// the subnet of its CNI configuration and, to have its snapshots
/// advertised in its labels (`snapshot-labels.py`), its daemon's socket.
pub struct NodeSpec<'a> {
    pub cri: &'a Cri,
    pub pod_cidr: &'a str,
    pub thaw_socket: Option<&'a Path>,
}

impl Cluster {
    /// Starts a one-node cluster on `cri`'s containerd and network
    /// namespace, its files below `base` (made here, removed at the end);
    /// `pod_cidr` is the CNI configuration's subnet. Returns once the node
    /// is Ready.
    pub fn start(cri: &Cri, base: &Path, pod_cidr: &str) -> Result<Cluster> {
        let node = NodeSpec {
            cri,
            pod_cidr,
            thaw_socket: None,
        };
        Cluster::start_nodes(&[node], base, pod_cidr)
    }

    /// Starts a cluster of `nodes` (the control plane in the first one's
    /// network namespace), its files below `base`; every node's subnet
    /// lies in `cluster_cidr`. Returns once every node is Ready.
    pub fn start_nodes(nodes: &[NodeSpec], base: &Path, cluster_cidr: &str) -> Result<Cluster> {
        let Some(first) = nodes.first() else {
            fail!(HarnessError::Failed, "a cluster needs a node");
        };
        let scripts = base.join("scripts");
        let dir = base.join("cluster");
        std::fs::create_dir_all(&scripts)?;
        std::fs::create_dir_all(&dir)?;
        for (name, text) in SCRIPTS {
            let p = scripts.join(name);
            std::fs::write(&p, text)?;
            if name.ends_with(".sh") {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755))?;
            }
        }
        // the binaries first (built once, for as long as that takes), so
        // the cluster's start alone counts against START_LIMIT
        let built = output_of(&mut Command::new(scripts.join("tools.sh")), "tools.sh")?;
        if !built.status.success() {
            fail!(
                HarnessError::Failed,
                "deploy/kubernetes/tools.sh could not build the cluster's binaries: {}",
                String::from_utf8_lossy(&built.stderr)
            );
        }
        let netns = |n: &NodeSpec| {
            n.cri
                .netns
                .path()
                .trim_start_matches("/run/netns/")
                .to_string()
        };
        let log = std::fs::File::create(base.join("cluster.log"))?;
        let mut cmd = Command::new(scripts.join("cluster.sh"));
        cmd.args(["--netns", &netns(first), "--containerd"])
            .arg(&first.cri.c.socket)
            .arg("--dir")
            .arg(&dir)
            .args(["--pod-cidr", cluster_cidr]);
        if let Some(s) = first.thaw_socket {
            cmd.arg("--thaw-socket").arg(s);
        }
        for n in &nodes[1..] {
            let mut spec = format!("{},{},{}", netns(n), n.cri.c.socket.display(), n.pod_cidr);
            if let Some(s) = n.thaw_socket {
                spec += &format!(",{}", s.display());
            }
            cmd.arg("--node").arg(spec);
        }
        cmd.stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        use std::os::unix::process::CommandExt;
        // SAFETY: only prctl between fork and exec (async-signal-safe): the
        // script gets SIGTERM (and cleans up) if this thread dies first.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .context("starting deploy/kubernetes/cluster.sh")?;
        let mut cluster = Cluster {
            child: Some(child),
            dir,
            node: String::new(),
            nodes: Vec::new(),
            base: base.to_path_buf(),
            proxy: Mutex::new(None),
        };
        let t = Instant::now();
        loop {
            if let Ok(ready) = std::fs::read_to_string(cluster.dir.join("ready")) {
                cluster.nodes = ready.lines().map(str::to_string).collect();
                cluster.node = cluster.nodes.first().cloned().unwrap_or_default();
                return Ok(cluster);
            }
            let child = cluster.child.as_mut().expect("running");
            if let Some(status) = child.try_wait()? {
                cluster.child = None;
                fail!(
                    HarnessError::Failed,
                    "cluster.sh exited ({status}) before the node was Ready:\n{}",
                    cluster.log()
                );
            }
            if t.elapsed() > START_LIMIT {
                fail!(
                    HarnessError::Failed,
                    "the cluster is not Ready after {START_LIMIT:?}:\n{}",
                    cluster.log()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The script's output (its own lines, a failed component's log).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.base.join("cluster.log")).unwrap_or_default()
    }

    /// A component's log (`kubelet`, `kube-apiserver`, ...).
    pub fn component_log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(format!("{name}.log"))).unwrap_or_default()
    }

    /// The pid of the script (its kubelet's cgroups are named after it).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// kubectl against the cluster, as its admin.
    pub fn kubectl(&self, args: &[&str]) -> Result<Output> {
        output_of(
            Command::new(self.dir.join("kubectl")).args(args),
            "the cluster's kubectl",
        )
    }

    /// `kubectl ARGS`, which must succeed: its stdout, trimmed.
    pub fn run(&self, args: &[&str]) -> Result<String> {
        Ok(succeeded("kubectl", args, self.kubectl(args)?)?
            .trim()
            .to_string())
    }

    /// `kubectl get ARGS -o json`.
    pub fn get(&self, args: &[&str]) -> Result<Value> {
        let mut a = vec!["get"];
        a.extend_from_slice(args);
        a.extend_from_slice(&["-o", "json"]);
        Ok(serde_json::from_str(&self.run(&a)?)?)
    }

    /// Sets the Deployment's replicas with one PATCH of its `scale`
    /// through a `kubectl proxy` that stays up (started at the first
    /// call): one request to the API server as an autoscaler makes it, on
    /// a connection kept open, with no kubectl process started per call.
    pub fn scale(&self, deployment: &str, replicas: u32) -> Result<()> {
        let socket = self.proxy_socket()?;
        let body = format!(r#"{{"spec":{{"replicas":{replicas}}}}}"#);
        let mut s = std::os::unix::net::UnixStream::connect(&socket)
            .with_context(|| format!("connecting to kubectl proxy at {}", socket.display()))?;
        write!(
            s,
            "PATCH /apis/apps/v1/namespaces/default/deployments/{deployment}/scale HTTP/1.1\r\n\
             host: localhost\r\ncontent-type: application/merge-patch+json\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )?;
        let mut answer = String::new();
        s.read_to_string(&mut answer)?;
        if !answer.starts_with("HTTP/1.1 200") {
            let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
            let status = head.lines().next().unwrap_or("no answer");
            fail!(
                HarnessError::Failed,
                "scaling {deployment} to {replicas}: {status}: {}",
                body.trim()
            );
        }
        Ok(())
    }

    /// The socket of the cluster's `kubectl proxy`, started if it is not.
    fn proxy_socket(&self) -> Result<PathBuf> {
        let socket = self.base.join("api.sock");
        let mut proxy = self.proxy.lock().unwrap_or_else(|e| e.into_inner());
        if proxy.is_some() {
            return Ok(socket);
        }
        let log = std::fs::File::create(self.base.join("kubectl-proxy.log"))?;
        let mut child = Command::new(self.dir.join("kubectl"))
            .arg("proxy")
            .arg("--unix-socket")
            .arg(&socket)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting kubectl proxy")?;
        let t = Instant::now();
        // a connection, not the socket's file: the file exists from its
        // bind, a moment before the proxy listens (connect is refused then)
        while std::os::unix::net::UnixStream::connect(&socket).is_err() {
            let exited = child.try_wait()?;
            if exited.is_some() || t.elapsed() > Duration::from_secs(30) {
                let _ = child.kill();
                let _ = child.wait();
                let log = std::fs::read_to_string(self.base.join("kubectl-proxy.log"));
                fail!(
                    HarnessError::Failed,
                    "kubectl proxy did not listen on {}: {}",
                    socket.display(),
                    log.unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        *proxy = Some(child);
        Ok(socket)
    }

    /// Polls `check` until it gives a value (for up to `limit`), failing
    /// with `what` and the last state `check` saw.
    pub fn wait_for<T>(
        &self,
        what: &str,
        limit: Duration,
        mut check: impl FnMut() -> Result<Option<T>, String>,
    ) -> Result<T> {
        let t = Instant::now();
        loop {
            let last = match check() {
                Ok(Some(v)) => return Ok(v),
                Ok(None) => String::new(),
                Err(seen) => seen,
            };
            if t.elapsed() > limit {
                fail!(
                    HarnessError::Failed,
                    "{what}: not after {limit:?} ({last})\nkubelet's log (its end): {}",
                    tail(&self.component_log("kubelet"), 30)
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Signals the script and waits for it: it must exit 0 (every
    /// component stopped, its mounts, cgroups, log links and kernel
    /// settings undone).
    pub fn stop(&mut self) -> Result<()> {
        let proxy = self.proxy.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some(mut proxy) = proxy.take() {
            let _ = proxy.kill();
            let _ = proxy.wait();
        }
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        if let Ok(pid) = libc::pid_t::try_from(child.id()) {
            // SAFETY: signals the script this harness started.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        let status = child.wait()?;
        let log = self.log();
        let _ = std::fs::remove_dir_all(&self.base);
        if !status.success() {
            fail!(HarnessError::Failed, "cluster.sh exited {status}:\n{log}");
        }
        Ok(())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            eprintln!("{e:#}");
        }
    }
}

/// The last `n` lines of `text`.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
