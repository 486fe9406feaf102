//! `thaw bench lambda`: Lambda's API through boto3 against thaw's own API,
//! on the same Python hello world, in the same run and client process
//! (`lambda_bench.py`, docs/BENCHMARKS.md):
//!
//! * cold: invokes alternating between the two APIs on a daemon that keeps
//!   an idle instance one second (policy `ttl`), each after a pause longer
//!   than that, so each one is a restore. Each invoke's time inside the
//!   daemon (`Server-Timing: total`) is also taken from its time at the
//!   client: what is left is the client's own work and HTTP, which is
//!   where boto3 and http.client differ;
//! * warm: requests per second from N client threads on each API, in two
//!   alternating halves, on a daemon with the default policy.
use serde::Serialize;
use std::path::Path;
use std::process::Command;
use thaw_bench::stats::{summarize, Summary};
use thaw_error::{fail, ResultExt};

use crate::error::{BenchServeError, OrFail, Result};

/// also a module of the peer's script (its `Server-Timing` parser)
pub(crate) const SCRIPT: &str = include_str!("lambda_bench.py");

pub struct Options {
    pub cold_runs: usize,
    pub warm_seconds: f64,
    pub threads: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// client-side latency of a restore-start invoke through thaw's API
    pub cold_native_ms: Summary,
    /// the same through Lambda's API with boto3 (SigV4 included)
    pub cold_lambda_ms: Summary,
    /// median Lambda / median native
    pub cold_ratio: f64,
    /// Lambda / native within each alternating pair
    pub cold_pair_ratio: Summary,
    /// the same cold invokes inside the daemon (`Server-Timing: total`):
    /// what is left of the gap once the clients' own work is out of it
    pub cold_native_daemon_ms: Summary,
    pub cold_lambda_daemon_ms: Summary,
    /// median Lambda / median native, inside the daemon
    pub cold_daemon_ratio: f64,
    /// each cold invoke at the client less its time inside the daemon: the
    /// client's own work, HTTP and loopback (http.client, then boto3)
    pub cold_native_outside_ms: Summary,
    pub cold_lambda_outside_ms: Summary,
    pub threads: usize,
    pub warm_seconds: f64,
    pub warm_native_rps: f64,
    pub warm_lambda_rps: f64,
    pub warm_native_ms: Summary,
    pub warm_lambda_ms: Summary,
}

pub(crate) fn stats(xs: &[f64]) -> Result<Summary> {
    summarize(xs).or_fail("no samples")
}

/// Runs both phases, each on a temporary daemon of its own; the runtime
/// root comes from `runtime_home`.
pub fn run(runtime_home: &Path, o: &Options) -> Result<Report> {
    let python = client_python()?;
    let script = |args: Vec<String>| ClientScript {
        name: "lambda_bench.py",
        source: SCRIPT,
        modules: &[],
        args,
        env: Vec::new(),
    };
    let cold = on_daemon(
        runtime_home,
        "lambda-cold",
        &short_keep_alive,
        &python,
        &script(vec!["cold".into(), o.cold_runs.to_string()]),
    )?;
    let warm = on_daemon(
        runtime_home,
        "lambda-warm",
        &|_| {},
        &python,
        &script(vec![
            "warm".into(),
            o.warm_seconds.to_string(),
            o.threads.to_string(),
        ]),
    )?;
    let (native, boto) = (floats(&cold, "native_ms")?, floats(&cold, "lambda_ms")?);
    let pairs: Vec<f64> = native.iter().zip(&boto).map(|(n, l)| l / n).collect();
    let (cold_native_ms, cold_lambda_ms) = (stats(&native)?, stats(&boto)?);
    let (native_daemon, boto_daemon) = (
        floats(&cold, "native_daemon_ms")?,
        floats(&cold, "lambda_daemon_ms")?,
    );
    let outside = |client: &[f64], daemon: &[f64]| {
        stats(
            &client
                .iter()
                .zip(daemon)
                .map(|(c, d)| c - d)
                .collect::<Vec<_>>(),
        )
    };
    let cold_native_outside_ms = outside(&native, &native_daemon)?;
    let cold_lambda_outside_ms = outside(&boto, &boto_daemon)?;
    let cold_native_daemon_ms = stats(&native_daemon)?;
    let cold_lambda_daemon_ms = stats(&boto_daemon)?;
    let mean = |xs: Vec<f64>| xs.iter().sum::<f64>() / xs.len().max(1) as f64;
    Ok(Report {
        cold_ratio: cold_lambda_ms.median / cold_native_ms.median,
        cold_native_ms,
        cold_lambda_ms,
        cold_pair_ratio: stats(&pairs)?,
        cold_daemon_ratio: cold_lambda_daemon_ms.median / cold_native_daemon_ms.median,
        cold_native_daemon_ms,
        cold_lambda_daemon_ms,
        cold_native_outside_ms,
        cold_lambda_outside_ms,
        threads: o.threads,
        warm_seconds: o.warm_seconds,
        warm_native_rps: mean(floats(&warm, "native_rps")?),
        warm_lambda_rps: mean(floats(&warm, "lambda_rps")?),
        warm_native_ms: stats(&floats(&warm, "native_ms")?)?,
        warm_lambda_ms: stats(&floats(&warm, "lambda_ms")?)?,
    })
}

/// A boto3 client script of the bench: its file name, source, the
/// modules it imports (name, source), arguments and environment beyond the
/// daemon's endpoint and key.
pub(crate) struct ClientScript<'a> {
    pub name: &'a str,
    pub source: &'a str,
    pub modules: &'a [(&'a str, &'a str)],
    pub args: Vec<String>,
    pub env: Vec<(&'a str, String)>,
}

/// A daemon that keeps an idle instance for a second only, so that an
/// invoke after a longer pause is a restore.
pub(crate) fn short_keep_alive(c: &mut thaw_server::Config) {
    c.policy = "ttl".into();
    c.keep_alive_s = 1;
}

/// Runs `client` with the venv's `python` against a temporary daemon
/// listening on a free loopback port, its settings adjusted by `tune`;
/// the JSON of the client's last line.
pub(crate) fn on_daemon(
    runtime_home: &Path,
    tag: &str,
    tune: &dyn Fn(&mut thaw_server::Config),
    python: &Path,
    client: &ClientScript,
) -> Result<serde_json::Value> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let configure = |c: &mut thaw_server::Config| {
        c.listen = Some(format!("127.0.0.1:{port}"));
        // room for every client thread's instance
        c.limits.instances_per_function = 16;
        tune(c);
        Ok::<_, BenchServeError>(())
    };
    let measure = |app: &thaw_server::App, _: &Path| -> Result<serde_json::Value> {
        let creds = thaw_server::lambda::sigv4::load_or_create(&app.cfg.state_dir())?;
        for (name, source) in [(client.name, client.source)].iter().chain(client.modules) {
            let path = app.cfg.home.join(name);
            std::fs::write(&path, source).with_context(|| format!("writing {}", path.display()))?;
        }
        let script = app.cfg.home.join(client.name);
        let out = Command::new(python)
            .arg(&script)
            .args(&client.args)
            .envs(client.env.iter().map(|(k, v)| (k, v)))
            .env("THAW_ENDPOINT", format!("http://127.0.0.1:{port}"))
            .env("AWS_ACCESS_KEY_ID", &creds.access_key_id)
            .env("AWS_SECRET_ACCESS_KEY", &creds.secret_access_key)
            .env("AWS_DEFAULT_REGION", &creds.region)
            .env("AWS_CONFIG_FILE", "/dev/null")
            .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
            .output()
            .with_context(|| format!("running {}", python.display()))?;
        if !out.status.success() {
            fail!(
                BenchServeError::Failed,
                "the boto3 client {} failed ({}): {}",
                client.name,
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        let last = stdout.lines().last().unwrap_or("");
        Ok(serde_json::from_str(last)?)
    };
    thaw_server::on_temp_daemon_with(runtime_home, tag, configure, measure)
}

/// boto3's virtual environment's python, or a failure naming its setup.
pub(crate) fn client_python() -> Result<std::path::PathBuf> {
    let venv = thaw_server::lambda::client_venv().or_fail(
        "boto3 is not installed: `scripts/setup.sh --tests` makes ~/.cache/thaw/lambda-clients",
    )?;
    Ok(venv.join("bin/python"))
}

/// The numbers under `key` of a client's JSON report.
pub(crate) fn floats(v: &serde_json::Value, key: &str) -> Result<Vec<f64>> {
    v[key]
        .as_array()
        .or_fail(&format!("the client's report has no {key}"))?
        .iter()
        .map(|x| x.as_f64().or_fail(&format!("{key} holds a non-number")))
        .collect()
}

/// The report as a markdown table.
pub fn markdown(r: &Report) -> String {
    let row = |what: &str, s: &Summary| {
        format!(
            "| {what} | {} | {:.2} | {:.2} | {:.2} |\n",
            s.n, s.min, s.median, s.p99
        )
    };
    let mut out =
        String::from("| invoke | n | min ms | median ms | p99 ms |\n|---|---|---|---|---|\n");
    out += &row(
        "cold (restore), thaw's API (http.client)",
        &r.cold_native_ms,
    );
    out += &row("cold (restore), Lambda's API (boto3)", &r.cold_lambda_ms);
    out += &row(
        "Lambda / thaw, per alternating pair (ratio)",
        &r.cold_pair_ratio,
    );
    out += &row(
        "cold, thaw's API, inside the daemon (Server-Timing)",
        &r.cold_native_daemon_ms,
    );
    out += &row(
        "cold, Lambda's API, inside the daemon (Server-Timing)",
        &r.cold_lambda_daemon_ms,
    );
    out += &row(
        "cold, thaw's API, outside the daemon (client, HTTP)",
        &r.cold_native_outside_ms,
    );
    out += &row(
        "cold, Lambda's API, outside the daemon (boto3, HTTP)",
        &r.cold_lambda_outside_ms,
    );
    out += &row(
        &format!("warm, thaw's API, {} threads", r.threads),
        &r.warm_native_ms,
    );
    out += &row(
        &format!("warm, Lambda's API (boto3), {} threads", r.threads),
        &r.warm_lambda_ms,
    );
    out += &format!(
        "\ncold: Lambda's API / thaw's API, median over median: {:.2}x at the client, {:.2}x inside the daemon; \
         outside the daemon boto3 takes {:.2} ms more than http.client at the median\n\
         warm throughput over {:.0} s from {} client threads: thaw's API {:.0} req/s, Lambda's API (boto3) {:.0} req/s\n",
        r.cold_ratio, r.cold_daemon_ratio,
        r.cold_lambda_outside_ms.median - r.cold_native_outside_ms.median, r.warm_seconds, r.threads, r.warm_native_rps, r.warm_lambda_rps
    );
    out
}
