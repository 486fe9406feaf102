//! The event-driven core: one thread, virtual time, deterministic.
//!
//! Events are arrivals (pulled lazily from the source, so memory never grows with
//! the trace), instance finishes and transfer completions (a heap holding at most
//! the running instances and pending transfers), and the policy's own deadlines
//! (keep-alive expiry). At equal times: finishes and transfers first (in the order
//! they were scheduled), then deadlines, then the arrival, so an instance that
//! finishes at t can serve an arrival at t.
//!
//! With a concurrency cap the next arrival waits until a running invocation ends,
//! as in the thesis' simulator; the wait is reported as queueing delay, apart from
//! start latency. The run ends when the input is exhausted and the last invocation
//! finishes; memory-time is integrated up to then.

use crate::error::{Result, SimError};
use crate::hist::Histogram;
use crate::source::{Item, Source};
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::Instant;
use thaw_error::fail;
use thaw_policy::{
    Action, FnCost, FnId, Footprint, InstanceId, Outcome, Policy, Start, Time, XferId,
};

/// USD per GB-hour of each tier.
#[derive(Clone, Copy, Debug, Serialize, PartialEq)]
pub struct Prices {
    pub ram: f64,
    pub disk: f64,
    pub net: f64,
}

impl Default for Prices {
    /// RAM: an r-class cloud VM's price per GB of memory (~$0.005/GB-h); disk: a
    /// provisioned SSD volume (~$0.08/GB-month); network tier: object storage
    /// (~$0.023/GB-month).
    fn default() -> Self {
        Prices {
            ram: 0.005,
            disk: 0.08 / 730.0,
            net: 0.023 / 730.0,
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// 0: no cap.
    pub max_concurrency: u32,
    /// An arrival the policy rejects while invocations run waits for the
    /// next one to end, and the arrivals behind it with it (as `thaw serve`
    /// queues it), instead of failing.
    pub wait_for_ram: bool,
    /// With `wait_for_ram`: how long a waiting arrival, with no invocation
    /// ending meanwhile, waits for running instances' RAM before idle
    /// instances are given up for it (`thaw serve` waits
    /// [`thaw_policy::MEMORY_PATIENCE`]); 0 gives them up at once.
    pub ram_patience: Time,
    /// A malformed line stops the run instead of being skipped.
    pub strict: bool,
    pub progress: bool,
    /// Keep (arrival, function, start or None when failed) of every invocation.
    /// Tests only: it grows with the trace.
    pub record_starts: bool,
    pub fn_costs: HashMap<String, FnCost>,
    /// What functions' instances hold in RAM when idle (default: what they declare).
    pub fn_footprints: HashMap<String, Footprint>,
    pub prices: Prices,
}

#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct StartCounts {
    pub warm: u64,
    pub lukewarm: u64,
    pub remote: u64,
    pub cold: u64,
}

#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct PerTier {
    pub ram: f64,
    pub disk: f64,
    pub net: f64,
}

#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct TransferCounts {
    pub checkpoints: u64,
    pub uploads: u64,
    pub downloads: u64,
    pub cancelled: u64,
    pub pending_at_end: u64,
}

/// What a run measured. Serialised as the JSON summary.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub invocations: u64,
    pub started: u64,
    pub failed: u64,
    pub starts: StartCounts,
    pub mean_start_ms: f64,
    pub p50_start_ms: f64,
    pub p99_start_ms: f64,
    pub p999_start_ms: f64,
    pub max_start_ms: f64,
    pub mean_start_by_type_ms: StartMeans,
    pub delayed: u64,
    pub mean_queue_delay_ms: f64,
    pub max_queue_delay_ms: f64,
    pub memory_gb_s: PerTier,
    pub cost_usd: PerTier,
    pub cost_usd_total: f64,
    pub peak_gb: PerTier,
    /// RAM held by running invocations at the busiest moment.
    pub peak_running_gb: f64,
    pub transfers: TransferCounts,
    pub functions: u64,
    pub malformed_lines: u64,
    pub sim_seconds: f64,
    pub wall_seconds: f64,
    pub invocations_per_second: f64,
    /// What makes the figures suspect (an input that yielded no invocations).
    pub warnings: Vec<String>,
    #[serde(skip)]
    pub hist: Histogram,
    #[serde(skip)]
    pub log: Vec<(Time, u32, Option<Start>)>,
}

#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct StartMeans {
    pub warm: f64,
    pub lukewarm: f64,
    pub remote: f64,
    pub cold: f64,
}

#[derive(PartialEq, Eq, Clone, Copy, Debug)]
enum Ev {
    Finish(u64),
    Xfer(u64),
}

impl Ev {
    /// (kind bit, id): the heap stores events as three plain words, so an
    /// entry is 24 bytes instead of 32.
    fn pack(self) -> (u64, u64) {
        match self {
            Ev::Finish(id) => (0, id),
            Ev::Xfer(id) => (1, id),
        }
    }

    fn unpack(kind: u64, id: u64) -> Ev {
        if kind & 1 == 0 {
            Ev::Finish(id)
        } else {
            Ev::Xfer(id)
        }
    }
}

struct Core<'a, P: Policy> {
    policy: &'a mut P,
    /// (time, schedule order << 1 | kind, id): unique in its first two words,
    /// so the order is time, then schedule order.
    heap: BinaryHeap<Reverse<(Time, u64, u64)>>,
    seq: u64,
    now: Time,
    actions: Vec<Action>,
    xfers: TransferCounts,
    mb_s: [f64; 3],
    peak_mb: [u64; 3],
    peak_running_mb: u64,
}

impl<P: Policy> Core<'_, P> {
    fn schedule(&mut self, t: Time, ev: Ev) {
        let (kind, id) = ev.pack();
        self.heap
            .push(Reverse((t.max(self.now), self.seq << 1 | kind, id)));
        self.seq += 1;
    }

    fn take_actions(&mut self) {
        for i in 0..self.actions.len() {
            match self.actions[i] {
                Action::Checkpoint { id, eta, .. } => {
                    self.xfers.checkpoints += 1;
                    self.schedule(eta, Ev::Xfer(id.0));
                }
                Action::Upload { id, eta, .. } => {
                    self.xfers.uploads += 1;
                    self.schedule(eta, Ev::Xfer(id.0));
                }
                Action::Download { id, eta, .. } => {
                    self.xfers.downloads += 1;
                    self.schedule(eta, Ev::Xfer(id.0));
                }
                Action::Cancel { .. } => self.xfers.cancelled += 1,
                Action::Kill { .. } | Action::DeleteDisk { .. } | Action::DeleteNet { .. } => {}
            }
        }
        self.actions.clear();
    }

    /// Moves the clock to `t`, integrating tier occupancy over the interval.
    fn advance_to(&mut self, t: Time) {
        let u = self.policy.usage();
        let dt = (t - self.now) as f64 / 1e6;
        self.mb_s[0] += u.ram_mb as f64 * dt;
        self.mb_s[1] += u.disk_mb as f64 * dt;
        self.mb_s[2] += u.net_mb as f64 * dt;
        self.now = t;
    }

    fn note_peaks(&mut self) {
        let u = self.policy.usage();
        for (p, v) in self.peak_mb.iter_mut().zip([u.ram_mb, u.disk_mb, u.net_mb]) {
            *p = (*p).max(v);
        }
        self.peak_running_mb = self.peak_running_mb.max(u.running_mb);
    }
}

/// Replays `src` through `policy`.
pub fn run<P: Policy>(src: &mut dyn Source, policy: &mut P, opts: &RunOptions) -> Result<Report> {
    let wall = Instant::now();
    let mut core = Core {
        policy,
        heap: BinaryHeap::new(),
        seq: 0,
        now: 0,
        actions: Vec::with_capacity(16),
        xfers: TransferCounts::default(),
        mb_s: [0.0; 3],
        peak_mb: [0; 3],
        peak_running_mb: 0,
    };
    let mut hist = Histogram::default();
    let mut counts = [0u64; 4];
    let mut sums = [0f64; 4];
    let (mut invocations, mut failed, mut malformed, mut running) = (0u64, 0u64, 0u64, 0u64);
    let (mut delayed, mut delay_sum, mut delay_max) = (0u64, 0f64, 0u64);
    let mut seen: Vec<bool> = Vec::new();
    let mut functions = 0u64;
    let mut log = Vec::new();
    let mut next = None;
    // the next arrival waits for RAM: no arrival until an invocation ends
    // (or its patience is over)
    let mut ram_wait = false;
    // while an arrival waits: when RAM was last given back (its arrival
    // first), as the daemon's waiting requests count their patience
    let mut ram_back: Option<Time> = None;
    // the waiting arrival was last refused patiently: its patience running
    // out is a reason to ask again (refused impatiently, only an ending
    // invocation is)
    let mut patient_wait = false;
    let mut eof = false;
    let mut last_t = 0;
    // A deadline the policy keeps reporting after being advanced to it is ignored
    // until something else happens (guards against a policy that never expires).
    let mut stuck: Option<Time> = None;
    let mut last_report = Instant::now();

    loop {
        if next.is_none() && !eof {
            match src.next_item()? {
                None => eof = true,
                Some(Item::Bad(b)) => {
                    malformed += 1;
                    if opts.strict {
                        fail!(SimError::Input, "malformed input: {b}");
                    }
                    if malformed <= 10 {
                        thaw_output::errln!("thaw sim: skipping malformed line: {b}");
                    }
                    continue;
                }
                Some(Item::Inv(inv)) => {
                    if inv.t < last_t {
                        fail!(
                            SimError::Stalled,
                            "input source produced unsorted arrivals ({} after {last_t})",
                            inv.t
                        );
                    }
                    last_t = inv.t;
                    next = Some(inv);
                }
            }
        }
        let can_start =
            !ram_wait && (opts.max_concurrency == 0 || running < opts.max_concurrency as u64);
        let t_arr = next.filter(|_| can_start).map(|i| i.t.max(core.now));
        let t_ev = core.heap.peek().map(|e| e.0 .0);
        let t_dl = core.policy.next_deadline().filter(|d| Some(*d) != stuck);
        // a waiting arrival's patience ends: it asks again, impatiently
        let t_pat = ram_back
            .filter(|_| ram_wait && patient_wait)
            .map(|b| (b + opts.ram_patience).max(core.now));
        if eof && next.is_none() && running == 0 {
            break;
        }
        let Some(t) = [t_ev, t_dl, t_arr, t_pat].into_iter().flatten().min() else {
            fail!(
                SimError::Stalled,
                "simulation stalled with {running} invocations running"
            );
        };
        core.advance_to(t);
        let due = if t_ev == Some(t) {
            core.heap.pop()
        } else {
            None
        };
        if let Some(Reverse((_, order, id))) = due {
            let ev = Ev::unpack(order, id);
            stuck = None;
            match ev {
                Ev::Finish(id) => {
                    running -= 1;
                    ram_wait = false;
                    ram_back = ram_back.map(|_| t);
                    core.policy.finish(t, InstanceId(id), &mut core.actions)?;
                }
                Ev::Xfer(id) => core.policy.transfer_done(t, XferId(id), &mut core.actions),
            }
        } else if t_dl == Some(t) {
            core.policy.advance(t, &mut core.actions);
            if core.policy.next_deadline() == Some(t) {
                stuck = Some(t);
            }
        } else if t_pat == Some(t) && t_arr.is_none() {
            ram_wait = false;
        } else if let Some(inv) = next.take() {
            stuck = None;
            invocations += 1;
            let wait = t - inv.t;
            if wait > 0 {
                delayed += 1;
                delay_sum += wait as f64;
                delay_max = delay_max.max(wait);
            }
            let fi = inv.f as usize;
            if fi >= seen.len() {
                seen.resize(fi + 1, false);
            }
            if !seen[fi] {
                seen[fi] = true;
                functions += 1;
                if let Some(c) = src.fn_name(inv.f).and_then(|n| opts.fn_costs.get(n)) {
                    core.policy.set_cost(FnId(inv.f), *c);
                }
                if let Some(fp) = src.fn_name(inv.f).and_then(|n| opts.fn_footprints.get(n)) {
                    core.policy
                        .set_footprint(FnId(inv.f), *fp, &mut core.actions);
                }
            }
            let back = *ram_back.get_or_insert(t);
            let patient = opts.wait_for_ram && t < back + opts.ram_patience;
            patient_wait = patient;
            let outcome = match patient {
                true => core
                    .policy
                    .arrive_queued(t, FnId(inv.f), inv.mem_mb, &mut core.actions),
                false => core
                    .policy
                    .arrive(t, FnId(inv.f), inv.mem_mb, &mut core.actions),
            };
            if matches!(outcome, Outcome::Started { .. }) || !opts.wait_for_ram || running == 0 {
                ram_back = None;
            }
            let start = match outcome {
                Outcome::Started {
                    start,
                    instance,
                    ready_at,
                } => {
                    let lat = ready_at - t;
                    hist.record(lat);
                    counts[start.index()] += 1;
                    sums[start.index()] += lat as f64;
                    running += 1;
                    core.schedule(ready_at + inv.dur, Ev::Finish(instance.0));
                    Some(start)
                }
                Outcome::Rejected if opts.wait_for_ram && running > 0 => {
                    // counted (and its delay) when it starts
                    invocations -= 1;
                    if wait > 0 {
                        delayed -= 1;
                        delay_sum -= wait as f64;
                    }
                    ram_wait = true;
                    next = Some(inv);
                    None
                }
                Outcome::Rejected => {
                    failed += 1;
                    None
                }
            };
            if opts.record_starts && !ram_wait {
                log.push((inv.t, inv.f, start));
            }
            if opts.progress && invocations % (1 << 18) == 0 && last_report.elapsed().as_secs() >= 2
            {
                last_report = Instant::now();
                let pct = src
                    .progress()
                    .map_or(String::new(), |p| format!(" ({:.1}%)", p * 100.0));
                thaw_output::errln!(
                    "thaw sim: {invocations} invocations, sim time {:.2} h{pct}, {:.2} M inv/s",
                    t as f64 / 3600e6,
                    invocations as f64 / wall.elapsed().as_secs_f64() / 1e6
                );
            }
        }
        core.take_actions();
        core.note_peaks();
    }

    let started = hist.len();
    let wall_s = wall.elapsed().as_secs_f64();
    let ms = |us: f64| us / 1000.0;
    let mean_of = |i: usize| {
        if counts[i] > 0 {
            ms(sums[i] / counts[i] as f64)
        } else {
            0.0
        }
    };
    let gb_s = PerTier {
        ram: core.mb_s[0] / 1024.0,
        disk: core.mb_s[1] / 1024.0,
        net: core.mb_s[2] / 1024.0,
    };
    let cost = PerTier {
        ram: gb_s.ram / 3600.0 * opts.prices.ram,
        disk: gb_s.disk / 3600.0 * opts.prices.disk,
        net: gb_s.net / 3600.0 * opts.prices.net,
    };
    core.xfers.pending_at_end = core.heap.len() as u64;
    Ok(Report {
        invocations,
        started,
        failed,
        starts: StartCounts {
            warm: counts[0],
            lukewarm: counts[1],
            remote: counts[2],
            cold: counts[3],
        },
        mean_start_ms: if started > 0 {
            ms(sums.iter().sum::<f64>() / started as f64)
        } else {
            0.0
        },
        p50_start_ms: ms(hist.quantile(0.5)),
        p99_start_ms: ms(hist.quantile(0.99)),
        p999_start_ms: ms(hist.quantile(0.999)),
        max_start_ms: ms(hist.max()),
        mean_start_by_type_ms: StartMeans {
            warm: mean_of(0),
            lukewarm: mean_of(1),
            remote: mean_of(2),
            cold: mean_of(3),
        },
        delayed,
        mean_queue_delay_ms: if invocations > 0 {
            ms(delay_sum / invocations as f64)
        } else {
            0.0
        },
        max_queue_delay_ms: ms(delay_max as f64),
        memory_gb_s: gb_s,
        cost_usd_total: cost.ram + cost.disk + cost.net,
        cost_usd: cost,
        peak_gb: PerTier {
            ram: core.peak_mb[0] as f64 / 1024.0,
            disk: core.peak_mb[1] as f64 / 1024.0,
            net: core.peak_mb[2] as f64 / 1024.0,
        },
        peak_running_gb: core.peak_running_mb as f64 / 1024.0,
        transfers: core.xfers,
        functions,
        malformed_lines: malformed,
        sim_seconds: core.now as f64 / 1e6,
        wall_seconds: wall_s,
        invocations_per_second: invocations as f64 / wall_s.max(1e-9),
        warnings: if invocations == 0 {
            vec![format!(
                "the input yielded no invocations ({malformed} malformed lines): every figure is empty"
            )]
        } else {
            Vec::new()
        },
        hist,
        log,
    })
}
