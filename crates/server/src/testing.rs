//! The in-process test daemon every test crate uses (the `testing`
//! feature, enabled by their dev-dependencies): a [`TempDaemon`] on a
//! home of its own, with a client on its Unix socket.
use serde_json::Value;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use thaw_client::{Client, Response, Target};

use crate::{Config, TempDaemon};

static N: AtomicU32 = AtomicU32::new(0);

/// A test's daemon settings: a home of its own under /tmp (`name` in it),
/// the machine's runtime root, small code and event limits.
pub fn test_config(name: &str) -> Config {
    let home = PathBuf::from(format!(
        "/tmp/thaw-serve-test-{}-{}-{name}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = crate::remove_home(&home);
    let mut cfg = Config {
        home,
        runtime_home: Some(thaw_runtime::default_home()),
        drain_grace_s: 10,
        // the machine's own memory stalls (other tests' work) must not
        // give a test's idle instances up; the test of it turns it on
        memory_pressure_stall_pct: 0.0,
        ..Config::default()
    };
    cfg.limits.code_bytes = 1 << 20;
    cfg.limits.unpacked_bytes = 8 << 20;
    cfg.limits.event_bytes = 256 << 10;
    cfg
}

impl TempDaemon {
    /// A daemon for a test (two runtime threads); a daemon that does not
    /// start fails the test.
    pub fn start(cfg: Config) -> TempDaemon {
        let home = cfg.home.display().to_string();
        TempDaemon::serve(cfg, Some(2))
            .unwrap_or_else(|e| panic!("starting the daemon on {home}: {e:#}"))
    }

    pub fn client(&self) -> Client {
        Client::new(Target::Unix(self.socket().to_path_buf()))
    }

    pub fn req(&self, method: &str, path: &str, body: Option<&[u8]>) -> Response {
        self.client().request(method, path, body).expect("request")
    }

    pub fn post_json(&self, path: &str, v: &Value) -> Response {
        self.req("POST", path, Some(&serde_json::to_vec(v).unwrap()))
    }

    pub fn invoke(&self, name: &str, event: &Value) -> Response {
        self.post_json(&format!("/v1/functions/{name}/invoke"), event)
    }

    /// Stops, runs `between` while it is down, and starts again on the
    /// same home.
    pub fn restart(mut self, between: impl FnOnce()) -> TempDaemon {
        self.stop();
        self.keep_home = true;
        let cfg = self.cfg.clone();
        drop(self);
        between();
        TempDaemon::start(cfg)
    }

    pub fn healthy(&self) {
        let r = self.req("GET", "/healthz", None);
        assert_eq!(r.status, 200, "the daemon stopped serving");
    }
}
