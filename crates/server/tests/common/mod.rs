//! The daemon in-process for tests: a throw-away home, a client on its
//! Unix socket, deploy requests. Each test binary uses part of it.
#![allow(dead_code)]
use base64::Engine as _;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use thaw_client::{Client, Response, Target};
use thaw_server::Config;

static N: AtomicU32 = AtomicU32::new(0);

pub struct Daemon {
    pub rt: tokio::runtime::Runtime,
    pub running: Option<thaw_server::Running>,
    pub home: PathBuf,
    pub cfg: Config,
    pub keep_home: bool,
}

pub fn test_config(name: &str) -> Config {
    let home = PathBuf::from(format!(
        "/tmp/thaw-serve-test-{}-{}-{name}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = thaw_server::remove_home(&home);
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

impl Daemon {
    pub fn start(cfg: Config) -> Daemon {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let home = cfg.home.clone();
        let c2 = cfg.clone();
        let running = rt.block_on(async move {
            let app = tokio::task::spawn_blocking(move || thaw_server::open(c2))
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
            cfg,
            keep_home: false,
        }
    }

    pub fn client(&self) -> Client {
        Client::new(Target::Unix(self.running.as_ref().unwrap().socket.clone()))
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

    pub fn stop(&mut self) {
        if let Some(r) = self.running.take() {
            self.rt.block_on(r.stop());
        }
    }

    /// Stops, runs `between` while it is down, and starts again on the same home.
    pub fn restart(mut self, between: impl FnOnce()) -> Daemon {
        self.stop();
        self.keep_home = true;
        let cfg = self.cfg.clone();
        drop(self);
        between();
        Daemon::start(cfg)
    }

    pub fn healthy(&self) {
        let r = self.req("GET", "/healthz", None);
        assert_eq!(r.status, 200, "the daemon stopped serving");
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
        if !self.keep_home {
            thaw_server::remove_home(&self.home).expect("removing the test home");
        }
    }
}

pub fn b64(d: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(d)
}

/// A deploy request for one source file.
pub fn file_deploy(name: &str, handler: &str, src: &str) -> Value {
    let module = handler.split('.').next().unwrap();
    json!({
        "name": name,
        "handler": handler,
        "code": {"format": "file", "data_base64": b64(src.as_bytes()), "filename": format!("{module}.py")},
    })
}

/// A Node.js function from one file, `m.js`, with handler `m.handler`.
pub fn node_file_deploy(name: &str, src: &str) -> Value {
    json!({
        "name": name,
        "runtime": "nodejs",
        "handler": "m.handler",
        "code": {"format": "file", "data_base64": b64(src.as_bytes()), "filename": "m.js"},
    })
}

pub fn deploy(d: &Daemon, req: &Value) -> Value {
    let r = d.post_json("/v1/functions", req);
    assert!(
        r.status == 201 || r.status == 200,
        "deploy failed: {} {}",
        r.status,
        String::from_utf8_lossy(&r.body)
    );
    r.json().unwrap()
}

pub fn error_of(r: &Response) -> (u16, String, String) {
    let v = r.json().unwrap_or(Value::Null);
    (
        r.status,
        v["error"].as_str().unwrap_or("").to_string(),
        v["message"].as_str().unwrap_or("").to_string(),
    )
}

/// One sample of the daemon's `/metrics`: `series` is the name with its
/// labels as the daemon writes them (`thaw_instances{state="idle"}`).
pub fn metric(d: &Daemon, series: &str) -> u64 {
    let text = String::from_utf8(d.req("GET", "/metrics", None).body).unwrap();
    let key = format!("{series} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&key))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series} in /metrics"))
}
