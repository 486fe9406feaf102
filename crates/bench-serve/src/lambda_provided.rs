//! `thaw bench lambda`'s custom runtimes: the Go (aws-lambda-go) and Rust
//! (lambda_runtime) hello worlds of the server's tests, built as
//! `bootstrap` by `crates/server/tests/lambda/build_bootstrap.sh`. Each run
//! times, alternately in the same process, a fresh start to its first
//! answer (sandbox, exec, the runtime's init, first `next` answered), a
//! restore to its first answer (sandbox, restore of the snapshot taken
//! while the first `next` waited, the waiting call answered), and the same
//! restore into a sandbox built ahead (the daemon's pool, refilled between
//! runs, untimed: no refill runs while the others are timed), as the
//! daemon's cold invokes are.
use serde::Serialize;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use thaw_bench::stats::{summarize, Summary};
use thaw_error::fail;
use thaw_worker::{RestoreRequest, StrategyKind, UserFunction, Worker};

use crate::error::{BenchServeError, OrFail, Result};

const T: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Serialize)]
pub struct ProvidedReport {
    /// `go-hello` or `rust-hello`
    pub function: String,
    pub strategy: String,
    /// fresh start to first answer
    pub fresh_ms: Summary,
    /// restore to first answer
    pub restore_ms: Summary,
    /// restore to first answer, into a prebuilt sandbox
    pub pooled_restore_ms: Summary,
    /// median fresh / median restore
    pub speedup: f64,
    /// median fresh / median pooled restore
    pub pooled_speedup: f64,
}

/// The path a project script prints once it has made `what` (a test
/// function's bootstrap, one of AWS's Lambda tools; both cached).
pub(crate) fn made_by(script: &str, what: &str) -> Result<PathBuf> {
    let out = std::process::Command::new(script).arg(what).output()?;
    if !out.status.success() {
        fail!(
            BenchServeError::Failed,
            "{script} {what}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// A test function's `bootstrap` (`go-hello`, `rust-hello`), built once.
pub(crate) fn bootstrap(name: &str) -> Result<PathBuf> {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../server/tests/lambda/build_bootstrap.sh"
    );
    made_by(script, name)
}

/// One timed start to a correct first answer.
fn answer(sb: &mut thaw_sandbox::Sandbox, what: &str) -> Result<()> {
    let r = thaw_worker::invoke_event(sb, &json!({"name": what}), T)?;
    match r.output {
        Ok(v) if v["hello"] == what => Ok(()),
        other => fail!(BenchServeError::Failed, "{what}: answered {other:?}"),
    }
}

/// Both hello worlds, `runs` alternating pairs each, in a scratch
/// directory under `scratch`.
pub fn run(runtime_home: &Path, scratch: &Path, runs: usize) -> Result<Vec<ProvidedReport>> {
    let w = Worker::new(runtime_home, &mut |m| eprintln!("runtime: {m}"))?;
    let mut out = Vec::new();
    for name in ["go-hello", "rust-hello"] {
        let dir = scratch.join(name);
        let code = dir.join("code");
        std::fs::create_dir_all(&code)?;
        std::fs::copy(bootstrap(name)?, code.join("bootstrap"))?;
        let func = UserFunction::plain(name, thaw_worker::Runtime::Provided, code, "bootstrap");
        let (mut sb, _) = w
            .start_user(&func, T)
            .map_err(|e| BenchServeError::Failed(format!("{name}: {e:#}")))?;
        let (snap, _) =
            thaw_checkpoint::checkpoint(&mut sb, &dir.join("snapshot"), name, &w.root.hash)
                .map_err(|e| BenchServeError::Failed(format!("{name}: checkpoint: {e:#}")))?;
        drop(sb);
        let strategy = StrategyKind::Mmap;
        let pool = w.user_pool(&func, 1)?;
        let (mut fresh, mut restored, mut pooled) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..runs + 1 {
            // no refill builds a sandbox while the others are timed
            if !pool.wait_full(T) {
                fail!(
                    BenchServeError::Failed,
                    "{name}: the sandbox pool did not refill"
                );
            }
            let t = Instant::now();
            let (mut sb, _) = w
                .start_user(&func, T)
                .map_err(|e| BenchServeError::Failed(format!("{name}: {e:#}")))?;
            answer(&mut sb, "fresh")?;
            let fresh_ms = t.elapsed().as_secs_f64() * 1e3;
            drop(sb);
            let t = Instant::now();
            let (mut sb, _) = w.restore(RestoreRequest::new(&snap, strategy).function(&func))?;
            answer(&mut sb, "restored")?;
            let restore_ms = t.elapsed().as_secs_f64() * 1e3;
            drop(sb);
            let t = Instant::now();
            let req = RestoreRequest::new(&snap, strategy).function(&func);
            let (mut sb, _) = w.restore(req.pool(Some(&pool)))?;
            answer(&mut sb, "restored")?;
            sb.after_first_response();
            let pooled_ms = t.elapsed().as_secs_f64() * 1e3;
            drop(sb);
            // the first pair warms the page cache and is not counted
            if i > 0 {
                fresh.push(fresh_ms);
                restored.push(restore_ms);
                pooled.push(pooled_ms);
            }
        }
        let fresh_ms = summarize(&fresh).or_fail("no samples")?;
        let restore_ms = summarize(&restored).or_fail("no samples")?;
        let pooled_restore_ms = summarize(&pooled).or_fail("no samples")?;
        out.push(ProvidedReport {
            function: name.into(),
            strategy: strategy.to_string(),
            speedup: fresh_ms.median / restore_ms.median,
            pooled_speedup: fresh_ms.median / pooled_restore_ms.median,
            fresh_ms,
            restore_ms,
            pooled_restore_ms,
        });
    }
    Ok(out)
}

/// The custom runtimes' rows.
pub fn markdown(rs: &[ProvidedReport]) -> String {
    let mut out = String::from(
        "| custom runtime, to first answer | n | min ms | median ms | p99 ms |\n|---|---|---|---|---|\n",
    );
    for r in rs {
        for (what, s) in [
            ("fresh start (exec + init)", &r.fresh_ms),
            (&*format!("restore ({})", r.strategy), &r.restore_ms),
            (
                &*format!("restore ({}) into a prebuilt sandbox", r.strategy),
                &r.pooled_restore_ms,
            ),
        ] {
            out += &format!(
                "| {} {what} | {} | {:.2} | {:.2} | {:.2} |\n",
                r.function, s.n, s.min, s.median, s.p99
            );
        }
    }
    for r in rs {
        out += &format!(
            "\n{}: fresh start / restore, median over median: {:.1}x ({:.1}x into a prebuilt sandbox)",
            r.function, r.speedup, r.pooled_speedup
        );
    }
    out + "\n"
}
