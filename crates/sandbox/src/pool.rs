//! Sandboxes built ahead of restores. Building one (namespaces, mounts,
//! cgroups, a uid, the restorer exec'd) is most of a restore's fixed cost and
//! needs nothing from the snapshot, so a [`SandboxPool`] keeps a few ready,
//! each a restorer blocked reading its plan, and a background thread builds
//! the next one once the restore that took the last has answered its first
//! request: a build beside a restore competes with it for the CPU and the
//! kernel locks both take (a fifth of helloworld's cold start on a loaded
//! two-core machine). A pooled sandbox serves
//! one restore only; one that died while waiting is discarded when taken.
use crate::error::{HostError, Result};
use crate::StartError;
use crate::{spawn, Sandbox, SandboxConfig, Slot};
use std::collections::VecDeque;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;
use thaw_error::fail;

/// A sandbox whose restorer is running and waiting for its plan. Dropping it
/// kills the restorer and removes its cgroups (it is a [`Sandbox`]).
pub struct Prebuilt {
    pub(crate) sb: Sandbox,
    /// set when taken from a pool: held until the restore's first response
    pub(crate) ticket: Option<Ticket>,
}

/// A restore in flight from a pool's sandbox; the pool's refill waits
/// (at most [`REFILL_DEFER_MAX`]) until none is, and [`QUIET_AFTER_ANSWER`]
/// after the last. Released when dropped.
pub(crate) struct Ticket(Arc<Shared>);

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut st = self.0.lock();
        st.in_flight -= 1;
        st.quiet_until = Some(std::time::Instant::now() + QUIET_AFTER_ANSWER);
        drop(st);
        self.0.cv.notify_all();
    }
}

impl Prebuilt {
    /// Builds the sandbox and starts the restorer in it.
    pub fn build(root: &Path, cfg: &SandboxConfig) -> Result<Prebuilt, StartError> {
        let mut slot = Slot::new(cfg)?;
        let spec = spawn::ChildSpec {
            root,
            fds: slot.stdio_fds(),
            argv: vec!["thaw-restorer".into()],
            env: vec![],
            exec: spawn::Exec::Memfd {
                fd: restorer_memfd()?,
            },
            rlimits: cfg.rlimits(),
            procs_files: slot.cgroups.procs_files(),
            tmp_bytes: cfg.tmp_bytes,
            shm_bytes: cfg.shm_bytes,
            binds: cfg.binds(),
            net: slot.net.as_ref(),
            before_start: None,
        };
        let pid = spawn::spawn(&spec)?;
        drop(spec);
        if let Some(api) = slot.runtime_api.as_mut() {
            // where the restored bootstrap's connection is made again
            match crate::runtime_api::Listeners::open(pid) {
                Ok(l) => api.set_listeners(l),
                Err(e) => {
                    spawn::kill_and_reap(pid);
                    return Err(e.into());
                }
            }
        }
        Ok(Prebuilt {
            sb: slot.into_sandbox(pid, root, None),
            ticket: None,
        })
    }

    /// The restorer's pid.
    pub fn pid(&self) -> i32 {
        self.sb.pid
    }

    /// The runtime root it was built on.
    pub fn root(&self) -> &Path {
        &self.sb.root
    }

    /// The sandbox, for a restore into it: a pool's refill waits for its
    /// first response (see [`Sandbox::after_first_response`]).
    pub fn into_sandbox(self) -> Sandbox {
        let mut sb = self.sb;
        sb.pool_ticket = self.ticket;
        sb
    }

    /// Whether the restorer still waits for its plan: it never writes before
    /// reading one, so anything readable on its socket (its end closed by
    /// death, or stray bytes) means it is unusable.
    fn waiting(&self) -> bool {
        let mut p = libc::pollfd {
            fd: self.sb.chan.socket().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll on one pollfd that lives across the call; no waiting.
        let n = unsafe { libc::poll(&mut p, 1, 0) };
        n == 0
    }
}

/// Counters of a [`SandboxPool`].
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct PoolStats {
    /// sandboxes built by the refill thread
    pub built: u64,
    /// takes served from the pool
    pub hits: u64,
    /// takes that found the pool empty
    pub misses: u64,
    /// pooled sandboxes found dead when taken, and dropped
    pub discarded: u64,
    /// builds that failed (the refill thread retries after a pause)
    pub build_failures: u64,
    pub last_error: String,
}

struct State {
    ready: VecDeque<Prebuilt>,
    /// sandboxes taken whose restore has not reached its first response
    in_flight: usize,
    /// no build before then: the last restore's answer is on its way out
    quiet_until: Option<std::time::Instant>,
    stop: bool,
    stats: PoolStats,
}

struct Shared {
    root: PathBuf,
    cfg: SandboxConfig,
    size: usize,
    state: Mutex<State>,
    /// the refill thread waits here for room in the pool or for stop
    cv: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Keeps up to `size` [`Prebuilt`] sandboxes for one root and one sandbox
/// configuration, refilled by a background thread as they are taken.
///
/// The restorers' parent-death signal follows the refill thread, which lives
/// as long as the pool: drop the pool only after the sandboxes taken from it
/// (a restored runtime drops root, which clears that signal, so it only
/// matters while a restorer waits).
pub struct SandboxPool {
    shared: Arc<Shared>,
    refill: Option<JoinHandle<()>>,
}

/// Pause after a failed build before the refill thread tries again.
const RETRY_PAUSE: Duration = Duration::from_millis(200);
/// Longest the refill waits for restores in flight (a caller that never
/// invokes its restored instance, or a steady stream of restores, must not
/// starve the pool).
const REFILL_DEFER_MAX: Duration = Duration::from_millis(20);
/// How long the refill stays off the CPUs after a restore's first response:
/// that response still has to reach its caller, and a build started at once
/// (on two CPUs) took a CPU from it and from the caller.
const QUIET_AFTER_ANSWER: Duration = Duration::from_millis(10);

impl SandboxPool {
    /// Starts the refill thread, which builds `size` sandboxes right away.
    pub fn start(root: &Path, cfg: &SandboxConfig, size: usize) -> Result<SandboxPool, StartError> {
        if size == 0 {
            fail!(
                StartError::Config,
                "a sandbox pool needs a size of at least 1"
            );
        }
        let shared = Arc::new(Shared {
            root: root.to_owned(),
            cfg: cfg.clone(),
            size,
            state: Mutex::new(State {
                ready: VecDeque::with_capacity(size),
                in_flight: 0,
                quiet_until: None,
                stop: false,
                stats: PoolStats::default(),
            }),
            cv: Condvar::new(),
        });
        let s = shared.clone();
        let refill = std::thread::Builder::new()
            .name("thaw-sandbox-pool".into())
            .spawn(move || refill_loop(&s))?;
        Ok(SandboxPool {
            shared,
            refill: Some(refill),
        })
    }

    /// The configuration the pool's sandboxes are built with.
    pub fn config(&self) -> &SandboxConfig {
        &self.shared.cfg
    }

    pub fn root(&self) -> &Path {
        &self.shared.root
    }

    /// A waiting sandbox, or `None` when the pool is empty (the caller builds
    /// one itself). Dead ones met on the way are dropped and counted.
    pub fn take(&self) -> Option<Prebuilt> {
        let mut dead = Vec::new();
        let got = {
            let mut st = self.shared.lock();
            let got = loop {
                match st.ready.pop_front() {
                    Some(mut p) if p.waiting() => {
                        st.in_flight += 1;
                        p.ticket = Some(Ticket(self.shared.clone()));
                        break Some(p);
                    }
                    Some(p) => dead.push(p),
                    None => break None,
                }
            };
            st.stats.discarded += dead.len() as u64;
            if got.is_some() {
                st.stats.hits += 1;
            } else {
                st.stats.misses += 1;
            }
            got
        };
        self.shared.cv.notify_all();
        drop(dead); // kills, reaps and removes cgroups, outside the lock
        got
    }

    /// Waits up to `timeout` until the pool is full (tests, and warm-up
    /// before a measurement). Returns whether it is.
    pub fn wait_full(&self, timeout: Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if self.shared.lock().ready.len() >= self.shared.size {
                return true;
            }
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Pids of the restorers waiting in the pool.
    pub fn waiting_pids(&self) -> Vec<i32> {
        self.shared.lock().ready.iter().map(Prebuilt::pid).collect()
    }

    pub fn stats(&self) -> PoolStats {
        self.shared.lock().stats.clone()
    }
}

fn refill_loop(sh: &Shared) {
    loop {
        {
            let mut st = sh.lock();
            let mut defer_until = None;
            loop {
                if st.stop {
                    return;
                }
                if st.ready.len() >= sh.size {
                    defer_until = None;
                    st = sh.cv.wait(st).unwrap_or_else(|p| p.into_inner());
                    continue;
                }
                let now = std::time::Instant::now();
                if st.in_flight == 0 && st.quiet_until.is_none_or(|t| t <= now) {
                    break;
                }
                let until = *defer_until.get_or_insert_with(|| now + REFILL_DEFER_MAX);
                let mut left = until.saturating_duration_since(now);
                if left.is_zero() {
                    break;
                }
                if st.in_flight == 0 {
                    // only the quiet time is left to wait
                    left = left.min(
                        st.quiet_until
                            .map_or(left, |t| t.saturating_duration_since(now)),
                    );
                }
                st = sh
                    .cv
                    .wait_timeout(st, left)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
        }
        let built = Prebuilt::build(&sh.root, &sh.cfg);
        let mut st = sh.lock();
        match built {
            // a stopping pool drops what was just built, here, on this thread
            Ok(p) if !st.stop => {
                st.ready.push_back(p);
                st.stats.built += 1;
            }
            Ok(_) => return,
            Err(e) => {
                st.stats.build_failures += 1;
                st.stats.last_error = thaw_error::chain(&e);
                tracing::warn!("building a pooled sandbox failed: {}", st.stats.last_error);
                let (st, _) = sh
                    .cv
                    .wait_timeout(st, RETRY_PAUSE)
                    .unwrap_or_else(|p| p.into_inner());
                if st.stop {
                    return;
                }
            }
        }
    }
}

impl Drop for SandboxPool {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.cv.notify_all();
        if let Some(t) = self.refill.take() {
            let _ = t.join();
        }
        // kill the waiting restorers while their parent thread is gone but
        // we still hold them (Sandbox::drop reaps and removes cgroups)
        self.shared.lock().ready.clear();
    }
}

/// The restorer ELF in a sealed memfd, made once per process.
pub(crate) fn restorer_memfd() -> Result<RawFd> {
    static FD: OnceLock<OwnedFd> = OnceLock::new();
    if let Some(fd) = FD.get() {
        return Ok(fd.as_raw_fd());
    }
    // SAFETY: memfd_create with a static NUL-terminated name.
    let fd = unsafe {
        libc::memfd_create(
            c"thaw-restorer".as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        )
    };
    if fd < 0 {
        fail!(
            HostError::Failed,
            "memfd_create: {}",
            std::io::Error::last_os_error()
        );
    }
    // SAFETY: fd was just created and is owned here.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut f = File::from(owned);
    f.write_all(thaw_restorer::RESTORER_ELF)?;
    let seals = libc::F_SEAL_WRITE | libc::F_SEAL_GROW | libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL;
    // SAFETY: fcntl on our own descriptor.
    unsafe { libc::fcntl(f.as_raw_fd(), libc::F_ADD_SEALS, seals) };
    let _ = FD.set(OwnedFd::from(f));
    Ok(FD.get().expect("just set").as_raw_fd())
}
