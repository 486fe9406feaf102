//! One record per request, the summary over them (HDR histograms), and the
//! record writers (JSON lines, CSV).

use crate::client::parse_server_timing;
use crate::error::Result;
use hdrhistogram::Histogram;
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use thaw_error::ResultExt;

/// What happened to one request. Times are milliseconds from the run's start;
/// latency is from the *intended* send time (no coordinated omission).
#[derive(Clone, Debug, Serialize)]
pub struct Record {
    pub seq: u64,
    pub function: String,
    pub scheduled_ms: f64,
    pub sent_ms: f64,
    /// When the response (or the failure) came.
    pub answered_ms: f64,
    /// The HTTP status, or `connect` / `io` / `timeout` when there was none.
    pub status: String,
    pub start_type: Option<String>,
    pub latency_ms: f64,
    /// How late the request left: sent - scheduled.
    pub lag_ms: f64,
    pub warmup: bool,
    /// Server-side phases from `Server-Timing` (metric -> ms).
    pub server_timing: BTreeMap<String, f64>,
    pub error: Option<String>,
}

impl Record {
    pub fn ok(&self) -> bool {
        self.status.len() == 3 && self.status.starts_with('2')
    }

    pub fn set_server_timing(&mut self, header: Option<&str>) {
        if let Some(h) = header {
            self.server_timing = parse_server_timing(h).into_iter().collect();
        }
    }
}

pub const CSV_HEADER: &str = "seq,function,scheduled_ms,sent_ms,answered_ms,status,start_type,latency_ms,lag_ms,warmup,server_timing";

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

impl Record {
    pub fn csv_row(&self) -> String {
        let timing: Vec<String> = self
            .server_timing
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        format!(
            "{},{},{:.3},{:.3},{:.3},{},{},{:.3},{:.3},{},{}",
            self.seq,
            csv_field(&self.function),
            self.scheduled_ms,
            self.sent_ms,
            self.answered_ms,
            csv_field(&self.status),
            csv_field(self.start_type.as_deref().unwrap_or("")),
            self.latency_ms,
            self.lag_ms,
            self.warmup,
            csv_field(&timing.join(";")),
        )
    }
}

/// Where records go as they arrive (files are written as the run goes, so
/// memory does not grow with the run).
pub struct Sink {
    jsonl: Option<std::io::BufWriter<std::fs::File>>,
    csv: Option<std::io::BufWriter<std::fs::File>>,
}

fn create(p: &Path) -> Result<std::io::BufWriter<std::fs::File>> {
    let f = std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?;
    Ok(std::io::BufWriter::new(f))
}

impl Sink {
    pub fn open(jsonl: Option<&Path>, csv: Option<&Path>) -> Result<Sink> {
        let mut s = Sink {
            jsonl: jsonl.map(create).transpose()?,
            csv: csv.map(create).transpose()?,
        };
        if let Some(w) = s.csv.as_mut() {
            writeln!(w, "{CSV_HEADER}")?;
        }
        Ok(s)
    }

    pub fn write(&mut self, r: &Record) -> Result<()> {
        if let Some(w) = self.jsonl.as_mut() {
            serde_json::to_writer(&mut *w, r).context("writing a record")?;
            writeln!(w)?;
        }
        if let Some(w) = self.csv.as_mut() {
            writeln!(w, "{}", r.csv_row())?;
        }
        Ok(())
    }

    pub fn finish(&mut self) -> Result<()> {
        for w in [self.jsonl.as_mut(), self.csv.as_mut()]
            .into_iter()
            .flatten()
        {
            w.flush().context("writing records")?;
        }
        Ok(())
    }
}

/// Percentiles of one latency population (ms).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Latency {
    pub count: u64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
}

/// A histogram of microseconds, 3 significant digits, growing as needed.
pub struct Hist(Histogram<u64>);

impl Default for Hist {
    fn default() -> Self {
        Hist(Histogram::new(3).expect("3 significant digits is a valid histogram"))
    }
}

impl Hist {
    // float casts saturate (NaN, negatives to 0): the clamp wanted
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    pub fn record_ms(&mut self, ms: f64) {
        let us = (ms.max(0.0) * 1000.0).round() as u64;
        // Auto-resizing histograms only refuse values past u64 range.
        let _ = self.0.record(us.max(1));
    }

    pub fn latency(&self) -> Latency {
        let h = &self.0;
        let ms = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
        Latency {
            count: h.len(),
            mean_ms: if h.is_empty() { 0.0 } else { h.mean() / 1000.0 },
            p50_ms: ms(0.50),
            p90_ms: ms(0.90),
            p99_ms: ms(0.99),
            p999_ms: ms(0.999),
            max_ms: h.max() as f64 / 1000.0,
        }
    }

    /// (ms, cumulative fraction) at each recorded value step, for plots.
    pub fn cdf(&self) -> Vec<(f64, f64)> {
        let n = self.0.len().max(1) as f64;
        let mut acc = 0u64;
        self.0
            .iter_recorded()
            .map(|v| {
                acc += v.count_at_value();
                (v.value_iterated_to() as f64 / 1000.0, acc as f64 / n)
            })
            .collect()
    }
}

/// The run's summary: what the simulated-vs-live comparison and a reader need.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub target: String,
    pub workload: serde_json::Value,
    pub seed: u64,
    pub scheduled: u64,
    pub sent: u64,
    /// Requests that got an HTTP response (any status).
    pub answered: u64,
    /// Requests with a 2xx response.
    pub ok: u64,
    pub warmup_excluded: u64,
    /// Measured window (after warm-up): from its first scheduled time to the
    /// last answer, seconds.
    pub window_s: f64,
    /// 2xx responses per second over the window.
    pub throughput_rps: f64,
    /// Count per status: HTTP codes, and `connect` / `io` / `timeout`.
    pub by_status: BTreeMap<String, u64>,
    /// Non-2xx and failures only.
    pub errors: BTreeMap<String, u64>,
    /// 2xx responses per `Thaw-Start-Type` (`unknown` when absent).
    pub start_types: BTreeMap<String, u64>,
    /// Latency from intended send time of 2xx responses, per start type, and `all`.
    pub latency: BTreeMap<String, Latency>,
    /// How late requests left (sent - scheduled): the generator's own lag.
    pub schedule_lag: Latency,
    /// Mean of each Server-Timing phase over 2xx responses, ms.
    pub server_timing_mean_ms: BTreeMap<String, f64>,
    pub trace: Option<crate::schedule::TraceStats>,
}

/// Accumulates records into histograms and counts.
#[derive(Default)]
pub struct Tally {
    pub scheduled: u64,
    pub sent: u64,
    pub answered: u64,
    pub ok: u64,
    pub warmup: u64,
    pub by_status: BTreeMap<String, u64>,
    pub latency: BTreeMap<String, Hist>,
    pub all: Hist,
    pub lag: Hist,
    timing_sum: BTreeMap<String, (f64, u64)>,
    window: Option<(f64, f64)>,
    /// (scheduled ms, latency ms, start type) of measured 2xx records, thinned
    /// to a bounded number of points for the latency-over-time plot.
    pub over_time: Vec<(f64, f64, String)>,
    over_time_stride: u64,
    seen: u64,
}

/// Points kept for the latency-over-time plot.
const PLOT_POINTS: usize = 20_000;

impl Tally {
    pub fn add(&mut self, r: &Record) {
        self.sent += 1;
        let answered = r.status.bytes().all(|b| b.is_ascii_digit());
        if answered {
            self.answered += 1;
        }
        if r.warmup {
            self.warmup += 1;
            return;
        }
        *self.by_status.entry(r.status.clone()).or_default() += 1;
        self.lag.record_ms(r.lag_ms);
        let (lo, hi) = self.window.unwrap_or((r.scheduled_ms, r.answered_ms));
        self.window = Some((lo.min(r.scheduled_ms), hi.max(r.answered_ms)));
        if !r.ok() {
            return;
        }
        self.ok += 1;
        let st = r.start_type.clone().unwrap_or_else(|| "unknown".into());
        self.latency
            .entry(st.clone())
            .or_default()
            .record_ms(r.latency_ms);
        self.all.record_ms(r.latency_ms);
        for (k, v) in &r.server_timing {
            let e = self.timing_sum.entry(k.clone()).or_default();
            e.0 += v;
            e.1 += 1;
        }
        // Keep every k-th point, doubling k whenever the buffer fills.
        self.seen += 1;
        let stride = self.over_time_stride.max(1);
        if self.seen.is_multiple_of(stride) {
            self.over_time.push((r.scheduled_ms, r.latency_ms, st));
            if self.over_time.len() >= PLOT_POINTS {
                self.over_time_stride = stride * 2;
                let mut i = 0;
                self.over_time.retain(|_| {
                    i += 1;
                    i % 2 == 0
                });
            }
        }
    }

    pub fn summary(
        &self,
        target: String,
        workload: serde_json::Value,
        seed: u64,
        trace: Option<crate::schedule::TraceStats>,
    ) -> Summary {
        let window_s = self.window.map(|(a, b)| (b - a) / 1000.0).unwrap_or(0.0);
        let mut latency: BTreeMap<String, Latency> = self
            .latency
            .iter()
            .map(|(k, h)| (k.clone(), h.latency()))
            .collect();
        latency.insert("all".into(), self.all.latency());
        Summary {
            target,
            workload,
            seed,
            scheduled: self.scheduled,
            sent: self.sent,
            answered: self.answered,
            ok: self.ok,
            warmup_excluded: self.warmup,
            window_s,
            throughput_rps: if window_s > 0.0 {
                self.ok as f64 / window_s
            } else {
                0.0
            },
            errors: self
                .by_status
                .iter()
                .filter(|(k, _)| !(k.len() == 3 && k.starts_with('2')))
                .map(|(k, v)| (k.clone(), *v))
                .collect(),
            by_status: self.by_status.clone(),
            start_types: self
                .latency
                .iter()
                .map(|(k, h)| (k.clone(), h.0.len()))
                .collect(),
            latency,
            schedule_lag: self.lag.latency(),
            server_timing_mean_ms: self
                .timing_sum
                .iter()
                .map(|(k, (s, n))| (k.clone(), s / *n as f64))
                .collect(),
            trace,
        }
    }
}

/// The summary as a short table for the terminal.
pub fn text_table(s: &Summary) -> String {
    let mut out = format!(
        "thaw load: {} scheduled, {} sent, {} answered, {} ok, {} warm-up excluded; {:.1} ok/s over {:.2} s\n",
        s.scheduled, s.sent, s.answered, s.ok, s.warmup_excluded, s.throughput_rps, s.window_s
    );
    out.push_str("| start type | count | mean ms | p50 | p90 | p99 | p99.9 | max |\n|---|---|---|---|---|---|---|---|\n");
    for (k, l) in &s.latency {
        out.push_str(&format!(
            "| {k} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |\n",
            l.count, l.mean_ms, l.p50_ms, l.p90_ms, l.p99_ms, l.p999_ms, l.max_ms
        ));
    }
    let l = &s.schedule_lag;
    out.push_str(&format!(
        "schedule lag (sent - scheduled): p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms\n",
        l.p50_ms, l.p99_ms, l.max_ms
    ));
    if !s.errors.is_empty() {
        let e: Vec<String> = s.errors.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        out.push_str(&format!("errors: {}\n", e.join(", ")));
    }
    out
}
