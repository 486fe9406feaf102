//! A daemon serving a throw-away state home in this process, on a tokio
//! runtime of its own: what the benchmarks (`thaw bench serve`,
//! thaw-bench-serve) and every test crate run on (the tests through
//! [`crate::testing`]).
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::{open, remove_home, start, App, Config, Running, ServeError};

/// A daemon in this process. Dropped, it stops and its home goes (unless
/// `keep_home`); a home that cannot be removed is a failure (a test's
/// panic), except while a panic already unwinds.
pub struct TempDaemon {
    /// gone only once the daemon has stopped
    rt: Option<tokio::runtime::Runtime>,
    pub running: Option<Running>,
    pub home: PathBuf,
    /// what it was started with (a restart starts on it again)
    pub cfg: Config,
    pub keep_home: bool,
}

impl TempDaemon {
    /// Opens `cfg.home` and serves it; `threads`: the runtime's worker
    /// threads (`None`: one per CPU).
    pub fn serve(cfg: Config, threads: Option<usize>) -> Result<TempDaemon, ServeError> {
        let mut rt = tokio::runtime::Builder::new_multi_thread();
        if let Some(n) = threads {
            rt.worker_threads(n);
        }
        let rt = rt.enable_all().build()?;
        let app = {
            // the daemon's nested (XDT) invocations run on this runtime
            let _in_runtime = rt.enter();
            open(cfg.clone())?
        };
        let running = rt.block_on(start(app, false))?;
        Ok(TempDaemon {
            rt: Some(rt),
            running: Some(running),
            home: cfg.home.clone(),
            cfg,
            keep_home: false,
        })
    }

    /// The running daemon's state.
    pub fn app(&self) -> &Arc<App> {
        &self.running().app
    }

    /// Its Unix socket.
    pub fn socket(&self) -> &Path {
        &self.running().socket
    }

    fn running(&self) -> &Running {
        self.running.as_ref().expect("the daemon is running")
    }

    /// Runs `f` on the daemon's runtime.
    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.as_ref().expect("the runtime").block_on(f)
    }

    /// Drains (bounded by the grace period) and stops; the home stays.
    pub fn stop(&mut self) {
        if let Some(r) = self.running.take() {
            self.block_on(r.stop());
        }
    }

    /// Stops, ends the runtime (its last tasks with it) and removes the
    /// home, saying whether that failed.
    pub fn close(mut self) -> Result<(), ServeError> {
        self.stop();
        drop(self.rt.take());
        self.keep_home = true;
        remove_home(&self.home)
    }
}

impl Drop for TempDaemon {
    fn drop(&mut self) {
        self.stop();
        drop(self.rt.take());
        if self.keep_home {
            return;
        }
        if let Err(e) = remove_home(&self.home) {
            if !std::thread::panicking() {
                panic!("removing the daemon's home {}: {e:#}", self.home.display());
            }
        }
    }
}
