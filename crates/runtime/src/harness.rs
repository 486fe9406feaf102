//! A minimal stand-in sandbox for driving the agent without checkpointing: the agent
//! runs chrooted into a read-only bind of the root with a private tmpfs on /tmp (own
//! mount namespace), no /proc, as uid/gid 65534, with one end of a socketpair at fd 3.
//! Used by this crate's tests, `thaw runtime verify --full` and the figures in
//! docs/RUNTIME.md. The real sandbox lives in crates/sandbox.

use crate::{RootInfo, SIZES};
use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};
use std::ffi::CString;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Reads one framed message (4-byte LE length + JSON) from `r`.
pub fn read_frame(r: &mut impl Read) -> Result<Value> {
    let mut head = [0u8; 4];
    r.read_exact(&mut head).context("read reply header")?;
    let n = u32::from_le_bytes(head) as usize;
    if n > 64 << 20 {
        bail!("reply of {n} bytes is implausibly large");
    }
    let mut body = vec![0u8; n];
    r.read_exact(&mut body).context("read reply body")?;
    serde_json::from_slice(&body).context("reply is not JSON")
}

/// Writes one framed message.
pub fn write_frame(w: &mut impl Write, v: &Value) -> Result<()> {
    let body = serde_json::to_vec(v)?;
    let mut msg = (body.len() as u32).to_le_bytes().to_vec();
    msg.extend_from_slice(&body);
    w.write_all(&msg)?;
    Ok(())
}

pub struct AgentProcess {
    pub child: Child,
    pub sock: UnixStream,
    pub function: String,
    /// Host path of the agent's stderr/stdout log.
    pub log: PathBuf,
}

impl AgentProcess {
    /// Starts the agent for `function` with [`RootInfo::agent_command`].
    pub fn spawn(root: &RootInfo, function: &str) -> Result<AgentProcess> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            bail!("running the agent needs root (mount namespace, chroot, setuid)");
        }
        let (argv, env) = root.agent_command(function);
        let (ours, theirs) = UnixStream::pair().context("socketpair")?;
        let their_fd = theirs.as_raw_fd();
        let log = std::env::temp_dir().join(format!(
            "thaw-agent-{}-{}-{}.log",
            function.replace(|c: char| !c.is_ascii_alphanumeric() && c != '_', "-"),
            std::process::id(),
            COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let logf = std::fs::File::create(&log)?;
        let rootp = CString::new(root.path.as_os_str().as_bytes())?;
        let tmpp = CString::new(root.path.join("tmp").as_os_str().as_bytes())?;
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(logf.try_clone()?)
            .stderr(logf);
        // SAFETY: only async-signal-safe libc calls between fork and exec; all strings
        // were allocated before the fork.
        unsafe {
            cmd.pre_exec(move || {
                let err = |_: &str| Err(std::io::Error::last_os_error());
                if libc::unshare(libc::CLONE_NEWNS) != 0 {
                    return err("unshare");
                }
                let none = std::ptr::null();
                if libc::mount(
                    none,
                    c"/".as_ptr(),
                    none,
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ) != 0
                {
                    return err("make-private");
                }
                if libc::mount(
                    rootp.as_ptr(),
                    rootp.as_ptr(),
                    none,
                    libc::MS_BIND | libc::MS_REC,
                    std::ptr::null(),
                ) != 0
                {
                    return err("bind");
                }
                if libc::mount(
                    none,
                    rootp.as_ptr(),
                    none,
                    libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY,
                    std::ptr::null(),
                ) != 0
                {
                    return err("remount ro");
                }
                if libc::mount(
                    c"tmpfs".as_ptr(),
                    tmpp.as_ptr(),
                    c"tmpfs".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV,
                    c"size=64m,mode=1777".as_ptr() as *const libc::c_void,
                ) != 0
                {
                    return err("tmpfs");
                }
                if libc::chroot(rootp.as_ptr()) != 0 || libc::chdir(c"/".as_ptr()) != 0 {
                    return err("chroot");
                }
                if libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setgid(65534) != 0
                    || libc::setuid(65534) != 0
                {
                    return err("setuid");
                }
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                if their_fd == 3 {
                    let fl = libc::fcntl(3, libc::F_GETFD);
                    if libc::fcntl(3, libc::F_SETFD, fl & !libc::FD_CLOEXEC) != 0 {
                        return err("fcntl");
                    }
                } else if libc::dup2(their_fd, 3) != 3 {
                    return err("dup2");
                }
                // Nothing else may leak into the runtime (e.g. a jobserver pipe that
                // `cargo test` hands down without CLOEXEC).
                if libc::syscall(libc::SYS_close_range, 4u32, u32::MAX, 0u32) != 0 {
                    for fd in 4..4096 {
                        libc::close(fd);
                    }
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("start agent for {function} in {}", root.path.display()))?;
        drop(theirs);
        ours.set_read_timeout(Some(Duration::from_secs(120)))?;
        Ok(AgentProcess {
            child,
            sock: ours,
            function: function.to_string(),
            log,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn set_timeout(&self, d: Duration) -> Result<()> {
        self.sock.set_read_timeout(Some(d))?;
        Ok(())
    }

    pub fn send(&mut self, v: &Value) -> Result<()> {
        write_frame(&mut self.sock, v)
    }

    pub fn send_raw(&mut self, bytes: &[u8]) -> Result<()> {
        self.sock.write_all(bytes)?;
        Ok(())
    }

    pub fn recv(&mut self) -> Result<Value> {
        read_frame(&mut self.sock).map_err(|e| {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            anyhow!("{e:#}; agent log:\n{}", tail(&log, 2000))
        })
    }

    pub fn request(&mut self, v: &Value) -> Result<Value> {
        self.send(v)?;
        self.recv()
    }

    /// Sends `req`, expects `"ok": true`, returns the reply.
    pub fn request_ok(&mut self, v: &Value) -> Result<Value> {
        let r = self.request(v)?;
        if r["ok"] != json!(true) {
            bail!("{} request {v} failed: {r}", self.function);
        }
        Ok(r)
    }

    /// Open fds of the agent as seen from outside (`/proc/PID/fd`).
    pub fn open_fds(&self) -> Result<Vec<i32>> {
        let mut v: Vec<i32> = std::fs::read_dir(format!("/proc/{}/fd", self.pid()))?
            .flatten()
            .filter_map(|e| e.file_name().to_string_lossy().parse().ok())
            .collect();
        v.sort();
        Ok(v)
    }

    /// Number of threads (`/proc/PID/task`).
    pub fn threads(&self) -> Result<usize> {
        Ok(std::fs::read_dir(format!("/proc/{}/task", self.pid()))?.count())
    }

    /// Resident set size now (`/proc/PID/status` VmRSS), in KiB.
    pub fn rss_kb(&self) -> Result<u64> {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))?;
        s.lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .ok_or_else(|| anyhow!("no VmRSS"))
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Asks the agent to exit and reaps it (kills it if it does not exit in 5 s).
    pub fn shutdown(mut self) -> Result<()> {
        let _ = self.send(&json!({"op": "exit"}));
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(5) {
            if self.child.try_wait()?.is_some() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        bail!("agent for {} did not exit", self.function)
    }
}

static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl Drop for AgentProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

fn tail(s: &str, n: usize) -> &str {
    if s.len() <= n {
        s
    } else {
        let mut i = s.len() - n;
        while !s.is_char_boundary(i) {
            i += 1;
        }
        &s[i..]
    }
}

/// Figures of one function: fresh start, RSS after init, warm latency per size.
#[derive(Clone, Debug, serde::Serialize)]
pub struct FunctionFigures {
    pub function: String,
    /// Spawn until the `load` reply (exec + interpreter start + import + init), ms.
    pub fresh_start_ms: f64,
    pub import_ms: f64,
    pub init_ms: f64,
    /// VmRSS after load (outside view), KiB.
    pub rss_after_init_kb: u64,
    /// Per size: (size, first invocation exec_ms, median warm exec_ms over `reps`,
    /// median round trip ms).
    pub sizes: Vec<(String, f64, f64, f64)>,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    if v.is_empty() {
        f64::NAN
    } else {
        v[v.len() / 2]
    }
}

/// Runs every size of `function` (first call + `reps` warm calls each), checking
/// each output with the function's checker (once per size).
pub fn measure(root: &RootInfo, function: &str, reps: usize) -> Result<FunctionFigures> {
    let t0 = Instant::now();
    let mut a = AgentProcess::spawn(root, function)?;
    let load = a.request_ok(&json!({"op": "load"}))?;
    let fresh = t0.elapsed().as_secs_f64() * 1e3;
    let rss = a.rss_kb()?;
    let mut sizes = Vec::new();
    for size in SIZES {
        let req = json!({"op": "invoke", "size": size});
        let first = a.request_ok(&req)?;
        root.check_output(function, size, &first["output"])?;
        let mut warm = Vec::new();
        let mut rtt = Vec::new();
        for _ in 0..reps {
            let t = Instant::now();
            let r = a.request_ok(&req)?;
            rtt.push(t.elapsed().as_secs_f64() * 1e3);
            warm.push(r["exec_ms"].as_f64().unwrap_or(f64::NAN));
        }
        sizes.push((
            size.to_string(),
            first["exec_ms"].as_f64().unwrap_or(f64::NAN),
            median(&mut warm),
            median(&mut rtt),
        ));
    }
    a.shutdown()?;
    Ok(FunctionFigures {
        function: function.to_string(),
        fresh_start_ms: fresh,
        import_ms: load["import_ms"].as_f64().unwrap_or(f64::NAN),
        init_ms: load["init_ms"].as_f64().unwrap_or(f64::NAN),
        rss_after_init_kb: rss,
        sizes,
    })
}
