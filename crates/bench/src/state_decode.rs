//! What reading a snapshot's process state costs: its decode (header,
//! checksum, parse, every check) timed once per run, per function, from
//! the bytes already in memory, so the file system is not measured.
use crate::error::{BenchError, Result};
use crate::stats::{summarize, Summary};
use std::time::Instant;
use thaw_snapshot_format::ProcessState;
use thaw_worker::Worker;

#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    pub function: String,
    /// the state file's bytes
    pub bytes: usize,
    pub threads: usize,
    pub mappings: usize,
    /// one decode, in microseconds
    pub decode_us: Summary,
}

/// Decodes each function's DRAM-tier snapshot state `runs` times.
pub fn run(w: &Worker, functions: &[String], runs: usize) -> Result<Vec<Row>> {
    if runs == 0 {
        return Err(BenchError::Failed(
            "state-decode needs at least one run".into(),
        ));
    }
    let tier = w.tier("tmpfs")?;
    let mut rows = Vec::new();
    for f in functions {
        let data = w.snapshot(f, &tier)?.load_state()?;
        let decode = || {
            ProcessState::decode(&data).map_err(|e| BenchError::Failed(format!("{f}'s state: {e}")))
        };
        // once untimed: a warm cache, and what the table says of the state
        let state = decode()?;
        let mut times = Vec::with_capacity(runs);
        for _ in 0..runs {
            let t = Instant::now();
            std::hint::black_box(decode()?);
            times.push(t.elapsed().as_secs_f64() * 1e6);
        }
        rows.push(Row {
            function: f.clone(),
            bytes: data.len(),
            threads: state.threads.len(),
            mappings: state.vmas.len(),
            decode_us: summarize(&times).ok_or_else(|| BenchError::Failed("no runs".into()))?,
        });
    }
    Ok(rows)
}

/// The table `thaw bench state-decode` prints.
pub fn markdown(rows: &[Row], runs: usize) -> String {
    let mut out = format!(
        "State format version {} · {runs} decodes per function · µs (min / median / p99)\n\n\
         | function | state bytes | threads | mappings | decode |\n\
         |---|---|---|---|---|\n",
        thaw_snapshot_format::STATE_VERSION
    );
    for r in rows {
        let s = &r.decode_us;
        out += &format!(
            "| {} | {} | {} | {} | {:.1} / {:.1} / {:.1} |\n",
            r.function, r.bytes, r.threads, r.mappings, s.min, s.median, s.p99
        );
    }
    out
}
