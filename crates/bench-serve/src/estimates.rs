//! `thaw bench estimates`: the daemon's placement estimates against the
//! cold starts it then serves, per function and tier (docs/BENCHMARKS.md).
//!
//! Each function is deployed once per tier with that tier named and the
//! strategy left to placement (so placement measures the profile and
//! estimates every tier), then restored `runs` times through the API
//! (`?force=cold`). A cold start is what placement's estimate stands for,
//! as the daemon times it (`Server-Timing`: restore + after-restore step +
//! first invocation), spaced so that each finds a sandbox built ahead, as
//! sporadic cold starts do. The first half of the restores recalibrates the
//! estimate (the daemon's own `calibration`); both the deploy's estimate and
//! the recalibrated one are compared with the second half, which the
//! recalibration has not seen.
use crate::error::{BenchServeError, OrFail, Result};
use base64::Engine as _;
use serde::Serialize;
use serde_json::{json, Value};
use thaw_bench::stats::{summarize, Summary};
use thaw_client::{Client, Target};
use thaw_error::{fail, ResultExt};

/// Pause before each restore start.
const SPACING: std::time::Duration = std::time::Duration::from_millis(200);

pub struct Options {
    /// suite functions with a built-in sample event ([`sample_event`])
    pub functions: Vec<String>,
    /// tiers to deploy on (empty: the daemon's snapshot tiers)
    pub tiers: Vec<String>,
    /// restore starts per function and tier (half calibrate, half judge)
    pub runs: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub function: String,
    pub tier: String,
    pub strategy: String,
    /// placement's estimate at deploy
    pub deploy_estimate_ms: f64,
    /// the estimate recalibrated from the first half of the restores
    pub recalibrated_ms: f64,
    /// the second half's cold starts
    pub measured_ms: Summary,
    /// estimate / measured median
    pub deploy_ratio: f64,
    pub recalibrated_ratio: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub rows: Vec<Row>,
}

/// The event each supported suite function is deployed and invoked with.
pub fn sample_event(function: &str) -> Result<Value> {
    Ok(match function {
        "helloworld" => json!({"name": "bench"}),
        "matmul" => json!({"n": 64, "seed": 1}),
        "linpack" => json!({"n": 64, "seed": 1}),
        "float_operation" => json!({"n": 10000}),
        _ => fail!(
            BenchServeError::Failed,
            "no sample event for {function:?}: use helloworld, matmul, linpack or float_operation (a suite function named after the library it imports, such as pyaes, would shadow it as a user function)"
        ),
    })
}

/// Runs the benchmark on a temporary state home; the runtime root comes
/// from `runtime_home`.
pub fn run(runtime_home: &std::path::Path, o: &Options) -> Result<Report> {
    if o.runs < 2 {
        fail!(
            BenchServeError::Failed,
            "--runs must be at least 2 (half calibrate, half judge)"
        );
    }
    let events = o
        .functions
        .iter()
        .map(|f| sample_event(f))
        .collect::<Result<Vec<_>>>()?;
    thaw_server::on_temp_daemon(runtime_home, "estimates", |app, socket| {
        let tiers: Vec<String> = if o.tiers.is_empty() {
            app.cfg
                .snapshot_tiers
                .names()
                .iter()
                .map(|t| t.to_string())
                .collect()
        } else {
            o.tiers.clone()
        };
        let mut c = Client::new(Target::Unix(socket.to_path_buf()));
        let mut rows = Vec::new();
        for (f, ev) in o.functions.iter().zip(&events) {
            for t in &tiers {
                rows.push(measure(app, &mut c, f, ev, t, o.runs)?);
            }
        }
        Ok(Report { rows })
    })
}

fn request(
    c: &mut Client,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> Result<(Value, thaw_client::Response)> {
    let raw = body.map(serde_json::to_vec).transpose()?;
    let r = crate::request_ok(c, method, path, raw.as_deref())?;
    let v = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
    Ok((v, r))
}

/// The cold start as the daemon timed it: restore + after-restore + exec
/// from the `Server-Timing` header.
fn cold_ms(r: &thaw_client::Response) -> Result<f64> {
    let timing = r
        .header("server-timing")
        .or_fail("no Server-Timing header")?;
    let dur = |name: &str| -> Option<f64> {
        timing.split(", ").find_map(|part| {
            let (n, d) = part.split_once(";dur=")?;
            (n == name).then(|| d.parse().ok()).flatten()
        })
    };
    match (dur("restore"), dur("after_restore"), dur("exec")) {
        (Some(a), Some(b), Some(e)) => Ok(a + b + e),
        _ => fail!(
            BenchServeError::Failed,
            "not a restore start: Server-Timing {timing:?}"
        ),
    }
}

fn measure(
    app: &thaw_server::App,
    c: &mut Client,
    function: &str,
    event: &Value,
    tier: &str,
    runs: usize,
) -> Result<Row> {
    let src_path = app
        .worker
        .root
        .path
        .join(format!("opt/thaw/functions/{function}.py"));
    let src =
        std::fs::read(&src_path).with_context(|| format!("reading {}", src_path.display()))?;
    let name = format!("{function}-{tier}");
    let deploy = json!({
        "name": name,
        "handler": format!("{function}.handler"),
        "code": {"format": "file", "filename": format!("{function}.py"),
                 "data_base64": base64::engine::general_purpose::STANDARD.encode(&src)},
        "tier": tier,
        "sample_event": event,
        "memory_mb": 128,
        // room for every restore start: an eviction's teardown would
        // otherwise overlap the next one
        "max_instances": u32::try_from((runs + 1).min(64)).unwrap_or(64),
    });
    request(c, "POST", "/v1/functions", Some(&deploy))?;
    let path = format!("/v1/functions/{name}");
    let (info, _) = request(c, "GET", &path, None)?;
    let strategy = info["strategy"].as_str().unwrap_or("-").to_string();
    let deploy_estimate_ms = info["placement"]["estimates"]
        .as_array()
        .and_then(|es| es.iter().find(|e| e["tier"] == tier))
        .and_then(|e| e["cold_ms"].as_f64())
        .or_fail("the deploy recorded no estimate for its tier")?;
    let invoke = format!("{path}/invoke?force=cold");
    let mut judged = Vec::new();
    let mut recalibrated_ms = None;
    for i in 0..runs {
        if i == runs / 2 {
            let (info, _) = request(c, "GET", &path, None)?;
            recalibrated_ms = info["calibration"]["estimate_ms"].as_f64();
        }
        // spaced as sporadic cold starts are: the function's sandbox pool
        // has refilled and the last instance's teardown is over
        std::thread::sleep(SPACING);
        let (_, r) = request(c, "POST", &invoke, Some(event))?;
        let ms = cold_ms(&r)?;
        if i >= runs / 2 {
            judged.push(ms);
        }
    }
    request(c, "DELETE", &path, None).ok();
    let recalibrated_ms = recalibrated_ms.or_fail("the daemon reported no calibration")?;
    let measured_ms = summarize(&judged).or_fail("no restore measured")?;
    Ok(Row {
        function: function.to_string(),
        tier: tier.to_string(),
        strategy,
        deploy_estimate_ms,
        recalibrated_ms,
        deploy_ratio: deploy_estimate_ms / measured_ms.median,
        recalibrated_ratio: recalibrated_ms / measured_ms.median,
        measured_ms,
    })
}

pub fn markdown(r: &Report) -> String {
    let mut m = String::from(
        "thaw bench estimates: placement's cold-start estimates against the restores the daemon served \
         (ms; measured: the second half of the restores, which the recalibration did not see)\n\n\
         | function | tier | strategy | estimate at deploy | recalibrated | measured min / median / p99 | deploy / measured | recalibrated / measured |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    for x in &r.rows {
        m += &format!(
            "| {} | {} | {} | {:.2} | {:.2} | {:.2} / {:.2} / {:.2} | {:.2} | {:.2} |\n",
            x.function,
            x.tier,
            x.strategy,
            x.deploy_estimate_ms,
            x.recalibrated_ms,
            x.measured_ms.min,
            x.measured_ms.median,
            x.measured_ms.p99,
            x.deploy_ratio,
            x.recalibrated_ratio
        );
    }
    m
}
