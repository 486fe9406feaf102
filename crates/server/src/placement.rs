//! Deploy-time placement: when a deploy names no strategy or tier, the
//! daemon measures the function's profile on the snapshot it just took and
//! lets `thaw_policy::placement` (the code `thaw place` runs) choose among
//! the daemon's tiers, then records the choice and the reasoning.
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use thaw_policy::placement::{self as model, FunctionProfile, TierOption};
use thaw_sandbox::{StartStrategy, StrategyKind, WsMode};
use thaw_store::Snapshot;
use thaw_tiers::{probe::ReaderResult, Kind, TierConfig};
use thaw_worker::{RestoreRequest, UserFunction, Worker};

use crate::registry::Record;

use thaw_error::{Context, ResultExt};
pub use thaw_tiers::probe::PROBE_FILE;

/// Why a function's placement could not be measured.
#[derive(Debug, thiserror::Error)]
pub enum PlacementError {
    #[error(transparent)]
    Worker(#[from] thaw_worker::WorkerError),
    #[error(transparent)]
    Tiers(#[from] thaw_tiers::TiersError),
    #[error(transparent)]
    Restore(#[from] thaw_checkpoint::RestoreError),
    #[error(transparent)]
    Sandbox(#[from] thaw_sandbox::SandboxError),
    /// the step that failed, with its cause
    #[error(transparent)]
    Other(#[from] Context),
}

type Result<T, E = PlacementError> = std::result::Result<T, E>;
/// A tier qualifies if its estimated cold start is within this factor of
/// the fastest one's (`thaw place --max-slowdown`'s default).
pub const MAX_SLOWDOWN: f64 = 1.3;
/// Cold starts per hour a new function is assumed to see (`thaw place
/// --rate`'s default): only the restore-slot check uses it.
pub const COLD_STARTS_PER_HOUR: f64 = 60.0;

/// One tier as the placement model sees it: probed figures where there are
/// some, declared ones otherwise.
pub fn tier_option(
    t: &TierConfig,
    probes: &BTreeMap<String, Vec<ReaderResult>>,
    free_mib: f64,
) -> TierOption {
    let measured = probes.get(&t.name).and_then(|v| v.first());
    TierOption {
        name: t.name.clone(),
        byte_addressable: matches!(t.kind, Kind::Dram | Kind::Pmem),
        remote: t.kind == Kind::Remote,
        emulated: t.emulated,
        price_per_gb_month: t.price_per_gb_month,
        read_mbps: measured.map_or(t.profile.read_mbps, |m| m.seq_read_mbps),
        access_us: measured.map_or(t.profile.rand_read_4k_us, |m| m.rand_read_4k_us_mean),
        free_mib,
        max_concurrent_restores: t.max_concurrent_restores,
    }
}

/// What a deploy records about its strategy and tier.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PlacementInfo {
    /// `request` (both named by the deploy) or `thaw` (at least one chosen)
    pub chosen_by: String,
    pub strategy: StartStrategy,
    pub tier: String,
    /// one sentence per step of the decision
    pub reason: Vec<String>,
    /// the measured profile (absent when the request named both)
    pub profile: Option<Value>,
    /// every tier's estimate
    pub estimates: Vec<Value>,
}

impl PlacementInfo {
    pub fn requested(strategy: StartStrategy, tier: &str) -> PlacementInfo {
        PlacementInfo {
            chosen_by: "request".into(),
            strategy,
            tier: tier.into(),
            reason: vec![format!(
                "the deploy request named strategy {strategy} and tier {tier}"
            )],
            profile: None,
            estimates: Vec::new(),
        }
    }
}

/// Longest a measuring restore waits for its sandbox to be built ahead.
const SANDBOX_WAIT: Duration = Duration::from_secs(10);

/// Measures `snap`'s profile: image size; with a sample event, the REAP
/// working set (a recording restore, then a prefetching one), the restore
/// cost outside the working set and the warm execution time; without one,
/// the whole image counts as the working set and one mmap restore gives the
/// fixed cost.
fn measure(
    worker: &Worker,
    rec: &Record,
    snap: &Snapshot,
    func: &UserFunction,
    sample: Option<&Value>,
) -> Result<(FunctionProfile, bool)> {
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    let image_mib = mib(snap.manifest.memory.len);
    let timeout = Duration::from_millis(rec.timeout_ms);
    let run = |sb: &mut thaw_sandbox::Sandbox, ev: &Value| -> Result<f64> {
        let t = Instant::now();
        thaw_worker::invoke_event(sb, ev, timeout)?;
        Ok(t.elapsed().as_secs_f64() * 1e3)
    };
    // made ready as the pool makes every restore, into a sandbox built
    // ahead as the daemon's restores are: the fixed cost is what a restore
    // start waits for (restore and after-restore step)
    let sandboxes = worker.user_pool(func, 1)?;
    let ready = |strategy| -> Result<_> {
        sandboxes.wait_full(SANDBOX_WAIT);
        let req = RestoreRequest::new(snap, strategy)
            .function(func)
            .pool(Some(&sandboxes));
        let (mut sb, rep) = worker.restore(req)?;
        let t = Instant::now();
        thaw_worker::after_restore(&mut sb, &rec.name, timeout)
            .context("the after-restore step")?;
        let waited_ms = rep.total_ms + t.elapsed().as_secs_f64() * 1e3;
        Ok((sb, rep, waited_ms))
    };
    let Some(ev) = sample else {
        let (_, _, waited_ms) = ready(StrategyKind::Mmap)?;
        let p = FunctionProfile {
            name: rec.name.clone(),
            image_mib,
            ws_mib: image_mib,
            exec_ms: 0.0,
            fixed_ms: waited_ms,
            cold_starts_per_hour: COLD_STARTS_PER_HOUR,
        };
        return Ok((p, false));
    };
    // the first restore records the working set at its first invocation
    // (the working set kept with the snapshot covers the after-restore step)
    let (mut sb, _, _) = ready(StrategyKind::Reap)?;
    run(&mut sb, ev)?;
    drop(sb);
    let (mut sb, rep, waited_ms) = ready(StrategyKind::Reap)?;
    run(&mut sb, ev)?;
    let exec_ms = run(&mut sb, ev)?;
    let measured = rep.figures.ws_mode == WsMode::Prefetch;
    let p = FunctionProfile {
        name: rec.name.clone(),
        image_mib,
        ws_mib: if measured {
            mib(rep.figures.ws_bytes)
        } else {
            image_mib
        },
        exec_ms,
        fixed_ms: (waited_ms - rep.figures.prefetch_ms).max(0.0),
        cold_starts_per_hour: COLD_STARTS_PER_HOUR,
    };
    Ok((p, measured))
}

/// The model's strategy as the daemon runs it: one that needs what the
/// daemon does not keep (see [`crate::deploy::daemon_strategies`]; `dax`,
/// a mapped image on a byte-addressable tier) runs as the strategy that
/// restores the same way without it (`mmap`).
pub(crate) fn daemon_strategy(k: StrategyKind) -> StrategyKind {
    thaw_restore::strategy(k).needs().map_or(k, |r| r.otherwise)
}

/// Chooses what the request left open among `tiers` (the daemon's, with
/// the room its budgets leave). `strategy` / `tier` are the request's
/// (None: thaw chooses).
#[allow(clippy::too_many_arguments)]
pub fn decide(
    worker: &Worker,
    tiers: &[TierOption],
    rec: &Record,
    snap: &Snapshot,
    func: &UserFunction,
    sample: Option<&Value>,
    strategy: Option<StartStrategy>,
    tier: Option<&str>,
) -> Result<PlacementInfo> {
    let (profile, ws_measured) = measure(worker, rec, snap, func, sample)
        .context("measuring the function's profile for placement")?;
    let pl = model::place(&profile, tiers, MAX_SLOWDOWN);
    let mut reason = Vec::new();
    if !ws_measured {
        reason.push(
            "no REAP working set was measured (no sample_event): the whole image counts as the working set"
                .to_string(),
        );
    }
    reason.extend(pl.explanation.iter().cloned());
    // a tier the request named: the model's strategy for that tier
    let (tier, model_strategy) = match tier {
        Some(t) => {
            let e = pl.estimates.iter().find(|e| e.tier == t);
            reason.push(format!("tier {t} named by the request"));
            (t.to_string(), e.map_or(StrategyKind::Mmap, |e| e.strategy))
        }
        None => match (&pl.tier, pl.strategy) {
            (Some(t), Some(s)) => (t.clone(), s),
            _ => {
                reason.push("falling back to tmpfs with mmap".into());
                ("tmpfs".to_string(), StrategyKind::Mmap)
            }
        },
    };
    let strategy = match strategy {
        Some(s) => {
            reason.push(format!("strategy {s} named by the request"));
            s
        }
        None => {
            let s = daemon_strategy(model_strategy);
            if let Some(r) = thaw_restore::strategy(model_strategy).needs() {
                reason.push(format!(
                    "the model's {model_strategy} (it needs {}) runs as the daemon's {s}",
                    r.needs
                ));
            }
            StartStrategy::Restore(s)
        }
    };
    let estimates = pl
        .estimates
        .iter()
        .map(|e| {
            serde_json::json!({
                "tier": e.tier, "strategy": daemon_strategy(e.strategy), "memory_ms": e.memory_ms,
                "cold_ms": e.cold_ms, "cost_per_month": e.cost_per_month, "rejected": e.rejected,
            })
        })
        .collect();
    Ok(PlacementInfo {
        chosen_by: "thaw".into(),
        strategy,
        tier,
        reason,
        profile: Some(serde_json::json!({
            "image_mib": profile.image_mib,
            "ws_mib": profile.ws_mib,
            "ws_measured": ws_measured,
            "exec_ms": profile.exec_ms,
            "fixed_ms": profile.fixed_ms,
            "cold_starts_per_hour": profile.cold_starts_per_hour,
            "max_slowdown": MAX_SLOWDOWN,
        })),
        estimates,
    })
}
