//! Calibration file: costs measured by `thaw bench`, replacing the thesis defaults.
//!
//! JSON, version 1. Every field is optional; unknown fields are errors (a typo must
//! not silently fall back to a default). Times in milliseconds, bandwidths in MB/s
//! (MiB/s), capacities in GB (GiB), prices in USD per GB-hour.
//!
//! ```json
//! {
//!   "version": 1,
//!   "source": "thaw bench restore --suite default, 2024-06-01, host X (emulated tiers)",
//!   "defaults": { "warm_ms": 0.5, "cold_ms": 250, "restore_ms": {"disk": 100, "net": 110},
//!                 "checkpoint_ms": 350 },
//!   "tiers": {
//!     "ram":  { "capacity_gb": 32, "price_gb_hour": 0.005 },
//!     "disk": { "capacity_gb": 50, "read_mb_s": 4096, "write_mb_s": 2048, "price_gb_hour": 0.00011 },
//!     "net":  { "capacity_gb": 1000, "mb_s": 1280, "price_gb_hour": 0.000032 }
//!   },
//!   "functions": {
//!     "<trace function name>": { "cold_ms": 900, "restore_ms": {"disk": 300}, "checkpoint_ms": 500,
//!                                "idle_mb": 1.2, "shared_mb": 40 }
//!   }
//! }
//! ```
//! `idle_mb` and `shared_mb` are a function's footprint in RAM as the daemon
//! charges it: what one idle instance holds on its own (without it, its
//! declared memory) and the pages its instances share, counted once.
//! Function names are as the trace spells them: `app,func` for azure2021,
//! `owner,app,func` for azure2019.

use crate::error::{Result, SimError};
use serde::Deserialize;
use std::collections::HashMap;
use std::path::Path;
use thaw_error::{fail, ResultExt};
use thaw_policy::{FnCost, Footprint, Time};

#[derive(Deserialize, Debug, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct Calibration {
    pub version: u32,
    #[serde(default)]
    pub source: Option<String>,
    #[serde(default)]
    pub defaults: CostSpec,
    #[serde(default)]
    pub tiers: Tiers,
    #[serde(default)]
    pub functions: HashMap<String, CostSpec>,
}

#[derive(Deserialize, Debug, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct CostSpec {
    pub warm_ms: Option<f64>,
    pub cold_ms: Option<f64>,
    #[serde(default)]
    pub restore_ms: PerTier,
    pub checkpoint_ms: Option<f64>,
    /// Functions only: RAM an idle instance holds on its own, MiB.
    pub idle_mb: Option<f64>,
    /// Functions only: RAM its instances share, MiB.
    pub shared_mb: Option<f64>,
}

#[derive(Deserialize, Debug, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct PerTier {
    pub disk: Option<f64>,
    pub net: Option<f64>,
}

#[derive(Deserialize, Debug, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct Tiers {
    #[serde(default)]
    pub ram: TierSpec,
    #[serde(default)]
    pub disk: TierSpec,
    #[serde(default)]
    pub net: TierSpec,
}

#[derive(Deserialize, Debug, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct TierSpec {
    pub capacity_gb: Option<f64>,
    pub read_mb_s: Option<f64>,
    pub write_mb_s: Option<f64>,
    pub mb_s: Option<f64>,
    pub price_gb_hour: Option<f64>,
}

// x checked finite and non-negative above
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn ms(v: Option<f64>, what: &str, dflt: Time) -> Result<Time> {
    match v {
        None => Ok(dflt),
        Some(x) if x.is_finite() && x >= 0.0 => Ok((x * 1000.0).round() as Time),
        Some(x) => fail!(
            SimError::Config,
            "{what} = {x}: expected a finite number of ms >= 0"
        ),
    }
}

impl CostSpec {
    /// Applies this spec over `base`.
    pub fn apply(&self, base: FnCost, ctx: &str) -> Result<FnCost> {
        Ok(FnCost {
            warm_us: ms(self.warm_ms, &format!("{ctx}.warm_ms"), base.warm_us)?,
            cold_us: ms(self.cold_ms, &format!("{ctx}.cold_ms"), base.cold_us)?,
            restore_disk_us: ms(
                self.restore_ms.disk,
                &format!("{ctx}.restore_ms.disk"),
                base.restore_disk_us,
            )?,
            restore_net_us: ms(
                self.restore_ms.net,
                &format!("{ctx}.restore_ms.net"),
                base.restore_net_us,
            )?,
            checkpoint_us: ms(
                self.checkpoint_ms,
                &format!("{ctx}.checkpoint_ms"),
                base.checkpoint_us,
            )?,
        })
    }
}

impl Calibration {
    pub fn load(path: &Path) -> Result<Calibration> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading calibration {}", path.display()))?;
        let c: Calibration = serde_json::from_str(&text)
            .with_context(|| format!("parsing calibration {}", path.display()))?;
        if c.version != 1 {
            fail!(
                SimError::Config,
                "{}: calibration version {} (this build reads 1)",
                path.display(),
                c.version
            );
        }
        if c.defaults.idle_mb.is_some() || c.defaults.shared_mb.is_some() {
            fail!(
                SimError::Config,
                "{}: idle_mb and shared_mb are given per function, not in defaults",
                path.display()
            );
        }
        Ok(c)
    }

    /// Per-function footprints in RAM, for the functions that give one.
    // x checked within 0..=u32::MAX above
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    pub fn function_footprints(&self) -> Result<HashMap<String, Footprint>> {
        let mib = |v: Option<f64>, what: String| -> Result<Option<u32>> {
            match v {
                None => Ok(None),
                Some(x) if x.is_finite() && (0.0..=u32::MAX as f64).contains(&x) => {
                    Ok(Some(x.ceil() as u32))
                }
                Some(x) => fail!(SimError::Config, "{what} = {x}: expected MiB >= 0"),
            }
        };
        let mut out = HashMap::new();
        for (name, spec) in &self.functions {
            let idle_mb = mib(spec.idle_mb, format!("functions.{name}.idle_mb"))?;
            let shared_mb = mib(spec.shared_mb, format!("functions.{name}.shared_mb"))?;
            if idle_mb.is_some() || shared_mb.is_some() {
                let shared_mb = shared_mb.unwrap_or(0);
                out.insert(name.clone(), Footprint { idle_mb, shared_mb });
            }
        }
        Ok(out)
    }

    /// Per-function costs, resolved over the defaults; checked up front so a bad
    /// entry fails before the run.
    pub fn function_costs(&self, base: FnCost) -> Result<HashMap<String, FnCost>> {
        self.functions
            .iter()
            .map(|(name, spec)| {
                Ok((
                    name.clone(),
                    spec.apply(base, &format!("functions.{name}"))?,
                ))
            })
            .collect()
    }
}
