//! What every input produces: invocations in arrival order, and reports of the
//! lines that could not be read.

use crate::error::{Result, SimError};
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use thaw_error::{fail, ResultExt};
use thaw_policy::Time;

/// One invocation: arrival time, function, RAM it needs, how long it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Inv {
    pub t: Time,
    pub f: u32,
    pub mem_mb: u32,
    pub dur: Time,
}

/// A malformed input line, reported as `file:line: reason`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadLine {
    pub file: String,
    pub line: u64,
    pub reason: String,
}

impl std::fmt::Display for BadLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: {}", self.file, self.line, self.reason)
    }
}

pub enum Item {
    Inv(Inv),
    Bad(BadLine),
}

/// A stream of invocations sorted by arrival time. `Err` is fatal (I/O); a bad
/// line is an `Item::Bad` and the stream goes on.
pub trait Source {
    fn next_item(&mut self) -> Result<Option<Item>>;
    /// The trace's name for a function (for calibration look-ups).
    fn fn_name(&self, f: u32) -> Option<&str>;
    /// How far the stream is, 0..1, when it can tell.
    fn progress(&self) -> Option<f64>;
}

/// Interns function names into dense ids; memory grows with functions only.
#[derive(Default)]
pub struct Names {
    ids: HashMap<Box<str>, u32>,
    names: Vec<Box<str>>,
}

impl Names {
    /// Returns the id and whether it is new.
    // trace functions number far below 2^32
    #[allow(clippy::cast_possible_truncation)]
    pub fn intern(&mut self, name: &str) -> (u32, bool) {
        if let Some(&id) = self.ids.get(name) {
            return (id, false);
        }
        let id = self.names.len() as u32;
        self.names.push(name.into());
        self.ids.insert(name.into(), id);
        (id, true)
    }
    pub fn get(&self, id: u32) -> Option<&str> {
        self.names.get(id as usize).map(|s| &**s)
    }
    pub fn len(&self) -> usize {
        self.names.len()
    }
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

/// Longest line any input may have, in bytes (an azure2019 invocations row of
/// 1,440 minutes is about 8 KiB). Longer is an error: it bounds memory on a file
/// that is not a trace at all (`/dev/zero`, a binary).
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// Reads a text file line by line into one reused buffer, counting lines.
pub struct Lines {
    pub path: String,
    rd: BufReader<File>,
    pub buf: String,
    pub line_no: u64,
    pub bytes_read: u64,
    pub bytes_total: u64,
}

impl Lines {
    pub fn open(path: &Path) -> Result<Lines> {
        let f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
        let bytes_total = f.metadata().map(|m| m.len()).unwrap_or(0);
        Ok(Lines {
            path: path.display().to_string(),
            rd: BufReader::with_capacity(1 << 16, f),
            buf: String::new(),
            line_no: 0,
            bytes_read: 0,
            bytes_total,
        })
    }

    /// Next line without its end-of-line; `false` at end of file. A line longer
    /// than [`MAX_LINE_BYTES`] is an error naming its file and line.
    pub fn next_line(&mut self) -> Result<bool> {
        self.buf.clear();
        let n = (&mut self.rd)
            .take(MAX_LINE_BYTES as u64 + 1)
            .read_line(&mut self.buf)
            .with_context(|| format!("{}:{}: read error", self.path, self.line_no + 1))?;
        if n == 0 {
            return Ok(false);
        }
        self.bytes_read += n as u64;
        self.line_no += 1;
        if n > MAX_LINE_BYTES && !self.buf.ends_with('\n') {
            self.buf = String::new();
            fail!(
                SimError::Input,
                "{}:{}: line longer than {MAX_LINE_BYTES} bytes (not a trace file?)",
                self.path,
                self.line_no
            );
        }
        while self.buf.ends_with(['\n', '\r']) {
            self.buf.pop();
        }
        Ok(true)
    }

    pub fn bad(&self, reason: impl Into<String>) -> BadLine {
        BadLine {
            file: self.path.clone(),
            line: self.line_no,
            reason: reason.into(),
        }
    }
}

/// Parses a finite, non-negative number, naming the column when it is not.
pub fn num(field: &str, what: &str) -> Result<f64, String> {
    match field.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        Ok(v) => Err(format!("{what} is {v}, expected a finite number >= 0")),
        Err(_) => Err(format!("{what} {field:?} is not a number")),
    }
}

/// Finds the first file in `dir` whose name starts with one of `prefixes`.
pub fn find_file(dir: &Path, prefixes: &[&str]) -> Result<Option<PathBuf>> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading directory {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                prefixes.iter().any(|pre| n.starts_with(pre)) && n.ends_with(".csv")
            })
        })
        .collect();
    found.sort();
    Ok(found.into_iter().next())
}

/// Memory for functions a trace gives none for: one Burr XII draw per function
/// name (the app-memory fit of Shahrad et al.), stable for a seed.
pub fn mem_for_name(seed: u64, name: &str) -> u32 {
    let mut r = crate::rng::Rng::new(crate::rng::hash_str(seed, name));
    crate::synthetic::draw_mem_mb(&mut r)
}
