//! `thaw bench concurrency`: the body of the subcommand.
use anyhow::{Context, Result};
use std::io::Write;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value = "helloworld")]
    pub function: String,
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "mmap,reap,dax"
    )]
    pub strategies: Vec<thaw_worker::StrategyKind>,
    /// tmpfs, disk (comma-separated)
    #[arg(long, default_value = "tmpfs,disk")]
    pub tiers: String,
    /// same (one snapshot) and/or different (one snapshot copy per instance)
    #[arg(long, default_value = "same,different")]
    pub modes: String,
    #[arg(long, default_value = "1,2,4,8,16,32,64")]
    pub levels: String,
    /// Batches per cell
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    #[arg(long, value_enum, default_value = "I")]
    pub size: thaw_runtime::InputSize,
    /// Write one JSON object per batch here
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write the markdown table here (it is printed either way)
    #[arg(long)]
    pub markdown: Option<PathBuf>,
}

/// `--levels 1,2,4`: the numbers of simultaneous cold starts.
pub(crate) fn parse_levels(levels: &str) -> Result<Vec<usize>> {
    crate::split(levels)
        .iter()
        .map(|s| {
            s.parse::<usize>()
                .with_context(|| format!("--levels: {s:?} is not a count"))
        })
        .collect()
}

pub fn run(w: &thaw_worker::Worker, a: Args) -> Result<()> {
    let levels = parse_levels(&a.levels)?;
    let o = thaw_bench::concurrency::Options {
        function: a.function.clone(),
        strategies: a.strategies.clone(),
        tiers: crate::split(&a.tiers),
        modes: crate::split(&a.modes),
        levels,
        reps: a.reps,
        size: a.size,
    };
    thaw_bench::concurrency::check(&o)?;
    let mut out = match &a.json {
        Some(p) => {
            Some(std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?)
        }
        None => None,
    };
    let batches = thaw_bench::concurrency::run(w, &o, &mut |b| {
        if let Some(f) = out.as_mut() {
            writeln!(f, "{}", serde_json::to_string(b)?)?;
        }
        Ok(())
    })?;
    let rows = thaw_bench::concurrency::summarize_rows(&batches);
    let md = thaw_bench::concurrency::markdown(&rows, &a.function, a.reps);
    thaw_output::outln!("{md}");
    if let Some(p) = a.markdown {
        std::fs::write(&p, &md).with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}
