//! Placement's estimates against the function's own cold starts: every
//! restore start the daemon serves is measured (restore, after-restore
//! step, first invocation: what placement's estimate stands for) and kept
//! per function version and tier; `thaw_policy::calibrate` (pure, the
//! code the simulator can run) refits the profile's fixed cost from their
//! median, and placement's model estimates every tier again from it.
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Mutex;
use thaw_policy::calibrate::{recalibrate, Window};
use thaw_policy::placement::{self as model, FunctionProfile, TierOption};

use crate::instances::FnVersion;

/// (function, version, tier) -> its latest measured cold starts (ms).
#[derive(Default)]
pub struct Calibrations {
    windows: Mutex<HashMap<(String, u64, String), Window>>,
}

impl Calibrations {
    /// One restore start of `name`'s `version` from `tier`, measured.
    pub fn observe(&self, name: &str, version: u64, tier: &str, cold_ms: f64) {
        let mut w = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        w.entry((name.to_string(), version, tier.to_string()))
            .or_default()
            .push(cold_ms);
    }

    /// A deleted or replaced function's windows go with it.
    pub fn forget(&self, name: &str) {
        let mut w = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        w.retain(|(n, _, _), _| n != name);
    }

    fn window(&self, name: &str, version: u64, tier: &str) -> Option<Window> {
        let w = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        w.get(&(name.to_string(), version, tier.to_string()))
            .cloned()
    }
}

/// The profile placement measured at deploy, as the model takes it.
fn profile_of(name: &str, p: &Value) -> Option<FunctionProfile> {
    let f = |k: &str| p.get(k).and_then(Value::as_f64);
    Some(FunctionProfile {
        name: name.to_string(),
        image_mib: f("image_mib")?,
        ws_mib: f("ws_mib")?,
        exec_ms: f("exec_ms")?,
        fixed_ms: f("fixed_ms")?,
        cold_starts_per_hour: f("cold_starts_per_hour")?,
    })
}

/// `v`'s estimates beside its measured cold starts on the tier it runs
/// from, recalibrated from them; None until a placement measured a profile
/// and a restore start was served. `tiers`: the daemon's tiers as
/// placement sees them now (asked for only then).
pub fn report(
    calibrations: &Calibrations,
    v: &FnVersion,
    tiers: impl FnOnce() -> Option<Vec<TierOption>>,
) -> Option<Value> {
    let rec = &v.rec;
    let placement = rec.placement.as_ref()?;
    let profile = profile_of(&rec.name, placement.profile.as_ref()?)?;
    let tier = v.placed()?.tier;
    let window = calibrations.window(&rec.name, rec.version, &tier)?;
    let measured_ms = window.median()?;
    let tiers = tiers()?;
    let on = tiers.iter().find(|t| t.name == tier)?;
    let estimate = |p: &model::Placement| {
        p.estimates
            .iter()
            .find(|e| e.tier == tier)
            .map(|e| e.cold_ms)
    };
    let at_deploy = model::place(&profile, &tiers, crate::placement::MAX_SLOWDOWN);
    let refit = recalibrate(&profile, on, measured_ms);
    let now = model::place(&refit, &tiers, crate::placement::MAX_SLOWDOWN);
    let (before, after) = (estimate(&at_deploy)?, estimate(&now)?);
    Some(json!({
        "tier": tier,
        "strategy": rec.strategy,
        "restores": window.len(),
        "measured_ms": measured_ms,
        "deploy_estimate_ms": before,
        "deploy_ratio": before / measured_ms,
        "estimate_ms": after,
        "ratio": after / measured_ms,
        "fixed_ms": refit.fixed_ms,
        "estimates": now.estimates.iter().map(|e| json!({
            "tier": e.tier, "strategy": crate::placement::daemon_strategy(e.strategy),
            "memory_ms": e.memory_ms,
            "cold_ms": e.cold_ms, "rejected": e.rejected,
        })).collect::<Vec<_>>(),
        // what placement would choose now (a redeploy acts on it)
        "would_choose": {"tier": now.tier, "strategy": now.strategy},
    }))
}
