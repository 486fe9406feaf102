//! The shim under a real containerd: each test runs a private containerd
//! (its own root, state, socket and config with the thaw runtime
//! registered; the shim binary first on its PATH) beside a `thaw serve`
//! on a temporary home, drives it with `ctr` as a user would, and checks
//! that nothing is left behind: no shim or front process, no mount, no
//! shim socket.
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use thaw_client::{Client, Target};

static N: AtomicU32 = AtomicU32::new(0);
const NS: &str = "thawtest";
const RUNTIME: &str = "io.containerd.thaw.v1";

fn unique(name: &str) -> String {
    format!(
        "thaw-shim-{}-{}-{name}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    )
}

/// `thaw serve` in-process on a temporary home (the runtime root shared).
struct Daemon {
    rt: tokio::runtime::Runtime,
    running: Option<thaw_server::Running>,
    home: PathBuf,
}

impl Daemon {
    fn start(home: PathBuf) -> Daemon {
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

    fn socket(&self) -> PathBuf {
        self.home.join("serve").join("thaw.sock")
    }

    fn functions(&self) -> Vec<String> {
        let r = Client::new(Target::Unix(self.socket()))
            .request("GET", "/v1/functions", None)
            .unwrap();
        r.json().unwrap()["functions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["name"].as_str().unwrap().to_string())
            .collect()
    }

    fn stop(&mut self) {
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
struct Containerd {
    dir: PathBuf,
    socket: PathBuf,
    child: Child,
}

fn repo_file(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

fn shim_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_containerd-shim-thaw-v1"))
        .parent()
        .unwrap()
        .to_path_buf()
}

impl Containerd {
    fn start(dir: &Path, thaw_socket: &Path) -> Containerd {
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
[plugins."io.containerd.grpc.v1.cri".cni]
  conf_dir = "{d}/cni"
"#,
            d = dir.display(),
            s = socket.display()
        );
        // the runtime is registered by the guide's own fragment
        let config = format!(
            "imports = [\"{}\"]\n{config}",
            repo_file("deploy/kubernetes/containerd-thaw.toml").display()
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
                && dump.contains(&format!("runtime_type = \"{RUNTIME}\"")),
            "the fragment does not register the runtime: {dump}"
        );
        let log = std::fs::File::create(dir.join("containerd.log")).unwrap();
        let path = format!(
            "{}:{}",
            shim_dir().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let child = Command::new("/usr/bin/containerd")
            .arg("--config")
            .arg(dir.join("config.toml"))
            .env("PATH", path)
            .env("THAW_SOCKET", thaw_socket)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("starting containerd");
        let c = Containerd {
            dir: dir.to_path_buf(),
            socket,
            child,
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

    fn ctr(&self, args: &[&str]) -> Output {
        Command::new("/usr/bin/ctr")
            .arg("--address")
            .arg(&self.socket)
            .arg("--namespace")
            .arg(NS)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("running ctr")
    }

    /// `ctr ARGS` must succeed; its stdout.
    fn ok(&self, args: &[&str]) -> String {
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
    fn assert_nothing_left(&self, ids: &[&str], daemon_home: &Path) {
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
                    containerd_shim::socket_address(self.socket.to_str().unwrap(), NS, id)
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
fn processes_naming(dirs: &[&Path], except: u32) -> Vec<String> {
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
fn import_function(c: &Containerd, name: &str, source: &str) -> String {
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

const GREETER: &str = r#"
def handler(event):
    event = event or {}
    print("greeting", event.get("name"))
    if event.get("fail"):
        raise ValueError("asked to fail")
    return {"greeting": "hi " + str(event.get("name"))}
"#;

/// A named network namespace the test makes (loopback up) and removes.
struct TestNetns(String);

impl TestNetns {
    fn new() -> TestNetns {
        let name = unique("ns");
        let ok = |args: &[&str]| {
            let s = Command::new("ip").args(args).status().expect("running ip");
            assert!(s.success(), "ip {args:?}");
        };
        ok(&["netns", "add", &name]);
        ok(&["-n", &name, "link", "set", "lo", "up"]);
        TestNetns(name)
    }

    fn path(&self) -> String {
        format!("/run/netns/{}", self.0)
    }

    /// One HTTP POST to 127.0.0.1:port inside the namespace (retried while
    /// nothing listens yet): status line and body.
    fn post(&self, port: u16, body: &str) -> String {
        let path = self.path();
        let body = body.to_string();
        std::thread::spawn(move || {
            let ns = std::fs::File::open(&path).unwrap();
            use std::os::fd::AsRawFd;
            // SAFETY: moves this thread alone into the test's namespace.
            assert_eq!(unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) }, 0);
            let t = Instant::now();
            let mut s = loop {
                match std::net::TcpStream::connect(("127.0.0.1", port)) {
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

fn wait_stopped(c: &Containerd, id: &str) {
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

#[test]
fn a_function_image_runs_once_serves_http_is_killed_and_deleted() {
    let base = std::env::temp_dir().join(unique("run"));
    let daemon = Daemon::start(base.with_extension("home"));
    let c = Containerd::start(&base, &daemon.socket());
    let image = import_function(&c, "greeter", GREETER);

    // one invocation: the function's output and its answer, exit 0
    let out = c.ok(&[
        "run",
        "--rm",
        "--runtime",
        RUNTIME,
        &image,
        "once",
        "invoke",
        r#"{"name": "ctr"}"#,
    ]);
    assert!(out.contains("greeting ctr"), "the function's print: {out}");
    assert!(out.contains(r#""greeting":"hi ctr""#), "the answer: {out}");
    // a second container of the image: the daemon already has the function
    let out = c.ok(&[
        "run",
        "--rm",
        "--runtime",
        RUNTIME,
        &image,
        "again",
        "invoke",
        r#"{"name": "two"}"#,
    ]);
    assert!(out.contains("hi two"), "{out}");
    assert_eq!(daemon.functions().len(), 1, "one deploy for one image");
    // the function raising: exit 1 and the daemon's error on stderr
    let o = c.ctr(&[
        "run",
        "--rm",
        "--runtime",
        RUNTIME,
        &image,
        "fails",
        "invoke",
        r#"{"fail": true}"#,
    ]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("function_error"),
        "{o:?}"
    );

    // a pod's pause container: runs until killed, deploys nothing
    let before = daemon.functions();
    c.ok(&[
        "run",
        "-d",
        "--runtime",
        RUNTIME,
        "--annotation",
        "io.kubernetes.cri.container-type=sandbox",
        &image,
        "pause",
    ]);
    assert_eq!(c.ok(&["task", "ps", "pause"]).lines().count(), 2);
    c.ok(&["task", "kill", "--signal", "SIGKILL", "pause"]);
    wait_stopped(&c, "pause");
    c.ok(&["task", "delete", "pause"]);
    c.ok(&["containers", "rm", "pause"]);
    assert_eq!(daemon.functions(), before);

    // serve: HTTP on $PORT in the namespace it is given, until killed
    let netns = TestNetns::new();
    let with_ns = format!("network:{}", netns.path());
    // in the foreground: `ctr run` waits for the task and exits with its status
    let mut web = Command::new("/usr/bin/ctr")
        .arg("--address")
        .arg(&c.socket)
        .args(["--namespace", NS, "run", "--rm", "--runtime", RUNTIME])
        .args(["--with-ns", &with_ns, "--env", "PORT=8080", &image, "web"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("ctr run");
    let answer = netns.post(8080, r#"{"name": "http"}"#);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("hi http"), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("thaw-start-type"),
        "{answer}"
    );
    let ps = c.ok(&["task", "ps", "web"]);
    assert!(ps.lines().count() == 2, "one process: {ps}");
    c.ok(&["task", "kill", "web"]);
    let mut printed = String::new();
    web.stdout
        .take()
        .unwrap()
        .read_to_string(&mut printed)
        .unwrap();
    let status = web.wait().unwrap();
    assert_eq!(status.code(), Some(143), "SIGTERM's exit status");
    assert!(
        printed.contains("greeting http"),
        "the function's print: {printed}"
    );
    assert!(!c.ok(&["containers", "ls", "-q"]).contains("web"));
    c.assert_nothing_left(&["once", "again", "fails", "pause", "web"], &daemon.home);
}

#[test]
fn bad_images_and_a_daemon_down_fail_clearly_and_leave_nothing() {
    let base = std::env::temp_dir().join(unique("bad"));
    let mut daemon = Daemon::start(base.with_extension("home"));
    let c = Containerd::start(&base, &daemon.socket());
    let run_fails = |image: &str, id: &str, extra: &[&str], cmd: &str, expect: &str| {
        let mut args = vec!["run", "--rm", "--runtime", RUNTIME];
        args.extend_from_slice(extra);
        args.extend_from_slice(&[image, id, cmd]);
        let o = c.ctr(&args);
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(!o.status.success(), "{id} should fail: {o:?}");
        assert!(err.contains(expect), "{id}: expected {expect:?} in: {err}");
    };
    let good = import_function(&c, "good", GREETER);
    // an image whose config names no handler (its THAW_HANDLER emptied)
    run_fails(
        &good,
        "nohandler",
        &["--env", "THAW_HANDLER="],
        "invoke",
        "names no handler",
    );
    // a handler whose module fails to import: the daemon's deploy refuses it
    let broken = import_function(&c, "broken", "raise ImportError('broken on purpose')\n");
    run_fails(&broken, "broken", &[], "invoke", "broken on purpose");
    // a bad setting
    run_fails(
        &good,
        "badmem",
        &["--env", "THAW_MEMORY_MB=lots"],
        "invoke",
        "THAW_MEMORY_MB",
    );
    // a command the runtime does not know
    run_fails(&good, "badcmd", &[], "sh", "unknown command");
    // the node's daemon down
    daemon.stop();
    run_fails(&good, "down", &[], "invoke", "does not answer");
    assert!(c.ok(&["containers", "ls", "-q"]).trim().is_empty());
    c.assert_nothing_left(
        &["nohandler", "broken", "badmem", "badcmd", "down"],
        &daemon.home,
    );
}

/// The Kubernetes manifests parse (PyYAML) and every pod runs on thaw.
#[test]
fn the_kubernetes_manifests_name_the_thaw_runtime() {
    let dir = repo_file("deploy/kubernetes");
    let mut pods = 0;
    let mut runtime_classes = 0;
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        let path = e.path();
        if path.extension().is_none_or(|x| x != "yaml") {
            continue;
        }
        let o = Command::new("/usr/bin/python3")
            .args([
                "-c",
                "import json, sys, yaml; print(json.dumps(list(yaml.safe_load_all(open(sys.argv[1])))))",
            ])
            .arg(&path)
            .output()
            .expect("python3 with PyYAML (scripts/setup.sh installs python3-yaml)");
        assert!(
            o.status.success(),
            "{}: {}",
            path.display(),
            String::from_utf8_lossy(&o.stderr)
        );
        let docs: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        for d in docs.as_array().unwrap() {
            assert!(
                d["apiVersion"].is_string() && d["metadata"]["name"].is_string(),
                "{d}"
            );
            match d["kind"].as_str().unwrap() {
                "RuntimeClass" => {
                    assert_eq!(d["handler"], "thaw");
                    runtime_classes += 1;
                }
                "Deployment" | "Service" if d["spec"]["template"].is_object() => {
                    let spec = &d["spec"]["template"]["spec"];
                    assert_eq!(spec["runtimeClassName"], "thaw", "{}", path.display());
                    assert!(spec["containers"][0]["image"].is_string());
                    pods += 1;
                }
                "Service" => assert!(d["spec"]["ports"].is_array()),
                other => panic!("{}: unexpected kind {other}", path.display()),
            }
        }
    }
    assert_eq!((runtime_classes, pods), (1, 2));
}
