//! Azure Functions 2019 trace: per-minute invocation counts per function
//! (`invocations*.csv`: HashOwner,HashApp,HashFunction,Trigger,1..1440), execution
//! time percentiles per function (`*durations*.csv`) and allocated memory
//! percentiles per app (`*memory*.csv`). A directory may hold one day (as the
//! sample) or the published day files (`...d01.csv`, `...d02.csv`, ...), replayed
//! back to back.
//!
//! Spreading counts within a minute (the trace only has counts): with `Even`, the
//! c invocations of a function in a minute are at (k + phi) * 60 s / c, k = 0..c-1,
//! with one uniform phase phi per function and minute; with `Uniform`, at c sorted
//! uniform times in the minute (a Poisson process given its count).
//! Durations: a uniform percentile u in [0, 100] per invocation, interpolated
//! linearly between the file's percentiles 0, 1, 25, 50, 75, 99, 100.
//! Memory: the app's `AverageAllocatedMb` (keyed by function when the file has a
//! HashFunction column). Functions missing from either file get the synthetic
//! generator's per-name draw, and are counted.
//!
//! Memory: one day's non-zero (function, minute) counts at a time, so it is bounded
//! by the number of functions x 1440, not by the number of invocations.

use crate::error::{Result, SimError};
use crate::rng::{hash_str, Rng};
use crate::source::{mem_for_name, num, BadLine, Inv, Item, Lines, Names, Source};
use crate::synthetic::draw_mean_duration_ms;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use thaw_error::{fail, ResultExt};
use thaw_policy::Time;

const MINUTE: Time = 60_000_000;
const PCTS: [f64; 7] = [0.0, 1.0, 25.0, 50.0, 75.0, 99.0, 100.0];
const PCT_COLS: [&str; 7] = [
    "percentile_Average_0",
    "percentile_Average_1",
    "percentile_Average_25",
    "percentile_Average_50",
    "percentile_Average_75",
    "percentile_Average_99",
    "percentile_Average_100",
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spread {
    Even,
    Uniform,
}

/// One day's files.
#[derive(Debug, Clone)]
pub struct Day {
    pub invocations: PathBuf,
    pub durations: Option<PathBuf>,
    pub memory: Option<PathBuf>,
}

/// Finds the day file sets in `dir`: every `invocations*.csv`, each with the
/// durations and memory files that share its `dNN` suffix (or the only ones).
pub fn discover(dir: &Path) -> Result<Vec<Day>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading trace directory {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "csv"))
        .collect();
    files.sort();
    let name = |p: &PathBuf| {
        p.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("")
            .to_string()
    };
    let tag = |n: &str| -> String {
        // "....d01.csv" -> "d01", otherwise "".
        let stem = n.trim_end_matches(".csv");
        match stem.rsplit_once('.') {
            Some((_, t)) if t.starts_with('d') && t[1..].chars().all(|c| c.is_ascii_digit()) => {
                t.to_string()
            }
            _ => String::new(),
        }
    };
    let pick = |kind: &str, t: &str| {
        files
            .iter()
            .find(|p| {
                let n = name(p);
                n.contains(kind) && tag(&n) == t
            })
            .cloned()
    };
    let days: Vec<Day> = files
        .iter()
        .filter(|p| name(p).starts_with("invocations"))
        .map(|p| {
            let t = tag(&name(p));
            Day {
                invocations: p.clone(),
                durations: pick("durations", &t),
                memory: pick("memory", &t),
            }
        })
        .collect();
    if days.is_empty() {
        fail!(
            SimError::Input,
            "no invocations*.csv in {} (azure2019 format)",
            dir.display()
        );
    }
    Ok(days)
}

pub struct Options {
    pub seed: u64,
    pub spread: Spread,
    pub fixed_mem: Option<u32>,
    pub start_minute: u64,
    pub minutes: Option<u64>,
}

struct Cursor {
    f: u32,
    count: u32,
    k: u32,
    /// Even: the phase; Uniform: the previous sorted uniform.
    x: f64,
}

pub struct Azure2019 {
    days: VecDeque<Day>,
    day_index: u64,
    opts: Options,
    rng: Rng,
    names: Names,
    mem: Vec<u32>,
    dur_pcts: Vec<[f32; 7]>,
    mem_by_key: HashMap<String, u32>,
    dur_by_key: HashMap<String, [f32; 7]>,
    /// This day's non-zero counts, by minute.
    minutes: Vec<Vec<(u32, u32)>>,
    minute: usize,
    cursors: Vec<Cursor>,
    heap: BinaryHeap<Reverse<(Time, u32)>>,
    bad: VecDeque<BadLine>,
    total_minutes: u64,
    pub missing_duration: u64,
    pub missing_memory: u64,
}

impl Azure2019 {
    pub fn open(dir: &Path, opts: Options) -> Result<Self> {
        let days: VecDeque<Day> = discover(dir)?.into();
        let total_minutes = days.len() as u64 * 1440;
        Ok(Azure2019 {
            days,
            day_index: 0,
            rng: Rng::new(opts.seed),
            opts,
            names: Names::default(),
            mem: Vec::new(),
            dur_pcts: Vec::new(),
            mem_by_key: HashMap::new(),
            dur_by_key: HashMap::new(),
            minutes: Vec::new(),
            minute: 0,
            cursors: Vec::new(),
            heap: BinaryHeap::new(),
            bad: VecDeque::new(),
            total_minutes,
            missing_duration: 0,
            missing_memory: 0,
        })
    }

    // float casts saturate (NaN, negatives to 0): the clamp wanted
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    fn load_memory(&mut self, path: &Path) -> Result<()> {
        let mut lines = Lines::open(path)?;
        let cols = header(&mut lines)?;
        let owner = col(&cols, "HashOwner", &lines)?;
        let app = col(&cols, "HashApp", &lines)?;
        let func = cols.iter().position(|c| c == "HashFunction");
        let avg = col(&cols, "AverageAllocatedMb", &lines)?;
        self.mem_by_key.clear();
        while lines.next_line()? {
            let Some(fields) = split_checked(&lines, cols.len(), &mut self.bad) else {
                continue;
            };
            match num(fields[avg], "AverageAllocatedMb") {
                Ok(mb) => {
                    let mut key = format!("{},{}", fields[owner], fields[app]);
                    if let Some(fc) = func {
                        key = format!("{key},{}", fields[fc]);
                    }
                    self.mem_by_key.insert(key, (mb.round() as u32).max(1));
                }
                Err(e) => self.bad.push_back(lines.bad(e)),
            }
        }
        Ok(())
    }

    // durations in ms are well inside f32's range
    #[allow(clippy::cast_possible_truncation)]
    fn load_durations(&mut self, path: &Path) -> Result<()> {
        let mut lines = Lines::open(path)?;
        let cols = header(&mut lines)?;
        let key_cols = [
            col(&cols, "HashOwner", &lines)?,
            col(&cols, "HashApp", &lines)?,
            col(&cols, "HashFunction", &lines)?,
        ];
        let mut pct_cols = [0usize; 7];
        for (i, name) in PCT_COLS.iter().enumerate() {
            pct_cols[i] = col(&cols, name, &lines)?;
        }
        self.dur_by_key.clear();
        while lines.next_line()? {
            let Some(fields) = split_checked(&lines, cols.len(), &mut self.bad) else {
                continue;
            };
            let mut p = [0f32; 7];
            let parsed: Result<(), String> =
                pct_cols.iter().zip(p.iter_mut()).try_for_each(|(&c, v)| {
                    *v = num(fields[c], "duration percentile")? as f32;
                    Ok(())
                });
            if let Err(e) = parsed {
                self.bad.push_back(lines.bad(e));
                continue;
            }
            if p.windows(2).any(|w| w[1] < w[0]) {
                self.bad
                    .push_back(lines.bad("duration percentiles decrease"));
                continue;
            }
            let key = key_cols.map(|c| fields[c]).join(",");
            self.dur_by_key.insert(key, p);
        }
        Ok(())
    }

    /// Loads the next day; false when there is none.
    // durations in ms are well inside f32's range
    #[allow(clippy::cast_possible_truncation)]
    fn load_day(&mut self) -> Result<bool> {
        let Some(day) = self.days.pop_front() else {
            return Ok(false);
        };
        if let Some(m) = &day.memory {
            self.load_memory(m)?;
        }
        if let Some(d) = &day.durations {
            self.load_durations(d)?;
        }
        let mut lines = Lines::open(&day.invocations)?;
        let cols = header(&mut lines)?;
        let expect = ["HashOwner", "HashApp", "HashFunction", "Trigger"];
        if cols.len() < 5 || cols[..4] != expect {
            fail!(
                SimError::Input,
                "{}:1: expected header HashOwner,HashApp,HashFunction,Trigger,1,2,...",
                lines.path
            );
        }
        let n_min = cols.len() - 4;
        self.minutes = vec![Vec::new(); n_min];
        let mut counts = Vec::with_capacity(n_min);
        while lines.next_line()? {
            if lines.buf.trim().is_empty() {
                continue;
            }
            let Some(fields) = split_checked(&lines, cols.len(), &mut self.bad) else {
                continue;
            };
            counts.clear();
            let mut err = None;
            for (i, s) in fields[4..].iter().enumerate() {
                match s.trim().parse::<u32>() {
                    Ok(c) => counts.push(c),
                    Err(_) => {
                        err = Some(format!(
                            "minute {} count {s:?} is not a whole number >= 0",
                            i + 1
                        ));
                        break;
                    }
                }
            }
            if let Some(e) = err {
                self.bad.push_back(lines.bad(e));
                continue;
            }
            let key = fields[..3].join(",");
            let (f, new) = self.names.intern(&key);
            if new {
                self.mem.push(0);
                self.dur_pcts.push([0.0; 7]);
            }
            let app_key = fields[..2].join(",");
            let mem = self
                .mem_by_key
                .get(&key)
                .or_else(|| self.mem_by_key.get(&app_key));
            self.mem[f as usize] = match (self.opts.fixed_mem, mem) {
                (Some(m), _) => m,
                (None, Some(&m)) => m,
                (None, None) => {
                    self.missing_memory += 1;
                    mem_for_name(self.opts.seed, &key)
                }
            };
            self.dur_pcts[f as usize] = match self.dur_by_key.get(&key) {
                Some(p) => *p,
                None => {
                    self.missing_duration += 1;
                    let mut r = Rng::new(hash_str(self.opts.seed ^ 0xd0, &key));
                    [draw_mean_duration_ms(&mut r) as f32; 7]
                }
            };
            for (m, &c) in counts.iter().enumerate() {
                if c > 0 {
                    self.minutes[m].push((f, c));
                }
            }
        }
        self.minute = 0;
        self.day_index += 1;
        Ok(true)
    }

    /// Absolute minute index (across days) of this day's minute `m`.
    fn abs_minute(&self, m: usize) -> u64 {
        (self.day_index - 1) * 1440 + m as u64
    }

    fn in_window(&self, abs: u64) -> bool {
        abs >= self.opts.start_minute
            && self
                .opts
                .minutes
                .is_none_or(|n| abs < self.opts.start_minute + n)
    }

    /// Fills the heap with the next minute that has invocations.
    // trace functions number far below 2^32
    #[allow(clippy::cast_possible_truncation)]
    fn start_minute(&mut self) -> Result<bool> {
        loop {
            while self.minute < self.minutes.len() {
                let m = self.minute;
                self.minute += 1;
                let abs = self.abs_minute(m);
                if !self.in_window(abs) || self.minutes[m].is_empty() {
                    continue;
                }
                let entries = std::mem::take(&mut self.minutes[m]);
                self.cursors.clear();
                let base = (abs - self.opts.start_minute) * MINUTE;
                for (f, count) in entries {
                    let x = match self.opts.spread {
                        Spread::Even => self.rng.f64(),
                        Spread::Uniform => 0.0,
                    };
                    let i = self.cursors.len() as u32;
                    self.cursors.push(Cursor { f, count, k: 0, x });
                    let t = self.advance(i as usize, base);
                    self.heap.push(Reverse((t, i)));
                }
                return Ok(true);
            }
            let past_end = self
                .opts
                .minutes
                .is_some_and(|n| self.day_index * 1440 >= self.opts.start_minute + n);
            if past_end || !self.load_day()? {
                return Ok(false);
            }
        }
    }

    /// Time of cursor `i`'s next invocation (its k-th), advancing it.
    // float casts saturate (NaN, negatives to 0): the clamp wanted
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    fn advance(&mut self, i: usize, base: Time) -> Time {
        let c = &mut self.cursors[i];
        let frac = match self.opts.spread {
            Spread::Even => (c.k as f64 + c.x) / c.count as f64,
            Spread::Uniform => {
                // Next order statistic of the remaining (count - k) uniforms on (x, 1).
                let remaining = (c.count - c.k) as f64;
                let v = self.rng.open01();
                c.x += (1.0 - c.x) * (1.0 - v.powf(1.0 / remaining));
                c.x
            }
        };
        c.k += 1;
        base + ((frac * MINUTE as f64) as Time).min(MINUTE - 1)
    }

    // float casts saturate (NaN, negatives to 0): the clamp wanted
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    fn duration(&mut self, f: u32) -> Time {
        let p = &self.dur_pcts[f as usize];
        let u = self.rng.f64() * 100.0;
        let j = PCTS.iter().rposition(|&q| q <= u).unwrap_or(0).min(5);
        let w = (u - PCTS[j]) / (PCTS[j + 1] - PCTS[j]);
        let ms = p[j] as f64 + w * (p[j + 1] as f64 - p[j] as f64);
        (ms * 1000.0).round() as Time
    }
}

/// Splits the current line, or queues a report when its column count is wrong.
fn split_checked<'a>(
    lines: &'a Lines,
    n: usize,
    bad: &mut VecDeque<BadLine>,
) -> Option<Vec<&'a str>> {
    let fields: Vec<&str> = lines.buf.split(',').collect();
    if fields.len() == n {
        return Some(fields);
    }
    bad.push_back(lines.bad(format!("expected {n} columns, found {}", fields.len())));
    None
}

fn header(lines: &mut Lines) -> Result<Vec<String>> {
    if !lines.next_line()? {
        fail!(SimError::Input, "{}: empty file", lines.path);
    }
    Ok(lines
        .buf
        .trim_start_matches('\u{feff}')
        .split(',')
        .map(|s| s.trim().to_string())
        .collect())
}

fn col(cols: &[String], name: &str, lines: &Lines) -> Result<usize> {
    match cols.iter().position(|c| c == name) {
        Some(i) => Ok(i),
        None => fail!(SimError::Input, "{}:1: no column {name}", lines.path),
    }
}

impl Source for Azure2019 {
    fn next_item(&mut self) -> Result<Option<Item>> {
        if let Some(b) = self.bad.pop_front() {
            return Ok(Some(Item::Bad(b)));
        }
        if self.heap.is_empty() {
            if !self.start_minute()? {
                return Ok(self.bad.pop_front().map(Item::Bad));
            }
            if let Some(b) = self.bad.pop_front() {
                return Ok(Some(Item::Bad(b)));
            }
        }
        let Some(Reverse((t, i))) = self.heap.pop() else {
            return Ok(None);
        };
        let c = &self.cursors[i as usize];
        let f = c.f;
        if c.k < c.count {
            let base = t - t % MINUTE;
            let next = self.advance(i as usize, base);
            self.heap.push(Reverse((next, i)));
        }
        let dur = self.duration(f);
        Ok(Some(Item::Inv(Inv {
            t,
            f,
            mem_mb: self.mem[f as usize],
            dur,
        })))
    }

    fn fn_name(&self, f: u32) -> Option<&str> {
        self.names.get(f)
    }

    fn progress(&self) -> Option<f64> {
        let done = self.day_index.saturating_sub(1) * 1440 + self.minute as u64;
        Some(done as f64 / self.total_minutes.max(1) as f64)
    }
}
