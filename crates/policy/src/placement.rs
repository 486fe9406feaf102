//! Placement: which tier a function's snapshot lives on, and which restore
//! strategy reads it, from the function's measured profile and the tiers'
//! device profiles, headroom and prices. Pure: the caller measures.
//!
//! The model (seed 000's finding is that the device matters as much as the
//! function: light functions feel every microsecond of the medium, heavy
//! ones barely notice it):
//! - the memory part of a cold start per tier and strategy: byte-addressable
//!   tiers map the image (`dax`; the working set is read through page
//!   tables at memory speed); block tiers either prefetch the working set in
//!   one read (`reap`: one access latency + working set / bandwidth) or fault
//!   it in page by page (`mmap`: one random read per working-set page); a
//!   remote snapshot is fetched whole before the restore (one round trip +
//!   image / bandwidth; thaw does not yet stream the working set first);
//! - estimated cold start = fixed cost (sandbox, resume: the same on every
//!   tier) + memory part + warm execution time;
//! - a tier qualifies if it has room for the image and its restore slots
//!   cover the function's expected concurrent cold starts (Little's law);
//! - among the qualifying tiers whose estimated cold start is within
//!   `max_slowdown` of the fastest one's, the choice minimises storage cost
//!   x estimated cold start (the figure of merit the issue names).

/// What was measured about one function.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionProfile {
    pub name: String,
    /// memory image (saved pages)
    pub image_mib: f64,
    /// REAP working set: what the first invocation touches
    pub ws_mib: f64,
    /// warm execution time
    pub exec_ms: f64,
    /// restore cost that does not depend on the tier (sandbox build, resume)
    pub fixed_ms: f64,
    /// cold starts per hour the function is expected to see
    pub cold_starts_per_hour: f64,
}

/// One tier as placement sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct TierOption {
    pub name: String,
    /// dram or pmem: mapped, no block I/O
    pub byte_addressable: bool,
    pub remote: bool,
    pub emulated: bool,
    pub price_per_gb_month: f64,
    pub read_mbps: f64,
    /// one 4 KiB random read (remote: one round trip), microseconds
    pub access_us: f64,
    pub free_mib: f64,
    pub max_concurrent_restores: u32,
}

/// One tier's estimate for one function.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    pub tier: String,
    pub strategy: &'static str,
    pub memory_ms: f64,
    pub cold_ms: f64,
    pub cost_per_month: f64,
    /// why the tier does not qualify, if it does not
    pub rejected: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Placement {
    pub function: String,
    /// None when no tier qualifies
    pub tier: Option<String>,
    pub strategy: Option<&'static str>,
    pub estimates: Vec<Estimate>,
    /// one sentence per step of the decision
    pub explanation: Vec<String>,
}

const PAGE_MIB: f64 = 4096.0 / (1024.0 * 1024.0);
const MIB: f64 = 1024.0 * 1024.0;

/// Memory part of a cold start (ms) and the strategy that gives it.
pub fn memory_estimate(f: &FunctionProfile, t: &TierOption) -> (&'static str, f64) {
    let stream_ms = f.ws_mib * MIB / (t.read_mbps * 1e6) * 1e3;
    if t.byte_addressable {
        return ("dax", stream_ms);
    }
    if t.remote {
        let fetch_ms = f.image_mib * MIB / (t.read_mbps * 1e6) * 1e3;
        return ("reap", t.access_us / 1e3 + fetch_ms);
    }
    let reap = t.access_us / 1e3 + stream_ms;
    let mmap = f.ws_mib / PAGE_MIB * t.access_us / 1e3;
    if mmap < reap {
        ("mmap", mmap)
    } else {
        ("reap", reap)
    }
}

/// Chooses a tier and strategy for `f` and says why.
pub fn place(f: &FunctionProfile, tiers: &[TierOption], max_slowdown: f64) -> Placement {
    let mut estimates = Vec::new();
    for t in tiers {
        let (strategy, memory_ms) = memory_estimate(f, t);
        let cold_ms = f.fixed_ms + memory_ms + f.exec_ms;
        // Little's law: cold starts in flight at once
        let in_flight = f.cold_starts_per_hour / 3600.0 * cold_ms / 1e3;
        let rejected = if t.free_mib < f.image_mib {
            Some(format!(
                "no room: {:.0} MiB free for a {:.0} MiB image",
                t.free_mib, f.image_mib
            ))
        } else if in_flight > t.max_concurrent_restores as f64 {
            Some(format!(
                "{in_flight:.1} restores in flight exceed its {} slots",
                t.max_concurrent_restores
            ))
        } else {
            None
        };
        estimates.push(Estimate {
            tier: t.name.clone(),
            strategy,
            memory_ms,
            cold_ms,
            cost_per_month: f.image_mib / 1024.0 * t.price_per_gb_month,
            rejected,
        });
    }
    let mut explanation = Vec::new();
    let ok: Vec<&Estimate> = estimates.iter().filter(|e| e.rejected.is_none()).collect();
    let Some(fastest) = ok.iter().min_by(|a, b| a.cold_ms.total_cmp(&b.cold_ms)) else {
        explanation.push("no tier has room and restore slots for this function".into());
        return Placement {
            function: f.name.clone(),
            tier: None,
            strategy: None,
            estimates,
            explanation,
        };
    };
    let bound = fastest.cold_ms * max_slowdown;
    explanation.push(format!(
        "{} measured: {:.1} MiB image, {:.1} MiB working set, {:.1} ms warm execution, {:.1} ms fixed restore cost",
        f.name, f.image_mib, f.ws_mib, f.exec_ms, f.fixed_ms
    ));
    explanation.push(format!(
        "fastest qualifying tier: {} ({}), estimated cold start {:.1} ms; bound {max_slowdown:.2}x = {bound:.1} ms",
        fastest.tier, fastest.strategy, fastest.cold_ms
    ));
    let chosen = ok
        .iter()
        .filter(|e| e.cold_ms <= bound)
        .min_by(|a, b| {
            (a.cost_per_month * a.cold_ms)
                .total_cmp(&(b.cost_per_month * b.cold_ms))
                .then(a.cold_ms.total_cmp(&b.cold_ms))
        })
        .copied()
        .unwrap_or(fastest);
    let memory_share = chosen.memory_ms / chosen.cold_ms;
    explanation.push(format!(
        "chosen: {} with {}: the lowest cost x latency within the bound ({:.1} ms, {:.2}x the fastest; ${:.4}/month); the medium is {:.0}% of its cold start",
        chosen.tier,
        chosen.strategy,
        chosen.cold_ms,
        chosen.cold_ms / fastest.cold_ms,
        chosen.cost_per_month,
        memory_share * 100.0
    ));
    Placement {
        function: f.name.clone(),
        tier: Some(chosen.tier.clone()),
        strategy: Some(chosen.strategy),
        estimates,
        explanation,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tier(name: &str, byte: bool, remote: bool, price: f64, mbps: f64, us: f64) -> TierOption {
        TierOption {
            name: name.into(),
            byte_addressable: byte,
            remote,
            emulated: false,
            price_per_gb_month: price,
            read_mbps: mbps,
            access_us: us,
            free_mib: 4096.0,
            max_concurrent_restores: 4,
        }
    }

    fn tiers() -> Vec<TierOption> {
        vec![
            tier("dram", true, false, 4.6, 23000.0, 0.08),
            tier("nvme", false, false, 0.125, 2200.0, 10.0),
            tier("sata", false, false, 0.08, 500.0, 180.0),
            tier("hdd", false, false, 0.045, 150.0, 6667.0),
            tier("remote", false, true, 0.023, 1250.0, 500.0),
        ]
    }

    fn func(exec_ms: f64, ws_mib: f64) -> FunctionProfile {
        FunctionProfile {
            name: "f".into(),
            image_mib: 40.0,
            ws_mib,
            exec_ms,
            fixed_ms: 5.0,
            cold_starts_per_hour: 60.0,
        }
    }

    #[test]
    fn light_functions_stay_fast_and_heavy_ones_go_cheap() {
        // a small working set streams from NVMe within the bound; a larger one does not
        let light = place(&func(1.0, 4.0), &tiers(), 1.3);
        let light_big = place(&func(1.0, 10.0), &tiers(), 1.3);
        let heavy = place(&func(2000.0, 10.0), &tiers(), 1.3);
        // the whole image comes from the remote: a light function stays local
        assert_ne!(light.tier.as_deref(), Some("remote"));
        assert_eq!(light.tier.as_deref(), Some("nvme"));
        assert_eq!(light_big.tier.as_deref(), Some("dram"));
        assert_eq!(heavy.tier.as_deref(), Some("remote"));
        assert_eq!(heavy.strategy, Some("reap"));
        assert_eq!(light.explanation.len(), 3);
    }

    #[test]
    fn block_tiers_prefer_reap_for_real_working_sets() {
        let f = func(1.0, 10.0);
        assert_eq!(memory_estimate(&f, &tiers()[2]).0, "reap");
        assert_eq!(memory_estimate(&f, &tiers()[0]).0, "dax");
    }

    #[test]
    fn room_and_slots_are_respected() {
        let mut ts = tiers();
        for t in &mut ts[1..] {
            t.free_mib = 1.0;
        }
        let p = place(&func(1.0, 10.0), &ts, 1.3);
        assert_eq!(p.tier.as_deref(), Some("dram"));
        let mut busy = func(1.0, 10.0);
        busy.cold_starts_per_hour = 1e9;
        let p = place(&busy, &tiers(), 1.3);
        assert_eq!(p.tier, None);
        assert!(p.estimates.iter().all(|e| e.rejected.is_some()));
    }
}
