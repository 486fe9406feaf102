//! Sandboxed function runtimes.
//!
//! A sandbox is a runtime process (the Python agent and its function) in fresh
//! pid, mount, net, ipc and uts namespaces, pivoted into the read-only runtime
//! root with a private /tmp and /dev/shm, under a seccomp filter, as an unprivileged uid,
//! with cgroup v1 memory and pids limits, talking to the worker over one
//! socket at fd 3. A sandbox knows nothing of snapshots: `thaw-checkpoint`
//! freezes one into a snapshot and rebuilds one from it, in a sandbox whose
//! process is the restorer ([`Prebuilt`]).

pub mod agent;
pub mod cgroup;
pub mod cleanup;
pub mod cmsg;
mod error;
pub mod netns;
pub mod pool;
pub mod runtime_api;
pub mod seccomp;
mod spawn;
pub mod uid;
pub mod zygote;

use agent::{AgentChannel, ChannelError, Reply, Request};
use cgroup::Cgroups;
use error::Result;
use serde_json::Value;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use thaw_error::ResultExt;
use thaw_memory::PageServer;
pub use thaw_restore::{FirstResponse, StartStrategy, StrategyKind, WsMode};

/// For readers that must sit in cgroups like a sandbox's (the tier probe).
pub use cgroup::Cgroups as SandboxCgroups;
pub use error::{HostError, SandboxError, StartError};
pub use pool::{PoolStats, Prebuilt, SandboxPool};
pub use runtime_api::RuntimeApiSpec;
pub use zygote::Zygote;

/// Limits and places for sandboxes.
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxConfig {
    pub memory_bytes: u64,
    pub pids_max: u64,
    /// CPU time the sandbox's processes may use together, in thousandths
    /// of a CPU (a CFS quota in the cpu cgroup); None: unlimited.
    pub cpu_millis: Option<u64>,
    /// The sandbox's CPU weight against other cgroups under contention,
    /// in cgroup v2 `cpu.weight` units (1..=10000; see
    /// [`thaw_pack::cpu::shares_of_cpu_weight`]); None: the host's default.
    pub cpu_weight: Option<u64>,
    pub tmp_bytes: u64,
    /// Size of the private /dev/shm.
    pub shm_bytes: u64,
    pub open_files: u64,
    pub file_size: u64,
    /// Where each sandbox's stdout/stderr log goes (host side).
    pub log_dir: PathBuf,
    /// REAP: share of the working set that may fault after a prefetch before
    /// the next cold start re-records it.
    pub drift_share: f64,
    /// A deployed function's code directory, bind-mounted read-only at
    /// [`USER_CODE_DIR`] inside the sandbox (fresh starts and restores alike).
    pub code_dir: Option<PathBuf>,
    /// A deployed function's extracted Debian packages, bind-mounted
    /// read-only at [`PACKAGES_DIR`] (fresh starts and restores alike).
    pub packages_dir: Option<PathBuf>,
    /// The runtime root's agent directory, bind-mounted read-only at
    /// [`AGENT_DIR`] before the code and packages: a function that runs on
    /// a root filesystem of its own (an image's) gets thaw's agent beside it.
    pub agent_dir: Option<PathBuf>,
    /// A function given network egress: each sandbox gets an address and a
    /// veth on the daemon's bridge, and a seccomp filter that allows IP
    /// sockets. None: loopback only, and no IP sockets at all.
    pub egress: Option<thaw_egress::Egress>,
    /// A custom runtime: the sandbox's program is a `bootstrap` served by
    /// the worker's Runtime API in its namespace (loopback IP sockets
    /// allowed), not an agent.
    pub runtime_api: Option<RuntimeApiSpec>,
}

/// Where a deployed function's code appears inside the sandbox.
pub const USER_CODE_DIR: &str = "/opt/thaw/user";
/// Where a deployed function's own Debian packages appear inside the sandbox.
pub const PACKAGES_DIR: &str = "/opt/thaw/packages";
/// Where the agent appears inside a sandbox whose root is not thaw's
/// runtime root (see [`SandboxConfig::agent_dir`]).
pub const AGENT_DIR: &str = "/opt/thaw";

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            memory_bytes: 1 << 30,
            pids_max: 32,
            cpu_millis: None,
            cpu_weight: None,
            tmp_bytes: 64 << 20,
            shm_bytes: 64 << 20,
            open_files: 256,
            file_size: 16 << 20,
            log_dir: PathBuf::from("/run/thaw/logs"),
            drift_share: 0.25,
            code_dir: None,
            packages_dir: None,
            agent_dir: None,
            egress: None,
            runtime_api: None,
        }
    }
}

impl SandboxConfig {
    fn rlimits(&self) -> Vec<(u32, u64)> {
        vec![
            (libc::RLIMIT_NOFILE, self.open_files),
            (libc::RLIMIT_FSIZE, self.file_size),
            (libc::RLIMIT_CORE, 0),
            (libc::RLIMIT_STACK, 8 << 20),
        ]
    }

    /// The read-only bind mounts of a deployed function's sandbox, in the
    /// order they are made (the agent's directory holds the others' mount
    /// points).
    fn binds(&self) -> Vec<(&Path, &'static str)> {
        let agent = self.agent_dir.as_deref().map(|d| (d, AGENT_DIR));
        let code = self.code_dir.as_deref().map(|d| (d, USER_CODE_DIR));
        let pkgs = self.packages_dir.as_deref().map(|d| (d, PACKAGES_DIR));
        let resolv = self
            .egress
            .as_ref()
            .and_then(|e| e.resolv_conf())
            .map(|f| (f, "/etc/resolv.conf"));
        agent
            .into_iter()
            .chain(code)
            .chain(pkgs)
            .chain(resolv)
            .collect()
    }

    /// The directories mounted over the root (code, packages, the agent):
    /// where a runtime's file mappings may come from besides the root
    /// itself, the innermost mount point first.
    fn dir_mounts(&self) -> Vec<(PathBuf, &'static str)> {
        let code = self.code_dir.clone().map(|d| (d, USER_CODE_DIR));
        let pkgs = self.packages_dir.clone().map(|d| (d, PACKAGES_DIR));
        let agent = self.agent_dir.clone().map(|d| (d, AGENT_DIR));
        code.into_iter().chain(pkgs).chain(agent).collect()
    }
}

/// Answers the agent's own requests during a call: (request, descriptors
/// passed with it) -> (reply, descriptor to pass back).
pub type SdkServer<'a> =
    dyn FnMut(&Value, Vec<std::os::fd::OwnedFd>) -> (Value, Option<std::os::fd::OwnedFd>) + 'a;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A live sandbox. Dropping it kills the process and removes its cgroups.
pub struct Sandbox {
    pub id: String,
    pid: i32,
    chan: AgentChannel,
    cgroups: Cgroups,
    pager: Option<PageServer>,
    log_path: PathBuf,
    root: PathBuf,
    uid: uid::UidLease,
    memory_limit: u64,
    alive: bool,
    /// the strategy a restore ran, until its first response is reported
    strategy: Option<Box<dyn thaw_restore::Strategy>>,
    first_response: Option<FirstResponse>,
    /// restored into a pooled sandbox: holds the pool's refill back until
    /// the first response
    pool_ticket: Option<pool::Ticket>,
    /// its address and veth, for a function given egress
    net: Option<thaw_egress::SandboxNet>,
    /// (host directory, mount point inside) of its code and packages
    mounts: Vec<(PathBuf, &'static str)>,
    /// a custom runtime's Runtime API, which stands in for the agent
    runtime_api: Option<runtime_api::RuntimeApi>,
}

/// The host-side pieces every new sandbox (fresh or restored) needs.
struct Slot {
    id: String,
    uid: uid::UidLease,
    memory_limit: u64,
    cgroups: Cgroups,
    log_path: PathBuf,
    log: File,
    devnull: File,
    worker_end: UnixStream,
    sandbox_end: UnixStream,
    net: Option<thaw_egress::SandboxNet>,
    mounts: Vec<(PathBuf, &'static str)>,
    runtime_api: Option<runtime_api::RuntimeApi>,
}

impl Slot {
    fn new(cfg: &SandboxConfig) -> Result<Slot, StartError> {
        let n = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        // the owner tag (pid and start time) lets crash cleanup find what a
        // dead worker left
        let id = format!("{}-{n}", thaw_store::secure::owner_tag());
        // A uid per sandbox, unique across workers: even a compromised
        // runtime cannot signal or read another sandbox's files or processes.
        let uid = uid::UidLease::acquire()?;
        let cgroups = Cgroups::create(
            &id,
            cfg.memory_bytes,
            cfg.pids_max,
            cfg.cpu_millis,
            cfg.cpu_weight,
        )?;
        thaw_store::secure::ensure_private_dir(&cfg.log_dir)
            .with_context(|| format!("sandbox log directory {}", cfg.log_dir.display()))?;
        let log_path = cfg.log_dir.join(format!("{id}.log"));
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(thaw_store::secure::FILE_MODE)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&log_path)
            .with_context(|| format!("creating {}", log_path.display()))?;
        let devnull = File::open("/dev/null")?;
        let (worker_end, sandbox_end) = UnixStream::pair()?;
        let net = cfg.egress.as_ref().map(|e| e.lease()).transpose()?;
        Ok(Slot {
            id,
            uid,
            memory_limit: cfg.memory_bytes,
            cgroups,
            log_path,
            log,
            devnull,
            worker_end,
            sandbox_end,
            net,
            mounts: cfg.dir_mounts(),
            runtime_api: cfg.runtime_api.clone().map(runtime_api::RuntimeApi::new),
        })
    }

    fn stdio_fds(&self) -> Vec<(i32, i32)> {
        vec![
            (self.devnull.as_raw_fd(), 0),
            (self.log.as_raw_fd(), 1),
            (self.log.as_raw_fd(), 2),
            (self.sandbox_end.as_raw_fd(), 3),
        ]
    }

    fn into_sandbox(self, pid: i32, root: &Path, pager: Option<PageServer>) -> Sandbox {
        Sandbox {
            id: self.id,
            pid,
            chan: AgentChannel::new(self.worker_end),
            cgroups: self.cgroups,
            pager,
            log_path: self.log_path,
            root: root.to_owned(),
            uid: self.uid,
            memory_limit: self.memory_limit,
            alive: true,
            strategy: None,
            first_response: None,
            pool_ticket: None,
            net: self.net,
            mounts: self.mounts,
            runtime_api: self.runtime_api,
        }
    }

    /// Whether the runtime may make IP sockets: a function given egress,
    /// or a custom runtime (its Runtime API is on loopback).
    fn ip_sockets(&self) -> bool {
        self.net.is_some() || self.runtime_api.is_some()
    }
}

impl Sandbox {
    /// Starts a fresh runtime: `argv[0]` is a path inside `root`.
    pub fn start(
        cfg: &SandboxConfig,
        root: &Path,
        argv: &[String],
        env: &[(String, String)],
    ) -> Result<Sandbox, StartError> {
        let mut slot = Slot::new(cfg)?;
        // a bootstrap may ask for its first event as soon as it runs
        let listeners = std::cell::OnceCell::new();
        let listen = |pid: i32| -> Result<()> {
            let _ = listeners.set(runtime_api::Listeners::open(pid)?);
            Ok(())
        };
        let path = argv
            .first()
            .ok_or_else(|| StartError::Config("empty runtime command".into()))?
            .clone();
        let spec = spawn::ChildSpec {
            root,
            fds: slot.stdio_fds(),
            argv: argv.to_vec(),
            env: env.to_vec(),
            exec: spawn::Exec::Runtime {
                path,
                uid: slot.uid.uid,
                gid: slot.uid.uid,
                filter: seccomp::filter_for(slot.ip_sockets()),
            },
            rlimits: cfg.rlimits(),
            procs_files: slot.cgroups.procs_files(),
            tmp_bytes: cfg.tmp_bytes,
            shm_bytes: cfg.shm_bytes,
            binds: cfg.binds(),
            net: slot.net.as_ref(),
            before_start: slot
                .runtime_api
                .is_some()
                .then_some(&listen as &dyn Fn(i32) -> Result<()>),
        };
        let pid = spawn::spawn(&spec)?;
        drop(spec);
        if let (Some(api), Some(l)) = (slot.runtime_api.as_mut(), listeners.into_inner()) {
            api.set_listeners(l);
        }
        Ok(slot.into_sandbox(pid, root, None))
    }

    /// The runtime's pid as the worker sees it.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// (host directory, mount point inside) of its code and packages.
    pub fn mounts(&self) -> &[(PathBuf, &'static str)] {
        &self.mounts
    }

    pub fn uid(&self) -> u32 {
        self.uid.uid
    }

    pub fn is_alive(&self) -> bool {
        self.alive
    }

    /// Whether its runtime may make IP sockets (see `Slot::ip_sockets`).
    pub fn ip_sockets(&self) -> bool {
        self.net.is_some() || self.runtime_api.is_some()
    }

    /// Its memory limit in bytes.
    pub fn memory_limit(&self) -> u64 {
        self.memory_limit
    }

    /// Whether it runs a custom runtime (a bootstrap served by the
    /// Runtime API) rather than an agent.
    pub fn is_custom_runtime(&self) -> bool {
        self.runtime_api.is_some()
    }

    /// A custom runtime's Runtime API connection whose call waits, if one does.
    pub fn pending_runtime_api_conn(&self) -> Option<runtime_api::PendingConn> {
        self.runtime_api.as_ref().and_then(|a| a.pending_conn())
    }

    /// The worker's end of the socket at the runtime's fd 3 (a restore
    /// talks to the restorer on it before the agent runs).
    pub fn control_socket(&self) -> &UnixStream {
        self.chan.socket()
    }

    /// A restore's page server for its lazily restored memory: stopped
    /// with the sandbox.
    pub fn attach_pager(&mut self, pager: PageServer) {
        self.pager = Some(pager);
    }

    /// A restore's strategy, whose last phase runs at the first response
    /// (see [`Sandbox::after_first_response`]).
    pub fn keep_strategy(&mut self, strategy: Box<dyn thaw_restore::Strategy>) {
        self.strategy = Some(strategy);
    }

    /// Its address and veth, for a function given egress.
    pub fn network(&self) -> Option<&thaw_egress::SandboxNet> {
        self.net.as_ref()
    }

    /// One request to the agent and its typed reply; an `"ok": false` reply
    /// becomes an [`agent::AgentError`]. See [`Sandbox::call_raw`] for the rest.
    pub fn call(&mut self, req: &Request, timeout: Duration) -> Result<Reply, SandboxError> {
        Ok(Reply::decode(req, self.call_raw(req, timeout)?)?)
    }

    /// One request to the agent, returning its reply whatever its `ok` says.
    /// A timeout kills the sandbox (the runtime may be stuck in native code no
    /// signal reaches); a closed socket or a malformed reply marks it dead.
    pub fn call_raw(&mut self, req: &Request, timeout: Duration) -> Result<Value, SandboxError> {
        self.exchange(&agent::encode_frame(req), timeout)
    }

    /// Sends `frame` as it is (a test's deliberately malformed request) and
    /// returns the agent's reply, as [`Sandbox::call_raw`] does.
    pub fn call_bytes(&mut self, frame: &[u8], timeout: Duration) -> Result<Value, SandboxError> {
        self.exchange(frame, timeout)
    }

    fn exchange(&mut self, frame: &[u8], timeout: Duration) -> Result<Value, SandboxError> {
        if !self.alive {
            return Err(self.gone());
        }
        if let Some(api) = self.runtime_api.as_mut() {
            let res = api.exchange(frame, self.pid, timeout);
            return self.finish_call(res, timeout);
        }
        let res = self
            .chan
            .send_bytes(frame)
            .and_then(|_| self.chan.recv(timeout));
        self.finish_call(res, timeout)
    }

    /// One request to the agent during which the agent may make requests of
    /// its own (frames with an `"sdk"` field, see `thaw_xdt::sdk`): each goes
    /// to `serve` with the descriptors passed along it, and `serve`'s answer
    /// (with the descriptor it gives, if any) goes back, until the agent's
    /// reply to `req` arrives. `timeout` bounds the whole exchange.
    pub fn call_serving(
        &mut self,
        req: &Request,
        timeout: Duration,
        serve: &mut SdkServer<'_>,
    ) -> Result<Value, SandboxError> {
        if self.runtime_api.is_some() {
            // a bootstrap makes no requests of the worker's
            return self.call_raw(req, timeout);
        }
        if !self.alive {
            return Err(self.gone());
        }
        let deadline = std::time::Instant::now() + timeout;
        let res = self.chan.send(req).and_then(|_| loop {
            let (msg, fds) = self.chan.recv_with_fds(deadline)?;
            if msg.get("sdk").is_none() {
                // descriptors passed with the final reply are dropped (closed)
                break Ok(msg);
            }
            let (reply, fd) = serve(&msg, fds);
            self.chan.send_with_fd(&reply, fd.as_ref())?;
        });
        self.finish_call(res, timeout)
    }

    fn gone(&self) -> SandboxError {
        SandboxError::Gone {
            id: self.id.clone(),
        }
    }

    /// What a request's outcome means for the sandbox: a timeout kills it; a
    /// closed socket or a malformed reply marks it dead.
    fn finish_call(
        &mut self,
        res: Result<Value, ChannelError>,
        timeout: Duration,
    ) -> Result<Value, SandboxError> {
        let e = match res {
            Ok(reply) => return Ok(reply),
            Err(ChannelError::Timeout) => {
                self.kill();
                let id = self.id.clone();
                return Err(SandboxError::Timeout { id, after: timeout });
            }
            Err(e) => e,
        };
        self.kill();
        let id = self.id.clone();
        let kills = self.cgroups.oom_kills();
        if kills > 0 {
            return Err(SandboxError::OomKilled {
                id,
                limit_mib: self.memory_limit >> 20,
                kills,
                cause: thaw_error::chain(&e),
            });
        }
        Err(SandboxError::Died {
            id,
            cause: thaw_error::chain(&e),
            log_tail: self.log_tail(400),
        })
    }

    /// The host path of the runtime's stdout/stderr log.
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The restore strategy's last phase: call once the first invocation
    /// has answered (REAP records or checks its working set, mmap and dax
    /// their write set; a pool may now refill). Only the first call does
    /// anything; a fresh instance has none.
    pub fn after_first_response(&mut self) -> Option<&FirstResponse> {
        self.pool_ticket = None;
        if let Some(mut s) = self.strategy.take() {
            let rt = thaw_restore::Runtime {
                pid: self.pid,
                pager: self.pager.as_ref(),
            };
            self.first_response = Some(s.after_first_response(&rt));
        }
        self.first_response.as_ref()
    }

    pub(crate) fn channel(&mut self) -> &mut AgentChannel {
        &mut self.chan
    }

    /// What the restore strategy did at the first response, once reported
    /// (see [`Sandbox::after_first_response`]).
    pub fn first_response(&self) -> Option<&FirstResponse> {
        self.first_response.as_ref()
    }

    /// (minor, major) page faults of the runtime so far.
    pub fn fault_counters(&self) -> Result<(u64, u64)> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid))?;
        let f = stat_fields(&stat)?;
        Ok((f.field(10)?, f.field(12)?))
    }

    /// Resident set of the runtime, in KiB.
    pub fn rss_kb(&self) -> Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid))?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .ok_or_else(|| HostError::Failed(format!("no VmRSS for pid {}", self.pid)))
    }

    /// CPU time the runtime and the children it reaped have used, in ns
    /// (user and system, from its `/proc` stat).
    pub fn cpu_ns(&self) -> Result<u64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid))?;
        let f = stat_fields(&stat)?;
        let ticks = f.field(14)? + f.field(15)? + f.field(16)? + f.field(17)?;
        // SAFETY: sysconf has no side effects.
        let hz =
            u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).map_or(1, |hz| hz.max(1));
        Ok(ticks * (1_000_000_000 / hz))
    }

    /// The sandbox's CPU quota in thousandths of a CPU, as its cgroup has
    /// it (None: unlimited).
    pub fn cpu_millis(&self) -> Option<u64> {
        self.cgroups.cpu_millis()
    }

    /// The sandbox's CPU weight (cgroup v2 units), as its cgroup has it
    /// (None: the host's default).
    pub fn cpu_weight(&self) -> Option<u64> {
        self.cgroups.cpu_weight()
    }

    /// Peak memory of the sandbox's cgroup.
    pub fn memory_peak(&self) -> Option<u64> {
        self.cgroups.memory_peak()
    }

    /// Memory charged to the sandbox's cgroup now.
    pub fn memory_usage(&self) -> Option<u64> {
        self.cgroups.memory_usage()
    }

    /// Anonymous (private) memory charged to the sandbox's cgroup now.
    pub fn memory_anon(&self) -> Option<u64> {
        self.cgroups.memory_anon()
    }

    pub fn memory_limit_hits(&self) -> u64 {
        self.cgroups.memory_failcnt()
    }

    /// Page-server counters when the sandbox was restored lazily.
    pub fn pager(&self) -> Option<&PageServer> {
        self.pager.as_ref()
    }

    /// The last `max` bytes of the runtime's stdout/stderr.
    pub fn log_tail(&self, max: usize) -> String {
        let data = std::fs::read(&self.log_path).unwrap_or_default();
        let tail = &data[data.len().saturating_sub(max)..];
        String::from_utf8_lossy(tail).trim().to_string()
    }

    /// Kills the runtime and reaps it; idempotent.
    pub fn kill(&mut self) {
        if self.alive {
            spawn::kill_and_reap(self.pid);
            self.alive = false;
        }
        if let Some(mut p) = self.pager.take() {
            p.stop();
        }
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        self.kill();
        self.cgroups.remove();
        if std::env::var_os("THAW_KEEP_LOGS").is_none() {
            let _ = std::fs::remove_file(&self.log_path);
        }
    }
}

/// /proc/PID/stat split after the command name (which may hold spaces).
pub struct StatFields<'a>(Vec<&'a str>);

impl StatFields<'_> {
    /// Field `n` as numbered in proc(5) (1-based; 3 is the state).
    pub fn field(&self, n: usize) -> Result<u64> {
        self.0
            .get(n.wrapping_sub(3))
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| HostError::Failed(format!("/proc stat field {n} missing")))
    }
}

pub fn stat_fields(stat: &str) -> Result<StatFields<'_>> {
    let close = stat
        .rfind(')')
        .ok_or_else(|| HostError::Failed("malformed /proc stat".into()))?;
    Ok(StatFields(stat[close + 1..].split_whitespace().collect()))
}
