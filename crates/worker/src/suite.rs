//! The function suite run in real sandboxes (namespaces, seccomp filter,
//! limits): `thaw runtime verify --full` and `thaw runtime figures`.
use crate::error::Result;
use crate::{invoke, load_timed, ms, INVOKE_TIMEOUT};
use serde::Serialize;
use std::time::Instant;
use thaw_error::ResultExt;
use thaw_runtime::{InputSize, RootInfo};
use thaw_sandbox::{Sandbox, SandboxConfig};

/// Figures of one function: fresh start, RSS after init, warm latency per size.
#[derive(Clone, Debug, Serialize)]
pub struct FunctionFigures {
    pub function: String,
    /// Sandbox start until the `load` reply (sandbox, exec, interpreter
    /// start, import, init), ms.
    pub fresh_start_ms: f64,
    pub import_ms: f64,
    pub init_ms: f64,
    /// VmRSS after load (outside view), KiB.
    pub rss_after_init_kb: u64,
    /// Per size: (size, first invocation exec_ms, median warm exec_ms over
    /// `reps`, median round trip ms).
    pub sizes: Vec<(String, f64, f64, f64)>,
}

/// Starts `function` in a fresh sandbox of `cfg` on `root`, runs every size
/// (a first call, checked with the function's checker, then `reps` warm
/// calls) and returns its figures.
pub fn measure(
    cfg: &SandboxConfig,
    root: &RootInfo,
    function: &str,
    reps: usize,
) -> Result<FunctionFigures> {
    let t0 = Instant::now();
    let (argv, env) = root.agent_command(function);
    let sb = Sandbox::start(cfg, &root.path, &argv, &env)
        .with_context(|| format!("starting a sandbox for {function}"))?;
    let (mut sb, fresh) = load_timed(sb, t0, INVOKE_TIMEOUT)?;
    let rss_after_init_kb = sb.rss_kb().context("reading the sandbox's RSS")?;
    let mut sizes = Vec::new();
    for size in InputSize::ALL {
        let first =
            invoke(&mut sb, size, INVOKE_TIMEOUT).with_context(|| format!("size {size}"))?;
        root.check_output(function, size, &first.output)?;
        let (mut warm, mut rtt) = (Vec::new(), Vec::new());
        for _ in 0..reps {
            let t = Instant::now();
            let r = invoke(&mut sb, size, INVOKE_TIMEOUT)?;
            rtt.push(ms(t));
            warm.push(r.exec_ms);
        }
        sizes.push((
            size.to_string(),
            first.exec_ms,
            median(&mut warm),
            median(&mut rtt),
        ));
    }
    Ok(FunctionFigures {
        function: function.to_string(),
        fresh_start_ms: fresh.total_ms,
        import_ms: fresh.import_ms,
        init_ms: fresh.init_ms,
        rss_after_init_kb,
        sizes,
    })
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}
