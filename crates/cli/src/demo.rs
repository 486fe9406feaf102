//! `thaw demo`: the main job. Builds the runtime root if needed, snapshots each
//! function, restores it with every strategy, checks the outputs and prints a
//! results table next to a fresh start.
use anyhow::{Context, Result};
use std::path::Path;
use thaw_worker::RestoreRequest;
use thaw_worker::{invoke, ms, InputSize, StrategyKind, INVOKE_TIMEOUT};

#[derive(clap::Args)]
pub struct Args {
    /// Comma-separated functions (default: the whole suite)
    #[arg(long)]
    functions: Option<String>,
    #[arg(long, default_value = "tmpfs")]
    tier: String,
    #[arg(long, value_enum, default_value = "I")]
    size: InputSize,
}

pub fn run(home: &Path, a: Args) -> Result<()> {
    let w = &crate::worker(home)?;
    let size = a.size;
    let tier = w.tier(&a.tier)?;
    let names: Vec<String> = match a.functions.as_deref().map(crate::split) {
        Some(f) => f,
        None => w.functions().iter().map(|f| f.name.clone()).collect(),
    };
    let strategies = StrategyKind::ALL;
    thaw_output::outln!(
        "thaw demo: runtime root {} ({}), snapshots on {}, input size {size}",
        &w.root.hash[..16],
        w.root.path.display(),
        tier.description
    );
    let mut header = format!("{:<16} {:>10} {:>10}", "function", "image MiB", "fresh ms");
    for s in strategies {
        header.push_str(&format!(" {:>10}", format!("{s} ms")));
    }
    header.push_str(&format!(" {:>9} {:>8}", "speed-up", "output"));
    thaw_output::outln!("{header}");
    for f in &names {
        thaw_output::errln!("thaw: demo: {f}: fresh start, snapshot, restores");
        let t0 = std::time::Instant::now();
        let (mut sb, _) = w.start_fresh(f)?;
        let inv = invoke(&mut sb, size, INVOKE_TIMEOUT)?;
        let fresh = ms(t0);
        w.check(f, size, &inv.output)
            .with_context(|| format!("{f} (fresh) gave a wrong output"))?;
        drop(sb);
        let (snap, _) = w.deploy(f, &tier)?;
        let mut line = format!(
            "{:<16} {:>10.1} {:>10.1}",
            f,
            snap.manifest.memory.len as f64 / (1 << 20) as f64,
            fresh
        );
        // untimed preparation: REAP records its working set, dax its write
        // set, tiered profiles and splits the snapshot (slow tier: the disk)
        w.make_tiered(f, &tier, &w.tier("disk")?, &[size], 2, &Default::default())?;
        for s in [StrategyKind::Reap, StrategyKind::Dax, StrategyKind::Tiered] {
            let (mut sb, _) = w.restore(RestoreRequest::new(&snap, s))?;
            invoke(&mut sb, size, INVOKE_TIMEOUT)?;
        }
        let mut best = f64::MAX;
        for s in strategies {
            snap.drop_page_cache()?;
            let t = std::time::Instant::now();
            let (mut sb, _) = w.restore(RestoreRequest::new(&snap, s))?;
            let inv = invoke(&mut sb, size, INVOKE_TIMEOUT)?;
            let cold = ms(t);
            w.check(f, size, &inv.output)
                .with_context(|| format!("{f} restored with {s} gave a wrong output"))?;
            best = best.min(cold);
            line.push_str(&format!(" {cold:>10.1}"));
        }
        line.push_str(&format!(" {:>8.1}x {:>8}", fresh / best, "ok"));
        thaw_output::outln!("{line}");
    }
    thaw_output::outln!(
        "cold = restore request to first response; fresh = exec + import + init + first response.\n\
         dax: tmpfs stands in for persistent memory (emulated). tiered: slow tier on the local disk.\n\
         One run each, after one untimed restore per strategy: see `thaw bench restore` and docs/BENCHMARKS.md for repeated measurements."
    );
    Ok(())
}
