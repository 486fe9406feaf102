//! `thaw bench xdt`: 1-1 transfers between two deployed functions on one
//! daemon, by reference (XDT: a sealed memfd mapped into the consumer) and
//! inline (base64 in the invocation event, up to the event limit), side by
//! side in one run. Each transfer is timed inside the producer from before it
//! hands the bytes over until the consumer has touched every page of them
//! and answered; the first transfer of each cell warms the consumer up and
//! is not counted. The object-store baseline is not built yet (see
//! docs/BENCHMARKS.md).
use anyhow::{bail, Context, Result};
use base64::Engine as _;
use serde::Serialize;
use serde_json::json;
use thaw_bench::stats::{summarize, Summary};

use crate::client::{Client, Target};

const FUNCTIONS: &str = include_str!("xdt_bench.py");

pub struct Options {
    pub sizes: Vec<u64>,
    pub runs: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Cell {
    pub size: u64,
    pub method: String,
    /// None: not possible (inline past the event limit)
    pub ms: Option<Summary>,
    /// size / median
    pub mb_per_s: Option<f64>,
    pub note: String,
}

/// Runs the benchmark on a temporary state home.
pub fn run(runtime_home: &std::path::Path, o: &Options) -> Result<Vec<Cell>> {
    crate::bench::on_temp_daemon(runtime_home, "xdt", |app, socket| {
        measure(socket, app.cfg.limits.event_bytes, &o.sizes, o.runs)
    })
}

fn measure(
    socket: &std::path::Path,
    event_limit: u64,
    sizes: &[u64],
    runs: usize,
) -> Result<Vec<Cell>> {
    let mut c = Client::new(Target::Unix(socket.to_path_buf()));
    let biggest = sizes.iter().copied().max().unwrap_or(0);
    // room for the data, its encoding and the mapped object
    let memory_mb = ((biggest * 4) >> 20).max(256) + 128;
    for (name, handler) in [("xdt-source", "source"), ("xdt-sink", "sink")] {
        let req = json!({
            "name": name,
            "handler": format!("xdt_bench.{handler}"),
            "code": {"format": "file", "filename": "xdt_bench.py",
                     "data_base64": base64::engine::general_purpose::STANDARD.encode(FUNCTIONS)},
            "memory_mb": memory_mb,
            "timeout_ms": 600_000,
        });
        let r = c.request("POST", "/v1/functions", Some(&serde_json::to_vec(&req)?))?;
        if r.status != 201 {
            bail!(
                "deploy {name}: {} {}",
                r.status,
                String::from_utf8_lossy(&r.body)
            );
        }
    }
    let mut cells = Vec::new();
    for &size in sizes {
        for method in ["xdt", "inline"] {
            // base64 grows the bytes by 4/3, plus the JSON around them
            if method == "inline" && size.div_ceil(3) * 4 + 64 > event_limit {
                cells.push(Cell {
                    size,
                    method: method.into(),
                    ms: None,
                    mb_per_s: None,
                    note: format!("over the {event_limit}-byte inline event limit"),
                });
                continue;
            }
            let ev = json!({"size": size, "method": method, "runs": runs});
            let r = c.request(
                "POST",
                "/v1/functions/xdt-source/invoke",
                Some(&serde_json::to_vec(&ev)?),
            )?;
            if r.status != 200 {
                bail!(
                    "{method} {size}: {} {}",
                    r.status,
                    String::from_utf8_lossy(&r.body)
                );
            }
            let out = r.json()?;
            let ms: Vec<f64> = out["ms"]
                .as_array()
                .context("no timings")?
                .iter()
                .filter_map(|v| v.as_f64())
                .collect();
            let s = summarize(&ms).context("no samples")?;
            cells.push(Cell {
                size,
                method: method.into(),
                mb_per_s: Some(size as f64 / 1e6 / (s.median / 1e3)),
                ms: Some(s),
                note: String::new(),
            });
        }
    }
    Ok(cells)
}

fn human(size: u64) -> String {
    match size {
        s if s >= 1_000_000 => format!("{} MB", s / 1_000_000),
        s if s >= 1_000 => format!("{} KB", s / 1_000),
        s => format!("{s} B"),
    }
}

pub fn markdown(cells: &[Cell]) -> String {
    let mut s = String::from(
        "| size | method | n | min ms | median ms | p99 ms | MB/s (median) | inline / xdt (median) |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    for c in cells {
        let inline = cells
            .iter()
            .find(|o| o.size == c.size && o.method == "inline")
            .and_then(|o| o.ms.as_ref());
        let ratio = match (c.method.as_str(), &c.ms, inline) {
            ("xdt", Some(x), Some(i)) => format!("{:.2}", i.median / x.median),
            _ => "-".into(),
        };
        match &c.ms {
            Some(m) => {
                s += &format!(
                    "| {} | {} | {} | {:.3} | {:.3} | {:.3} | {:.0} | {ratio} |\n",
                    human(c.size),
                    c.method,
                    m.n,
                    m.min,
                    m.median,
                    m.p99,
                    c.mb_per_s.unwrap_or(0.0)
                )
            }
            None => {
                s += &format!(
                    "| {} | {} | - | - | - | - | - | {} |\n",
                    human(c.size),
                    c.method,
                    c.note
                )
            }
        }
    }
    s
}
