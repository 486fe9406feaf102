//! `thaw invoke`: restore a suite function from its snapshot (or start it
//! fresh or from a zygote) and invoke it once.
use anyhow::Result;
use std::path::Path;
use thaw_bench::start::{Start, StartType};
use thaw_runtime::InputSize;
use thaw_worker::RestoreRequest;

#[derive(clap::Args)]
pub struct Args {
    function: String,
    #[arg(long, value_enum, default_value = "I")]
    size: InputSize,
    /// A restore strategy, or a start type without a snapshot
    #[arg(long, value_enum, default_value = "mmap")]
    strategy: Start,
    /// A local tier, or the remote one: then the restore streams
    /// (working set first; uffd or reap)
    #[arg(long, default_value = "tmpfs")]
    tier: String,
    /// Verify the output with the function's checker
    #[arg(long)]
    check: bool,
}

pub fn run(home: &Path, a: Args) -> Result<()> {
    let Args {
        function,
        size,
        strategy,
        tier,
        check,
    } = a;
    let w = crate::worker(home)?;
    if let Some(s) = strategy.strategy() {
        if crate::tiers::is_remote(home, &tier)? {
            let inv = crate::tiers::Invocation {
                function: &function,
                size,
                strategy: s,
                tier: &tier,
                check,
            };
            return crate::tiers::invoke_streamed(home, &w, &inv);
        }
    }
    let t0 = std::time::Instant::now();
    let mut sb = match strategy {
        Start::Baseline(StartType::Fresh) => w.start_fresh(&function)?.0,
        Start::Baseline(StartType::Zygote) => {
            let mut z = w.start_zygote(&function)?;
            w.fork_zygote(&mut z)?
        }
        Start::Restore(s) => {
            let snap = w.snapshot(&function, &w.tier(&tier)?)?;
            let _slot = crate::tiers::restore_slot(home, &tier)?;
            w.restore(RestoreRequest::new(&snap, s))?.0
        }
    };
    let inv = thaw_worker::invoke(&mut sb, size, thaw_worker::INVOKE_TIMEOUT)?;
    let cold = thaw_worker::ms(t0);
    if check {
        w.check(&function, size, &inv.output)?;
    }
    thaw_output::outln!(
        "{}",
        serde_json::json!({"function": function, "size": size, "strategy": strategy,
            "cold_ms": cold, "exec_ms": inv.exec_ms, "output": inv.output, "checked": check})
    );
    Ok(())
}
