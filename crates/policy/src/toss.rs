//! The TOSS memory-cost model: which of a snapshot's saved pages go to the
//! fast (DRAM) tier and which to the slow one, from how often each was
//! touched while profiling. Pure: the page files are written by
//! `thaw_memory::tiering`.
//!
//! Cost of a placement = slowdown x (fast MiB x fast price + slow MiB x slow
//! price), prices relative to the slow tier (fast = `price_ratio`, slow = 1).
//! Slowdown is the estimated cold start over the all-fast one (`base_ms`),
//! from two costs the tier probe measures:
//! - pages: a fault on the slow tier costs `slow_fault_us - fast_fault_us`
//!   more than on the fast one; a page profiled as touched in k of E epochs
//!   is touched by an invocation with probability k/E, and one fault maps a
//!   whole fault-around window of cached pages ([`fault_shares`]);
//! - mappings: each run of pages on one tier is mapped on its own, so every
//!   run beyond the one mapping per stretch of contiguous pages an all-fast
//!   restore makes costs `map_us` of memory setup. A page-by-page split of
//!   interleaved hot and cold pages pays more in mappings than it saves.
//!
//! The placement is TOSS's by access-count bins, then smoothed: a run of
//! one tier between pages of the other is moved across when that lowers the
//! cost within the bound (a few hot pages inside a cold stretch go slow, a few
//! cold ones inside a hot stretch stay fast), smallest runs first.
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

/// Bytes per page (x86_64), for the model's MiB.
const PAGE_BYTES: u64 = 4096;

/// One mapping's cost when the tier was never probed for it, µs: what one
/// more run added to a split restore's memory setup on this kind of
/// machine (2 cores; `thaw tier probe` measures it per tier).
pub const DECLARED_MAP_US: f64 = 2.3;

fn declared_map_us() -> f64 {
    DECLARED_MAP_US
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CostParams {
    /// fast-tier price per MiB relative to the slow tier's (TOSS: 2.5)
    pub price_ratio: f64,
    /// extra cost of first touching a slow-tier page vs a fast-tier one, in microseconds
    pub slow_fault_us: f64,
    pub fast_fault_us: f64,
    /// one more mapping in a restore's memory setup, in microseconds
    #[serde(default = "declared_map_us")]
    pub map_us: f64,
    /// the function's cold start with everything on the fast tier
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
            map_us: DECLARED_MAP_US,
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
    /// cold start of this class with everything on the fast tier (ms)
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
    /// the bin as a whole went slow (before smoothing)
    pub slow: bool,
    /// its pages on the slow tier after smoothing
    #[serde(default)]
    pub slow_pages: u64,
}

/// The outcome of [`place`].
pub struct Placement {
    pub tier: HashMap<u64, TierKind>,
    pub bins: Vec<BinDecision>,
    pub est_slowdown: f64,
    pub cost: f64,
    pub cost_all_fast: f64,
    /// mappings the split adds to an all-fast restore's
    pub extra_mappings: u64,
}

/// The model's view of one assignment: what it adds to a cold start.
#[derive(Clone)]
struct Totals {
    slow_pages: u64,
    /// fault time added per class, ms
    faults_ms: Vec<f64>,
    /// runs of one tier (each one mapping)
    runs: u64,
}

/// The saved pages in address order with what moving each to the slow tier
/// costs, and the fixed inputs of the cost.
struct Model<'a> {
    p: &'a CostParams,
    /// `starts[i]`: page i begins a new mapping whatever the tiers (a
    /// region's first page, or the first after a gap)
    starts: Vec<bool>,
    /// per class, prefix sums of the ms a page adds on the slow tier
    prefix: Vec<Vec<f64>>,
    bases: Vec<f64>,
    /// mappings of an all-fast restore
    base_runs: u64,
}

impl Model<'_> {
    fn pages(&self) -> usize {
        self.starts.len()
    }

    /// ms pages `lo..hi` add to class `c` on the slow tier
    fn faults(&self, c: usize, lo: usize, hi: usize) -> f64 {
        self.prefix[c][hi] - self.prefix[c][lo]
    }

    fn slowdown(&self, t: &Totals) -> f64 {
        let maps_ms = t.runs.saturating_sub(self.base_runs) as f64 * self.p.map_us / 1000.0;
        self.bases
            .iter()
            .zip(&t.faults_ms)
            .map(|(b, f)| 1.0 + (f + maps_ms) / b.max(1e-3))
            .fold(1.0, f64::max)
    }

    fn price(&self, slow_pages: u64) -> f64 {
        let mib = |pages: u64| (pages * PAGE_BYTES) as f64 / (1 << 20) as f64;
        mib(self.pages() as u64 - slow_pages) * self.p.price_ratio + mib(slow_pages)
    }

    fn cost(&self, t: &Totals) -> f64 {
        self.slowdown(t) * self.price(t.slow_pages)
    }

    fn totals(&self, slow: &[bool]) -> Totals {
        let mut t = Totals {
            slow_pages: 0,
            faults_ms: vec![0.0; self.bases.len()],
            runs: 0,
        };
        for (i, &s) in slow.iter().enumerate() {
            if self.starts[i] || s != slow[i - 1] {
                t.runs += 1;
            }
            if s {
                t.slow_pages += 1;
                for (c, f) in t.faults_ms.iter_mut().enumerate() {
                    *f += self.faults(c, i, i + 1);
                }
            }
        }
        t
    }

    /// Accepts a change from `cur` to `next` if it lowers the cost within
    /// the bound, or brings a slowdown past the bound down.
    fn better(&self, cur: &Totals, next: &Totals) -> bool {
        let (s0, s1) = (self.slowdown(cur), self.slowdown(next));
        let bound = self.p.max_slowdown;
        if s0 > bound {
            return s1 < s0;
        }
        s1 <= bound && self.cost(next) < self.cost(cur) * (1.0 - 1e-12)
    }
}

/// Decides, for each saved page, fast or slow. `regions` holds the saved
/// pages' addresses region by region (each region is mapped on its own),
/// in address order. Untouched pages go slow (free by the model). Touched
/// pages are binned by access count; as in TOSS, bins are moved to the slow
/// tier in order of slowdown per MiB saved (lower counts first) while the
/// cost keeps falling and the slowdown stays within `max_slowdown`; then
/// runs are smoothed ([`smooth`]), and the result is checked against
/// smoothing from all pages slow.
pub fn place(regions: &[Vec<u64>], profile: &AccessProfile, p: &CostParams) -> Placement {
    let addrs: Vec<u64> = regions.iter().flatten().copied().collect();
    let mut starts = Vec::with_capacity(addrs.len());
    for r in regions {
        for (i, &a) in r.iter().enumerate() {
            starts.push(i == 0 || r[i - 1] + PAGE_BYTES != a);
        }
    }
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
    let prefix = classes
        .iter()
        .map(|c| {
            let touch: Vec<f64> = addrs.iter().map(|&a| count_in(c, a)).collect();
            let mut v = Vec::with_capacity(addrs.len() + 1);
            v.push(0.0);
            for p in fault_shares(&addrs, &touch) {
                v.push(v.last().copied().unwrap_or(0.0) + p * penalty_ms);
            }
            v
        })
        .collect();
    let base_runs = starts.iter().filter(|&&s| s).count() as u64;
    let m = Model {
        p,
        starts,
        prefix,
        bases: classes.iter().map(|c| c.base_ms).collect(),
        base_runs,
    };
    let counts: Vec<u32> = addrs
        .iter()
        .map(|a| profile.counts.get(a).copied().unwrap_or(0))
        .collect();
    let mut slow: Vec<bool> = counts.iter().map(|&c| c == 0).collect();
    let cost_all_fast = m.cost(&m.totals(&vec![false; addrs.len()]));
    let mut cur = m.totals(&slow);
    // TOSS's bins, lower counts first: most memory per unit of slowdown
    let mut bins: BTreeMap<u32, (u64, bool)> = BTreeMap::new();
    for &c in &counts {
        bins.entry(c).or_insert((0, c == 0)).0 += 1;
    }
    for (&c, (_, moved)) in bins.iter_mut().filter(|(c, _)| **c != 0) {
        let trial: Vec<bool> = slow
            .iter()
            .zip(&counts)
            .map(|(&s, &n)| s || n == c)
            .collect();
        let next = m.totals(&trial);
        if m.better(&cur, &next) && m.slowdown(&next) <= p.max_slowdown {
            (slow, cur, *moved) = (trial, next, true);
        }
    }
    cur = smooth(&m, &mut slow, cur);
    // the greedy steps can stop short (past the bound they merge runs into
    // whichever tier is nearer): smoothed from all-slow too, the better
    // of the two stands
    let mut all_slow = vec![true; addrs.len()];
    let start = m.totals(&all_slow);
    let from_slow = smooth(&m, &mut all_slow, start);
    if m.better(&cur, &from_slow) {
        (slow, cur) = (all_slow, from_slow);
    }
    let mut tier = HashMap::with_capacity(addrs.len());
    let mut slow_in_bin: BTreeMap<u32, u64> = BTreeMap::new();
    for ((&a, &s), &c) in addrs.iter().zip(&slow).zip(&counts) {
        tier.insert(a, if s { TierKind::Slow } else { TierKind::Fast });
        *slow_in_bin.entry(c).or_default() += u64::from(s);
    }
    let bins = bins
        .iter()
        .map(|(&c, &(pages, moved))| BinDecision {
            accesses: c.min(profile.epochs),
            pages,
            slow: moved,
            slow_pages: slow_in_bin.get(&c).copied().unwrap_or(0),
        })
        .collect();
    Placement {
        tier,
        bins,
        est_slowdown: m.slowdown(&cur),
        cost: m.cost(&cur),
        cost_all_fast,
        extra_mappings: cur.runs.saturating_sub(m.base_runs),
    }
}

/// Pages the kernel maps with a read fault on a cached file page (its
/// fault-around window, 64 KiB by default): touching one page of a window
/// brings its neighbours along, so a window costs one fault, not one per page.
const FAULT_AROUND_PAGES: u64 = 16;

/// Each page's share of its tier's faults: a fault-around window is first
/// touched with the probability of its most touched page, and that fault is
/// shared by the window's touched pages (so moving part of a window moves
/// its part of the fault).
fn fault_shares(addrs: &[u64], touch: &[f64]) -> Vec<f64> {
    let window = |a: u64| a / (FAULT_AROUND_PAGES * PAGE_BYTES);
    let mut out = vec![0.0; addrs.len()];
    let mut lo = 0;
    while lo < addrs.len() {
        let w = window(addrs[lo]);
        let hi = lo + addrs[lo..].iter().take_while(|&&a| window(a) == w).count();
        let touched = touch[lo..hi].iter().filter(|&&p| p > 0.0).count();
        let first = touch[lo..hi].iter().copied().fold(0.0, f64::max);
        for i in lo..hi {
            if touch[i] > 0.0 {
                out[i] = first / touched as f64;
            }
        }
        lo = hi;
    }
    out
}

/// A run of pages on one tier inside one mapping stretch.
struct Run {
    lo: usize,
    hi: usize,
    slow: bool,
    /// runs of the other tier beside it in the same stretch (0-2): the
    /// mappings moving it across saves
    neighbours: u64,
}

fn runs_of(m: &Model<'_>, slow: &[bool]) -> Vec<Run> {
    let mut out: Vec<Run> = Vec::new();
    for (i, &s) in slow.iter().enumerate() {
        if !m.starts[i] && s == slow[i - 1] {
            if let Some(r) = out.last_mut() {
                r.hi = i + 1;
            }
            continue;
        }
        let joined = !m.starts[i];
        if let (true, Some(prev)) = (joined, out.last_mut()) {
            prev.neighbours += 1;
        }
        out.push(Run {
            lo: i,
            hi: i + 1,
            slow: s,
            neighbours: u64::from(joined),
        });
    }
    out
}

/// What moving one run across changes.
struct Move {
    run: usize,
    next: Totals,
}

fn moved(m: &Model<'_>, cur: &Totals, r: &Run) -> Totals {
    let len = (r.hi - r.lo) as u64;
    let sign = if r.slow { -1.0 } else { 1.0 };
    Totals {
        slow_pages: if r.slow {
            cur.slow_pages - len
        } else {
            cur.slow_pages + len
        },
        faults_ms: (0..cur.faults_ms.len())
            .map(|c| cur.faults_ms[c] + sign * m.faults(c, r.lo, r.hi))
            .collect(),
        runs: cur.runs - r.neighbours,
    }
}

/// Moves runs across (one beside runs of the other tier merges with them
/// into one mapping; one alone in its stretch moves whole) while that lowers
/// the cost within the bound, or, past the bound, the slowdown: each pass
/// takes the moves best first; a run whose neighbour moved waits for the
/// next pass.
fn smooth(m: &Model<'_>, slow: &mut [bool], mut cur: Totals) -> Totals {
    for _pass in 0..64 {
        let runs = runs_of(m, slow);
        let over = m.slowdown(&cur) > m.p.max_slowdown;
        let key = |t: &Totals| if over { m.slowdown(t) } else { m.cost(t) };
        let mut moves: Vec<Move> = (0..runs.len())
            .map(|k| Move {
                run: k,
                next: moved(m, &cur, &runs[k]),
            })
            .filter(|mv| m.better(&cur, &mv.next))
            .collect();
        moves.sort_by(|a, b| key(&a.next).total_cmp(&key(&b.next)));
        let mut stale = vec![false; runs.len()];
        let mut any = false;
        for mv in moves {
            let (k, r) = (mv.run, &runs[mv.run]);
            if stale[k] {
                continue;
            }
            // the totals moved since: the same run's change from where they are now
            let next = moved(m, &cur, r);
            if !m.better(&cur, &next) {
                continue;
            }
            slow[r.lo..r.hi].fill(!r.slow);
            cur = next;
            any = true;
            stale[k.saturating_sub(1)] = true;
            if let Some(s) = stale.get_mut(k + 1) {
                *s = true;
            }
        }
        if !any {
            break;
        }
    }
    cur
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The saved pages of a private file mapping (one page at 0x1000) and
    /// an anonymous one (8 pages from 0x10000).
    fn pages() -> Vec<Vec<u64>> {
        vec![vec![0x1000], (0..8).map(|i| 0x10000 + i * 0x1000).collect()]
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
            ..
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

#[cfg(test)]
mod mapping_tests {
    use super::*;

    /// One region of `n` contiguous pages from 0x100000, with `hot(i)`
    /// pages touched in every one of 4 epochs.
    fn region(n: u64, hot: impl Fn(u64) -> bool) -> (Vec<Vec<u64>>, AccessProfile) {
        let pages: Vec<u64> = (0..n).map(|i| 0x100000 + i * PAGE_BYTES).collect();
        let mut prof = AccessProfile {
            epochs: 4,
            ..Default::default()
        };
        for (i, &a) in pages.iter().enumerate() {
            if hot(i as u64) {
                prof.counts.insert(a, 4);
            }
        }
        (vec![pages], prof)
    }

    fn share(p: &Placement) -> f64 {
        let slow = p.tier.values().filter(|&&t| t == TierKind::Slow).count();
        slow as f64 / p.tier.len() as f64
    }

    /// A slow tier 1 µs dearer per first touch than DRAM (emulated pmem
    /// as a noisy probe may see it), on a function whose cold start is 10 ms.
    fn pmem_like(map_us: f64) -> CostParams {
        CostParams {
            slow_fault_us: 6.0,
            fast_fault_us: 5.0,
            map_us,
            base_ms: 10.0,
            ..Default::default()
        }
    }

    #[test]
    fn hot_pages_scattered_in_cold_stretches_go_slow_once_mappings_count() {
        // 8 lone hot pages in 1,024 cold ones, on a 0.1 ms cold start: slow
        // they add 8 µs (8%), which costs more than the memory they save
        let (l, prof) = region(1024, |i| i % 128 == 100);
        let fast = |map_us| CostParams {
            base_ms: 0.1,
            ..pmem_like(map_us)
        };
        let by_page = place(&l, &prof, &fast(0.0));
        assert_eq!(share(&by_page), 1016.0 / 1024.0);
        assert_eq!(by_page.extra_mappings, 16);
        // at 2.3 µs a mapping, a lone hot page costs less slow (1 µs) than
        // the two mappings it splits off
        let counted = place(&l, &prof, &fast(2.3));
        assert_eq!(share(&counted), 1.0);
        assert_eq!(counted.extra_mappings, 0);
        // the estimate is the slow first touches: 8 pages x 1 µs on 0.1 ms
        assert!(
            (counted.est_slowdown - 1.08).abs() < 1e-9,
            "{}",
            counted.est_slowdown
        );
    }

    #[test]
    fn long_hot_stretches_stay_fast_and_lone_cold_pages_inside_them_too() {
        // a hot stretch of 256 pages with every 16th page cold, then 256 cold
        let (l, prof) = region(512, |i| i < 256 && i % 16 != 5);
        let disk = |map_us| CostParams {
            slow_fault_us: 61.0,
            fast_fault_us: 1.0,
            base_ms: 1.0,
            ..pmem_like(map_us)
        };
        // by page, each cold page inside the hot stretch is mapped on its own
        assert_eq!(place(&l, &prof, &disk(0.0)).extra_mappings, 33);
        let pl = place(&l, &prof, &disk(2.3));
        // the hot stretch costs 240 µs slow: more than the mapping it saves
        assert_eq!(pl.tier[&0x100000], TierKind::Fast);
        // the cold pages inside it would save 16 pages' price for 32 mappings
        assert_eq!(pl.tier[&(0x100000 + 5 * PAGE_BYTES)], TierKind::Fast);
        assert_eq!(pl.tier[&(0x100000 + 300 * PAGE_BYTES)], TierKind::Slow);
        assert_eq!(pl.extra_mappings, 1);
        let bins = |slow| pl.bins.iter().find(|b| b.accesses == 0 && b.slow == slow);
        let cold = bins(true).unwrap();
        assert_eq!((cold.pages, cold.slow_pages), (272, 256));
    }

    #[test]
    fn mappings_count_towards_the_bound() {
        // every other page hot on a slow tier 60 µs dearer: no hot page may
        // go slow, and a page-by-page split would add 2,047 mappings
        // (4.7 ms on a 10 ms cold start)
        let (l, prof) = region(4096, |i| i % 2 == 0);
        let p = CostParams {
            slow_fault_us: 61.0,
            fast_fault_us: 1.0,
            ..pmem_like(2.3)
        };
        let pl = place(&l, &prof, &p);
        assert!(pl.est_slowdown <= p.max_slowdown, "{}", pl.est_slowdown);
        assert!(
            pl.extra_mappings * 2300 <= 1_000_000,
            "{}",
            pl.extra_mappings
        );
        // by page (mappings free) every cold page between two hot ones
        // would be mapped on its own
        let by_page = place(
            &l,
            &prof,
            &CostParams {
                map_us: 0.0,
                ..p.clone()
            },
        );
        assert_eq!(by_page.extra_mappings, 4095);
    }

    #[test]
    fn gaps_and_regions_are_mappings_of_their_own() {
        // two regions and a gap: 3 mappings all-fast, and a split along them adds none
        let a: Vec<u64> = (0..4).map(|i| 0x1000 + i * PAGE_BYTES).collect();
        let b: Vec<u64> = (0..4)
            .map(|i| 0x5000 + i * PAGE_BYTES)
            .chain((0..4).map(|i| 0x20000 + i * PAGE_BYTES))
            .collect();
        let mut prof = AccessProfile {
            epochs: 1,
            ..Default::default()
        };
        for &x in &b[4..] {
            prof.counts.insert(x, 1);
        }
        // the hot pages cost 240 µs slow: past the bound
        let p = CostParams {
            slow_fault_us: 61.0,
            fast_fault_us: 1.0,
            base_ms: 0.1,
            ..pmem_like(1e6)
        };
        let pl = place(&[a, b], &prof, &p);
        assert_eq!(pl.extra_mappings, 0);
        assert_eq!(pl.tier[&0x1000], TierKind::Slow);
        assert_eq!(pl.tier[&0x5000], TierKind::Slow);
        assert_eq!(pl.tier[&0x20000], TierKind::Fast);
    }
}
