//! Writers: JSON summary, CSV rows, and a hand-written SVG of start-latency CDFs.

use crate::error::Result;
use crate::run::Report;
use serde::Serialize;
use std::fmt::Write as _;
use std::path::Path;
use thaw_error::ResultExt;

/// The configuration a run used, echoed in every output.
#[derive(Clone, Debug, Serialize)]
pub struct RunConfig {
    pub policy: String,
    pub input: String,
    pub seed: u64,
    pub ram_gb: f64,
    pub disk_gb: f64,
    pub net_gb: f64,
    pub threshold: f64,
    pub keep_alive_s: f64,
    pub disk_read_gb_s: f64,
    pub disk_write_gb_s: f64,
    pub net_gbit_s: f64,
    pub cold_ms: f64,
    pub restore_ms: f64,
    pub checkpoint_ms: f64,
    pub max_concurrency: u32,
    pub deployed_snapshots: bool,
    pub calibration: Option<String>,
}

#[derive(Serialize)]
pub struct Summary<'a> {
    pub config: &'a RunConfig,
    #[serde(flatten)]
    pub report: &'a Report,
    /// (start latency ms, fraction of started invocations at or below it).
    pub cdf: Vec<(f64, f64)>,
}

pub fn summary<'a>(config: &'a RunConfig, report: &'a Report) -> Summary<'a> {
    let cdf = report
        .hist
        .cdf(400)
        .into_iter()
        .map(|(us, f)| (us / 1000.0, f))
        .collect();
    Summary {
        config,
        report,
        cdf,
    }
}

pub fn write_file(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

pub const CSV_HEADER: &str = "policy,input,ram_gb,disk_gb,net_gb,net_gbit_s,disk_read_gb_s,threshold,\
invocations,warm,lukewarm,remote,cold,failed,mean_start_ms,p50_start_ms,p99_start_ms,p999_start_ms,\
ram_gb_s,disk_gb_s,net_gb_s,cost_usd,checkpoints,uploads,downloads,sim_seconds,wall_seconds,invocations_per_second";

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

pub fn csv_row(c: &RunConfig, r: &Report) -> String {
    format!(
        "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{:.3},{:.3},{:.3},{:.3},{:.1},{:.1},{:.1},{:.6},{},{},{},{:.1},{:.3},{:.0}",
        c.policy,
        csv_field(&c.input),
        c.ram_gb,
        c.disk_gb,
        c.net_gb,
        c.net_gbit_s,
        c.disk_read_gb_s,
        c.threshold,
        r.invocations,
        r.starts.warm,
        r.starts.lukewarm,
        r.starts.remote,
        r.starts.cold,
        r.failed,
        r.mean_start_ms,
        r.p50_start_ms,
        r.p99_start_ms,
        r.p999_start_ms,
        r.memory_gb_s.ram,
        r.memory_gb_s.disk,
        r.memory_gb_s.net,
        r.cost_usd_total,
        r.transfers.checkpoints,
        r.transfers.uploads,
        r.transfers.downloads,
        r.sim_seconds,
        r.wall_seconds,
        r.invocations_per_second
    )
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

/// CDF of start latency for each (label, report), one line each.
pub fn svg_cdf(title: &str, series: &[(String, &Report)]) -> String {
    let (w, h) = (760.0, 460.0);
    let (l, r, t, b) = (70.0, 200.0, 40.0, 60.0);
    let (pw, ph) = (w - l - r, h - t - b);
    // x range: up to the largest p99.9 (the tail beyond is noise for a planner).
    let xmax_ms = series
        .iter()
        .map(|(_, rep)| rep.p999_start_ms.max(rep.p50_start_ms))
        .fold(1.0f64, f64::max)
        * 1.1;
    let x = |ms: f64| l + (ms.min(xmax_ms) / xmax_ms) * pw;
    let y = |f: f64| t + (1.0 - f) * ph;
    let mut s = String::new();
    let _ = write!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">{}</text>\n",
        l + pw / 2.0,
        esc(title)
    );
    for i in 0..=5 {
        let fx = i as f64 / 5.0;
        let (gx, gy) = (l + fx * pw, y(fx));
        let _ = write!(
            s,
            "<line x1=\"{l}\" y1=\"{gy}\" x2=\"{}\" y2=\"{gy}\" stroke=\"#ddd\"/>\
             <text x=\"{}\" y=\"{}\" text-anchor=\"end\">{:.1}</text>\n\
             <line x1=\"{gx}\" y1=\"{t}\" x2=\"{gx}\" y2=\"{}\" stroke=\"#eee\"/>\
             <text x=\"{gx}\" y=\"{}\" text-anchor=\"middle\">{:.0}</text>\n",
            l + pw,
            l - 6.0,
            gy + 4.0,
            fx,
            t + ph,
            t + ph + 18.0,
            fx * xmax_ms
        );
    }
    let _ = write!(
        s,
        "<rect x=\"{l}\" y=\"{t}\" width=\"{pw}\" height=\"{ph}\" fill=\"none\" stroke=\"black\"/>\n\
         <text x=\"{}\" y=\"{}\" text-anchor=\"middle\">start latency (ms)</text>\n\
         <text x=\"18\" y=\"{}\" text-anchor=\"middle\" transform=\"rotate(-90 18 {})\">fraction of invocations</text>\n",
        l + pw / 2.0,
        h - 18.0,
        t + ph / 2.0,
        t + ph / 2.0
    );
    for (i, (label, rep)) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        // Step function: horizontal to each value, then up.
        let mut pts = format!("{:.1},{:.1}", x(0.0), y(0.0));
        let mut prev = 0.0;
        for (us, f) in rep.hist.cdf(600) {
            let px = x(us / 1000.0);
            let _ = write!(pts, " {px:.1},{:.1} {px:.1},{:.1}", y(prev), y(f));
            prev = f;
        }
        let _ = write!(pts, " {:.1},{:.1}", x(xmax_ms), y(prev));
        let ly = t + 16.0 + i as f64 * 18.0;
        let _ = write!(
            s,
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" points=\"{pts}\"/>\n\
             <line x1=\"{}\" y1=\"{ly}\" x2=\"{}\" y2=\"{ly}\" stroke=\"{color}\" stroke-width=\"3\"/>\
             <text x=\"{}\" y=\"{}\">{}</text>\n",
            l + pw + 12.0,
            l + pw + 32.0,
            l + pw + 38.0,
            ly + 4.0,
            esc(label)
        );
    }
    s.push_str("</svg>\n");
    s
}
