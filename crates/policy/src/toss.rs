//! The TOSS memory-cost model: which of a snapshot's saved pages go to the
//! fast (DRAM) tier and which to the slow one, from how often each was
//! touched while profiling. Pure: the page files are written by
//! `thaw_memory::tiering`.
//!
//! Cost of a placement = slowdown x (fast MiB x fast price + slow MiB x slow
//! price), prices relative to the slow tier (fast = `price_ratio`, slow = 1).
//! Slowdown is estimated from the profile: a page on the slow tier costs
//! `slow_fault_us - fast_fault_us` more each time an invocation first touches
//! it, and a page profiled as touched in k of E epochs is touched by an
//! invocation with probability k/E.
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

/// Bytes per page (x86_64), for the model's MiB.
const PAGE_BYTES: f64 = 4096.0;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CostParams {
    /// fast-tier price per MiB relative to the slow tier's (TOSS: 2.5)
    pub price_ratio: f64,
    /// extra cost of first touching a slow-tier page vs a fast-tier one, in microseconds
    pub slow_fault_us: f64,
    pub fast_fault_us: f64,
    /// the function's cold invocation time with everything on the fast tier
    pub base_ms: f64,
    /// bound on the estimated slowdown (TOSS's optional threshold); infinity
    /// gives the plain minimum-cost placement
    pub max_slowdown: f64,
}

impl Default for CostParams {
    fn default() -> Self {
        // fault costs from DESIGN.md's measured floors: cached minor fault
        // 0.26 us, cold random 4 KiB read from the disk 61 us
        CostParams {
            price_ratio: 2.5,
            slow_fault_us: 61.0,
            fast_fault_us: 0.26,
            base_ms: 10.0,
            max_slowdown: 1.10,
        }
    }
}

/// Page access counts from profiling: page address -> epochs that touched it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct AccessProfile {
    pub epochs: u32,
    pub counts: BTreeMap<u64, u32>,
    /// The same counts per class of invocation (an input size); slowdown is
    /// estimated per class and the worst one counts, so a bound holds for
    /// short invocations too. Empty: one class, `CostParams::base_ms`.
    pub classes: Vec<ProfileClass>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ProfileClass {
    pub name: String,
    pub epochs: u32,
    pub counts: HashMap<u64, u32>,
    /// cold invocation time of this class with everything on the fast tier (ms)
    pub base_ms: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TierKind {
    Fast,
    Slow,
}

/// One bin of pages with equal access count, and where the model put it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BinDecision {
    pub accesses: u32,
    pub pages: u64,
    pub slow: bool,
}

/// The outcome of [`place`].
pub struct Placement {
    pub tier: HashMap<u64, TierKind>,
    pub bins: Vec<BinDecision>,
    pub est_slowdown: f64,
    pub cost: f64,
    pub cost_all_fast: f64,
}

/// Decides, for each of `pages` (the saved pages' addresses), fast or slow. Untouched pages go slow (free by
/// the model). Touched pages are binned by access count; as in TOSS, bins
/// whose move alone lowers the cost are candidates, taken in order of
/// slowdown per MiB saved while the total cost keeps falling and the
/// slowdown stays within `max_slowdown`.
pub fn place(pages: &[u64], profile: &AccessProfile, p: &CostParams) -> Placement {
    let mut bins: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for &a in pages {
        let c = profile.counts.get(&a).copied().unwrap_or(0);
        bins.entry(c).or_default().push(a);
    }
    let mib = |pages: u64| pages as f64 * PAGE_BYTES / (1 << 20) as f64;
    let total: u64 = bins.values().map(|v| v.len() as u64).sum();
    let penalty_ms = (p.slow_fault_us - p.fast_fault_us).max(0.0) / 1000.0;
    // per class: (epochs, counts, base); one class from the totals when none given
    let single = [ProfileClass {
        name: String::new(),
        epochs: profile.epochs,
        counts: HashMap::new(),
        base_ms: p.base_ms,
    }];
    let classes: &[ProfileClass] = if profile.classes.is_empty() {
        &single
    } else {
        &profile.classes
    };
    let count_in = |c: &ProfileClass, a: u64| -> f64 {
        let n = if profile.classes.is_empty() {
            profile.counts.get(&a).copied()
        } else {
            c.counts.get(&a).copied()
        };
        n.unwrap_or(0) as f64 / c.epochs.max(1) as f64
    };
    // extra milliseconds per class if a bin moves to the slow tier
    let bin_extra: BTreeMap<u32, Vec<f64>> = bins
        .iter()
        .map(|(&cnt, pages)| {
            (
                cnt,
                classes
                    .iter()
                    .map(|c| pages.iter().map(|&a| count_in(c, a)).sum::<f64>() * penalty_ms)
                    .collect(),
            )
        })
        .collect();
    let slowdown_of = |extra: &[f64]| {
        classes
            .iter()
            .zip(extra)
            .map(|(c, e)| 1.0 + e / c.base_ms.max(1e-3))
            .fold(1.0, f64::max)
    };
    let cost = |slow: u64, extra: &[f64]| {
        slowdown_of(extra) * (mib(total - slow) * p.price_ratio + mib(slow))
    };
    let zero = vec![0.0; classes.len()];
    let cost_all_fast = cost(0, &zero);
    let add = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x + y).collect::<Vec<f64>>();

    let mut slow = bins.get(&0).map(|v| v.len() as u64).unwrap_or(0);
    let mut extra = bin_extra.get(&0).cloned().unwrap_or_else(|| zero.clone());
    let candidates: Vec<u32> = bins
        .iter()
        .filter(|(&c, v)| c != 0 && cost(v.len() as u64, &bin_extra[&c]) < cost_all_fast)
        .map(|(&c, _)| c)
        .collect();
    // lower counts first: most memory per unit of slowdown
    let mut moved = std::collections::HashSet::new();
    for c in candidates {
        let (s2, e2) = (slow + bins[&c].len() as u64, add(&extra, &bin_extra[&c]));
        if cost(s2, &e2) < cost(slow, &extra) && slowdown_of(&e2) <= p.max_slowdown {
            slow = s2;
            extra = e2;
            moved.insert(c);
        }
    }
    let mut tier = HashMap::new();
    let mut decisions = Vec::new();
    for (&c, pages) in &bins {
        let to_slow = c == 0 || moved.contains(&c);
        for &a in pages {
            tier.insert(
                a,
                if to_slow {
                    TierKind::Slow
                } else {
                    TierKind::Fast
                },
            );
        }
        decisions.push(BinDecision {
            accesses: c.min(profile.epochs),
            pages: pages.len() as u64,
            slow: to_slow,
        });
    }
    Placement {
        tier,
        bins: decisions,
        est_slowdown: slowdown_of(&extra),
        cost: cost(slow, &extra),
        cost_all_fast,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The saved pages of a private file mapping (one page at 0x1000) and
    /// an anonymous one (8 pages from 0x10000).
    fn pages() -> Vec<u64> {
        let anon = (0..8).map(|i| 0x10000 + i * 0x1000);
        std::iter::once(0x1000).chain(anon).collect()
    }

    #[test]
    fn cold_pages_go_slow_hot_stay_fast_and_cost_drops() {
        let l = pages();
        let mut prof = AccessProfile {
            epochs: 4,
            ..Default::default()
        };
        prof.counts.insert(0x10000, 4); // hot
        prof.counts.insert(0x11000, 4);
        prof.counts.insert(0x12000, 1); // lukewarm
        prof.counts.insert(0x1000, 4); // a hot privately modified page of a file mapping
                                       // a short function: each slow first touch is a large share of its time
        let p = CostParams {
            base_ms: 0.05,
            ..Default::default()
        };
        let Placement {
            tier: pl,
            bins,
            est_slowdown: slowdown,
            cost,
            cost_all_fast: all_fast,
        } = place(&l, &prof, &p);
        assert_eq!(pl[&0x1000], TierKind::Fast, "hot file-private page");
        assert_eq!(pl[&0x17000], TierKind::Slow, "untouched page");
        assert_eq!(pl[&0x10000], TierKind::Fast, "hot page");
        assert!(cost < all_fast);
        assert!(slowdown >= 1.0);
        assert!(bins.iter().any(|b| b.accesses == 0 && b.slow));
        assert_eq!(
            pl[&0x12000],
            TierKind::Fast,
            "lukewarm page costs more slowdown than it saves"
        );
        // a long-running function hides the same faults: everything touched rarely goes slow
        let p2 = CostParams {
            base_ms: 1000.0,
            ..Default::default()
        };
        assert_eq!(place(&l, &prof, &p2).tier[&0x12000], TierKind::Slow);
        // ...unless the slowdown bound forbids it
        let p3 = CostParams {
            base_ms: 1.0,
            max_slowdown: 1.001,
            ..Default::default()
        };
        let pl3 = place(&l, &prof, &p3);
        assert_eq!(pl3.tier[&0x12000], TierKind::Fast);
        assert!(pl3.est_slowdown <= 1.001);
        let p4 = CostParams {
            base_ms: 1.0,
            max_slowdown: f64::INFINITY,
            ..Default::default()
        };
        assert_eq!(place(&l, &prof, &p4).tier[&0x12000], TierKind::Slow);
    }

    #[test]
    fn the_most_sensitive_class_bounds_the_slowdown() {
        let l = pages();
        // a page touched by every short invocation and no long one: across
        // all invocations it looks lukewarm, but the short ones would slow down
        let mut short = ProfileClass {
            name: "I".into(),
            epochs: 2,
            base_ms: 0.1,
            ..Default::default()
        };
        short.counts.insert(0x12000, 2);
        let long = ProfileClass {
            name: "IV".into(),
            epochs: 2,
            base_ms: 1000.0,
            ..Default::default()
        };
        let mut prof = AccessProfile {
            epochs: 4,
            classes: vec![short, long],
            ..Default::default()
        };
        prof.counts.insert(0x12000, 2);
        let pl = place(&l, &prof, &CostParams::default());
        assert_eq!(pl.tier[&0x12000], TierKind::Fast);
        assert!(pl.est_slowdown <= 1.10);
        // with only the long class it would move
        prof.classes.remove(0);
        prof.classes[0].counts.insert(0x12000, 1);
        assert_eq!(
            place(&l, &prof, &CostParams::default()).tier[&0x12000],
            TierKind::Slow
        );
    }
}
