//! `thaw bench xdt`.
use anyhow::{bail, Context, Result};
use clap::Args;
use std::path::{Path, PathBuf};

#[derive(Args, Debug)]
pub struct BenchXdtArgs {
    /// Object sizes in bytes
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "10000,1000000,10000000,100000000"
    )]
    sizes: Vec<u64>,
    /// Timed 1-1 transfers per size and method (after one warm-up)
    #[arg(long, default_value_t = 20)]
    runs: usize,
    /// Scatter / gather / broadcast degrees (at most 16)
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16")]
    degrees: Vec<u32>,
    /// Object size of the patterns, bytes
    #[arg(long, default_value_t = 1_000_000)]
    pattern_size: u64,
    /// Timed rounds per pattern, degree and method (after one warm-up)
    #[arg(long, default_value_t = 10)]
    pattern_runs: usize,
    /// Runs per application and method (after one warm-up); 0 skips them
    #[arg(long, default_value_t = 3)]
    app_runs: usize,
    /// Word-count corpus, MB
    #[arg(long, default_value_t = 32)]
    wc_mb: u64,
    /// Stacking-ensemble data set rows (40 features)
    #[arg(long, default_value_t = 50_000)]
    ens_rows: u64,
    /// Write the cells as JSON here
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the markdown table here (it is printed either way), and its
    /// SVG plots beside it (STEM-latency.svg, STEM-bandwidth.svg, ...)
    #[arg(long)]
    markdown: Option<PathBuf>,
    /// Skip the cross-worker method (two daemons in network namespaces)
    #[arg(long)]
    no_cross_worker: bool,
}

pub fn bench(home: &Path, a: BenchXdtArgs) -> Result<()> {
    if let Some(d) = a.degrees.iter().find(|d| !(1..=16).contains(*d)) {
        bail!("--degrees: {d} is not in 1..=16");
    }
    if a.sizes.contains(&0) || a.pattern_size == 0 {
        bail!("object sizes must be at least 1 byte");
    }
    if a.wc_mb == 0 || a.wc_mb > 1024 || a.ens_rows < 100 || a.ens_rows > 1_000_000 {
        bail!("--wc-mb must be in 1..=1024 and --ens-rows in 100..=1000000");
    }
    let o = thaw_bench_serve::xdt::Options {
        sizes: a.sizes,
        runs: a.runs.max(1),
        degrees: a.degrees,
        pattern_size: a.pattern_size,
        pattern_runs: a.pattern_runs.max(1),
        app_runs: a.app_runs,
        wc_mb: a.wc_mb,
        ens_rows: a.ens_rows,
        cross_worker_exe: if a.no_cross_worker {
            None
        } else {
            Some(std::env::current_exe().context("locating the thaw binary")?)
        },
    };
    let report = thaw_bench_serve::xdt::run(home, &o)?;
    let md = thaw_bench_serve::xdt::markdown(&report);
    if let Some(m) = &a.markdown {
        let stem = m
            .file_stem()
            .map_or("xdt".into(), |s| s.to_string_lossy().into_owned());
        for (suffix, svg) in thaw_bench_serve::xdt::plots(&report) {
            let p = m.with_file_name(format!("{stem}-{suffix}.svg"));
            thaw_plot::write(&p, &svg).with_context(|| format!("writing {}", p.display()))?;
        }
    }
    super::emit_report(&md, &report, a.json, a.markdown)
}
