//! Function output, per invocation, in a bounded ring on disk.
//!
//! Each sandbox writes stdout/stderr to its own log file (opened O_APPEND,
//! capped by RLIMIT_FSIZE). After every invocation the instance thread takes
//! what was written and truncates the file, so a sandbox log never holds more
//! than one invocation's output. The taken text (cut to a per-invocation cap)
//! is appended as one JSON line to the instance's ring
//! (`functions/NAME/logs/INSTANCE.jsonl`); when that passes its cap the older
//! half is dropped, and a function keeps the rings of its newest
//! [`KEEP_INSTANCES`] instances. A function printing 1 GiB costs at most the
//! caps.
use serde::{Deserialize, Serialize};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use thaw_error::{fail, Context, ResultExt};

/// Why a log entry was not kept.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// an instance name that is not a file name
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Runtime(#[from] thaw_runtime::RuntimeError),
    /// the step that failed, with its cause
    #[error(transparent)]
    Other(#[from] Context),
}

type Result<T, E = LogError> = std::result::Result<T, E>;

/// Now, as a log entry's `unix_ms` (0 before 1970).
pub fn now_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LogEntry {
    pub seq: u64,
    pub invocation_id: String,
    pub instance: String,
    pub unix_ms: u64,
    pub output: String,
    #[serde(default)]
    pub truncated: bool,
    /// Bytes the instance received and sent during the invocation (functions
    /// given network egress only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub net_in_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub net_out_bytes: Option<u64>,
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

/// Instances whose rings a function keeps (the oldest go first).
pub const KEEP_INSTANCES: usize = 16;

/// One function's output: one ring file per instance
/// (`logs/INSTANCE.jsonl`, each at most `cap` bytes plus one entry), the
/// newest [`KEEP_INSTANCES`] of them; entries are numbered across them.
pub struct Ring {
    dir: PathBuf,
    cap: u64,
    state: Mutex<u64>,
}

impl Ring {
    pub fn open(dir: PathBuf, cap: u64) -> Ring {
        let last = instance_files(&dir)
            .iter()
            .flat_map(|p| read_entries(p))
            .map(|e| e.seq)
            .max()
            .unwrap_or(0);
        Ring {
            dir,
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
        crate::registry::mkdir_private(&self.dir)?;
        let path = self.instance_path(&e.instance)?;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&path)?;
        f.write_all(&line)?;
        if f.metadata()?.len() > self.cap {
            drop(f);
            keep_newest_half(&path, self.cap)?;
        }
        let mut files = instance_files(&self.dir);
        if files.len() > KEEP_INSTANCES {
            files.sort_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok());
            for old in &files[..files.len() - KEEP_INSTANCES] {
                std::fs::remove_file(old)?;
            }
        }
        Ok(())
    }

    fn instance_path(&self, instance: &str) -> Result<PathBuf> {
        // instance names are the daemon's own (`FUNCTION-HEX`)
        if instance.is_empty()
            || !instance
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            fail!(LogError::Invalid, "bad instance name {instance:?}");
        }
        Ok(self.dir.join(format!("{instance}.jsonl")))
    }

    /// Entries after `after` (a seq), of one instance and/or invocation if
    /// given, the newest `tail` of them, oldest first.
    pub fn read(
        &self,
        after: u64,
        tail: usize,
        instance: Option<&str>,
        invocation: Option<&str>,
    ) -> Vec<LogEntry> {
        let _guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let mut v: Vec<_> = instance_files(&self.dir)
            .iter()
            .flat_map(|p| read_entries(p))
            .filter(|e| e.seq > after)
            .filter(|e| instance.is_none_or(|i| e.instance == i))
            .filter(|e| invocation.is_none_or(|i| e.invocation_id == i))
            .collect();
        v.sort_by_key(|e| e.seq);
        let skip = v.len().saturating_sub(tail);
        v.drain(..skip);
        v
    }

    /// Instances that have a ring.
    pub fn instances(&self) -> Vec<String> {
        let mut v: Vec<String> = instance_files(&self.dir)
            .iter()
            .filter_map(|p| p.file_stem()?.to_str().map(String::from))
            .collect();
        v.sort();
        v
    }
}

fn instance_files(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
                .collect()
        })
        .unwrap_or_default()
}

fn keep_newest_half(path: &Path, cap: u64) -> Result<()> {
    let data = std::fs::read(path)?;
    let mut cut = data.len()
        - usize::try_from(cap / 2)
            .unwrap_or(usize::MAX)
            .min(data.len());
    while cut < data.len() && data[cut.saturating_sub(1)] != b'\n' {
        cut += 1;
    }
    Ok(crate::registry::write_private(path, &data[cut..])
        .with_context(|| format!("trimming {}", path.display()))?)
}

fn read_entries(path: &Path) -> Vec<LogEntry> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}
