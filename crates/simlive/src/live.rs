//! The live side: a `thaw serve` started and stopped here (a child process on a
//! throw-away home), the trace's functions deployed to it, and their start costs
//! measured through its API for the simulator's calibration.
use crate::compare::LiveStart;
use crate::error::{Result, SimliveError};
use crate::trace::Trace;
use base64::Engine as _;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use thaw_client::{Client, Target};
use thaw_error::{fail, ResultExt};

/// What the daemon is started with; the simulator gets the same.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ServeOptions {
    pub policy: String,
    pub memory_budget_mb: u64,
    pub keep_alive_s: u64,
    /// `measured` or `declared` (None: the daemon's default)
    pub memory_accounting: Option<String>,
}

/// A running `thaw serve`; stopped (SIGTERM, then SIGKILL) when dropped.
pub struct Daemon {
    child: Option<Child>,
    pub socket: PathBuf,
}

impl Daemon {
    pub fn start(
        thaw: &Path,
        home: &Path,
        runtime_home: &Path,
        o: &ServeOptions,
        log: &Path,
    ) -> Result<Daemon> {
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("opening {}", log.display()))?;
        let child = Command::new(thaw)
            .arg("--home")
            .arg(home)
            .arg("serve")
            .arg("--runtime-home")
            .arg(runtime_home)
            .args(["--policy", &o.policy])
            .args(["--memory-budget-mb", &o.memory_budget_mb.to_string()])
            .args(["--keep-alive-s", &o.keep_alive_s.to_string()])
            .args(
                o.memory_accounting
                    .iter()
                    .flat_map(|a| ["--memory-accounting", a.as_str()]),
            )
            .stdin(Stdio::null())
            .stdout(log_file.try_clone()?)
            .stderr(log_file)
            .spawn()
            .with_context(|| format!("starting {} serve", thaw.display()))?;
        let mut d = Daemon {
            child: Some(child),
            socket: home.join("serve").join("thaw.sock"),
        };
        let t = Instant::now();
        loop {
            if let Ok(r) = d.client().request("GET", "/readyz", None) {
                if r.status == 200 {
                    return Ok(d);
                }
            }
            if let Some(st) = d.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                d.child = None;
                fail!(
                    SimliveError::Daemon,
                    "thaw serve exited with {st} before it was ready (see {})",
                    log.display()
                );
            }
            if t.elapsed() > Duration::from_secs(180) {
                fail!(
                    SimliveError::Daemon,
                    "thaw serve was not ready within 180 s (see {})",
                    log.display()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn client(&self) -> Client {
        Client::new(Target::Unix(self.socket.clone()))
    }

    /// SIGTERM (the daemon drains and drops every instance), bounded; then SIGKILL.
    pub fn stop(&mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        // SAFETY: kill(2) on the pid of a child we spawned and have not reaped.
        unsafe { libc::kill(child.id().cast_signed(), libc::SIGTERM) };
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(60) {
            if let Some(st) = child.try_wait()? {
                if !st.success() {
                    fail!(
                        SimliveError::Daemon,
                        "thaw serve exited with {st} on SIGTERM"
                    );
                }
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        fail!(
            SimliveError::Daemon,
            "thaw serve did not stop within 60 s of SIGTERM (killed)"
        )
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// The function every trace function is: it sleeps its fixed duration.
const CODE: &str = "import os\nimport time\n\nDURATION_S = float(os.environ[\"SIMLIVE_DURATION_MS\"]) / 1000.0\n\n\ndef handler(event):\n    time.sleep(DURATION_S)\n    return {\"slept_ms\": DURATION_S * 1000.0}\n";

/// A deploy's outcome: what the snapshot took.
pub struct Deployed {
    pub checkpoint_ms: Option<f64>,
}

pub fn deploy(
    c: &mut Client,
    name: &str,
    duration_ms: u64,
    memory_mb: u64,
    max_instances: u32,
    strategy: thaw_strategy_kind::StartStrategy,
) -> Result<Deployed> {
    let b64 = base64::engine::general_purpose::STANDARD.encode(CODE);
    let req = json!({
        "name": name,
        "handler": "main.handler",
        "code": {"format": "file", "data_base64": b64, "filename": "main.py"},
        "env": {"SIMLIVE_DURATION_MS": duration_ms.to_string()},
        "memory_mb": memory_mb,
        "max_instances": max_instances,
        "timeout_ms": (duration_ms + 30_000),
        "strategy": strategy,
    });
    let r = c
        .request("POST", "/v1/functions", Some(req.to_string().as_bytes()))
        .with_context(|| format!("deploying {name}"))?;
    answered(&r, &format!("deploying {name}"))?;
    let rec = r
        .json()
        .with_context(|| format!("deploying {name}: the daemon's answer"))?;
    Ok(Deployed {
        checkpoint_ms: rec
            .pointer("/snapshot/checkpoint_ms")
            .and_then(Value::as_f64),
    })
}

pub fn remove(c: &mut Client, name: &str) -> Result<()> {
    let r = c
        .request("DELETE", &format!("/v1/functions/{name}"), None)
        .with_context(|| format!("removing {name}"))?;
    if !(200..300).contains(&r.status) {
        fail!(
            SimliveError::Daemon,
            "removing {name}: the daemon answered {}",
            r.status
        );
    }
    Ok(())
}

/// One invocation measured from the client: (start type, start latency ms =
/// round trip minus the function's own execution time).
pub fn timed_invoke(c: &mut Client, name: &str, cold: bool) -> Result<(String, f64)> {
    let path = format!(
        "/v1/functions/{name}/invoke{}",
        if cold { "?force=cold" } else { "" }
    );
    let t = Instant::now();
    let r = c
        .request("POST", &path, Some(b"{}"))
        .with_context(|| format!("invoking {name}"))?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    answered(&r, &format!("invoking {name}"))?;
    let exec = r
        .header("server-timing")
        .map(thaw_load::client::parse_server_timing)
        .and_then(|t| t.into_iter().find(|(k, _)| k == "exec").map(|(_, v)| v))
        .ok_or_else(|| {
            SimliveError::Daemon("the response has no Server-Timing exec phase".into())
        })?;
    let start = r.header("thaw-start-type").unwrap_or("unknown").to_string();
    Ok((start, (ms - exec).max(0.0)))
}

/// Measured costs of one function, ms (medians over `runs`).
#[derive(Clone, Debug, serde::Serialize)]
pub struct Measured {
    pub warm_ms: f64,
    pub restore_ms: f64,
    pub checkpoint_ms: Option<f64>,
    /// What the daemon charges the function's instances in RAM, if any
    /// were live when it was asked.
    #[serde(skip)]
    pub footprint: Option<Footprint>,
}

/// A function's RAM as the daemon charges it (MiB): one idle instance's own
/// pages (the mean over its live instances, to the nearest MiB as the
/// daemon rounds each) and its snapshot's pages, once.
#[derive(Clone, Copy, Debug)]
pub struct Footprint {
    pub idle_mb: f64,
    pub shared_mb: f64,
}

/// A 2xx answer, else an error saying `what` got which answer.
fn answered(r: &thaw_client::Response, what: &str) -> Result<()> {
    if !(200..300).contains(&r.status) {
        fail!(
            SimliveError::Daemon,
            "{what}: the daemon answered {}: {}",
            r.status,
            String::from_utf8_lossy(&r.body)
        );
    }
    Ok(())
}

/// `name`'s footprint as the daemon measures it now (None: no instance).
pub fn footprint(c: &mut Client, name: &str) -> Result<Option<Footprint>> {
    let what = format!("reading {name}'s instances");
    let r = c
        .request("GET", &format!("/v1/functions/{name}"), None)
        .with_context(|| what.clone())?;
    answered(&r, &what)?;
    let v: Value = r.json().with_context(|| what.clone())?;
    let live = v["instances"]["live"].as_u64().unwrap_or(0);
    let private = v["instances"]["private_bytes"].as_u64().unwrap_or(0);
    let size = v["snapshot"]["size_bytes"].as_u64().unwrap_or(0);
    let mib = (1u64 << 20) as f64;
    Ok((live > 0 && private > 0).then(|| Footprint {
        idle_mb: (private as f64 / live as f64 / mib).round().max(1.0),
        shared_mb: size.div_ceil(1 << 20) as f64,
    }))
}

/// The median: one start slowed by another tenant of a shared machine must
/// not set a function's cost for the whole replay.
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => 0.5 * (v[n / 2 - 1] + v[n / 2]),
    }
}

/// Time left after a calibration call's own duration before the next call, so
/// that the call before has ended and its instance is idle.
const CALIBRATION_GAP_US: u64 = 500_000;

/// Calls per function in one calibration round: the first restores, the rest
/// are warm samples (cheap, and the noisier of the two on a shared machine).
const CALIBRATION_CALLS: usize = 4;

/// One calibration round: `CALIBRATION_CALLS` invocations of each function in
/// turn, every call after the previous one has ended. Replayed by `thaw load`
/// against a daemon started empty with room for every function's instance,
/// the first call restores (no instance, nothing to evict) and the others
/// find the instance idle and are warm. The records' start types are what
/// counts, not this expectation.
// calibrated functions number far below 2^32
#[allow(clippy::cast_possible_truncation)]
pub fn calibration_trace(tr: &Trace) -> Trace {
    let mut rows = Vec::new();
    let mut t = 0;
    for (i, f) in tr.functions.iter().enumerate() {
        for _ in 0..CALIBRATION_CALLS {
            rows.push((t, i as u32));
            t += f.duration_ms * 1000 + CALIBRATION_GAP_US;
        }
    }
    Trace {
        functions: tr.functions.clone(),
        rows,
    }
}

/// Per function (in `names` order): median warm and restore start latency of
/// the calibration replay's answered requests.
pub fn calibrated(starts: &[LiveStart], names: &[&str]) -> Result<Vec<(f64, f64)>> {
    names
        .iter()
        .map(|name| {
            let of = |kind: &str| -> Result<f64> {
                let mut v: Vec<f64> = starts
                    .iter()
                    .filter(|s| s.function == *name && s.start_type == kind)
                    .map(|s| s.ms)
                    .collect();
                if v.is_empty() {
                    fail!(
                        SimliveError::Records,
                        "calibration: {name} had no {kind} start (see calibration-N.jsonl)"
                    );
                }
                Ok(median(&mut v))
            };
            Ok((of("warm")?, of("restore")?))
        })
        .collect()
}

/// Boot cost: a throw-away function deployed without a snapshot (`boot`),
/// forced cold `runs` times, then removed.
pub fn measure_boot(c: &mut Client, memory_mb: u64, runs: usize) -> Result<f64> {
    let name = "simlive-boot-probe";
    deploy(
        c,
        name,
        1,
        memory_mb,
        4,
        thaw_strategy_kind::StartStrategy::Boot,
    )?;
    let mut boots = Vec::new();
    for _ in 0..runs {
        let (st, ms) = timed_invoke(c, name, true)?;
        if st != "boot" {
            fail!(
                SimliveError::Daemon,
                "the boot probe started as {st:?}, not boot"
            );
        }
        boots.push(ms);
    }
    remove(c, name)?;
    Ok(median(&mut boots))
}
