//! The harness of the shim's tests: a `thaw serve` on a temporary home, a
//! private containerd (its own root, state, socket and config with the
//! thaw runtime registered; the shim binary first on its PATH), test
//! network namespaces, images, and checks that nothing is left behind.
// each test binary uses a part of it
#![allow(dead_code)]
pub mod kube;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use thaw_client::{Client, Target};
pub use thaw_kube_harness::containerd::{
    self, processes_naming, Containerd, Netns, PAUSE_IMAGE, RUNTIME,
};

pub const NS: &str = "thawtest";

pub fn unique(name: &str) -> String {
    containerd::unique("thaw-shim", name)
}

/// `thaw serve` in-process on a temporary home (the runtime root shared;
/// `thaw_server::testing`): stopped and its home removed when dropped.
pub struct Daemon {
    daemon: thaw_server::TempDaemon,
    pub home: PathBuf,
}

impl Daemon {
    pub fn start(home: PathBuf) -> Daemon {
        Daemon::start_with(home, |_| {})
    }

    /// A daemon that imports containers' root filesystems from below
    /// `roots_from` (a test's containerd directory).
    pub fn start_importing_from(home: PathBuf, roots_from: Vec<PathBuf>) -> Daemon {
        Daemon::start_with(home, |cfg| cfg.image_roots_from = roots_from)
    }

    /// A daemon whose configuration `configure` changes first.
    pub fn start_with(home: PathBuf, configure: impl FnOnce(&mut thaw_server::Config)) -> Daemon {
        let mut cfg = thaw_server::Config {
            home: home.clone(),
            runtime_home: Some(thaw_runtime::default_home()),
            drain_grace_s: 5,
            ..thaw_server::Config::default()
        };
        configure(&mut cfg);
        Daemon {
            daemon: thaw_server::TempDaemon::start(cfg),
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

    /// Deletes function `name` (`DELETE /v1/functions/NAME`, which must
    /// succeed), then holds its deploy lock as another deploy of it would:
    /// the next deploy of it waits, then is answered 503 `busy`.
    pub fn delete_and_hold(&self, name: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let r = Client::new(Target::Unix(self.socket()))
            .request("DELETE", &format!("/v1/functions/{name}"), None)
            .unwrap();
        let body = String::from_utf8_lossy(&r.body);
        assert_eq!(r.status, 204, "DELETE {name}: {body}");
        self.app()
            .deploy_lock(name)
            .try_lock_owned()
            .expect("the function's lock is free")
    }

    /// The running daemon's state (its locks, for tests that hold one).
    pub fn app(&self) -> std::sync::Arc<thaw_server::App> {
        self.daemon.app().clone()
    }

    /// `GET /v1/functions/NAME`.
    pub fn function(&self, name: &str) -> serde_json::Value {
        self.get(&format!("/v1/functions/{name}")).json().unwrap()
    }

    /// `DELETE /v1/functions/NAME`, which must succeed (the node lost it).
    pub fn delete(&self, name: &str) {
        let r = Client::new(Target::Unix(self.socket()))
            .request("DELETE", &format!("/v1/functions/{name}"), None)
            .unwrap();
        assert_eq!(r.status, 204, "{}", String::from_utf8_lossy(&r.body));
    }

    /// `GET /v1/functions/NAME/stats`.
    pub fn stats(&self, name: &str) -> serde_json::Value {
        self.get(&format!("/v1/functions/{name}/stats"))
            .json()
            .unwrap()
    }

    /// The sum of the series whose lines start with `prefix` (0 if none).
    pub fn metric(&self, prefix: &str) -> f64 {
        self.metrics()
            .lines()
            .filter_map(|l| l.strip_prefix(prefix))
            .filter_map(|v| v.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// The daemon's Prometheus text.
    pub fn metrics(&self) -> String {
        String::from_utf8_lossy(&self.get("/metrics").body).into_owned()
    }

    /// The daemon's metrics count a restore.
    pub fn assert_restored(&self) {
        let metrics = self.metrics();
        assert!(
            metrics
                .lines()
                .any(|l| l.starts_with("thaw_restore_duration_seconds_count") && !l.ends_with(" 0")),
            "the daemon restored the function: {metrics}"
        );
    }

    /// How many root filesystems the daemon imported.
    pub fn imported_roots(&self) -> usize {
        std::fs::read_dir(self.home.join("serve/roots")).map_or(0, |d| d.count())
    }

    pub fn stop(&mut self) {
        self.daemon.stop();
    }
}

pub fn repo_file(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

/// The shim's binary, a binary of another package, which cargo does not
/// build for this crate's tests.
const SHIM: &str = "containerd-shim-thaw-v1";
const BUILD_SHIM: &str = "cargo build --release -p thaw-shim";

/// The directory of the shim under test: the target directory this test
/// was built into (`target/release` for `target/release/deps/TEST`), where
/// `cargo build -p thaw-shim` puts it. A shim older than one of its
/// sources (as its dep-info lists them) would test old code: refused.
pub fn shim_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("this test's path");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("a test binary under TARGET/PROFILE/deps")
        .to_path_buf();
    let shim = dir.join(SHIM);
    let built = std::fs::metadata(&shim)
        .and_then(|m| m.modified())
        .unwrap_or_else(|e| panic!("{}: {e}: build it first ({BUILD_SHIM})", shim.display()));
    let dep_info = dir.join(format!("{SHIM}.d"));
    let deps = std::fs::read_to_string(&dep_info).unwrap_or_else(|e| {
        panic!(
            "{}: {e}: build the shim with {BUILD_SHIM}",
            dep_info.display()
        )
    });
    let newer: Vec<PathBuf> = dep_info_sources(&deps)
        .into_iter()
        .filter(|src| {
            std::fs::metadata(src)
                .and_then(|m| m.modified())
                .is_ok_and(|t| t > built)
        })
        .collect();
    assert!(
        newer.is_empty(),
        "{} is older than {newer:?}: rebuild it ({BUILD_SHIM})",
        shim.display()
    );
    dir
}

/// The sources a cargo dep-info file names after its target (`TARGET:
/// SRC SRC...`, a space in a path escaped as `\ `).
fn dep_info_sources(deps: &str) -> Vec<PathBuf> {
    let Some((_, sources)) = deps.lines().next().and_then(|l| l.split_once(": ")) else {
        return Vec::new();
    };
    sources
        .replace("\\ ", "\0")
        .split_whitespace()
        .map(|p| PathBuf::from(p.replace('\0', " ")))
        .collect()
}

/// A private containerd (`ctr` in the test namespace) next to `thaw_socket`.
pub fn start_containerd(dir: &Path, thaw_socket: &Path) -> Containerd {
    let c = Containerd::start(dir, thaw_socket, &shim_dir(), None, NS).expect("containerd");
    check_config(&c);
    c
}

/// containerd's own view of its configuration registers the runtime with
/// the CRI plugin (the guide's fragment, merged in).
pub fn check_config(c: &Containerd) {
    let dump = Command::new("/usr/bin/containerd")
        .arg("--config")
        .arg(c.dir.join("config.toml"))
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
}

/// What a test asks of `ctr` / `crictl`: success, its stdout.
pub trait Checked {
    fn ok(&self, args: &[&str]) -> String;
}

impl Checked for Containerd {
    fn ok(&self, args: &[&str]) -> String {
        self.run(args).unwrap_or_else(|e| panic!("{e:#}"))
    }
}

impl Checked for containerd::Cri {
    fn ok(&self, args: &[&str]) -> String {
        self.run(args).unwrap_or_else(|e| panic!("{e:#}"))
    }
}

/// No process names this test's directories, nothing is mounted under
/// them, and the shim sockets of these containers are gone.
pub fn assert_nothing_left(c: &Containerd, ids: &[&str], daemon_home: &Path) {
    let t = Instant::now();
    loop {
        let procs = processes_naming(&[&c.dir, daemon_home], c.pid());
        let mounts: Vec<String> = std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .filter(|l| l.contains(&format!("{}/", c.dir.display())))
            .map(str::to_string)
            .collect();
        let sockets: Vec<String> = ids
            .iter()
            .map(|id| {
                containerd_shim::socket_address(c.socket.to_str().unwrap(), c.namespace, id)
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

/// A function's code directory and its image, imported into containerd.
pub fn import_function(c: &Containerd, name: &str, source: &str) -> String {
    import_function_into(&[c], name, source)
}

/// One image of a function (one archive, so the same files and times
/// everywhere), imported into each of `cs`.
pub fn import_function_into(cs: &[&Containerd], name: &str, source: &str) -> String {
    let dir = &cs[0].dir;
    let code = dir.join(format!("{name}-code"));
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
    let archive = dir.join(format!("{name}.oci.tar"));
    std::fs::write(&archive, &built.archive).unwrap();
    for c in cs {
        let out = c.ok(&["images", "import", archive.to_str().unwrap()]);
        assert!(out.contains(&reference), "import: {out}");
    }
    reference
}

/// A function image of whole root filesystem layers (`base`, lowest
/// first: e.g. thaw's runtime root as `thaw image build` makes it) and
/// the code, imported into containerd.
pub fn import_rooted_function(
    c: &Containerd,
    name: &str,
    source: &str,
    base: &[thaw_server::image::Layer],
) -> String {
    let code = c.dir.join(format!("{name}-code"));
    std::fs::create_dir_all(&code).unwrap();
    std::fs::write(code.join("main.py"), source).unwrap();
    let reference = format!("thaw.local/{name}:latest");
    let archive = c.dir.join(format!("{name}.oci.tar"));
    let mut out = std::fs::File::create(&archive).unwrap();
    thaw_server::image::build_on(
        &thaw_server::image::ImageSpec {
            code: &code,
            handler: "main.handler",
            init: None,
            reference: &reference,
        },
        base,
        &mut out,
    )
    .unwrap();
    drop(out);
    let out = c.ok(&["images", "import", archive.to_str().unwrap()]);
    assert!(out.contains(&reference), "import: {out}");
    std::fs::remove_file(&archive).unwrap();
    reference
}

/// The base layer `thaw image build` gives a function image: thaw's
/// runtime root (built once, cached under the runtime home).
pub fn runtime_layer() -> thaw_server::image::Layer {
    let home = thaw_runtime::default_home();
    let root = thaw_runtime::ensure_root(&home, &mut |m| eprintln!("runtime: {m}"))
        .expect("the runtime root (thaw runtime build)");
    thaw_server::image::runtime_layer(&root.path, &root.hash, &home.join("images"))
        .expect("the runtime root's layer")
}

/// A layer of `files` ((path, content)) written into `dir` first.
pub fn files_layer(dir: &Path, files: &[(&str, &str)]) -> thaw_server::image::Layer {
    let tree = dir.join("tree");
    for (path, content) in files {
        let p = tree.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }
    thaw_server::image::layer_from_dir(&tree, &dir.join("layer.tar.gz")).unwrap()
}

/// Reads a file only the image's root filesystem has, and says whether
/// thaw's agent is there beside it.
pub const READS_THE_IMAGE: &str = r#"
import os
def handler(event):
    with open("/etc/thaw-image-marker") as f:
        marker = f.read()
    print("marker", marker)
    return {"marker": marker, "agent": os.path.exists("/opt/thaw/agent.py")}
"#;

pub const GREETER: &str = r#"
def handler(event):
    event = event or {}
    print("greeting", event.get("name"))
    if event.get("fail"):
        raise ValueError("asked to fail")
    return {"greeting": "hi " + str(event.get("name"))}
"#;

/// A network namespace the test makes (loopback up) and removes.
pub fn test_netns() -> Netns {
    Netns::new(unique("ns")).expect("making a netns")
}

/// One HTTP POST to `addr:port` inside `ns` (retried while nothing listens
/// yet): status line, headers and body.
pub fn post(ns: &Netns, addr: &str, port: u16, body: &str) -> String {
    ns.post_to(addr, port, body, Duration::from_secs(20))
        .unwrap_or_else(|e| panic!("{e:#}"))
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

/// Debian's registry (`docker-registry`, the distribution registry)
/// serving plain HTTP on 127.0.0.1:5000 in a network namespace of its own,
/// storing under `dir`; killed on drop. Its clients run in that namespace
/// ([`Registry::client`]).
pub struct Registry {
    pub netns: Netns,
    child: std::process::Child,
}

pub const REGISTRY: &str = "127.0.0.1:5000";

impl Registry {
    pub fn start(dir: &Path) -> Registry {
        let bin = Path::new("/usr/bin/docker-registry");
        assert!(
            bin.exists(),
            "{} is missing (scripts/setup.sh --tests installs docker-registry)",
            bin.display()
        );
        std::fs::create_dir_all(dir.join("store")).unwrap();
        let config = dir.join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {REGISTRY}\n",
                dir.join("store").display()
            ),
        )
        .unwrap();
        let netns = test_netns();
        let log = std::fs::File::create(dir.join("registry.log")).unwrap();
        // nsenter execs the registry: the child is the registry itself
        let child = Command::new("/usr/bin/nsenter")
            .arg(format!("--net={}", netns.path()))
            .arg(bin)
            .arg("serve")
            .arg(&config)
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("starting docker-registry");
        let mut r = Registry { netns, child };
        let t = Instant::now();
        loop {
            let up = r
                .netns
                .within(|| Ok(std::net::TcpStream::connect(REGISTRY).is_ok()))
                .unwrap();
            if up {
                return r;
            }
            if let Ok(Some(status)) = r.child.try_wait() {
                panic!(
                    "docker-registry exited ({status}): {}",
                    std::fs::read_to_string(dir.join("registry.log")).unwrap_or_default()
                );
            }
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "docker-registry does not listen on {REGISTRY} after 20 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `program` run in the registry's network namespace.
    pub fn client(&self, program: &str) -> Command {
        let mut c = Command::new("/usr/bin/nsenter");
        c.arg(format!("--net={}", self.netns.path())).arg(program);
        c
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A command's stdout; it must succeed.
pub fn succeeds(cmd: &mut Command) -> String {
    let o = cmd
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(o.status.success(), "{cmd:?}: {o:?}");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The emulated object store two nodes share (MinIO in a network
/// namespace, with thaw's relay in front of it), on a home of its own, set
/// up and torn down by the `thaw` binary built beside the shim (`thaw tier
/// setup --tiers remote`, as the shared snapshots test does): torn down
/// and removed when it goes.
pub struct SharedStore {
    pub home: PathBuf,
    pub tier: thaw_tiers::TierConfig,
}

impl SharedStore {
    fn thaw(home: &Path, args: &[&str]) -> std::process::Output {
        let thaw = shim_dir().join("thaw");
        assert!(
            thaw.is_file(),
            "{} is missing: the shared store is set up by the thaw binary (cargo build --release -p thaw-cli)",
            thaw.display()
        );
        std::process::Command::new(thaw)
            .arg("--home")
            .arg(home)
            .args(args)
            .output()
            .expect("running thaw")
    }

    pub fn up(home: PathBuf) -> SharedStore {
        std::fs::create_dir_all(&home).unwrap();
        let o = SharedStore::thaw(&home, &["tier", "setup", "--tiers", "remote"]);
        let tier = thaw_tiers::TiersConfig::load(&home)
            .ok()
            .and_then(|t| t.get("remote").ok().cloned());
        let s = SharedStore {
            home,
            tier: tier.unwrap_or_else(|| panic!("no remote tier: {o:?}")),
        };
        assert!(o.status.success(), "thaw tier setup: {o:?}");
        s
    }

    /// A node's daemon on `home`, sharing snapshots through this store.
    pub fn node(&self, home: PathBuf) -> Daemon {
        Daemon::start_with(home, |cfg| {
            thaw_tiers::remote::join(&cfg.home, &self.home, &self.tier)
                .unwrap_or_else(|e| panic!("joining the shared store: {e:#}"));
            cfg.snapshot_tiers = thaw_server::config::SnapshotTiers::parse("tmpfs,remote").unwrap();
            cfg.shared_snapshots = true;
        })
    }
}

impl Drop for SharedStore {
    fn drop(&mut self) {
        let o = SharedStore::thaw(
            &self.home,
            &["tier", "teardown", "--tiers", "remote", "--force"],
        );
        let _ = std::fs::remove_dir_all(&self.home);
        assert!(
            o.status.success() || std::thread::panicking(),
            "thaw tier teardown: {o:?}"
        );
    }
}

/// The sum of a restore counter's series of `tier`, in the metrics' text.
pub fn restores_from(daemon: &Daemon, tier: &str) -> f64 {
    daemon
        .metrics()
        .lines()
        .filter(|l| {
            l.starts_with("thaw_restore_duration_seconds_count{")
                && l.contains(&format!("tier=\"{tier}\""))
        })
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}
