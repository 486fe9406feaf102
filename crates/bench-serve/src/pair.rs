//! Two workers on one machine: two `thaw serve` daemons, each
//! in a network namespace of its own, joined by a veth pair on a private
//! /30 and listing each other as XDT peers. The benchmark and the tests
//! make the pair and remove everything again (daemons, namespaces, links,
//! homes), also when they fail half-way; names or a subnet already in use
//! are refused, never taken over.
use crate::error::{BenchServeError, Result};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use thaw_client::{Client, Target};
use thaw_error::{fail, ResultExt};
use thaw_tiers::netns;

/// Each worker's peer listener port (inside its own namespace).
pub const PEER_PORT: u16 = 7070;
const PREFIX: u8 = 30;
/// The link's MTU: jumbo frames, as datacenter networks between workers
/// use (a 1500-byte MTU costs a softirq per 1.5 kB on these 2 cores).
pub const MTU: u32 = 9000;
/// How long a daemon gets to open its home and answer.
const START_DEADLINE: Duration = Duration::from_secs(180);

/// The link between the two workers' namespaces.
#[derive(Debug, Clone)]
pub struct PairNet {
    pub netns: [String; 2],
    pub links: [String; 2],
    pub addrs: [String; 2],
}

impl PairNet {
    /// Names and a /30 inside 10.214.0.0/16 derived from `tag` (a pid).
    pub fn for_tag(tag: u32) -> PairNet {
        let t = format!("{:06x}", tag & 0xff_ffff);
        let slot = tag % 16_384;
        let (third, fourth) = (slot / 64, (slot % 64) * 4);
        PairNet {
            netns: [format!("thaw-xdt-{t}-a"), format!("thaw-xdt-{t}-b")],
            links: [format!("thx{t}a"), format!("thx{t}b")],
            addrs: [
                format!("10.214.{third}.{}", fourth + 1),
                format!("10.214.{third}.{}", fourth + 2),
            ],
        }
    }

    fn names(&self) -> ([&str; 2], [&str; 2]) {
        (
            [&self.netns[0], &self.netns[1]],
            [&self.links[0], &self.links[1]],
        )
    }

    pub fn up(&self) -> Result<()> {
        let (ns, links) = self.names();
        netns::check_free(&ns, &links, &self.addrs[0], PREFIX)?;
        let end = |i: usize| netns::End {
            link: &self.links[i],
            netns: Some(&self.netns[i]),
            addr: &self.addrs[i],
        };
        netns::link_pair(&end(0), &end(1), PREFIX)?;
        for i in 0..2 {
            netns::set_mtu(&self.netns[i], &self.links[i], MTU)?;
        }
        Ok(())
    }

    pub fn down(&self) -> Result<()> {
        let (ns, links) = self.names();
        Ok(netns::remove(&ns, &links)?)
    }

    pub fn peer_addr(&self, i: usize) -> String {
        format!("{}:{PEER_PORT}", self.addrs[i])
    }
}

/// One of the two daemons.
pub struct Daemon {
    pub home: PathBuf,
    pub socket: PathBuf,
    pub log: PathBuf,
    child: Option<Child>,
    /// killed with SIGKILL: its leftovers are collected on drop
    killed: bool,
}

impl Daemon {
    pub fn client(&self) -> Client {
        Client::new(Target::Unix(self.socket.clone()))
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL (a producer's worker lost mid-transfer).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
            self.killed = true;
        }
    }

    /// SIGTERM, then SIGKILL after 30 s.
    fn stop(&mut self) {
        let Some(mut c) = self.child.take() else {
            return;
        };
        // SAFETY: a plain signal to the child this harness started.
        unsafe { libc::kill(c.id().cast_signed(), libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = c.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = c.kill();
        let _ = c.wait();
        self.killed = true;
    }
}

/// What each worker of the pair is configured with.
#[derive(Debug, Clone)]
pub struct PairOptions {
    pub memory_budget_mb: u64,
    pub max_instances_per_function: u32,
    pub max_object_bytes: u64,
    pub budget_per_function_bytes: u64,
    pub stall_ms: u64,
    /// `[xdt.peering] prefetch` of both workers
    pub prefetch: bool,
}

impl Default for PairOptions {
    fn default() -> Self {
        PairOptions {
            memory_budget_mb: 8192,
            max_instances_per_function: 16,
            max_object_bytes: 512 << 20,
            budget_per_function_bytes: 1 << 30,
            stall_ms: 5_000,
            prefetch: true,
        }
    }
}

pub struct Pair {
    pub net: PairNet,
    pub workers: Vec<Daemon>,
    dir: PathBuf,
    runtime_home: PathBuf,
    net_up: bool,
}

impl Pair {
    /// Starts the pair: `exe` is the thaw binary, `runtime_home` the home
    /// whose runtime root both daemons use; their own homes are made under
    /// a fresh directory and removed on drop.
    pub fn start(exe: &Path, runtime_home: &Path, o: &PairOptions) -> Result<Pair> {
        let tag = std::process::id();
        let dir = std::env::temp_dir().join(format!("thaw-xdt-pair-{tag}"));
        if dir.exists() {
            fail!(
                BenchServeError::Failed,
                "{} exists (a pair of this process still running?)",
                dir.display()
            );
        }
        thaw_runtime::mkdir_private(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut p = Pair {
            net: PairNet::for_tag(tag),
            workers: Vec::new(),
            dir,
            runtime_home: runtime_home.to_path_buf(),
            net_up: false,
        };
        // from here on, drop cleans up whatever was made
        p.net.up().context("linking the two workers' namespaces")?;
        p.net_up = true;
        let key: [u8; 32] = rand::random();
        let key_file = p.dir.join("peer.key");
        thaw_tiers::seal::create_private(&key_file, hex::encode(key).as_bytes())?;
        for i in 0..2 {
            let d = p.spawn(exe, i, &key_file, o)?;
            p.workers.push(d);
        }
        for d in &p.workers {
            wait_ready(d)?;
        }
        Ok(p)
    }

    /// The key both workers share.
    pub fn key_file(&self) -> PathBuf {
        self.dir.join("peer.key")
    }

    fn spawn(&self, exe: &Path, i: usize, key_file: &Path, o: &PairOptions) -> Result<Daemon> {
        let name = ["a", "b"][i];
        let home = self.dir.join(name);
        thaw_runtime::mkdir_private(&home)
            .with_context(|| format!("creating {}", home.display()))?;
        let cfg = format!(
            "home = {home:?}\nruntime_home = {rt:?}\nmemory_budget_mb = {mem}\n\
             [limits]\nmax_instances_per_function = {inst}\n\
             [xdt.objects]\nmax_object_bytes = {obj}\nbudget_per_function_bytes = {budget}\n\
             [xdt.peering]\nlisten = {listen:?}\nkey_file = {key:?}\npeers = [{peer:?}]\nstall_ms = {stall}\n\
             prefetch = {prefetch}\n",
            home = home.to_string_lossy(),
            rt = self.runtime_home.to_string_lossy(),
            mem = o.memory_budget_mb,
            inst = o.max_instances_per_function,
            obj = o.max_object_bytes,
            budget = o.budget_per_function_bytes,
            prefetch = o.prefetch,
            listen = self.net.peer_addr(i),
            key = key_file.to_string_lossy(),
            peer = self.net.peer_addr(1 - i),
            stall = o.stall_ms,
        );
        let cfg_path = self.dir.join(format!("{name}.toml"));
        thaw_tiers::seal::create_private(&cfg_path, cfg.as_bytes())?;
        let log = self.dir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log)?;
        // only the network namespace changes: `ip netns exec` would also
        // remount /sys, hiding the cgroup hierarchies sandboxes need
        let ns_path = Path::new("/run/netns").join(&self.net.netns[i]);
        let ns = std::fs::File::open(&ns_path)
            .with_context(|| format!("opening {}", ns_path.display()))?;
        let ns_fd = ns.as_raw_fd();
        let mut cmd = Command::new(exe);
        cmd.args(["serve", "--config"])
            .arg(&cfg_path)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out);
        // SAFETY: between fork and exec only async-signal-safe calls: setns
        // on a descriptor the parent keeps open until spawn returns.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
                if libc::setns(ns_fd, libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .context("starting `thaw serve` in its namespace")?;
        drop(ns);
        let socket = thaw_server::Config {
            home: home.clone(),
            ..thaw_server::Config::default()
        }
        .socket_path();
        Ok(Daemon {
            home,
            socket,
            log,
            child: Some(child),
            killed: false,
        })
    }
}

fn log_tail(p: &Path) -> String {
    let s = std::fs::read_to_string(p).unwrap_or_default();
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n  ")
}

fn wait_ready(d: &Daemon) -> Result<()> {
    let deadline = Instant::now() + START_DEADLINE;
    loop {
        if d.socket.exists() {
            if let Ok(r) = d.client().request("GET", "/healthz", None) {
                if r.status == 200 {
                    return Ok(());
                }
            }
        }
        if Instant::now() > deadline {
            fail!(
                BenchServeError::Failed,
                "the daemon of {} did not answer within {}s:\n  {}",
                d.home.display(),
                START_DEADLINE.as_secs(),
                log_tail(&d.log)
            );
        }
        if let Some(pid) = d.pid() {
            if !Path::new(&format!("/proc/{pid}")).exists() {
                fail!(
                    BenchServeError::Failed,
                    "the daemon of {} exited at start:\n  {}",
                    d.home.display(),
                    log_tail(&d.log)
                );
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        for d in &mut self.workers {
            d.stop();
        }
        if self.workers.iter().any(|d| d.killed) {
            // a worker's start collects what dead workers left (cgroups, logs)
            if let Err(e) = thaw_worker::Worker::with_runtime_home(
                &self.workers[0].home,
                &self.runtime_home,
                &mut |_| {},
            ) {
                eprintln!("collecting a killed worker's leftovers: {e:#}");
            }
        }
        if self.net_up {
            if let Err(e) = self.net.down() {
                eprintln!("removing the workers' namespaces: {e:#}");
            }
        }
        for d in &self.workers {
            if let Err(e) = thaw_server::remove_home(&d.home) {
                eprintln!("removing {}: {e:#}", d.home.display());
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs `f` on a thread inside network namespace `ns` (tests reach a
/// worker's peer listener from its side of the link this way).
pub fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> Result<T> {
    let path = Path::new("/run/netns").join(ns);
    let file = std::fs::File::open(&path).with_context(|| format!("opening {}", path.display()))?;
    std::thread::spawn(move || -> Result<T> {
        // SAFETY: setns on a namespace descriptor we hold; it moves only
        // this thread, which ends with `f`.
        if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            fail!(
                BenchServeError::Failed,
                "setns: {}",
                std::io::Error::last_os_error()
            );
        }
        Ok(f())
    })
    .join()
    .map_err(|_| BenchServeError::Failed(format!("the thread in {} panicked", path.display())))?
}
