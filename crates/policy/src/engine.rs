//! The one engine behind every named policy.
//!
//! RAM holds running instances, idle instances (the RAM cache) and instances being
//! checkpointed. Below it, when the policy is tiered, a disk tier and a network tier
//! hold snapshots, each in LRU order. Transfers are modelled as serial queues per
//! direction (disk read, disk write, network down, network up); a queue's "busy
//! until" time is what the start-type estimate adds to the transfer time, as in the
//! thesis' "lowest estimated latency given queued transfers".
//!
//! What an instance is charged depends on its state: a running (or
//! checkpointing) instance holds its declared memory, its limit, so a burst
//! cannot promise more than RAM; an idle one holds what it was measured to
//! hold on its own (its private pages, [`Engine::measured`]), or its
//! function's footprint until it is measured ([`Policy::set_footprint`]).
//! The pages a function's instances share (its snapshot image) are charged
//! once, while any of its instances is in RAM.

use crate::list::{Links, List};
use crate::{
    index_u32, Action, Config, FnCost, FnId, Footprint, InstanceId, Outcome, Policy, PolicyError,
    PolicyKind, Start, Time, Usage, XferId,
};
use std::collections::{BTreeSet, HashMap, VecDeque};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    Running,
    Idle,
    Writing,
    Free,
}

#[derive(Clone, Copy, Debug)]
struct Inst {
    f: u32,
    /// Declared memory: charged while running or being checkpointed.
    mem: u32,
    /// What the instance is charged now (`mem`, or its idle charge).
    held: u32,
    /// Private memory last measured, if it was.
    measured: Option<u32>,
    gen: u32,
    state: State,
    /// When the instance became idle (LRU order and keep-alive expiry).
    since: Time,
    /// Greedy-dual priority as ordered f64 bits (priorities are never negative).
    gd_key: u64,
}

const ON_DISK: u8 = 1;
const DISK_PENDING: u8 = 2;
const ON_NET: u8 = 4;
const NET_PENDING: u8 = 8;

#[derive(Clone, Copy, Debug)]
struct Func {
    /// This function's idle instances, most recently idle first (reused first).
    idle: List,
    /// Instances in RAM in any state; greedy-dual forgets frequency at zero.
    live: u32,
    /// Those of them running or being checkpointed: while there are any,
    /// the function's shared pages cannot be given up.
    pinned: u32,
    freq: u32,
    /// Size of the snapshot on disk or network.
    snap_mb: u32,
    flags: u8,
    /// What an idle instance holds until it is measured (None: its
    /// declared memory); the last measure of any of its instances.
    idle_mb: Option<u32>,
    /// Pages its instances share, charged once while any is in RAM.
    shared_mb: u32,
    /// Index into `Engine::costs` (0: the configured default). Kept out of line
    /// so a function's record stays small: the simulator touches one per event.
    cost: u32,
}

/// The tier below RAM a snapshot is on (see [`Engine::set_snapshot`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnapshotLevel {
    Disk,
    Net,
}

#[derive(Clone, Copy, Debug)]
enum Pending {
    Checkpoint { slot: u32 },
    Download { f: u32 },
    Upload { f: u32 },
}

const DISK_READ: usize = 0;
const DISK_WRITE: usize = 1;
const NET_DOWN: usize = 2;
const NET_UP: usize = 3;

/// See the crate documentation; build one with [`Engine::new`].
pub struct Engine {
    cfg: Config,
    now: Time,
    insts: Vec<Inst>,
    free_slots: Vec<u32>,
    idle_links: Links,
    idle_lru: List,
    fn_links: Links,
    funcs: Vec<Func>,
    /// Distinct per-function costs; `costs[0]` is `cfg.cost`.
    costs: Vec<FnCost>,
    disk_links: Links,
    disk_lru: List,
    net_links: Links,
    net_lru: List,
    gd: BTreeSet<(u64, u32)>,
    gd_clock: f64,
    /// Pending checkpoints in issue order; pressure cancels from the back.
    writes: VecDeque<(XferId, Time)>,
    pending: HashMap<XferId, Pending>,
    next_xfer: u64,
    busy: [Time; 4],
    us_per_mb: [f64; 4],
    idle_limit_mb: u64,
    usage: Usage,
    /// Shared pages of functions whose instances are all idle: what giving
    /// up every idle instance would free besides their own memory.
    idle_shared_mb: u64,
}

impl Engine {
    pub fn new(cfg: Config) -> Result<Engine, PolicyError> {
        cfg.validate()?;
        let default_cost = cfg.cost;
        let per = |mb_s: f64| 1e6 / mb_s;
        Ok(Engine {
            us_per_mb: [
                per(cfg.disk_read_mb_s),
                per(cfg.disk_write_mb_s),
                per(cfg.net_mb_s),
                per(cfg.net_mb_s),
            ],
            // saturating: a threshold below 0 leaves no idle room
            #[allow(clippy::cast_sign_loss, clippy::cast_possible_truncation)]
            idle_limit_mb: (cfg.ram_mb as f64 * cfg.threshold).floor() as u64,
            cfg,
            now: 0,
            insts: Vec::new(),
            free_slots: Vec::new(),
            idle_links: Links::default(),
            idle_lru: List::default(),
            fn_links: Links::default(),
            funcs: Vec::new(),
            costs: vec![default_cost],
            disk_links: Links::default(),
            disk_lru: List::default(),
            net_links: Links::default(),
            net_lru: List::default(),
            gd: BTreeSet::new(),
            gd_clock: 0.0,
            writes: VecDeque::new(),
            pending: HashMap::new(),
            next_xfer: 0,
            busy: [0; 4],
            usage: Usage::default(),
            idle_shared_mb: 0,
        })
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Forgets a running or idle instance that is gone without the policy
    /// asking (it crashed, timed out, or its function was removed), returning
    /// its RAM. Stale or unknown ids are an error.
    pub fn discard(&mut self, now: Time, instance: InstanceId) -> Result<(), PolicyError> {
        self.tick(now);
        let (slot, gen) = instance.slot_and_gen();
        match self.insts.get(slot as usize) {
            Some(i) if i.gen == gen && i.state == State::Idle => self.unidle(slot),
            Some(i) if i.gen == gen && i.state == State::Running => {}
            _ => return Err(PolicyError::NotRunning(instance)),
        }
        self.release(slot);
        Ok(())
    }

    /// Like [`Policy::arrive`], but never reuses an idle instance: a new
    /// instance starts (experiments that must measure a cold path).
    pub fn arrive_skipping_warm(
        &mut self,
        now: Time,
        f: FnId,
        mem_mb: u32,
        out: &mut Vec<Action>,
    ) -> Outcome {
        self.arrive_inner(now, f, mem_mb, false, false, out)
    }

    /// [`Policy::arrive_queued`], or with `reuse_idle` false the same
    /// skipping warm instances (as [`Engine::arrive_skipping_warm`]).
    pub fn arrive_patiently(
        &mut self,
        now: Time,
        f: FnId,
        mem_mb: u32,
        reuse_idle: bool,
        out: &mut Vec<Action>,
    ) -> Outcome {
        self.arrive_inner(now, f, mem_mb, reuse_idle, true, out)
    }

    /// `patient`: rather than give idle instances up for RAM that running
    /// instances will give back, reject (see [`Engine::arrive_patiently`]).
    fn arrive_inner(
        &mut self,
        now: Time,
        f: FnId,
        mem_mb: u32,
        reuse_idle: bool,
        patient: bool,
        out: &mut Vec<Action>,
    ) -> Outcome {
        let now = self.tick(now);
        self.expire(now, out);
        let fi = self.ensure_fn(f);
        self.funcs[fi].freq = self.funcs[fi].freq.saturating_add(1);
        if let Some(slot) = self.funcs[fi].idle.front().filter(|_| reuse_idle) {
            // running, it holds its declared memory again: room for that
            // first (without giving this instance up), else it stays idle
            self.unidle(slot);
            self.pin(fi, true);
            let inst = self.insts[slot as usize];
            self.usage.idle_mb -= inst.held as u64;
            self.usage.ram_mb -= inst.held as u64;
            if !self.make_room(inst.mem as u64, patient, out) {
                self.pin(fi, false);
                // idle as it was, not charged a footprint learnt since
                self.idle_holding(slot, inst.held);
                return Outcome::Rejected;
            }
            self.usage.running_mb += inst.mem as u64;
            self.usage.ram_mb += inst.mem as u64;
            let i = &mut self.insts[slot as usize];
            i.state = State::Running;
            i.held = i.mem;
            return Outcome::Started {
                start: Start::Warm,
                instance: self.id_of(slot),
                ready_at: now + self.costs[self.funcs[fi].cost as usize].warm_us,
            };
        }
        // the function's shared pages are needed too if it has nothing in
        // RAM, which making room may have just caused
        loop {
            let need = mem_mb as u64 + self.shared_need(fi);
            if !self.make_room(need, patient, out) {
                return Outcome::Rejected;
            }
            if need == mem_mb as u64 + self.shared_need(fi) {
                break;
            }
        }
        let func = self.funcs[fi];
        let c = self.cost(&func);
        let mut best = if self.cfg.deployed_snapshots {
            (Start::Lukewarm, c.restore_disk_us, None)
        } else {
            (Start::Cold, c.cold_us, None)
        };
        // Strictly faster than the current best, as the thesis: ties go to cold,
        // then to the disk.
        let tiers = [
            (ON_DISK, DISK_READ, Start::Lukewarm, c.restore_disk_us),
            (ON_NET, NET_DOWN, Start::Remote, c.restore_net_us),
        ];
        for (flag, q, start, restore) in tiers {
            if func.flags & flag != 0 {
                let wait = self.busy[q].saturating_sub(now);
                let lat = wait + self.xfer_us(func.snap_mb, q) + restore;
                if lat < best.1 {
                    best = (start, lat, Some(q));
                }
            }
        }
        match best.2 {
            Some(DISK_READ) => {
                self.enqueue(DISK_READ, self.xfer_us(func.snap_mb, DISK_READ));
                self.disk_links.touch(&mut self.disk_lru, index_u32(fi));
            }
            Some(q) => {
                self.enqueue(q, self.xfer_us(func.snap_mb, q));
                self.net_links.touch(&mut self.net_lru, index_u32(fi));
            }
            None => {}
        }
        let slot = self.alloc(index_u32(fi), mem_mb);
        self.usage.running_mb += mem_mb as u64;
        self.usage.ram_mb += mem_mb as u64;
        self.pin(fi, true);
        self.add_live(fi);
        Outcome::Started {
            start: best.0,
            instance: self.id_of(slot),
            ready_at: now + best.1,
        }
    }

    /// Tells the policy where the caller holds a snapshot of `f` that the
    /// policy did not ask for (a deploy wrote it), replacing what it knew:
    /// `Some(level)` puts it at the front of that level's LRU (spilling
    /// others if the level is full: the actions go to `out`), `None` forgets
    /// every copy (the function is gone). Transfers already issued for `f`
    /// still complete as usual.
    pub fn set_snapshot(
        &mut self,
        now: Time,
        f: FnId,
        snap_mb: u32,
        level: Option<SnapshotLevel>,
        out: &mut Vec<Action>,
    ) {
        self.tick(now);
        let fi = self.ensure_fn(f);
        let old = self.funcs[fi];
        if old.flags & ON_DISK != 0 {
            self.disk_links.remove(&mut self.disk_lru, index_u32(fi));
            self.usage.disk_mb -= old.snap_mb as u64;
        }
        if old.flags & ON_NET != 0 {
            self.net_links.remove(&mut self.net_lru, index_u32(fi));
            self.usage.net_mb -= old.snap_mb as u64;
        }
        let func = &mut self.funcs[fi];
        func.flags &= !(ON_DISK | ON_NET);
        func.snap_mb = snap_mb;
        match level {
            Some(SnapshotLevel::Disk) => self.disk_insert(fi, out),
            Some(SnapshotLevel::Net) => self.net_insert(fi, out),
            None => {}
        }
    }

    /// `instance` was measured to hold `private_mb` on its own: what it is
    /// charged while idle from now on (running, it keeps its declared
    /// memory), and its function's footprint for instances not measured
    /// yet. An idle instance that grew past the budget makes room (the
    /// actions go to `out`). Stale or unknown ids are an error.
    pub fn measured(
        &mut self,
        now: Time,
        instance: InstanceId,
        private_mb: u32,
        out: &mut Vec<Action>,
    ) -> Result<(), PolicyError> {
        self.tick(now);
        let (slot, gen) = instance.slot_and_gen();
        let inst = match self.insts.get(slot as usize) {
            Some(i) if i.gen == gen && matches!(i.state, State::Running | State::Idle) => *i,
            _ => return Err(PolicyError::NotRunning(instance)),
        };
        self.funcs[inst.f as usize].idle_mb = Some(private_mb);
        self.insts[slot as usize].measured = Some(private_mb);
        if inst.state == State::Idle {
            self.insts[slot as usize].held = private_mb;
            let (old, new) = (inst.held as u64, private_mb as u64);
            self.usage.idle_mb = self.usage.idle_mb - old + new;
            self.usage.ram_mb = self.usage.ram_mb - old + new;
            self.make_room(0, false, out);
        }
        Ok(())
    }

    /// Pressure the budget does not see (the kernel reports memory stalls,
    /// or the node holds its most instances): idle instances given up in
    /// the policy's order until `mb` of the RAM charged is freed or none is
    /// left idle (`mb` = 1 gives up one). Returns (instances, MiB) freed.
    pub fn shed_idle(&mut self, now: Time, mb: u64, out: &mut Vec<Action>) -> (usize, u64) {
        self.tick(now);
        let before = self.usage.ram_mb;
        let mut killed = 0;
        while before.saturating_sub(self.usage.ram_mb) < mb {
            let Some(v) = self.victim() else { break };
            self.kill_idle(v, out);
            killed += 1;
        }
        (killed, before.saturating_sub(self.usage.ram_mb))
    }

    /// Number of transfers issued and not yet done or cancelled.
    pub fn pending_transfers(&self) -> usize {
        self.pending.len()
    }

    fn tick(&mut self, now: Time) -> Time {
        // A caller's clock that steps back must not corrupt queue estimates.
        self.now = self.now.max(now);
        self.now
    }

    fn ensure_fn(&mut self, f: FnId) -> usize {
        let fi = f.0 as usize;
        if fi >= self.funcs.len() {
            let blank = Func {
                idle: List::default(),
                live: 0,
                pinned: 0,
                freq: 0,
                snap_mb: 0,
                flags: 0,
                idle_mb: None,
                shared_mb: 0,
                cost: 0,
            };
            self.funcs.resize(fi + 1, blank);
            self.disk_links.ensure(fi + 1);
            self.net_links.ensure(fi + 1);
        }
        fi
    }

    // saturating: rates are positive, a bad one costs 0 rather than wrapping
    #[allow(clippy::cast_sign_loss, clippy::cast_possible_truncation)]
    fn xfer_us(&self, mb: u32, q: usize) -> Time {
        (mb as f64 * self.us_per_mb[q]).round() as Time
    }

    /// Appends a job of `dur` to queue `q`, returning when it ends.
    fn enqueue(&mut self, q: usize, dur: Time) -> Time {
        let end = self.busy[q].max(self.now) + dur;
        self.busy[q] = end;
        end
    }

    fn new_xfer(&mut self, p: Pending) -> XferId {
        let id = XferId(self.next_xfer);
        self.next_xfer += 1;
        self.pending.insert(id, p);
        id
    }

    fn id_of(&self, slot: u32) -> InstanceId {
        InstanceId(((self.insts[slot as usize].gen as u64) << 32) | slot as u64)
    }

    fn alloc(&mut self, f: u32, mem: u32) -> u32 {
        let inst = Inst {
            f,
            mem,
            held: mem,
            measured: None,
            gen: 0,
            state: State::Running,
            since: self.now,
            gd_key: 0,
        };
        match self.free_slots.pop() {
            Some(s) => {
                let gen = self.insts[s as usize].gen;
                self.insts[s as usize] = Inst { gen, ..inst };
                s
            }
            None => {
                self.insts.push(inst);
                let n = self.insts.len();
                self.idle_links.ensure(n);
                self.fn_links.ensure(n);
                index_u32(n - 1)
            }
        }
    }

    /// Returns an instance's RAM, whatever state it was in.
    fn release(&mut self, slot: u32) {
        let inst = self.insts[slot as usize];
        let held = inst.held as u64;
        match inst.state {
            State::Running => self.usage.running_mb -= held,
            State::Idle => self.usage.idle_mb -= held,
            State::Writing => self.usage.writing_mb -= held,
            State::Free => return,
        }
        self.usage.ram_mb -= held;
        let fi = inst.f as usize;
        if inst.state != State::Idle {
            self.pin(fi, false);
        }
        self.funcs[fi].live -= 1;
        if self.funcs[fi].live == 0 {
            self.funcs[fi].freq = 0;
            let shared = self.funcs[fi].shared_mb as u64;
            self.usage.shared_mb -= shared;
            self.usage.ram_mb -= shared;
            self.idle_shared_mb -= shared;
        }
        let i = &mut self.insts[slot as usize];
        i.state = State::Free;
        i.gen = i.gen.wrapping_add(1);
        self.free_slots.push(slot);
    }

    /// One more instance of function `fi` in RAM (the first brings its
    /// shared pages).
    fn add_live(&mut self, fi: usize) {
        let func = self.funcs[fi];
        if func.live == 0 {
            let shared = func.shared_mb as u64;
            self.usage.shared_mb += shared;
            self.usage.ram_mb += shared;
            if func.pinned == 0 {
                self.idle_shared_mb += shared;
            }
        }
        self.funcs[fi].live += 1;
    }

    /// One more (`up`) or one fewer instance of `fi` that cannot be given
    /// up; its shared pages become freeable when the last one goes.
    fn pin(&mut self, fi: usize, up: bool) {
        let func = &mut self.funcs[fi];
        let shared = func.shared_mb as u64;
        if up {
            if func.pinned == 0 && func.live > 0 {
                self.idle_shared_mb -= shared;
            }
            func.pinned += 1;
        } else {
            func.pinned -= 1;
            if func.pinned == 0 && func.live > 0 {
                self.idle_shared_mb += shared;
            }
        }
    }

    /// The shared pages a new instance of `fi` brings.
    fn shared_need(&self, fi: usize) -> u64 {
        match self.funcs[fi].live {
            0 => self.funcs[fi].shared_mb as u64,
            _ => 0,
        }
    }

    /// Makes an uncharged instance (running once) idle, charged what it
    /// was measured to hold, else its function's footprint.
    fn make_idle(&mut self, slot: u32) {
        let i = self.insts[slot as usize];
        let footprint = self.funcs[i.f as usize].idle_mb;
        self.idle_holding(slot, i.measured.or(footprint).unwrap_or(i.mem));
    }

    /// [`Engine::make_idle`] charging `held`.
    fn idle_holding(&mut self, slot: u32, held: u32) {
        self.insts[slot as usize].held = held;
        let inst = self.insts[slot as usize];
        let fi = inst.f as usize;
        self.idle_links.push_front(&mut self.idle_lru, slot);
        self.fn_links.push_front(&mut self.funcs[fi].idle, slot);
        if self.cfg.kind.greedy_dual() {
            let func = self.funcs[fi];
            let miss_us = self.miss_cost_us(&func);
            let prio = self.gd_clock
                + func.freq as f64 * (miss_us as f64 / 1000.0) / inst.held.max(1) as f64;
            let key = prio.to_bits();
            self.insts[slot as usize].gd_key = key;
            self.gd.insert((key, slot));
        }
        self.usage.idle_mb += inst.held as u64;
        self.usage.ram_mb += inst.held as u64;
        self.insts[slot as usize].state = State::Idle;
    }

    /// Takes an idle instance out of every idle order (it stays in RAM).
    fn unidle(&mut self, slot: u32) {
        let inst = self.insts[slot as usize];
        self.idle_links.remove(&mut self.idle_lru, slot);
        self.fn_links
            .remove(&mut self.funcs[inst.f as usize].idle, slot);
        if self.cfg.kind.greedy_dual() {
            self.gd.remove(&(inst.gd_key, slot));
        }
    }

    /// What losing this function's last RAM instance costs at its next start:
    /// greedy-dual's "cost" term, aware of the tiers when there are any.
    fn cost(&self, func: &Func) -> FnCost {
        self.costs[func.cost as usize]
    }

    fn miss_cost_us(&self, func: &Func) -> Time {
        let c = self.cost(func);
        if self.cfg.deployed_snapshots {
            c.restore_disk_us
        } else if func.flags & ON_DISK != 0 {
            c.cold_us
                .min(c.restore_disk_us + self.xfer_us(func.snap_mb, DISK_READ))
        } else if func.flags & ON_NET != 0 {
            c.cold_us
                .min(c.restore_net_us + self.xfer_us(func.snap_mb, NET_DOWN))
        } else {
            c.cold_us
        }
    }

    /// The idle instance to give up next.
    fn victim(&mut self) -> Option<u32> {
        if self.cfg.kind.greedy_dual() {
            let &(key, slot) = self.gd.first()?;
            // Greedy-dual ages the cache: later entries start from the evicted priority.
            self.gd_clock = self.gd_clock.max(f64::from_bits(key));
            Some(slot)
        } else {
            self.idle_lru.back()
        }
    }

    fn kill_idle(&mut self, slot: u32, out: &mut Vec<Action>) {
        let id = self.id_of(slot);
        self.unidle(slot);
        self.release(slot);
        out.push(Action::Kill { instance: id });
    }

    fn cancel_last_write(&mut self, out: &mut Vec<Action>) -> bool {
        while let Some((id, _)) = self.writes.pop_back() {
            if let Some(Pending::Checkpoint { slot }) = self.pending.remove(&id) {
                let f = self.insts[slot as usize].f as usize;
                self.funcs[f].flags &= !DISK_PENDING;
                self.release(slot);
                out.push(Action::Cancel { id });
                // The queue now ends with the previous write (or is idle).
                self.busy[DISK_WRITE] = self.writes.back().map_or(self.now, |w| w.1.max(self.now));
                return true;
            }
        }
        false
    }

    /// Frees RAM for `need` MiB: pending writes first, then idle instances. Does
    /// nothing when even both would not be enough, or, `patient`, when the
    /// running instances will give back what is missing.
    fn make_room(&mut self, need: u64, patient: bool, out: &mut Vec<Action>) -> bool {
        let free = self.cfg.ram_mb.saturating_sub(self.usage.ram_mb);
        if free >= need && self.usage.ram_mb <= self.cfg.ram_mb {
            return true;
        }
        // a lower bound (cancelling a write may free its function's shared
        // pages too): the loop below never runs out of victims short of it
        let freeable = self.usage.writing_mb + self.usage.idle_mb + self.idle_shared_mb;
        let short = (self.usage.ram_mb + need).saturating_sub(self.cfg.ram_mb);
        if freeable < short || (patient && self.usage.running_mb >= short) {
            return false;
        }
        while self.cfg.ram_mb < self.usage.ram_mb + need {
            if self.cancel_last_write(out) {
                continue;
            }
            match self.victim() {
                Some(v) => self.kill_idle(v, out),
                None => return false,
            }
        }
        true
    }

    /// Tiered policies: move idle instances down until the RAM cache is under the
    /// threshold. Checkpoint only when no copy exists; pull from the network rather
    /// than checkpoint again.
    fn demote_over_threshold(&mut self, out: &mut Vec<Action>) {
        while self.usage.idle_mb > self.idle_limit_mb {
            let Some(slot) = self.victim() else { return };
            let inst = self.insts[slot as usize];
            let fi = inst.f as usize;
            let flags = self.funcs[fi].flags;
            let fits_disk = self.cfg.disk_mb > 0 && inst.mem as u64 <= self.cfg.disk_mb;
            if flags & (ON_DISK | DISK_PENDING) != 0 || !fits_disk || self.cfg.deployed_snapshots {
                if flags & ON_DISK != 0 {
                    self.disk_links.touch(&mut self.disk_lru, index_u32(fi));
                }
                self.kill_idle(slot, out);
            } else if flags & ON_NET != 0 {
                self.kill_idle(slot, out);
                let dur = self.xfer_us(self.funcs[fi].snap_mb, NET_DOWN);
                let eta = self.enqueue(NET_DOWN, dur);
                let id = self.new_xfer(Pending::Download { f: index_u32(fi) });
                self.funcs[fi].flags |= DISK_PENDING;
                out.push(Action::Download {
                    id,
                    f: FnId(index_u32(fi)),
                    eta,
                });
            } else {
                let instance = self.id_of(slot);
                self.unidle(slot);
                self.pin(fi, true);
                self.usage.idle_mb -= inst.held as u64;
                self.usage.writing_mb += inst.held as u64;
                self.insts[slot as usize].state = State::Writing;
                let func = &mut self.funcs[fi];
                func.flags |= DISK_PENDING;
                func.snap_mb = inst.mem;
                let func = self.funcs[fi];
                let dur = self.cost(&func).checkpoint_us + self.xfer_us(inst.mem, DISK_WRITE);
                let eta = self.enqueue(DISK_WRITE, dur);
                let id = self.new_xfer(Pending::Checkpoint { slot });
                self.writes.push_back((id, eta));
                out.push(Action::Checkpoint {
                    id,
                    instance,
                    f: FnId(index_u32(fi)),
                    eta,
                });
            }
        }
    }

    fn disk_insert(&mut self, fi: usize, out: &mut Vec<Action>) {
        let mb = self.funcs[fi].snap_mb as u64;
        if self.funcs[fi].flags & ON_DISK != 0 {
            self.disk_links.touch(&mut self.disk_lru, index_u32(fi));
            return;
        }
        if mb > self.cfg.disk_mb {
            out.push(Action::DeleteDisk {
                f: FnId(index_u32(fi)),
            });
            return;
        }
        while self.usage.disk_mb + mb > self.cfg.disk_mb {
            let Some(v) = self.disk_lru.back() else { break };
            self.spill(v as usize, out);
        }
        self.funcs[fi].flags |= ON_DISK;
        self.usage.disk_mb += mb;
        self.disk_links
            .push_front(&mut self.disk_lru, index_u32(fi));
    }

    /// Disk eviction: upload to the network unless a copy is (or will be) there.
    fn spill(&mut self, fi: usize, out: &mut Vec<Action>) {
        self.disk_links.remove(&mut self.disk_lru, index_u32(fi));
        let func = &mut self.funcs[fi];
        func.flags &= !ON_DISK;
        let mb = func.snap_mb;
        self.usage.disk_mb -= mb as u64;
        let f = FnId(index_u32(fi));
        let uploadable = mb as u64 <= self.cfg.net_mb;
        if func.flags & (ON_NET | NET_PENDING) == 0 && uploadable {
            func.flags |= NET_PENDING;
            let dur = self.xfer_us(mb, NET_UP);
            let eta = self.enqueue(NET_UP, dur);
            let id = self.new_xfer(Pending::Upload { f: index_u32(fi) });
            out.push(Action::Upload { id, f, eta });
        } else {
            out.push(Action::DeleteDisk { f });
        }
    }

    fn net_insert(&mut self, fi: usize, out: &mut Vec<Action>) {
        let mb = self.funcs[fi].snap_mb as u64;
        if self.funcs[fi].flags & ON_NET != 0 {
            self.net_links.touch(&mut self.net_lru, index_u32(fi));
            return;
        }
        if mb > self.cfg.net_mb {
            out.push(Action::DeleteNet {
                f: FnId(index_u32(fi)),
            });
            return;
        }
        while self.usage.net_mb + mb > self.cfg.net_mb {
            let Some(v) = self.net_lru.back() else { break };
            self.net_links.remove(&mut self.net_lru, v);
            let func = &mut self.funcs[v as usize];
            func.flags &= !ON_NET;
            self.usage.net_mb -= func.snap_mb as u64;
            out.push(Action::DeleteNet { f: FnId(v) });
        }
        self.funcs[fi].flags |= ON_NET;
        self.usage.net_mb += mb;
        self.net_links.push_front(&mut self.net_lru, index_u32(fi));
    }

    fn expire(&mut self, now: Time, out: &mut Vec<Action>) {
        if self.cfg.kind != PolicyKind::Ttl {
            return;
        }
        while let Some(t) = self.idle_lru.back() {
            if self.insts[t as usize].since + self.cfg.keep_alive_us > now {
                break;
            }
            self.kill_idle(t, out);
        }
    }
}

impl Policy for Engine {
    fn arrive(&mut self, now: Time, f: FnId, mem_mb: u32, out: &mut Vec<Action>) -> Outcome {
        self.arrive_inner(now, f, mem_mb, true, false, out)
    }

    fn arrive_queued(&mut self, now: Time, f: FnId, mem_mb: u32, out: &mut Vec<Action>) -> Outcome {
        self.arrive_patiently(now, f, mem_mb, true, out)
    }

    fn finish(
        &mut self,
        now: Time,
        instance: InstanceId,
        out: &mut Vec<Action>,
    ) -> Result<(), PolicyError> {
        let now = self.tick(now);
        let (slot, gen) = instance.slot_and_gen();
        match self.insts.get(slot as usize) {
            Some(i) if i.gen == gen && i.state == State::Running => {}
            _ => return Err(PolicyError::NotRunning(instance)),
        }
        let mem = self.insts[slot as usize].mem as u64;
        self.usage.running_mb -= mem;
        self.usage.ram_mb -= mem;
        self.pin(self.insts[slot as usize].f as usize, false);
        self.insts[slot as usize].since = now;
        self.make_idle(slot);
        // measured more than it was declared (its limit was raised, or the
        // estimate was off): back under the budget
        self.make_room(0, false, out);
        if self.cfg.kind.tiered() {
            self.demote_over_threshold(out);
        }
        self.expire(now, out);
        Ok(())
    }

    fn transfer_done(&mut self, now: Time, id: XferId, out: &mut Vec<Action>) {
        self.tick(now);
        let Some(p) = self.pending.remove(&id) else {
            return;
        };
        match p {
            Pending::Checkpoint { slot } => {
                if let Some(pos) = self.writes.iter().position(|w| w.0 == id) {
                    self.writes.remove(pos);
                }
                let fi = self.insts[slot as usize].f as usize;
                self.release(slot);
                self.funcs[fi].flags &= !DISK_PENDING;
                self.disk_insert(fi, out);
            }
            Pending::Download { f } => {
                self.funcs[f as usize].flags &= !DISK_PENDING;
                self.disk_insert(f as usize, out);
            }
            Pending::Upload { f } => {
                self.funcs[f as usize].flags &= !NET_PENDING;
                self.net_insert(f as usize, out);
            }
        }
    }

    fn advance(&mut self, now: Time, out: &mut Vec<Action>) {
        let now = self.tick(now);
        self.expire(now, out);
    }

    fn next_deadline(&self) -> Option<Time> {
        if self.cfg.kind != PolicyKind::Ttl {
            return None;
        }
        let t = self.idle_lru.back()?;
        Some(self.insts[t as usize].since + self.cfg.keep_alive_us)
    }

    fn usage(&self) -> Usage {
        self.usage
    }

    fn set_footprint(&mut self, f: FnId, fp: Footprint, out: &mut Vec<Action>) {
        let fi = self.ensure_fn(f);
        let func = &mut self.funcs[fi];
        func.idle_mb = fp.idle_mb;
        let old = std::mem::replace(&mut func.shared_mb, fp.shared_mb) as u64;
        if func.live > 0 {
            let new = fp.shared_mb as u64;
            if func.pinned == 0 {
                self.idle_shared_mb = self.idle_shared_mb - old + new;
            }
            self.usage.shared_mb = self.usage.shared_mb - old + new;
            self.usage.ram_mb = self.usage.ram_mb - old + new;
            self.make_room(0, false, out);
        }
    }

    fn set_cost(&mut self, f: FnId, cost: FnCost) {
        let fi = self.ensure_fn(f);
        let idx = self.funcs[fi].cost as usize;
        if idx == 0 {
            self.funcs[fi].cost = index_u32(self.costs.len());
            self.costs.push(cost);
        } else {
            self.costs[idx] = cost;
        }
    }
}
