//! What an image that cannot change after verification costs.
//! On the DRAM tier a process's first restore of a snapshot version copies
//! the image into a sealed memfd while hashing it; before, it only hashed the
//! file. Both are measured here in the same run, interleaved, per function.
use crate::error::{BenchError, Result};
use crate::stats::{summarize, Summary};
use std::time::Instant;
use thaw_worker::Worker;

#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    pub function: String,
    pub image_mib: f64,
    /// baseline: SHA-256 of the tmpfs image (the old first-use check)
    pub hash_ms: Summary,
    /// hash + copy into a memfd + seal (what a first restore pays now)
    pub seal_ms: Summary,
    /// median seal / median hash
    pub ratio: f64,
}

/// Measures `runs` interleaved (hash, seal) pairs for each function's DRAM-tier snapshot.
pub fn run(w: &Worker, functions: &[String], runs: usize) -> Result<Vec<Row>> {
    let tier = w.tier("tmpfs")?;
    let mut rows = Vec::new();
    for f in functions {
        let snap = w.snapshot(f, &tier)?;
        let (mut hash, mut seal) = (Vec::new(), Vec::new());
        for _ in 0..runs.max(1) {
            let t = Instant::now();
            snap.verify_memory()?;
            hash.push(thaw_worker::ms(t));
            let t = Instant::now();
            drop(snap.seal_image()?);
            seal.push(thaw_worker::ms(t));
        }
        let hash_ms = summarize(&hash).ok_or_else(|| BenchError::Failed("no runs".into()))?;
        let seal_ms = summarize(&seal).ok_or_else(|| BenchError::Failed("no runs".into()))?;
        rows.push(Row {
            function: f.clone(),
            image_mib: snap.manifest.memory.len as f64 / (1 << 20) as f64,
            ratio: seal_ms.median / hash_ms.median,
            hash_ms,
            seal_ms,
        });
    }
    Ok(rows)
}

/// The table `thaw bench store` prints.
pub fn markdown(rows: &[Row], runs: usize) -> String {
    let f = |s: &Summary| format!("{:.2} / {:.2} / {:.2}", s.min, s.median, s.p99);
    let thp = thaw_store::shmem_thp_mode().unwrap_or_else(|| "unavailable".into());
    let mut out = format!(
        "Tier: tmpfs (DRAM) · memfds: shmem THP {thp} · {runs} runs per cell · ms (min / median / p99)\n\n\
         | function | image MiB | hash only (baseline) | hash + copy + seal | ratio (median) |\n\
         |---|---|---|---|---|\n"
    );
    for r in rows {
        out += &format!(
            "| {} | {:.1} | {} | {} | {:.2}x |\n",
            r.function,
            r.image_mib,
            f(&r.hash_ms),
            f(&r.seal_ms),
            r.ratio
        );
    }
    out
}
