//! `thaw bench hierarchy`: the body of the subcommand.
use anyhow::{Context, Result};
use std::io::Write;
use std::path::PathBuf;
use thaw_bench::hierarchy::{self, Line, ReadAhead, Scaling};
use thaw_worker::StrategyKind;

#[derive(clap::Args)]
pub struct Args {
    /// The functions (by default the light ones of "FaaS in the Age of
    /// (sub-)µs I/O")
    #[arg(long, default_value = "helloworld,lr_serving,pyaes")]
    functions: String,
    /// Tiers in order, fastest first (set up with `thaw tier setup`)
    #[arg(long, default_value = "tmpfs,pmem,nvme,sata,hdd")]
    tiers: String,
    #[arg(long, value_enum, value_delimiter = ',', default_value = "mmap,reap")]
    strategies: Vec<StrategyKind>,
    /// Warm invocations per instance: the 1st and the last are reported (the
    /// storage study of "FaaS in the Age of (sub-)µs I/O" reports the 51st)
    #[arg(long, default_value_t = 51)]
    warm_calls: usize,
    /// Readahead settings of the emulated block tiers' devices: on (the
    /// tier's configured read_ahead_kb, 128 KiB by default) and/or off (0)
    #[arg(long, default_value = "on,off")]
    readahead: String,
    /// Concurrency axis: simultaneous cold starts of distinct snapshots
    #[arg(long, default_value = "1,2,4,8,16,32,64")]
    levels: String,
    #[arg(long, default_value = "helloworld")]
    scaling_functions: String,
    /// Tiers of the concurrency axis (by default the four of "FaaS in the Age
    /// of (sub-)µs I/O")
    #[arg(long, default_value = "tmpfs,pmem,nvme,sata")]
    scaling_tiers: String,
    #[arg(long, value_enum, value_delimiter = ',', default_value = "mmap,reap")]
    scaling_strategies: Vec<StrategyKind>,
    /// Batches per concurrency level
    #[arg(long, default_value_t = 3)]
    scaling_reps: usize,
    /// Leave the concurrency axis out
    #[arg(long)]
    no_scaling: bool,
    /// Short run (the bench's own test): 2 runs, 3 warm calls, levels 1 and 2, 1 batch each
    #[arg(long)]
    quick: bool,
    /// Write hierarchy.md, hierarchy.jsonl and the SVG plots here
    #[arg(long)]
    out: Option<PathBuf>,
    #[command(flatten)]
    run: super::RunOpts,
}

pub fn run(w: &thaw_worker::Worker, mut a: Args) -> Result<()> {
    if a.quick {
        a.run.runs = 2;
        a.warm_calls = 3;
        a.levels = "1,2".into();
        a.scaling_reps = 1;
    }
    let levels = super::concurrency::parse_levels(&a.levels)?;
    let read_ahead = crate::split(&a.readahead)
        .iter()
        .map(|s| ReadAhead::parse(s))
        .collect::<Result<Vec<_>, _>>()?;
    let scaling_functions = crate::split(&a.scaling_functions);
    let scaling = (!a.no_scaling && !scaling_functions.is_empty()).then(|| Scaling {
        functions: scaling_functions,
        tiers: crate::split(&a.scaling_tiers),
        strategies: a.scaling_strategies.clone(),
        levels,
        reps: a.scaling_reps,
    });
    let o = hierarchy::Options {
        functions: crate::split(&a.functions),
        tiers: crate::split(&a.tiers),
        strategies: a.strategies.clone(),
        sizes: a.run.sizes.clone(),
        runs: a.run.runs,
        redeploy: a.run.redeploy,
        warm_calls: a.warm_calls,
        read_ahead,
        scaling,
    };
    if o.sizes.is_empty() || o.functions.is_empty() {
        anyhow::bail!("name at least one function and one input size");
    }
    hierarchy::check(&o)?;
    let create = |p: &std::path::Path| {
        std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))
    };
    let mut sinks = Vec::new();
    if let Some(p) = &a.run.json {
        sinks.push(create(p)?);
    }
    if let Some(d) = &a.out {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
        sinks.push(create(&d.join("hierarchy.jsonl"))?);
    }
    let study = hierarchy::run(w, &o, &mut |l: Line| {
        let s = serde_json::to_string(&l)?;
        for f in &mut sinks {
            writeln!(f, "{s}")?;
        }
        Ok(())
    })?;
    let md = hierarchy::report(&study, &o.tiers);
    a.run.emit(&md)?;
    if let Some(d) = &a.out {
        std::fs::write(d.join("hierarchy.md"), &md)?;
        let mut all = o.tiers.clone();
        for t in o.scaling.iter().flat_map(|s| &s.tiers) {
            if !all.contains(t) {
                all.push(t.clone());
            }
        }
        for p in hierarchy::plots(&study, &all, d)? {
            thaw_output::errln!("bench: wrote {}", p.display());
        }
    }
    Ok(())
}
