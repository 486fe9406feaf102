//! `thaw bench lambda`'s peer: AWS's Runtime Interface Emulator (RIE) with
//! the same Python, Go and Rust hello worlds as thaw, through the same
//! boto3 client in the same process (`lambda_peers.py`, docs/BENCHMARKS.md).
//! RIE's first invoke (a new runtime process, its init, the answer) against
//! thaw's restore; a live instance of each, warm, through boto3 and plain
//! HTTP. RIE and the daemon listen on loopback only.
use serde::Serialize;
use std::path::Path;
use thaw_bench::stats::Summary;

use crate::error::{OrFail, Result};
use crate::lambda::{client_python, floats, on_daemon, short_keep_alive, stats, ClientScript};
use crate::lambda_provided::{bootstrap, made_by};

const SCRIPT: &str = include_str!("lambda_peers.py");
const FUNCTION_ZIP: &str = include_str!("../../server/tests/lambda/function_zip.py");
/// the awslambdaric `bootstrap` (function_zip.py reads it from here)
const RIC_HELLO: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../server/tests/lambda/ric-hello"
);
const TOOLS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/lambda-tools.sh");

/// One function on one server.
#[derive(Debug, Clone, Serialize)]
pub struct PeerRow {
    /// `python`, `python-awslambdaric`, `go` or `rust`
    pub function: String,
    /// `thaw` or `rie`
    pub server: String,
    /// thaw: a restore; RIE: a first invoke (runtime start + init)
    pub cold_ms: Summary,
    pub warm_boto3_ms: Summary,
    pub warm_http_ms: Summary,
    /// thaw only: the cold invokes as the daemon timed them (`Server-Timing`)
    #[serde(skip_serializing_if = "Option::is_none")]
    pub daemon: Option<DaemonSide>,
}

/// A thaw restore as the daemon timed it, beside what the client saw.
#[derive(Debug, Clone, Serialize)]
pub struct DaemonSide {
    /// the restore phase alone
    pub restore_ms: Summary,
    /// restore to answer: the restore, the after-restore step and the handler
    pub answer_ms: Summary,
    /// the request inside the daemon, from its first byte read to its answer
    pub total_ms: Summary,
    /// of it, the wait for the policy to give an instance (before the restore)
    pub queue_ms: Summary,
}

/// thaw's cold start of one function against RIE's first invoke of the same.
#[derive(Debug, Clone, Serialize)]
pub struct PeerRatio {
    pub function: String,
    /// RIE's median first invoke / thaw's median restore
    pub cold_speedup: f64,
    /// RIE / thaw within each run
    pub cold_pair_speedup: Summary,
}

#[derive(Debug, Clone, Serialize)]
pub struct PeersReport {
    /// the emulator's cache directory, named by its pinned version
    pub rie: String,
    /// the daemon's `limits.sandbox_pool` (sandboxes built ahead of restores)
    pub sandbox_pool: usize,
    pub rows: Vec<PeerRow>,
    pub ratios: Vec<PeerRatio>,
}

pub struct Options {
    /// cold rounds
    pub runs: usize,
    /// warm calls of each function
    pub warm_calls: usize,
    /// the daemon's `limits.sandbox_pool`
    pub sandbox_pool: usize,
}

pub fn run(runtime_home: &Path, o: &Options) -> Result<PeersReport> {
    let python = client_python()?;
    let rie = made_by(TOOLS, "rie")?;
    let ric = made_by(TOOLS, "awslambdaric")?;
    let path = |p: &Path| p.display().to_string();
    let client = ClientScript {
        name: "lambda_peers.py",
        source: SCRIPT,
        modules: &[
            ("function_zip.py", FUNCTION_ZIP),
            ("lambda_bench.py", crate::lambda::SCRIPT),
        ],
        args: vec![o.runs.to_string(), o.warm_calls.to_string()],
        env: vec![
            ("RIE", path(&rie)),
            ("AWSLAMBDARIC", path(&ric)),
            ("GO_BOOTSTRAP", path(&bootstrap("go-hello")?)),
            ("RUST_BOOTSTRAP", path(&bootstrap("rust-hello")?)),
            ("RIC_HELLO_DIR", RIC_HELLO.into()),
        ],
    };
    let tune = |c: &mut thaw_server::Config| {
        short_keep_alive(c);
        c.limits.sandbox_pool = o.sandbox_pool;
    };
    let v = on_daemon(runtime_home, "lambda-peers", &tune, &python, &client)?;
    let mut rows = Vec::new();
    let mut ratios = Vec::new();
    for (server, peer_of) in [("thaw", true), ("rie", false)] {
        let by_function = v[server].as_object().or_fail("no functions")?;
        for (function, series) in by_function {
            let daemon = match peer_of {
                true => Some(DaemonSide {
                    restore_ms: stats(&floats(series, "daemon_restore_ms")?)?,
                    answer_ms: stats(&floats(series, "daemon_answer_ms")?)?,
                    total_ms: stats(&floats(series, "daemon_total_ms")?)?,
                    queue_ms: stats(&floats(series, "daemon_queue_ms")?)?,
                }),
                false => None,
            };
            rows.push(PeerRow {
                function: function.clone(),
                server: server.into(),
                cold_ms: stats(&floats(series, "cold_ms")?)?,
                warm_boto3_ms: stats(&floats(series, "warm_boto_ms")?)?,
                warm_http_ms: stats(&floats(series, "warm_http_ms")?)?,
                daemon,
            });
            if !peer_of {
                continue;
            }
            // python-awslambdaric is served by RIE's python
            let peer = function.split('-').next().unwrap_or(function);
            let thaw = floats(series, "cold_ms")?;
            let rie = floats(&v["rie"][peer], "cold_ms")?;
            let pairs: Vec<f64> = thaw.iter().zip(&rie).map(|(t, r)| r / t).collect();
            ratios.push(PeerRatio {
                function: function.clone(),
                cold_speedup: stats(&rie)?.median / stats(&thaw)?.median,
                cold_pair_speedup: stats(&pairs)?,
            });
        }
    }
    let rie = rie
        .parent()
        .and_then(|d| d.file_name())
        .map(|d| d.to_string_lossy().into_owned())
        .unwrap_or_default();
    Ok(PeersReport {
        rie,
        sandbox_pool: o.sandbox_pool,
        rows,
        ratios,
    })
}

/// The peers' rows.
pub fn markdown(r: &PeersReport) -> String {
    let mut out = String::from(
        "| function | server | n | cold min ms | cold median ms | cold p99 ms | warm boto3 median / p99 ms | warm HTTP median / p99 ms |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    for row in &r.rows {
        let cold = match row.server.as_str() {
            "thaw" => "thaw (restore)",
            _ => "RIE (first invoke)",
        };
        let (c, b, h) = (&row.cold_ms, &row.warm_boto3_ms, &row.warm_http_ms);
        out += &format!(
            "| {} | {cold} | {} | {:.2} | {:.2} | {:.2} | {:.2} / {:.2} | {:.2} / {:.2} |\n",
            row.function, c.n, c.min, c.median, c.p99, b.median, b.p99, h.median, h.p99
        );
    }
    out += "\nthaw's restores as the daemon timed them (`Server-Timing`), min / median / p99 ms:\n\n\
            | function | restore | restore to answer (restore, after-restore, handler) | in the daemon | at the client |\n\
            |---|---|---|---|---|\n";
    let three = |s: &Summary| format!("{:.2} / {:.2} / {:.2}", s.min, s.median, s.p99);
    for row in &r.rows {
        if let Some(d) = &row.daemon {
            out += &format!(
                "| {} | {} | {} | {} | {} |\n",
                row.function,
                three(&d.restore_ms),
                three(&d.answer_ms),
                three(&d.total_ms),
                three(&row.cold_ms)
            );
        }
    }
    out += &format!(
        "\nRIE: {}; thaw's sandbox_pool: {}\n",
        r.rie, r.sandbox_pool
    );
    for p in &r.ratios {
        out += &format!(
            "{}: RIE's first invoke / thaw's restore, median over median {:.1}x, per run median {:.1}x (min {:.1}x)\n",
            p.function, p.cold_speedup, p.cold_pair_speedup.median, p.cold_pair_speedup.min
        );
    }
    out
}
