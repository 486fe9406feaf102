//! A private containerd with the thaw runtime registered, driven through
//! `ctr` and the kubelet's own CRI calls (`crictl`): what the shim's tests
//! and `thaw bench cri` run on. Its root, state, socket and config live in
//! one directory; with a network namespace it runs inside it, so the CRI
//! plugin's CNI bridge (Debian's containernetworking-plugins: bridge +
//! host-local) and the pods' addresses exist only there. Every image is
//! local (the pause image is built from a static binary), nothing is pulled.
use crate::cri_client::{CriClient, CriError, Msg};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use thaw_error::{fail, Context, ResultExt};

/// The test pods' resolver: their own loopback, where nothing answers, so
/// a lookup (Python's `http.server` looks its host name up at bind) fails
/// at once and never leaves the test's network for the host's resolver.
pub const POD_RESOLVER: &str = "127.0.0.1";

pub const RUNTIME: &str = "io.containerd.thaw.v1";
/// The CRI plugin's pause image: imported by each harness, never pulled.
pub const PAUSE_IMAGE: &str = "thaw.local/pause:test";
/// Debian's containernetworking-plugins.
pub const CNI_BIN: &str = "/usr/lib/cni";
/// The guide's containerd fragment that registers the runtime.
pub const CONTAINERD_FRAGMENT: &str =
    include_str!("../../../deploy/kubernetes/containerd-thaw.toml");

/// What went wrong driving containerd, crictl or a namespace.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// a tool missing, a command that failed, an answer that is not one
    #[error("{0}")]
    Failed(String),
    #[error(transparent)]
    Image(#[from] thaw_server::image::ImageError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Cri(#[from] CriError),
    /// the step that failed, with its cause
    #[error(transparent)]
    Other(#[from] Context),
}

pub type Result<T, E = HarnessError> = std::result::Result<T, E>;

static N: AtomicU32 = AtomicU32::new(0);

/// A name no other harness of this or another process uses.
pub fn unique(prefix: &str, name: &str) -> String {
    format!(
        "{prefix}-{}-{}-{name}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    )
}

/// A named network namespace (loopback up), removed on drop.
pub struct Netns(String);

impl Netns {
    pub fn new(name: String) -> Result<Netns> {
        let run = |args: &[&str]| -> Result<()> {
            let s = Command::new("ip")
                .args(args)
                .status()
                .context("running ip")?;
            if !s.success() {
                fail!(HarnessError::Failed, "ip {args:?} failed");
            }
            Ok(())
        };
        run(&["netns", "add", &name])?;
        let ns = Netns(name);
        run(&["-n", &ns.0, "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    pub fn path(&self) -> String {
        format!("/run/netns/{}", self.0)
    }

    /// Runs `f` on a thread of its own inside the namespace.
    pub fn within<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let path = self.path();
        std::thread::spawn(move || {
            let ns = std::fs::File::open(&path).with_context(|| format!("opening {path}"))?;
            use std::os::fd::AsRawFd;
            // SAFETY: moves this thread alone into the namespace.
            if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                let e = std::io::Error::last_os_error();
                return Err(Context::new("entering the netns", e).into());
            }
            f()
        })
        .join()
        .map_err(|_| HarnessError::Failed("the thread in the netns panicked".into()))?
    }

    /// One HTTP POST to `addr:port` from inside the namespace, retried
    /// while nothing listens yet (for up to `wait`): status line, headers
    /// and body.
    pub fn post_to(&self, addr: &str, port: u16, body: &str, wait: Duration) -> Result<String> {
        let (addr, body) = (addr.to_string(), body.to_string());
        self.within(move || http_post(&addr, port, &body, wait))
    }

    /// [`Netns::post_to`], and how long the connection took to be accepted.
    pub fn post_timed(
        &self,
        addr: &str,
        port: u16,
        body: &str,
        wait: Duration,
    ) -> Result<(String, Duration)> {
        let (addr, body) = (addr.to_string(), body.to_string());
        self.within(move || http_post_timed(&addr, port, &body, wait))
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// One HTTP/1.1 POST to `addr:port` in the caller's network namespace,
/// connecting again while nothing listens (for up to `wait`): status line,
/// headers and body.
pub fn http_post(addr: &str, port: u16, body: &str, wait: Duration) -> Result<String> {
    Ok(http_post_timed(addr, port, body, wait)?.0)
}

/// [`http_post`], and how long the connection took to be accepted
/// (retries while nothing listened included).
pub fn http_post_timed(
    addr: &str,
    port: u16,
    body: &str,
    wait: Duration,
) -> Result<(String, Duration)> {
    let t = Instant::now();
    let to = std::net::ToSocketAddrs::to_socket_addrs(&(addr, port))
        .with_context(|| format!("resolving {addr}:{port}"))?
        .next()
        .ok_or_else(|| HarnessError::Failed(format!("no address for {addr}:{port}")))?;
    let mut s = loop {
        // each attempt bounded: a SYN nobody answers (no route back, no
        // Service rule yet) is tried again on a new connection, and fails
        // within `wait`, not after the kernel's two minutes of retries
        let attempt = wait
            .saturating_sub(t.elapsed())
            .clamp(Duration::from_millis(100), Duration::from_secs(2));
        match std::net::TcpStream::connect_timeout(&to, attempt) {
            Ok(s) => break s,
            Err(e) if t.elapsed() < wait => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => return Err(Context::new(format!("connecting to {addr}:{port}"), e).into()),
        }
    };
    let connected = t.elapsed();
    s.set_read_timeout(Some(wait.max(Duration::from_secs(60))))?;
    write!(
        s,
        "POST / HTTP/1.1\r\nhost: pod\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)
        .with_context(|| format!("reading the answer of {addr}:{port}"))?;
    if out.is_empty() {
        fail!(
            HarnessError::Failed,
            "{addr}:{port} closed the connection without an answer"
        );
    }
    Ok((out, connected))
}

/// A private containerd.
pub struct Containerd {
    pub dir: PathBuf,
    pub socket: PathBuf,
    child: Child,
    /// The containerd namespace `ctr` works in (`k8s.io` for the CRI's).
    pub namespace: &'static str,
}

impl Containerd {
    /// containerd on `dir` with the thaw runtime (the shim binary in
    /// `shim_dir`, first on its PATH; the node's daemon at `thaw_socket`),
    /// in the network namespace `netns` if given, `ctr` working in
    /// `namespace`. Its CRI plugin runs pods from local images only: the
    /// pause image is [`PAUSE_IMAGE`], the pod network the CNI
    /// configuration in `dir/cni`.
    pub fn start(
        dir: &Path,
        thaw_socket: &Path,
        shim_dir: &Path,
        netns: Option<&Netns>,
        namespace: &'static str,
    ) -> Result<Containerd> {
        Containerd::start_at(dir, thaw_socket, shim_dir, netns, namespace, "info")
    }

    /// [`Containerd::start`], logging at `log_level` (`debug`: the
    /// timestamps of every step of its calls, as in `thaw bench cri
    /// --containerd-log`).
    pub fn start_at(
        dir: &Path,
        thaw_socket: &Path,
        shim_dir: &Path,
        netns: Option<&Netns>,
        namespace: &'static str,
        log_level: &str,
    ) -> Result<Containerd> {
        for bin in ["/usr/bin/containerd", "/usr/bin/ctr"] {
            if !Path::new(bin).exists() {
                fail!(
                    HarnessError::Failed,
                    "{bin} is missing (scripts/setup.sh --tests installs Debian's containerd)"
                );
            }
        }
        std::fs::create_dir_all(dir)?;
        let socket = dir.join("containerd.sock");
        let config = format!(
            r#"version = 2
root = "{d}/root"
state = "{d}/state"
[debug]
  level = "{log_level}"
[grpc]
  address = "{s}"
[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  # runc pods: their specs ask for a negative oom_score_adj, which this
  # host's root may not set (no CAP_SYS_RESOURCE); keep it at containerd's
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "{CNI_BIN}"
  conf_dir = "{d}/cni"
"#,
            d = dir.display(),
            s = socket.display()
        );
        // the runtime is registered by the guide's own fragment, merged in
        // as the guide says (an `imports` of it would replace the whole CRI
        // section: containerd 1.6 merges imported files plugin by plugin)
        let config = format!(
            "{config}{}",
            CONTAINERD_FRAGMENT
                .lines()
                .filter(|l| !l.starts_with("version"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        std::fs::write(dir.join("config.toml"), config)?;
        let log = std::fs::File::create(dir.join("containerd.log"))?;
        let path = format!(
            "{}:{}",
            shim_dir.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut cmd = Command::new("/usr/bin/containerd");
        cmd.arg("--config")
            .arg(dir.join("config.toml"))
            .env("PATH", path)
            .env("THAW_SOCKET", thaw_socket)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        if let Some(ns) = netns {
            let f = std::fs::File::open(ns.path()).context("opening the netns")?;
            use std::os::unix::process::CommandExt;
            // SAFETY: only setns between fork and exec (async-signal-safe);
            // the descriptor stays open in the parent until spawn returns.
            unsafe {
                cmd.pre_exec(move || {
                    use std::os::fd::AsRawFd;
                    if libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let child = cmd.spawn().context("starting containerd")?;
        let c = Containerd {
            dir: dir.to_path_buf(),
            socket,
            child,
            namespace,
        };
        let t = Instant::now();
        while !c.ctr(&["version"])?.status.success() {
            if t.elapsed() > Duration::from_secs(30) {
                fail!(
                    HarnessError::Failed,
                    "containerd did not come up: {}",
                    std::fs::read_to_string(dir.join("containerd.log")).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(c)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn ctr(&self, args: &[&str]) -> Result<Output> {
        output_of(
            Command::new("/usr/bin/ctr")
                .arg("--address")
                .arg(&self.socket)
                .arg("--namespace")
                .arg(self.namespace)
                .args(args),
            "ctr",
        )
    }

    /// `ctr ARGS`, which must succeed: its stdout.
    pub fn run(&self, args: &[&str]) -> Result<String> {
        succeeded("ctr", args, self.ctr(args)?)
    }

    /// Imports an OCI archive (`thaw image build`'s) into containerd.
    pub fn import(&self, archive: &Path) -> Result<String> {
        self.run(&["images", "import", &archive.to_string_lossy()])
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("containerd.log")).unwrap_or_default()
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        if let Ok(pid) = libc::pid_t::try_from(self.child.id()) {
            // SAFETY: signals the containerd this harness started.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The stdout of `tool ARGS`, which must have succeeded (else its output
/// is the error).
pub fn succeeded(tool: &str, args: &[&str], o: Output) -> Result<String> {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    if o.status.success() {
        return Ok(text(&o.stdout));
    }
    Err(HarnessError::Failed(format!(
        "{tool} {args:?}: {}\n{}",
        text(&o.stdout),
        text(&o.stderr)
    )))
}

/// `cmd`'s output, its stdin empty (`what`: the tool, for the error).
pub fn output_of(cmd: &mut Command, what: &str) -> Result<Output> {
    cmd.stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {what}"))
        .map_err(HarnessError::from)
}

/// Processes (other than `except` and this one) whose command line names
/// one of `dirs`.
pub fn processes_naming(dirs: &[&Path], except: u32) -> Vec<String> {
    let mut found = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return found;
    };
    for e in rd.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pid == except || pid == std::process::id() {
            continue;
        }
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if dirs.iter().any(|d| cmd.contains(&*d.to_string_lossy())) {
            found.push(format!("{pid}: {cmd}"));
        }
    }
    found
}

/// cri-tools' `crictl`: on PATH, or where `go install` puts it.
pub fn crictl_binary() -> Result<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join("crictl"));
    let go_bin = std::env::var_os("HOME").map(|h| Path::new(&h).join("go/bin/crictl"));
    on_path
        .chain(go_bin)
        .chain([PathBuf::from("/root/go/bin/crictl")])
        .find(|p| p.is_file())
        .ok_or_else(|| {
            HarnessError::Failed(
                "crictl is missing (scripts/setup.sh --tests installs cri-tools' crictl)".into(),
            )
        })
}

/// A static binary that prints its first argument, then waits for
/// SIGTERM/SIGINT and exits 0: the pod's pause process under runc and a
/// sidecar.
pub fn idle_binary(dir: &Path) -> Result<Vec<u8>> {
    static_binary(
        dir,
        "idle",
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
}

/// `source` (C) built with `gcc -static` in `dir` as `name`: the binary.
pub fn static_binary(dir: &Path, name: &str, source: &str) -> Result<Vec<u8>> {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source)?;
    let out = dir.join(name);
    let o = Command::new("gcc")
        .args(["-static", "-O2", "-o"])
        .arg(&out)
        .arg(&src)
        .output()
        .context("running gcc (scripts/setup.sh installs it)")?;
    if !o.status.success() {
        fail!(
            HarnessError::Failed,
            "gcc -static: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    Ok(std::fs::read(out)?)
}

/// A pod as `crictl runp` (or the gRPC call) made it: its id, its config
/// file and the same config as the CRI message.
#[derive(Debug, Clone)]
pub struct Pod {
    pub id: String,
    pub config: String,
    sandbox: Msg,
}

/// A host directory bind-mounted into a container.
pub struct Mount<'a> {
    pub host: &'a Path,
    pub container: &'a str,
    pub readonly: bool,
}

/// How the harness makes its CRI calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CriCalls {
    /// one `crictl` process per call (its start is part of every call)
    Crictl,
    /// the kubelet's way: gRPC on one connection kept open
    Grpc,
}

/// A private containerd serving CRI in its own network namespace, with a
/// pod network, the pause image and the crictl client; pods are started
/// through crictl, or with [`Cri::use_grpc`] through the gRPC API directly.
pub struct Cri {
    pub c: Containerd,
    pub netns: Netns,
    crictl: PathBuf,
    grpc: Option<CriClient>,
}

impl Cri {
    /// containerd on `base` (see [`Containerd::start`]) in a new network
    /// namespace with a bridge pod network on `subnet` (e.g. 10.88.0.0/24),
    /// and the pause image (plus `native`: (reference, entry) images of
    /// the idle binary) imported; containerd logs at `log_level` (`info`;
    /// `debug`: every step of its calls timestamped).
    pub fn start(
        base: &Path,
        thaw_socket: &Path,
        shim_dir: &Path,
        subnet: &str,
        native: &[(&str, &str)],
        log_level: &str,
    ) -> Result<Cri> {
        for plugin in ["bridge", "host-local", "loopback"] {
            if !Path::new(CNI_BIN).join(plugin).exists() {
                fail!(HarnessError::Failed, "the CNI plugin {plugin} is missing from {CNI_BIN} (scripts/setup.sh --tests installs containernetworking-plugins)");
            }
        }
        let crictl = crictl_binary()?;
        let netns = Netns::new(unique("thaw-cri", "ns"))?;
        std::fs::create_dir_all(base.join("cni"))?;
        // the bridge and the pods' addresses exist only in the netns; each
        // pod's default route is the bridge (host-local's route, which the
        // bridge plugin installs with the bridge as gateway): without it a
        // pod answers only its own subnet, never another node's address
        std::fs::write(
            base.join("cni/10-thaw-test.conflist"),
            serde_json::to_string_pretty(&json!({
                "cniVersion": "0.4.0",
                "name": "thaw-test",
                "plugins": [{
                    "type": "bridge",
                    "bridge": "thawbr0",
                    "isGateway": true,
                    "ipMasq": false,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": subnet}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": base.join("ipam"),
                    },
                }],
            }))?,
        )?;
        std::fs::write(
            base.join("crictl.yaml"),
            format!(
                "runtime-endpoint: unix://{s}\nimage-endpoint: unix://{s}\ntimeout: 120\n",
                s = base.join("containerd.sock").display()
            ),
        )?;
        let c = Containerd::start_at(
            base,
            thaw_socket,
            shim_dir,
            Some(&netns),
            "k8s.io",
            log_level,
        )?;
        let idle = idle_binary(base)?;
        for &(reference, entry) in [(PAUSE_IMAGE, "pause")].iter().chain(native) {
            let built = thaw_server::image::build_native(
                &[(entry, idle.as_slice(), 0o755)],
                &[&format!("/{entry}")],
                reference,
            )?;
            let archive = base.join(format!("{entry}.oci.tar"));
            std::fs::write(&archive, &built.archive)?;
            c.import(&archive)?;
        }
        Ok(Cri {
            c,
            netns,
            crictl,
            grpc: None,
        })
    }

    /// Makes the pod calls (run, create + start, status, stop + remove)
    /// over a gRPC connection to containerd instead of crictl processes.
    pub fn use_grpc(&mut self) -> Result<()> {
        self.grpc = Some(CriClient::connect(&self.c.socket)?);
        Ok(())
    }

    /// How the pod calls are made.
    pub fn calls(&self) -> CriCalls {
        match self.grpc {
            Some(_) => CriCalls::Grpc,
            None => CriCalls::Crictl,
        }
    }

    pub fn crictl(&self, args: &[&str]) -> Result<Output> {
        Command::new(&self.crictl)
            .arg("--config")
            .arg(self.c.dir.join("crictl.yaml"))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .context("running crictl")
            .map_err(HarnessError::from)
    }

    /// `crictl ARGS`, which must succeed: its stdout, trimmed.
    pub fn run(&self, args: &[&str]) -> Result<String> {
        let o = self.crictl(args)?;
        if !o.status.success() {
            fail!(
                HarnessError::Failed,
                "crictl {args:?}: {}\n{}\ncontainerd's log: {}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr),
                self.c.log()
            );
        }
        Ok(String::from_utf8_lossy(&o.stdout).trim().to_string())
    }

    /// `crictl COMMAND -o json ID`.
    pub fn json(&self, command: &str, id: &str) -> Result<Value> {
        Ok(serde_json::from_str(
            &self.run(&[command, "-o", "json", id])?,
        )?)
    }

    /// A config file for `crictl runp` / `create`.
    pub fn config(&self, name: &str, v: Value) -> Result<String> {
        let p = self.c.dir.join(format!("{name}.json"));
        std::fs::write(&p, v.to_string())?;
        Ok(p.to_string_lossy().into_owned())
    }

    /// `crictl runp --runtime RUNTIME` of a pod named `name` with these
    /// annotations (`runtime`: a runtime handler of the CRI plugin, `thaw`
    /// or `runc`).
    pub fn run_pod(&self, name: &str, runtime: &str, annotations: Value) -> Result<Pod> {
        let logs = self.c.dir.join("logs").join(name);
        let uid = format!("uid-{name}");
        let config = self.config(
            &format!("pod-{name}"),
            json!({
                "metadata": {"name": name, "namespace": "default", "uid": uid, "attempt": 1},
                "hostname": name,
                "log_directory": logs,
                "dns_config": {"servers": [POD_RESOLVER]},
                "annotations": annotations,
                "linux": {},
            }),
        )?;
        // PodSandboxConfig: metadata (name, uid, namespace, attempt),
        // hostname, log_directory, dns_config (servers), annotations, linux
        let mut sandbox = Msg::default()
            .msg(
                1,
                &Msg::default()
                    .str(1, name)
                    .str(2, &uid)
                    .str(3, "default")
                    .uint(4, 1),
            )
            .str(2, name)
            .str(3, &logs.to_string_lossy())
            .msg(4, &Msg::default().str(1, POD_RESOLVER));
        for (k, v) in annotations.as_object().into_iter().flatten() {
            sandbox = sandbox.entry(7, k, v.as_str().unwrap_or_default());
        }
        let sandbox = sandbox.msg(8, &Msg::default());
        let id = match &self.grpc {
            // RunPodSandboxRequest: config, runtime_handler; the answer's pod_sandbox_id
            Some(g) => g.call_for_string(
                "RunPodSandbox",
                &Msg::default().msg(1, &sandbox).str(2, runtime),
                &[1],
            )?,
            None => self.run(&["runp", "--runtime", runtime, &config])?,
        };
        Ok(Pod {
            id,
            config,
            sandbox,
        })
    }

    /// `crictl create` + `start` of a container of `image` in the pod
    /// (with `PORT=8080`, `envs` and `mounts`).
    pub fn run_container(
        &self,
        pod: &Pod,
        name: &str,
        image: &str,
        args: &[&str],
        envs: &[(&str, &str)],
        mounts: &[Mount],
    ) -> Result<String> {
        let envs: Vec<Value> = [("PORT", "8080")]
            .iter()
            .chain(envs)
            .map(|(k, v)| json!({"key": k, "value": v}))
            .collect();
        if let Some(g) = &self.grpc {
            return grpc_container(g, pod, name, image, args, &envs, mounts);
        }
        let mounts: Vec<Value> = mounts
            .iter()
            .map(|m| json!({"host_path": m.host, "container_path": m.container, "readonly": m.readonly}))
            .collect();
        let config = self.config(
            &format!("ctr-{}-{name}", &pod.id[..12.min(pod.id.len())]),
            json!({
                "metadata": {"name": name},
                "image": {"image": image},
                "args": args,
                "envs": envs,
                "mounts": mounts,
                "log_path": format!("{name}.log"),
                "linux": {},
            }),
        )?;
        let id = self.run(&["create", "--no-pull", &pod.id, &config, &pod.config])?;
        self.run(&["start", &id])?;
        Ok(id)
    }

    /// The IP of a ready pod sandbox labelled `key=value`, if there is one
    /// (one call on the gRPC connection after [`Cri::use_grpc`], no process;
    /// else crictl).
    pub fn ready_pod_ip(&self, key: &str, value: &str) -> Result<Option<String>> {
        let id = match &self.grpc {
            // ListPodSandboxRequest.filter: state SANDBOX_READY (0: an empty
            // value, present) and the label; the answer's items[].id
            Some(g) => {
                let filter = Msg::default().msg(2, &Msg::default()).entry(3, key, value);
                g.call_for_string("ListPodSandbox", &Msg::default().msg(1, &filter), &[1, 1])?
            }
            None => {
                let label = format!("{key}={value}");
                let ids = self.run(&["pods", "--label", &label, "--state", "ready", "-q"])?;
                ids.lines().next().unwrap_or_default().to_string()
            }
        };
        if id.is_empty() {
            return Ok(None);
        }
        self.pod_ip(&id).map(Some)
    }

    pub fn pod_ip(&self, pod: &str) -> Result<String> {
        if let Some(g) = &self.grpc {
            // PodSandboxStatusResponse.status.network.ip
            let ip =
                g.call_for_string("PodSandboxStatus", &Msg::default().str(1, pod), &[1, 5, 1])?;
            if ip.is_empty() {
                fail!(HarnessError::Failed, "the pod {pod} has no IP");
            }
            return Ok(ip);
        }
        let v = self.json("inspectp", pod)?;
        v["status"]["network"]["ip"]
            .as_str()
            .filter(|ip| !ip.is_empty())
            .map(str::to_string)
            .ok_or_else(|| HarnessError::Failed(format!("the pod has no IP: {v}")))
    }

    /// The pid of a running container, as containerd reports it.
    pub fn pid(&self, container: &str) -> Result<u32> {
        let v = self.json("inspect", container)?;
        v["info"]["pid"]
            .as_u64()
            .and_then(|p| u32::try_from(p).ok())
            .ok_or_else(|| HarnessError::Failed(format!("no pid in {v}")))
    }

    /// Stops and removes the pod (its containers go with it).
    pub fn remove_pod(&self, pod: &str) -> Result<()> {
        if let Some(g) = &self.grpc {
            let req = Msg::default().str(1, pod);
            g.call("StopPodSandbox", &req)?;
            g.call("RemovePodSandbox", &req)?;
            return Ok(());
        }
        self.run(&["stopp", pod])?;
        self.run(&["rmp", pod])?;
        Ok(())
    }
}

/// `CreateContainer` + `StartContainer` over gRPC, with the fields
/// [`Cri::run_container`] gives crictl.
fn grpc_container(
    g: &CriClient,
    pod: &Pod,
    name: &str,
    image: &str,
    args: &[&str],
    envs: &[Value],
    mounts: &[Mount],
) -> Result<String> {
    // ContainerConfig: metadata (name), image (image), args, envs
    // (key, value), mounts (container_path, host_path, readonly),
    // log_path, linux
    let mut config = Msg::default()
        .msg(1, &Msg::default().str(1, name))
        .msg(2, &Msg::default().str(1, image));
    for a in args {
        config = config.str(4, a);
    }
    for e in envs {
        config = config.msg(
            6,
            &Msg::default()
                .str(1, e["key"].as_str().unwrap_or_default())
                .str(2, e["value"].as_str().unwrap_or_default()),
        );
    }
    for m in mounts {
        config = config.msg(
            7,
            &Msg::default()
                .str(1, m.container)
                .str(2, &m.host.to_string_lossy())
                .uint(3, u64::from(m.readonly)),
        );
    }
    let config = config
        .str(11, &format!("{name}.log"))
        .msg(15, &Msg::default());
    // CreateContainerRequest: pod_sandbox_id, config, sandbox_config
    let id = g.call_for_string(
        "CreateContainer",
        &Msg::default()
            .str(1, &pod.id)
            .msg(2, &config)
            .msg(3, &pod.sandbox),
        &[1],
    )?;
    g.call("StartContainer", &Msg::default().str(1, &id))?;
    Ok(id)
}

impl Drop for Cri {
    /// Pods left go too (their processes, mounts and the CNI plugin's
    /// state), before containerd stops.
    fn drop(&mut self) {
        let _ = self.crictl(&["rmp", "--all", "--force"]);
    }
}
