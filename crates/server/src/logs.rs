//! Function output, per invocation, in a bounded ring on disk.
//!
//! Each sandbox writes stdout/stderr to its own log file (opened O_APPEND,
//! capped by RLIMIT_FSIZE). After every invocation the instance thread takes
//! what was written and truncates the file, so a sandbox log never holds more
//! than one invocation's output. The taken text (cut to a per-invocation cap)
//! is appended as one JSON line to the function's `logs.jsonl`; when that
//! passes its cap the older half is dropped. A function printing 1 GiB costs
//! at most the caps.
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LogEntry {
    pub seq: u64,
    pub invocation_id: String,
    pub instance: String,
    pub unix_ms: u64,
    pub output: String,
    #[serde(default)]
    pub truncated: bool,
}

/// Takes (and clears) what a sandbox wrote since the last call, at most `cap` bytes.
pub fn take_sandbox_output(path: &Path, cap: u64) -> (String, bool) {
    let Ok(mut f) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
    else {
        return (String::new(), false);
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let mut buf = Vec::new();
    let _ = f.seek(std::io::SeekFrom::Start(0));
    let _ = (&mut f).take(cap).read_to_end(&mut buf);
    let _ = f.set_len(0);
    (String::from_utf8_lossy(&buf).into_owned(), len > cap)
}

/// One function's ring.
pub struct Ring {
    path: PathBuf,
    cap: u64,
    state: Mutex<u64>,
}

impl Ring {
    pub fn open(path: PathBuf, cap: u64) -> Ring {
        let last = read_entries(&path).last().map_or(0, |e| e.seq);
        Ring {
            path,
            cap,
            state: Mutex::new(last),
        }
    }

    pub fn append(&self, mut e: LogEntry) -> Result<()> {
        let mut seq = self.state.lock().unwrap_or_else(|p| p.into_inner());
        *seq += 1;
        e.seq = *seq;
        let mut line = serde_json::to_vec(&e)?;
        line.push(b'\n');
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&self.path)?;
        f.write_all(&line)?;
        if f.metadata()?.len() > self.cap {
            drop(f);
            self.keep_newest_half()?;
        }
        Ok(())
    }

    fn keep_newest_half(&self) -> Result<()> {
        let data = std::fs::read(&self.path)?;
        let mut cut = data.len() - (self.cap as usize / 2).min(data.len());
        while cut < data.len() && data[cut.saturating_sub(1)] != b'\n' {
            cut += 1;
        }
        crate::registry::write_private(&self.path, &data[cut..])
    }

    /// Entries after `after` (a seq), the newest `tail` of them.
    pub fn read(&self, after: u64, tail: usize) -> Vec<LogEntry> {
        let _guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let mut v: Vec<_> = read_entries(&self.path)
            .into_iter()
            .filter(|e| e.seq > after)
            .collect();
        let skip = v.len().saturating_sub(tail);
        v.drain(..skip);
        v
    }
}

fn read_entries(path: &Path) -> Vec<LogEntry> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}
