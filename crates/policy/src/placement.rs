//! Placement: which tier a function's snapshot lives on, and which restore
//! strategy reads it, from the function's measured profile and the tiers'
//! device profiles, headroom and prices. Pure: the caller measures.
//!
//! The model (the finding of "FaaS in the Age of (sub-)µs I/O" is that the
//! device matters as much as the function: light functions feel every microsecond of the medium, heavy
//! ones barely notice it):
//! - the memory part of a cold start per tier and strategy: byte-addressable
//!   tiers map the image (`dax`; the working set is read through page
//!   tables at memory speed); block tiers either prefetch the working set in
//!   one read (`reap`: one access latency + working set / bandwidth) or fault
//!   it in page by page (`mmap`: one random read per working-set page); a
//!   remote snapshot is streamed (`thaw_tiers::stream`): two round trips
//!   (manifest, state and header; then the working set), then the working
//!   set at the tier's bandwidth, the rest of the image in the background.
//!   The working set is LZ4-compressed on the store; the model assumes no
//!   gain from that, and leaves out the restorer's few chunks of
//!   file-backed pages, which travel beside the working set;
//! - estimated cold start = fixed cost (sandbox, resume: the same on every
//!   tier) + memory part + warm execution time;
//! - a tier qualifies if it has room for the image and its restore slots
//!   cover the function's expected concurrent cold starts (Little's law);
//! - among the qualifying tiers whose estimated cold start is within
//!   `max_slowdown` of the fastest one's, the choice minimises storage cost
//!   x estimated cold start (placement's figure of merit).

pub use thaw_strategy_kind::StrategyKind;

/// What was measured about one function.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
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
    #[serde(default)]
    pub cold_starts_per_hour: f64,
}

/// One tier as placement sees it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
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
    pub strategy: StrategyKind,
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
    pub strategy: Option<StrategyKind>,
    pub estimates: Vec<Estimate>,
    /// one sentence per step of the decision
    pub explanation: Vec<String>,
}

impl Placement {
    /// The estimate of the chosen tier, if any.
    pub fn chosen(&self) -> Option<&Estimate> {
        self.estimates
            .iter()
            .find(|e| Some(&e.tier) == self.tier.as_ref())
    }

    /// The fastest estimated cold start among the qualifying tiers
    /// (infinite when none qualifies).
    pub fn fastest_ms(&self) -> f64 {
        self.estimates
            .iter()
            .filter(|e| e.rejected.is_none())
            .map(|e| e.cold_ms)
            .fold(f64::INFINITY, f64::min)
    }
}

const PAGE_MIB: f64 = 4096.0 / (1024.0 * 1024.0);
const MIB: f64 = 1024.0 * 1024.0;

/// Memory part of a cold start (ms) and the strategy that gives it.
pub fn memory_estimate(f: &FunctionProfile, t: &TierOption) -> (StrategyKind, f64) {
    let stream_ms = f.ws_mib * MIB / (t.read_mbps * 1e6) * 1e3;
    if t.byte_addressable {
        return (StrategyKind::Dax, stream_ms);
    }
    if t.remote {
        return (StrategyKind::Reap, 2.0 * t.access_us / 1e3 + stream_ms);
    }
    let reap = t.access_us / 1e3 + stream_ms;
    let mmap = f.ws_mib / PAGE_MIB * t.access_us / 1e3;
    if mmap < reap {
        (StrategyKind::Mmap, mmap)
    } else {
        (StrategyKind::Reap, reap)
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

/// Places a fleet: starts from each function's own choice (`place`), then
/// moves single functions between the tiers that qualify for them (room,
/// restore slots, within `max_slowdown` of their fastest) while that lowers
/// the fleet's figure of merit: total storage cost x mean cold start, where
/// each function's cold start counts as often as it cold-starts
/// (`cold_starts_per_hour`). So a rarely started function goes to a cheap
/// tier and a often started one to a fast tier, which no per-function rule
/// sees. Capacity is summed over the fleet: the functions that cold-start
/// most take their room first, a move needs room for the image on the
/// target, and a function no tier has room left for is placed nowhere.
pub fn place_fleet(
    fs: &[FunctionProfile],
    tiers: &[TierOption],
    max_slowdown: f64,
) -> Vec<Placement> {
    let mut out: Vec<Placement> = fs.iter().map(|f| place(f, tiers, max_slowdown)).collect();
    // per function: indices of its candidate estimates, and its current pick
    let mut picks: Vec<Option<usize>> = vec![None; fs.len()];
    let mut cands: Vec<Vec<usize>> = Vec::with_capacity(fs.len());
    for p in &out {
        let fastest = p.fastest_ms();
        let within: Vec<usize> = (0..p.estimates.len())
            .filter(|&i| {
                let e = &p.estimates[i];
                e.rejected.is_none() && e.cold_ms <= fastest * max_slowdown
            })
            .collect();
        cands.push(within);
    }
    // room left per tier; the most often started functions are seated first,
    // each on its own choice if it still fits, else its fastest that does
    let mut free: std::collections::HashMap<&str, f64> = tiers
        .iter()
        .map(|t| (t.name.as_str(), t.free_mib))
        .collect();
    let mut order: Vec<usize> = (0..fs.len()).collect();
    order.sort_by(|&a, &b| {
        fs[b]
            .cold_starts_per_hour
            .total_cmp(&fs[a].cold_starts_per_hour)
    });
    for &k in &order {
        let est = &out[k].estimates;
        let mut options = cands[k].clone();
        options.sort_by(|&a, &b| {
            let own = |i: usize| Some(&est[i].tier) != out[k].tier.as_ref();
            own(a)
                .cmp(&own(b))
                .then(est[a].cold_ms.total_cmp(&est[b].cold_ms))
        });
        let fits = |i: &usize, free: &std::collections::HashMap<&str, f64>| {
            free.get(est[*i].tier.as_str()).copied().unwrap_or(0.0) >= fs[k].image_mib
        };
        if let Some(i) = options.into_iter().find(|i| fits(i, &free)) {
            *free
                .get_mut(est[i].tier.as_str())
                .expect("a configured tier") -= fs[k].image_mib;
            picks[k] = Some(i);
        }
    }
    // with no cold starts expected anywhere, every function weighs the same
    let total_rate: f64 = fs.iter().map(|f| f.cold_starts_per_hour).sum();
    let weight = |f: &FunctionProfile| {
        if total_rate > 0.0 {
            f.cold_starts_per_hour
        } else {
            1.0
        }
    };
    let (mut cost, mut lat) = (0.0, 0.0);
    for ((f, p), pick) in fs.iter().zip(&out).zip(&picks) {
        if let Some(i) = pick {
            cost += p.estimates[*i].cost_per_month;
            lat += weight(f) * p.estimates[*i].cold_ms;
        }
    }
    // coordinate descent: every accepted move strictly lowers cost x lat,
    // so it ends; the round cap only bounds the work
    for _round in 0..100 {
        let mut moved = false;
        for (k, f) in fs.iter().enumerate() {
            let Some(cur) = picks[k] else { continue };
            let est = &out[k].estimates;
            let w = weight(f);
            let base_cost = cost - est[cur].cost_per_month;
            let base_lat = lat - w * est[cur].cold_ms;
            let mut best = (cost * lat, cur);
            let room = |i: usize| {
                est[i].tier == est[cur].tier
                    || free.get(est[i].tier.as_str()).copied().unwrap_or(0.0) >= f.image_mib
            };
            for &i in cands[k].iter().filter(|&&i| room(i)) {
                let v = (base_cost + est[i].cost_per_month) * (base_lat + w * est[i].cold_ms);
                if v < best.0 * (1.0 - 1e-12) {
                    best = (v, i);
                }
            }
            if best.1 != cur {
                *free
                    .get_mut(est[cur].tier.as_str())
                    .expect("a configured tier") += f.image_mib;
                *free
                    .get_mut(est[best.1].tier.as_str())
                    .expect("a configured tier") -= f.image_mib;
                cost = base_cost + est[best.1].cost_per_month;
                lat = base_lat + w * est[best.1].cold_ms;
                picks[k] = Some(best.1);
                moved = true;
            }
        }
        if !moved {
            break;
        }
    }
    for ((p, pick), f) in out.iter_mut().zip(&picks).zip(fs) {
        let Some(i) = *pick else {
            if p.tier.is_some() {
                p.explanation.push(
                    "fleet: no tier within the bound has room left for it once the functions started more often are placed".into(),
                );
                p.tier = None;
                p.strategy = None;
            }
            continue;
        };
        let e = p.estimates[i].clone();
        if p.tier.as_ref() != Some(&e.tier) {
            p.explanation.push(format!(
                "fleet: moved to {} with {} ({:.1} ms, ${:.4}/month): at {:.2} cold starts per hour this lowers the fleet's storage cost x mean cold start",
                e.tier, e.strategy, e.cold_ms, e.cost_per_month, f.cold_starts_per_hour
            ));
            p.tier = Some(e.tier);
            p.strategy = Some(e.strategy);
        }
    }
    out
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
        // two round trips before the working set: a light function stays local
        assert_ne!(light.tier.as_deref(), Some("remote"));
        assert_eq!(light.tier.as_deref(), Some("nvme"));
        assert_eq!(light_big.tier.as_deref(), Some("dram"));
        assert_eq!(heavy.tier.as_deref(), Some("remote"));
        assert_eq!(heavy.strategy, Some(StrategyKind::Reap));
        assert_eq!(light.explanation.len(), 3);
    }

    #[test]
    fn remote_restores_stream_the_working_set_not_the_image() {
        let remote = &tiers()[4];
        let small = memory_estimate(&func(1.0, 4.0), remote).1;
        // two 0.5 ms round trips, then 4 MiB at 1250 MB/s
        assert!(
            (small - (1.0 + 4.0 * MIB / 1250e6 * 1e3)).abs() < 1e-9,
            "{small}"
        );
        // the image's size does not matter, the working set's does
        let big_image = FunctionProfile {
            image_mib: 4000.0,
            ..func(1.0, 4.0)
        };
        assert_eq!(memory_estimate(&big_image, remote).1, small);
        assert!(memory_estimate(&func(1.0, 8.0), remote).1 > small);
    }

    #[test]
    fn block_tiers_prefer_reap_for_real_working_sets() {
        let f = func(1.0, 10.0);
        assert_eq!(memory_estimate(&f, &tiers()[2]).0, StrategyKind::Reap);
        assert_eq!(memory_estimate(&f, &tiers()[0]).0, StrategyKind::Dax);
    }

    /// storage cost x cold-start-weighted mean cold start of an assignment
    fn merit(fs: &[FunctionProfile], picks: &[&Estimate]) -> f64 {
        let cost: f64 = picks.iter().map(|e| e.cost_per_month).sum();
        let w: f64 = fs.iter().map(|f| f.cold_starts_per_hour).sum();
        let lat: f64 = fs
            .iter()
            .zip(picks)
            .map(|(f, e)| f.cold_starts_per_hour * e.cold_ms)
            .sum();
        cost * lat / w
    }

    #[test]
    fn fleet_placement_sends_rare_functions_to_cheap_tiers_and_beats_every_fixed_tier() {
        // one hot function and nine that rarely cold-start, all heavy enough
        // that the remote is within the bound
        let mut fs: Vec<FunctionProfile> = (0..10)
            .map(|i| FunctionProfile {
                name: format!("f{i}"),
                cold_starts_per_hour: if i == 0 { 1000.0 } else { 0.1 },
                ..func(2000.0, 10.0)
            })
            .collect();
        // the hot one is light with a large working set: streamed from the
        // remote it would be past the bound
        fs[0].exec_ms = 1.0;
        (fs[0].image_mib, fs[0].ws_mib) = (400.0, 200.0);
        let ts = tiers();
        let fleet = place_fleet(&fs, &ts, 10.0);
        let placed: Vec<&Estimate> = fleet.iter().map(|p| p.chosen().unwrap()).collect();
        // the hot one stays on a fast tier, the rare ones go cheap
        assert_ne!(fleet[0].tier.as_deref(), Some("remote"));
        assert!(fleet[1..]
            .iter()
            .all(|p| p.tier.as_deref() == Some("remote")));
        let ours = merit(&fs, &placed);
        // every fixed tier that keeps the bound for every function
        for t in &ts {
            let fixed: Vec<&Estimate> = fleet
                .iter()
                .map(|p| p.estimates.iter().find(|e| e.tier == t.name).unwrap())
                .collect();
            let keeps = fleet
                .iter()
                .zip(&fixed)
                .all(|(p, e)| e.rejected.is_none() && e.cold_ms <= p.fastest_ms() * 10.0);
            if !keeps {
                continue;
            }
            assert!(
                ours < merit(&fs, &fixed),
                "fleet {ours} vs all on {}: {}",
                t.name,
                merit(&fs, &fixed)
            );
        }
        // and no worse than each function's own choice
        let own: Vec<Placement> = fs.iter().map(|f| place(f, &ts, 10.0)).collect();
        let own: Vec<&Estimate> = own.iter().map(|p| p.chosen().unwrap()).collect();
        assert!(ours <= merit(&fs, &own));
    }

    #[test]
    fn fleet_placement_keeps_the_bound_and_the_rejections() {
        let mut ts = tiers();
        ts[4].free_mib = 1.0; // the remote has no room
        let fs: Vec<FunctionProfile> = (0..4)
            .map(|i| FunctionProfile {
                name: format!("f{i}"),
                cold_starts_per_hour: 0.01,
                ..func(1.0, 4.0)
            })
            .collect();
        for p in place_fleet(&fs, &ts, 1.3) {
            let e = p.chosen().unwrap();
            assert!(e.rejected.is_none());
            assert!(e.cold_ms <= p.fastest_ms() * 1.3);
        }
        assert!(place_fleet(&[], &ts, 1.3).is_empty());
    }

    #[test]
    fn fleet_capacity_is_summed_over_the_functions() {
        let mut ts = tiers();
        // room for two 40 MiB images on each tier
        for t in &mut ts {
            t.free_mib = 80.0;
        }
        let fs: Vec<FunctionProfile> = (0..9)
            .map(|i| FunctionProfile {
                name: format!("f{i}"),
                cold_starts_per_hour: 1.0 + i as f64,
                ..func(1.0, 4.0)
            })
            .collect();
        let placed = place_fleet(&fs, &ts, 1e9);
        for t in &ts {
            let n = placed
                .iter()
                .filter(|p| p.tier.as_deref() == Some(&t.name))
                .count();
            assert!(
                n <= 2,
                "{n} images of 40 MiB on {} with 80 MiB free",
                t.name
            );
        }
        // five tiers x two: nine fit, and each one placed has a tier within the bound
        assert_eq!(placed.iter().filter(|p| p.tier.is_some()).count(), 9);
        // one more than there is room for: the least often started is left out
        let mut more = fs.clone();
        more.push(FunctionProfile {
            name: "rare".into(),
            cold_starts_per_hour: 0.001,
            ..func(1.0, 4.0)
        });
        more.push(FunctionProfile {
            name: "rarer".into(),
            cold_starts_per_hour: 0.0001,
            ..func(1.0, 4.0)
        });
        let placed = place_fleet(&more, &ts, 1e9);
        let left: Vec<&str> = placed
            .iter()
            .filter(|p| p.tier.is_none())
            .map(|p| p.function.as_str())
            .collect();
        assert_eq!(left, ["rarer"]);
        assert!(placed[10].explanation.last().unwrap().contains("no tier"));
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
