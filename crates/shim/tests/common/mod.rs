//! The harness of the shim's tests: a `thaw serve` on a temporary home, a
//! private containerd (its own root, state, socket and config with the
//! thaw runtime registered; the shim binary first on its PATH), test
//! network namespaces, images, and checks that nothing is left behind.
// each test binary uses a part of it
#![allow(dead_code)]
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use thaw_client::{Client, Target};

static N: AtomicU32 = AtomicU32::new(0);
pub const NS: &str = "thawtest";
pub const RUNTIME: &str = "io.containerd.thaw.v1";
/// The CRI plugin's pause image: imported by each CRI test, never pulled.
pub const PAUSE_IMAGE: &str = "thaw.local/pause:test";
/// Debian's containernetworking-plugins.
pub const CNI_BIN: &str = "/usr/lib/cni";

pub fn unique(name: &str) -> String {
    format!(
        "thaw-shim-{}-{}-{name}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    )
}

/// `thaw serve` in-process on a temporary home (the runtime root shared).
pub struct Daemon {
    rt: tokio::runtime::Runtime,
    running: Option<thaw_server::Running>,
    pub home: PathBuf,
}

impl Daemon {
    pub fn start(home: PathBuf) -> Daemon {
        let cfg = thaw_server::Config {
            home: home.clone(),
            runtime_home: Some(thaw_runtime::default_home()),
            drain_grace_s: 5,
            ..thaw_server::Config::default()
        };
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let running = rt.block_on(async move {
            let app = tokio::task::spawn_blocking(move || thaw_server::open(cfg))
                .await
                .unwrap()
                .expect("opening the daemon");
            thaw_server::start(app, false)
                .await
                .expect("starting the daemon")
        });
        Daemon {
            rt,
            running: Some(running),
            home,
        }
    }

    pub fn socket(&self) -> PathBuf {
        self.home.join("serve").join("thaw.sock")
    }

    pub fn functions(&self) -> Vec<String> {
        self.get("/v1/functions").json().unwrap()["functions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["name"].as_str().unwrap().to_string())
            .collect()
    }

    fn get(&self, path: &str) -> thaw_client::Response {
        let r = Client::new(Target::Unix(self.socket()))
            .request("GET", path, None)
            .unwrap();
        assert_eq!(r.status, 200, "GET {path}");
        r
    }

    /// `GET /v1/functions/NAME`.
    pub fn function(&self, name: &str) -> serde_json::Value {
        self.get(&format!("/v1/functions/{name}")).json().unwrap()
    }

    /// The daemon's Prometheus text.
    pub fn metrics(&self) -> String {
        String::from_utf8_lossy(&self.get("/metrics").body).into_owned()
    }

    pub fn stop(&mut self) {
        if let Some(r) = self.running.take() {
            self.rt.block_on(r.stop());
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
        thaw_server::remove_home(&self.home).expect("removing the daemon's home");
    }
}

/// A private containerd.
pub struct Containerd {
    pub dir: PathBuf,
    pub socket: PathBuf,
    child: Child,
    /// The containerd namespace `ctr` works in (`k8s.io` for the CRI's).
    pub namespace: &'static str,
}

pub fn repo_file(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

pub fn shim_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_containerd-shim-thaw-v1"))
        .parent()
        .unwrap()
        .to_path_buf()
}

impl Containerd {
    pub fn start(dir: &Path, thaw_socket: &Path) -> Containerd {
        Containerd::start_in(dir, thaw_socket, None, NS)
    }

    /// containerd in the network namespace `netns` (the CRI plugin's CNI
    /// bridge is made there, never in the host's), `ctr` working in
    /// `namespace`. Its CRI plugin runs pods from local images only: the
    /// pause image is `PAUSE_IMAGE`, the pod network the test's CNI config
    /// (`cni_config`).
    pub fn start_in(
        dir: &Path,
        thaw_socket: &Path,
        netns: Option<&TestNetns>,
        namespace: &'static str,
    ) -> Containerd {
        assert!(
            Path::new("/usr/bin/containerd").exists() && Path::new("/usr/bin/ctr").exists(),
            "containerd and ctr are missing (scripts/setup.sh installs Debian's containerd)"
        );
        std::fs::create_dir_all(dir).unwrap();
        let socket = dir.join("containerd.sock");
        let config = format!(
            r#"version = 2
root = "{d}/root"
state = "{d}/state"
[grpc]
  address = "{s}"
[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
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
        let fragment =
            std::fs::read_to_string(repo_file("deploy/kubernetes/containerd-thaw.toml")).unwrap();
        let config = format!(
            "{config}{}",
            fragment
                .lines()
                .filter(|l| !l.starts_with("version"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        std::fs::write(dir.join("config.toml"), config).unwrap();
        let dump = Command::new("/usr/bin/containerd")
            .arg("--config")
            .arg(dir.join("config.toml"))
            .args(["config", "dump"])
            .output()
            .expect("containerd config dump");
        let dump = String::from_utf8_lossy(&dump.stdout);
        assert!(
            dump.contains("[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.thaw]")
                && dump.contains(&format!("runtime_type = \"{RUNTIME}\""))
                && dump.contains(&format!("sandbox_image = \"{PAUSE_IMAGE}\"")),
            "the fragment does not register the runtime: {dump}"
        );
        let log = std::fs::File::create(dir.join("containerd.log")).unwrap();
        let path = format!(
            "{}:{}",
            shim_dir().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut cmd = Command::new("/usr/bin/containerd");
        cmd.arg("--config")
            .arg(dir.join("config.toml"))
            .env("PATH", path)
            .env("THAW_SOCKET", thaw_socket)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        if let Some(ns) = netns {
            let f = std::fs::File::open(ns.path()).expect("the test's netns");
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
        let child = cmd.spawn().expect("starting containerd");
        let c = Containerd {
            dir: dir.to_path_buf(),
            socket,
            child,
            namespace,
        };
        let t = Instant::now();
        while !c.ctr(&["version"]).status.success() {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "containerd did not come up: {}",
                std::fs::read_to_string(dir.join("containerd.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        c
    }

    pub fn ctr(&self, args: &[&str]) -> Output {
        Command::new("/usr/bin/ctr")
            .arg("--address")
            .arg(&self.socket)
            .arg("--namespace")
            .arg(self.namespace)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("running ctr")
    }

    /// `ctr ARGS` must succeed; its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let o = self.ctr(args);
        assert!(
            o.status.success(),
            "ctr {args:?}: {}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// No process names this test's directories, nothing is mounted under
    /// them, and the shim sockets of these containers are gone.
    pub fn assert_nothing_left(&self, ids: &[&str], daemon_home: &Path) {
        let t = Instant::now();
        loop {
            let procs = processes_naming(&[&self.dir, daemon_home], self.child.id());
            let mounts: Vec<String> = std::fs::read_to_string("/proc/self/mountinfo")
                .unwrap()
                .lines()
                .filter(|l| l.contains(&format!("{}/", self.dir.display())))
                .map(str::to_string)
                .collect();
            let sockets: Vec<String> = ids
                .iter()
                .map(|id| {
                    containerd_shim::socket_address(
                        self.socket.to_str().unwrap(),
                        self.namespace,
                        id,
                    )
                    .trim_start_matches("unix://")
                    .to_string()
                })
                .filter(|p| Path::new(p).exists())
                .collect();
            if procs.is_empty() && mounts.is_empty() && sockets.is_empty() {
                return;
            }
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "left behind: processes {procs:?}, mounts {mounts:?}, shim sockets {sockets:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        // SAFETY: signals the containerd this test started.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Processes (other than `except`) whose command line names one of `dirs`.
pub fn processes_naming(dirs: &[&Path], except: u32) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
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
        if dirs.iter().any(|d| cmd.contains(d.to_str().unwrap())) {
            found.push(format!("{pid}: {cmd}"));
        }
    }
    found
}

/// A function's code directory and its image, imported into containerd.
pub fn import_function(c: &Containerd, name: &str, source: &str) -> String {
    let code = c.dir.join(format!("{name}-code"));
    std::fs::create_dir_all(&code).unwrap();
    std::fs::write(code.join("main.py"), source).unwrap();
    let reference = format!("thaw.local/{name}:latest");
    let built = thaw_server::image::build(&thaw_server::image::ImageSpec {
        code: &code,
        handler: "main.handler",
        init: None,
        reference: &reference,
    })
    .unwrap();
    let archive = c.dir.join(format!("{name}.oci.tar"));
    std::fs::write(&archive, &built.archive).unwrap();
    let out = c.ok(&["images", "import", archive.to_str().unwrap()]);
    assert!(out.contains(&reference), "import: {out}");
    reference
}

pub const GREETER: &str = r#"
def handler(event):
    event = event or {}
    print("greeting", event.get("name"))
    if event.get("fail"):
        raise ValueError("asked to fail")
    return {"greeting": "hi " + str(event.get("name"))}
"#;

/// A named network namespace the test makes (loopback up) and removes.
pub struct TestNetns(String);

impl TestNetns {
    pub fn new() -> TestNetns {
        let name = unique("ns");
        let ok = |args: &[&str]| {
            let s = Command::new("ip").args(args).status().expect("running ip");
            assert!(s.success(), "ip {args:?}");
        };
        ok(&["netns", "add", &name]);
        ok(&["-n", &name, "link", "set", "lo", "up"]);
        TestNetns(name)
    }

    pub fn path(&self) -> String {
        format!("/run/netns/{}", self.0)
    }

    /// One HTTP POST to 127.0.0.1:port inside the namespace.
    pub fn post(&self, port: u16, body: &str) -> String {
        self.post_to("127.0.0.1", port, body)
    }

    /// One HTTP POST to `addr:port` from inside the namespace (retried
    /// while nothing listens yet): status line, headers and body.
    pub fn post_to(&self, addr: &str, port: u16, body: &str) -> String {
        let path = self.path();
        let body = body.to_string();
        let addr = addr.to_string();
        std::thread::spawn(move || {
            let ns = std::fs::File::open(&path).unwrap();
            use std::os::fd::AsRawFd;
            // SAFETY: moves this thread alone into the test's namespace.
            assert_eq!(unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) }, 0);
            let t = Instant::now();
            let mut s = loop {
                match std::net::TcpStream::connect((addr.as_str(), port)) {
                    Ok(s) => break s,
                    Err(e) => {
                        assert!(t.elapsed() < Duration::from_secs(20), "connect: {e}");
                        std::thread::sleep(Duration::from_millis(50));
                    }
                }
            };
            write!(
                s,
                "POST / HTTP/1.1\r\nhost: pod\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).unwrap();
            out
        })
        .join()
        .unwrap()
    }
}

impl Drop for TestNetns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

pub fn wait_stopped(c: &Containerd, id: &str) {
    let t = Instant::now();
    while !c
        .ok(&["task", "ls"])
        .lines()
        .any(|l| l.starts_with(id) && l.contains("STOPPED"))
    {
        assert!(t.elapsed() < Duration::from_secs(10), "{id} did not stop");
        std::thread::sleep(Duration::from_millis(50));
    }
}
