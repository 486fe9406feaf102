//! The emulated remote tier: a real S3-compatible server (MinIO) in a
//! network namespace of its own, reached over a veth pair. The link of
//! "Reducing FaaS Latency with Storage-backed Caching": 0.5 ms RTT and
//! 10 Gbit/s. The rate is a `tbf` qdisc on both veth ends;
//! the delay is a relay in the namespace (`relay.rs`), because this kernel
//! has no `netem`. Every name and address is derived from the state home,
//! so two homes (a test's and the operator's) never collide.
use crate::config::{TierConfig, TIERS_DIR};
use crate::device::{run, DeviceState};
use crate::error::{Result, TiersError};
use crate::netns::{self, interface_with_address_in, link_exists, netns_exists};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use thaw_error::fail;
use thaw_error::{Context, ResultExt};

pub const PORT: u16 = 9000;
/// Prefix length of a home's veth subnet.
const PREFIX: u8 = 30;
/// The server's own port, on the namespace's loopback behind the relay.
const SERVER_PORT: u16 = 9001;
/// How long a freshly started server gets to answer.
const START_DEADLINE: Duration = Duration::from_secs(60);
/// One-way delay in each direction: half the RTT.
const ONE_WAY_DELAY_US: u64 = 250;
const RATE: &str = "10gbit";

/// Names and addresses of one home's emulated remote.
#[derive(Debug, Clone)]
pub struct RemoteNet {
    pub netns: String,
    pub veth_host: String,
    pub veth_ns: String,
    pub host_addr: String,
    pub server_addr: String,
}

/// FNV-1a: stable across builds, so teardown finds what setup named.
fn fnv(s: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for &b in s {
        h ^= b as u32;
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

impl RemoteNet {
    pub fn for_home(home: &Path) -> RemoteNet {
        let h = fnv(home.as_os_str().as_encoded_bytes());
        let tag = format!("{:06x}", h & 0xff_ffff);
        // a /30 per home inside 10.213.0.0/16 (16,384 of them, so two homes
        // rarely meet; setup refuses one whose subnet is already in use)
        let slot = (h >> 8) % 16_384;
        let (third, fourth) = (slot / 64, (slot % 64) * 4);
        RemoteNet {
            netns: format!("thaw-remote-{tag}"),
            veth_host: format!("thr{tag}h"),
            veth_ns: format!("thr{tag}n"),
            host_addr: format!("10.213.{third}.{}", fourth + 1),
            server_addr: format!("10.213.{third}.{}", fourth + 2),
        }
    }

    /// The subnet shared by the two ends of the veth pair.
    pub fn subnet(&self) -> String {
        format!("{}/{PREFIX}", self.host_addr)
    }

    pub fn url(&self) -> String {
        format!("http://{}:{PORT}/thaw", self.server_addr)
    }
}

fn state_dir(home: &Path, t: &TierConfig) -> PathBuf {
    home.join(TIERS_DIR).join(format!(".{}", t.name))
}

/// Where the emulated server's access key and secret are kept (another
/// home that uses the same server as its remote tier holds a copy there).
pub fn credentials_path(home: &Path, t: &TierConfig) -> PathBuf {
    state_dir(home, t).join("credentials")
}

/// Access key and secret of the emulated server, made on first use (0600).
pub fn credentials(home: &Path, t: &TierConfig) -> Result<(String, String)> {
    let p = credentials_path(home, t);
    if let Ok(raw) = std::fs::read_to_string(&p) {
        if let Some((a, s)) = raw.trim().split_once(':') {
            return Ok((a.into(), s.into()));
        }
        fail!(
            TiersError::Config,
            "{} is malformed (want ACCESS:SECRET)",
            p.display()
        );
    }
    let mut rnd = [0u8; 24];
    crate::seal::random(&mut rnd)?;
    let hex: String = rnd.iter().map(|b| format!("{b:02x}")).collect();
    let (a, s) = (format!("thaw{}", &hex[..12]), hex[12..].to_string());
    std::fs::create_dir_all(state_dir(home, t))?;
    crate::seal::create_private(&p, format!("{a}:{s}\n").as_bytes())?;
    Ok((a, s))
}

/// The MinIO server binary: on PATH, or where `go install` puts it.
pub fn server_binary() -> Result<PathBuf> {
    let mut cands: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).map(|d| d.join("minio")).collect())
        .unwrap_or_default();
    if let Some(gobin) = std::env::var_os("GOBIN") {
        cands.push(PathBuf::from(gobin).join("minio"));
    }
    if let Some(gopath) = std::env::var_os("GOPATH") {
        cands.push(PathBuf::from(gopath).join("bin/minio"));
    }
    // go's default GOPATH, where `scripts/setup.sh --tests` installs it
    if let Some(home) = std::env::var_os("HOME") {
        cands.push(PathBuf::from(home).join("go/bin/minio"));
    }
    cands.push(PathBuf::from("/root/go/bin/minio"));
    match cands.into_iter().find(|p| p.is_file()) {
        Some(p) => Ok(p),
        None => fail!(TiersError::Device, "the MinIO server is not installed: `scripts/setup.sh --tests` builds it (a pinned `go install github.com/minio/minio@VERSION`)"),
    }
}

/// The processes setup starts in the namespace, by pid-file name.
const PROCS: [&str; 2] = ["relay", "server"];

/// A live process of ours: the pid file's pid, if its command line still
/// names `needle` (a pid reused by something else is never signalled).
fn our_pid(home: &Path, t: &TierConfig, which: &str, needle: &str) -> Option<i32> {
    let pid: i32 = std::fs::read_to_string(state_dir(home, t).join(format!("{which}.pid")))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    String::from_utf8_lossy(&cmd)
        .contains(needle)
        .then_some(pid)
}

/// What identifies each process's command line: the state directory.
fn needle(home: &Path, t: &TierConfig) -> String {
    state_dir(home, t).to_string_lossy().into_owned()
}

fn server_pid(home: &Path, t: &TierConfig) -> Option<i32> {
    our_pid(home, t, "server", &needle(home, t))
}

/// Starts `cmd` inside the namespace, in its own session, with its output
/// in `which.log` and its pid in `which.pid`. The caller watches the child
/// while it starts, then lets it go.
fn spawn_in_netns(
    home: &Path,
    t: &TierConfig,
    netns: &str,
    which: &str,
    prog: &Path,
    args: &[String],
    env: &[(&str, String)],
) -> Result<std::process::Child> {
    let dir = state_dir(home, t);
    let log = std::fs::File::create(dir.join(format!("{which}.log")))?;
    let mut cmd = std::process::Command::new("ip");
    cmd.args(["netns", "exec", netns])
        .arg(prog)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    crate::device::in_own_session(&mut cmd);
    let child = cmd
        .spawn()
        .with_context(|| format!("starting the {which}"))?;
    // `ip netns exec` execs the program, so this pid is the server's
    std::fs::write(dir.join(format!("{which}.pid")), child.id().to_string())?;
    Ok(child)
}

/// The last lines of a start-up log, for an error message.
fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(8)..].join("\n  ");
    if tail.is_empty() {
        "(empty log)".into()
    } else {
        tail
    }
}

/// The server answers its liveness check through the relay (the relay
/// alone accepting a connection is not enough).
fn answers(addr: &str) -> bool {
    use std::io::{Read, Write};
    let Ok(sa) = format!("{addr}:{PORT}").parse::<std::net::SocketAddr>() else {
        return false;
    };
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&sa, Duration::from_millis(500)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let req =
        format!("GET /minio/health/live HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    s.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.1 200")
}

pub fn setup(home: &Path, t: &TierConfig) -> Result<crate::device::DeviceState> {
    let net = RemoteNet::for_home(home);
    let want = net.url();
    if t.url.as_deref() != Some(want.as_str()) {
        fail!(TiersError::Config,
            "tier {}: an emulated remote is served at {want}; set its url to that (or emulated: false for a real store)",
            t.name
        );
    }
    let minio = server_binary()?;
    let dir = state_dir(home, t);
    std::fs::create_dir_all(dir.join("data"))?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
    if !link_exists(&net.veth_host) {
        if let Some(dev) = interface_with_address_in(&net.host_addr, PREFIX)? {
            fail!(TiersError::Config,
                "the emulated remote's subnet {} is already in use on interface {dev} (another state home's remote tier?); tear that one down or use another --home",
                net.subnet()
            );
        }
        netns::link_pair(
            &netns::End {
                link: &net.veth_host,
                netns: None,
                addr: &net.host_addr,
            },
            &netns::End {
                link: &net.veth_ns,
                netns: Some(&net.netns),
                addr: &net.server_addr,
            },
            PREFIX,
        )?;
        let tbf = [
            "root", "tbf", "rate", RATE, "burst", "4mb", "latency", "10ms",
        ];
        let mut a = vec!["qdisc", "replace", "dev", net.veth_host.as_str()];
        a.extend_from_slice(&tbf);
        run("tc", &a)?;
        let mut a = vec![
            "netns",
            "exec",
            net.netns.as_str(),
            "tc",
            "qdisc",
            "replace",
            "dev",
        ];
        a.push(net.veth_ns.as_str());
        a.extend_from_slice(&tbf);
        run("ip", &a)?;
    }
    // children started by this call, watched by exit status while they
    // start (a pid file's command line is unreadable for a moment while
    // `ip netns exec` execs the program, so it cannot tell "exited")
    let mut started: Vec<(&str, std::process::Child)> = Vec::new();
    if server_pid(home, t).is_none() {
        let (user, secret) = credentials(home, t)?;
        let args = [
            "server".to_string(),
            "--quiet".into(),
            "--address".into(),
            format!("127.0.0.1:{SERVER_PORT}"),
            dir.join("data").to_string_lossy().into_owned(),
        ];
        let env = [
            ("MINIO_ROOT_USER", user),
            ("MINIO_ROOT_PASSWORD", secret),
            ("MINIO_BROWSER", "off".to_string()),
            ("MINIO_UPDATE", "off".to_string()),
        ];
        started.push((
            "server",
            spawn_in_netns(home, t, &net.netns, "server", &minio, &args, &env)?,
        ));
    }
    if our_pid(home, t, "relay", &needle(home, t)).is_none() {
        // the relay is this very binary (`thaw tier relay`)
        let exe = std::env::current_exe().context("locating the thaw binary")?;
        let args = [
            "tier".to_string(),
            "relay".into(),
            "--listen".into(),
            format!("{}:{PORT}", net.server_addr),
            "--upstream".into(),
            format!("127.0.0.1:{SERVER_PORT}"),
            "--delay-us".into(),
            ONE_WAY_DELAY_US.to_string(),
            "--tag".into(),
            needle(home, t),
        ];
        started.push((
            "relay",
            spawn_in_netns(home, t, &net.netns, "relay", &exe, &args, &[])?,
        ));
    }
    let deadline = Instant::now() + START_DEADLINE;
    while !answers(&net.server_addr) {
        if Instant::now() > deadline {
            fail!(
                TiersError::Config,
                "the object store did not answer at {}:{PORT} within {}s (log: {})",
                net.server_addr,
                START_DEADLINE.as_secs(),
                dir.join("server.log").display()
            );
        }
        for (which, child) in &mut started {
            if let Some(st) = child.try_wait()? {
                let log = dir.join(format!("{which}.log"));
                fail!(
                    TiersError::Config,
                    "the object store's {which} exited at start ({st}; log: {}):\n  {}",
                    log.display(),
                    log_tail(&log)
                );
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // they outlive this command and are reaped by init
    for (_, child) in started {
        std::mem::forget(child);
    }
    crate::objects::RemoteStore::open(home, t)?.ensure_bucket(deadline)?;
    status(home, t)
}

pub fn status(home: &Path, t: &TierConfig) -> Result<DeviceState> {
    let net = RemoteNet::for_home(home);
    let pid = server_pid(home, t);
    let ready = pid.is_some() && netns_exists(&net.netns) && answers(&net.server_addr);
    Ok(DeviceState {
        tier: t.name.clone(),
        ready,
        detail: if ready {
            format!(
                "MinIO pid {} in netns {} at {} (veth {}, relay delay {}us each way, tbf {RATE})",
                pid.unwrap_or(0),
                net.netns,
                net.url(),
                net.veth_host,
                ONE_WAY_DELAY_US
            )
        } else {
            "not set up (thaw tier setup)".into()
        },
        devno: None,
    })
}

pub fn teardown(home: &Path, t: &TierConfig) -> Result<()> {
    let net = RemoteNet::for_home(home);
    for which in PROCS {
        if let Some(pid) = our_pid(home, t, which, &needle(home, t)) {
            stop(pid);
        }
    }
    netns::remove(&[&net.netns], &[&net.veth_host])?;
    match std::fs::remove_dir_all(state_dir(home, t)) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Context::new("removing the object store's data", e).into()),
    }
}

/// SIGTERM, then SIGKILL after ten seconds.
fn stop(pid: i32) {
    // SAFETY: plain signal to a process this module started (checked by cmdline).
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(10);
    while Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    if Path::new(&format!("/proc/{pid}")).exists() {
        // SAFETY: as above.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

/// Makes `home` use the emulated store that `server_home` runs (tier
/// `store`) as its remote tier, as another node of a cluster would: its
/// tier configuration (the defaults, the remote one pointed at that
/// store) is written, and it gets copies (0600) of the store's credentials
/// and of the sealing key (`remote.key`: what an operator installs on
/// every node that shares snapshots). Refuses a home that has either.
pub fn join(home: &Path, server_home: &Path, store: &TierConfig) -> Result<()> {
    std::fs::create_dir_all(home)?;
    let mut tiers = crate::TiersConfig::defaults(home);
    for t in tiers.tiers.iter_mut().filter(|t| t.name == store.name) {
        t.url = store.url.clone();
    }
    tiers.save(home)?;
    let copy = |from: PathBuf, to: PathBuf| -> Result<()> {
        let data = std::fs::read(&from).with_context(|| format!("reading {}", from.display()))?;
        if let Some(dir) = to.parent() {
            std::fs::create_dir_all(dir)?;
        }
        crate::seal::create_private(&to, &data)
    };
    copy(
        credentials_path(server_home, store),
        credentials_path(home, store),
    )?;
    copy(
        server_home.join(crate::seal::KEY_FILE),
        home.join(crate::seal::KEY_FILE),
    )
}

/// A home's emulated remote tier (the tier named `remote`), up for as long
/// as this lives: torn down on drop, also when setup fails half-way.
pub struct EmulatedStore {
    home: PathBuf,
    pub tier: TierConfig,
}

impl EmulatedStore {
    pub fn up(home: &Path) -> Result<EmulatedStore> {
        let tiers = crate::TiersConfig::load(home)?;
        let tier = tiers.get("remote")?.clone();
        if !tier.emulated {
            fail!(
                TiersError::Config,
                "the remote tier of {} is not the emulated one",
                home.display()
            );
        }
        let s = EmulatedStore {
            home: home.to_path_buf(),
            tier,
        };
        crate::device::setup(&s.home, &s.tier)
            .map_err(|e| e.during("setting up the emulated object store"))?;
        Ok(s)
    }
}

impl Drop for EmulatedStore {
    fn drop(&mut self) {
        if let Err(e) = crate::device::teardown(&self.home, &self.tier, true) {
            eprintln!("tearing down the emulated object store: {e:#}");
        }
    }
}
