//! Hand-computed event sequences for every policy, plus a property test that no
//! policy ever exceeds a capacity.
//!
//! Unless a test says otherwise: cold 250 ms, restore 100 ms, checkpoint 350 ms,
//! disk read 4096 MiB/s (100 MiB in 24 414 us), disk write 2048 MiB/s (100 MiB in
//! 48 828 us), network 1280 MiB/s (100 MiB in 78 125 us).

use proptest::prelude::*;
use thaw_policy::{
    Action, Config, Engine, FnId, Footprint, InstanceId, Outcome, Policy, PolicyKind,
    SnapshotLevel, Start, Time, XferId,
};

const S: Time = 1_000_000;
const A: FnId = FnId(0);
const B: FnId = FnId(1);
const C: FnId = FnId(2);
const D: FnId = FnId(3);

fn cfg(kind: PolicyKind, ram_mb: u64) -> Config {
    Config {
        ram_mb,
        disk_mb: 1000,
        net_mb: 100_000,
        threshold: 0.5,
        ..Config::thesis(kind)
    }
}

struct H {
    p: Engine,
    out: Vec<Action>,
}

impl H {
    fn new(c: Config) -> H {
        H {
            p: Engine::new(c).unwrap(),
            out: vec![],
        }
    }
    /// Arrives and returns (start, instance, start latency).
    fn go(&mut self, t: Time, f: FnId, mem: u32) -> (Start, InstanceId, Time) {
        self.out.clear();
        match self.p.arrive(t, f, mem, &mut self.out) {
            Outcome::Started {
                start,
                instance,
                ready_at,
            } => (start, instance, ready_at - t),
            Outcome::Rejected => panic!("rejected at {t}"),
        }
    }
    fn fin(&mut self, t: Time, i: InstanceId) {
        self.out.clear();
        self.p.finish(t, i, &mut self.out).unwrap();
    }
    fn done(&mut self, t: Time, id: XferId) {
        self.out.clear();
        self.p.transfer_done(t, id, &mut self.out);
    }
    /// The one transfer the last call issued, with its estimated end.
    fn xfer(&self) -> (XferId, Time) {
        let v: Vec<_> = self
            .out
            .iter()
            .filter_map(|a| match *a {
                Action::Checkpoint { id, eta, .. }
                | Action::Upload { id, eta, .. }
                | Action::Download { id, eta, .. } => Some((id, eta)),
                _ => None,
            })
            .collect();
        assert_eq!(v.len(), 1, "actions: {:?}", self.out);
        v[0]
    }
}

#[test]
fn lru_mem_evicts_least_recently_idle() {
    let mut h = H::new(cfg(PolicyKind::LruMem, 300));
    let mut seq = vec![];
    let (s, a, l) = h.go(0, A, 100);
    assert_eq!(l, 250_000);
    seq.push(s);
    h.fin(S, a);
    let (s, b, _) = h.go(2 * S, B, 100);
    seq.push(s);
    h.fin(3 * S, b);
    let (s, c, _) = h.go(4 * S, C, 100);
    seq.push(s);
    h.fin(5 * S, c);
    let (s, a2, l) = h.go(6 * S, A, 100);
    assert_eq!((a2, l), (a, 0), "warm start reuses the idle instance");
    seq.push(s);
    h.fin(7 * S, a2);
    // RAM full of idle A(7 s), B(3 s), C(5 s): D evicts B.
    let (s, d, _) = h.go(8 * S, D, 100);
    assert_eq!(h.out, vec![Action::Kill { instance: b }]);
    seq.push(s);
    h.fin(9 * S, d);
    let (s, _, _) = h.go(10 * S, B, 100);
    assert_eq!(h.out, vec![Action::Kill { instance: c }]);
    seq.push(s);
    use Start::*;
    assert_eq!(seq, vec![Cold, Cold, Cold, Warm, Cold, Cold]);
    assert_eq!(h.p.usage().ram_mb, 300);
    assert_eq!(h.p.usage().running_mb, 100);
}

#[test]
fn discard_returns_ram_of_running_and_idle_instances() {
    let mut h = H::new(cfg(PolicyKind::LruMem, 300));
    let (_, a, _) = h.go(0, A, 100);
    let (_, b, _) = h.go(0, B, 100);
    h.fin(S, b);
    h.p.discard(2 * S, a).unwrap();
    h.p.discard(2 * S, b).unwrap();
    assert_eq!(h.p.usage().ram_mb, 0);
    assert!(h.p.discard(3 * S, a).is_err(), "a discarded id is stale");
    // the discarded idle instance is not offered as a warm start
    let (s, _, _) = h.go(4 * S, B, 100);
    assert_eq!(s, Start::Cold);
}

#[test]
fn lru_mem_rejects_when_everything_runs() {
    let mut h = H::new(cfg(PolicyKind::LruMem, 250));
    h.go(0, A, 100);
    h.go(0, B, 100);
    let mut out = vec![];
    assert_eq!(h.p.arrive(0, C, 100, &mut out), Outcome::Rejected);
    assert!(out.is_empty(), "a rejection changes nothing");
    assert_eq!(h.p.arrive(0, C, 251, &mut out), Outcome::Rejected);
}

#[test]
fn ttl_expires_after_the_window() {
    let mut c = cfg(PolicyKind::Ttl, 1000);
    c.keep_alive_us = 10 * S;
    let mut h = H::new(c);
    let (s1, a, _) = h.go(0, A, 100);
    h.fin(S, a);
    let (s2, a, _) = h.go(5 * S, A, 100);
    h.fin(6 * S, a);
    assert_eq!(h.p.next_deadline(), Some(16 * S));
    h.out.clear();
    h.p.advance(16 * S - 1, &mut h.out);
    assert!(h.out.is_empty());
    h.p.advance(16 * S, &mut h.out);
    assert_eq!(h.out, vec![Action::Kill { instance: a }]);
    assert_eq!(h.p.next_deadline(), None);
    let (s3, _, _) = h.go(16 * S + 500_000, A, 100);
    assert_eq!(
        vec![s1, s2, s3],
        vec![Start::Cold, Start::Warm, Start::Cold]
    );
}

#[test]
fn ttl_still_respects_ram() {
    let mut c = cfg(PolicyKind::Ttl, 200);
    c.keep_alive_us = 100 * S;
    let mut h = H::new(c);
    let (_, a, _) = h.go(0, A, 100);
    h.fin(S, a);
    let (_, b, _) = h.go(2 * S, B, 100);
    h.fin(3 * S, b);
    let (s, _, _) = h.go(4 * S, C, 100);
    assert_eq!(s, Start::Cold);
    assert_eq!(h.out, vec![Action::Kill { instance: a }]);
    let (s, _, _) = h.go(5 * S, B, 100);
    assert_eq!(s, Start::Warm);
}

#[test]
fn greedy_dual_keeps_the_frequent_function() {
    let mut h = H::new(cfg(PolicyKind::GreedyDual, 200));
    // A runs three times, B once; B is idle more recently than A.
    for t in 0..3 {
        let (_, a, _) = h.go(t * S, A, 100);
        h.fin(t * S + S / 2, a);
    }
    let (_, b, _) = h.go(4 * S, B, 100);
    h.fin(5 * S, b);
    // LRU would drop A; greedy-dual drops B (freq 1 x 250 / 100 < 3 x 250 / 100).
    let (s, _, _) = h.go(6 * S, C, 100);
    assert_eq!(s, Start::Cold);
    assert_eq!(h.out, vec![Action::Kill { instance: b }]);
    let (s, _, _) = h.go(7 * S, A, 100);
    assert_eq!(s, Start::Warm);
}

#[test]
fn greedy_dual_prefers_to_drop_large_instances() {
    let mut h = H::new(cfg(PolicyKind::GreedyDual, 300));
    let (_, b, _) = h.go(0, B, 50);
    h.fin(S, b);
    let (_, a, _) = h.go(2 * S, A, 200);
    h.fin(3 * S, a);
    // Both invoked once; A's priority 250/200 < B's 250/50 although A is newer.
    let (_, _, _) = h.go(4 * S, C, 100);
    assert_eq!(h.out, vec![Action::Kill { instance: a }]);
}

/// The thesis' walk through the tiers: demote over the threshold by checkpointing,
/// lukewarm from disk, pressure cancels a pending write.
fn tiered_walk(kind: PolicyKind) {
    let mut h = H::new(cfg(kind, 300));
    let mut seq = vec![];
    let (s, a, _) = h.go(0, A, 100);
    seq.push(s);
    h.fin(S, a);
    assert!(
        h.out.is_empty(),
        "100 MiB idle is under the 150 MiB threshold"
    );
    let (s, b, _) = h.go(2 * S, B, 100);
    seq.push(s);
    h.fin(3 * S, b);
    // 200 MiB idle > 150: the LRU idle instance (A) is checkpointed.
    let (ck, eta) = h.xfer();
    assert_eq!(eta, 3 * S + 350_000 + 48_828);
    assert!(matches!(h.out[0], Action::Checkpoint { f: A, .. }));
    assert_eq!(h.p.usage().writing_mb, 100);
    h.done(eta, ck);
    assert_eq!(h.p.usage().disk_mb, 100);
    assert_eq!(h.p.usage().ram_mb, 100);
    let (s, a, lat) = h.go(5 * S, A, 100);
    assert_eq!(lat, 24_414 + 100_000);
    seq.push(s);
    h.fin(6 * S, a);
    // A and B idle again: B (idle since 3 s) is the LRU one and has no snapshot.
    let (ck_b, _) = h.xfer();
    assert!(matches!(h.out[0], Action::Checkpoint { f: B, .. }));
    // B arrives while its checkpoint is pending: RAM is full (A idle, B writing,
    // C running), so the pending write is dropped first.
    let (_, _, _) = h.go(6 * S + 1, C, 100);
    let (s, _, _) = h.go(6 * S + 2, B, 100);
    assert_eq!(h.out, vec![Action::Cancel { id: ck_b }]);
    seq.push(s);
    // The cancelled transfer's late completion is ignored.
    h.done(7 * S, ck_b);
    assert!(h.out.is_empty());
    assert_eq!(h.p.usage().disk_mb, 100);
    use Start::*;
    assert_eq!(seq, vec![Cold, Cold, Lukewarm, Cold]);
}

#[test]
fn snapshots_the_caller_placed_drive_starts_and_spill_when_full() {
    let mut h = H::new(Config {
        disk_mb: 150,
        ..cfg(PolicyKind::TieredLru, 300)
    });
    h.p.set_snapshot(0, A, 100, Some(SnapshotLevel::Disk), &mut h.out);
    assert!(h.out.is_empty());
    assert_eq!(h.p.usage().disk_mb, 100);
    // a second one does not fit the 150 MiB disk: the LRU one (A) goes up
    h.p.set_snapshot(0, B, 100, Some(SnapshotLevel::Disk), &mut h.out);
    let (up, _) = h.xfer();
    assert!(
        matches!(h.out[0], Action::Upload { f: A, .. }),
        "{:?}",
        h.out
    );
    assert_eq!(h.p.usage().disk_mb, 100);
    h.done(S, up);
    assert_eq!(h.p.usage().net_mb, 100);
    let (s, _, _) = h.go(2 * S, A, 100);
    assert_eq!(s, Start::Remote);
    let (s, _, _) = h.go(2 * S, B, 100);
    assert_eq!(s, Start::Lukewarm);
    // forgetting every copy: the next start is cold, the tiers are empty
    h.p.set_snapshot(3 * S, A, 100, None, &mut h.out);
    h.p.set_snapshot(3 * S, B, 100, None, &mut h.out);
    assert_eq!((h.p.usage().disk_mb, h.p.usage().net_mb), (0, 0));
    let (s, _, _) = h.go(4 * S, A, 100);
    assert_eq!(s, Start::Cold);
}

#[test]
fn tiered_lru_walk() {
    tiered_walk(PolicyKind::TieredLru);
}

#[test]
fn tiered_greedy_dual_walk() {
    // With one invocation each, greedy-dual ties fall back to the lower slot,
    // which here is also the LRU instance, so the walk is the same.
    tiered_walk(PolicyKind::TieredGreedyDual);
}

#[test]
fn tiered_lru_spills_disk_to_network_and_starts_remote() {
    let mut c = cfg(PolicyKind::TieredLru, 300);
    c.disk_mb = 100; // room for one snapshot
    c.threshold = 0.3; // 90 MiB: every idle instance is demoted
    let mut h = H::new(c);
    let (_, a, _) = h.go(0, A, 100);
    h.fin(S, a);
    let (ck, eta) = h.xfer();
    h.done(eta, ck);
    let (_, b, _) = h.go(2 * S, B, 100);
    h.fin(3 * S, b);
    let (ck, eta) = h.xfer();
    // B's snapshot lands: A is spilled to the network.
    h.done(eta, ck);
    let (up, up_eta) = h.xfer();
    assert!(matches!(h.out[0], Action::Upload { f: A, .. }));
    assert_eq!(up_eta, eta + 78_125);
    assert_eq!(h.p.usage().disk_mb, 100);
    h.done(up_eta, up);
    assert_eq!(h.p.usage().net_mb, 100);
    let (s, a, lat) = h.go(5 * S, A, 100);
    assert_eq!((s, lat), (Start::Remote, 78_125 + 100_000));
    let (s, b, lat) = h.go(5 * S, B, 100);
    assert_eq!((s, lat), (Start::Lukewarm, 124_414));
    // A finishes and is demoted again: it is on the network, not on disk, so the
    // policy pulls it down instead of checkpointing it again.
    h.fin(6 * S, a);
    assert!(matches!(
        h.out[..],
        [Action::Kill { .. }, Action::Download { f: A, .. }]
    ));
    let (dl, dl_eta) = h.xfer();
    h.fin(6 * S, b); // B's snapshot is on disk already: just killed
    assert!(matches!(h.out[..], [Action::Kill { .. }]));
    h.done(dl_eta, dl);
    // A lands on disk and B is spilled; B is already on the network? No: B was never
    // uploaded, so it goes up now.
    assert!(matches!(h.out[..], [Action::Upload { f: B, .. }]));
}

#[test]
fn lukewarm_estimate_waits_for_queued_reads() {
    let mut c = cfg(PolicyKind::TieredLru, 1000);
    c.disk_read_mb_s = 1000.0; // 100 MiB in 100 ms
    c.threshold = 0.05; // demote everything
    let mut h = H::new(c);
    for (t, f) in [(0, A), (S, B)] {
        let (_, i, _) = h.go(t, f, 100);
        h.fin(t + S / 2, i);
        let (ck, eta) = h.xfer();
        h.done(eta, ck);
    }
    assert_eq!(h.p.usage().disk_mb, 200);
    let (s1, _, l1) = h.go(10 * S, A, 100);
    let (s2, _, l2) = h.go(10 * S, B, 100);
    // The second read queues behind the first: 100 + 100 + 100 ms > 250 ms cold.
    assert_eq!((s1, l1), (Start::Lukewarm, 200_000));
    assert_eq!((s2, l2), (Start::Cold, 250_000));
}

#[test]
fn bad_calls_are_errors_not_panics() {
    let mut h = H::new(cfg(PolicyKind::TieredLru, 300));
    let (_, a, _) = h.go(0, A, 100);
    h.fin(S, a);
    let mut out = vec![];
    assert!(h.p.finish(2 * S, a, &mut out).is_err(), "finished twice");
    assert!(h.p.finish(2 * S, InstanceId(99), &mut out).is_err());
    h.p.transfer_done(2 * S, XferId(12345), &mut out);
    assert!(out.is_empty());
    // A clock that steps back does not move the policy's time back.
    let (s, _, _) = h.go(0, A, 100);
    assert_eq!(s, Start::Warm);
}

#[test]
fn impossible_configs_are_rejected() {
    let ok = Config::thesis(PolicyKind::TieredLru);
    assert!(Engine::new(ok.clone()).is_ok());
    for bad in [
        Config {
            ram_mb: 0,
            ..ok.clone()
        },
        Config {
            threshold: 0.0,
            ..ok.clone()
        },
        Config {
            threshold: 1.5,
            ..ok.clone()
        },
        Config {
            threshold: f64::NAN,
            ..ok.clone()
        },
        Config {
            disk_read_mb_s: 0.0,
            ..ok.clone()
        },
        Config {
            net_mb_s: -1.0,
            ..ok.clone()
        },
        Config {
            kind: PolicyKind::Ttl,
            keep_alive_us: 0,
            ..ok.clone()
        },
    ] {
        assert!(Engine::new(bad.clone()).is_err(), "{bad:?}");
    }
    assert!("nope".parse::<PolicyKind>().is_err());
    for k in PolicyKind::ALL {
        assert_eq!(k.name().parse::<PolicyKind>(), Ok(k));
    }
}

#[derive(Debug, Clone)]
enum Op {
    Arrive(u32, u32),
    Finish(usize),
    Done(usize),
    Advance(u64),
    /// an instance (running or idle once) measured at this many MiB
    Measure(usize, u32),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u32..12, 1u32..400).prop_map(|(f, m)| Op::Arrive(f, m)),
        3 => any::<usize>().prop_map(Op::Finish),
        2 => any::<usize>().prop_map(Op::Done),
        1 => (0u64..5_000_000).prop_map(Op::Advance),
        2 => (any::<usize>(), 0u32..500).prop_map(|(i, m)| Op::Measure(i, m)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn no_policy_exceeds_a_capacity(
        kind in 0usize..5,
        ram in 1u64..1500,
        disk in 0u64..900,
        net in 0u64..1500,
        thr in 0.05f64..1.0,
        footprints in proptest::collection::vec((proptest::option::of(0u32..300), 0u32..200), 12),
        ops in proptest::collection::vec(op(), 1..200),
    ) {
        let mut c = Config::thesis(PolicyKind::ALL[kind]);
        c.ram_mb = ram;
        c.disk_mb = disk;
        c.net_mb = net;
        c.threshold = thr;
        c.keep_alive_us = 3_000_000;
        let mut p = Engine::new(c).unwrap();
        let mut out = vec![];
        for (f, &(idle, shared)) in footprints.iter().enumerate() {
            p.set_footprint(FnId(u32::try_from(f).unwrap()), Footprint { idle_mb: idle, shared_mb: shared }, &mut out);
        }
        let mut running = vec![];
        let mut seen = vec![];
        let mut xfers = vec![];
        let mut t = 0;
        for o in ops {
            t += 10_000;
            out.clear();
            match o {
                Op::Arrive(f, m) => {
                    if let Outcome::Started { instance, .. } = p.arrive(t, FnId(f), m, &mut out) {
                        running.push(instance);
                        seen.push(instance);
                    }
                }
                Op::Finish(i) if !running.is_empty() => {
                    let inst = running.swap_remove(i % running.len());
                    prop_assert!(p.finish(t, inst, &mut out).is_ok());
                }
                Op::Done(i) if !xfers.is_empty() => {
                    let id = xfers.swap_remove(i % xfers.len());
                    p.transfer_done(t, id, &mut out);
                }
                Op::Advance(d) => { t += d; p.advance(t, &mut out); }
                // gone ones are errors, not panics
                Op::Measure(i, m) if !seen.is_empty() => { let _ = p.measured(t, seen[i % seen.len()], m, &mut out); }
                _ => {}
            }
            for a in &out {
                match *a {
                    Action::Checkpoint { id, .. } | Action::Upload { id, .. } | Action::Download { id, .. } => xfers.push(id),
                    _ => {}
                }
            }
            let u = p.usage();
            prop_assert!(u.ram_mb <= ram, "ram {} > {}", u.ram_mb, ram);
            prop_assert!(u.disk_mb <= disk, "disk {} > {}", u.disk_mb, disk);
            prop_assert!(u.net_mb <= net, "net {} > {}", u.net_mb, net);
            prop_assert_eq!(u.ram_mb, u.running_mb + u.idle_mb + u.writing_mb + u.shared_mb);
            let run: u64 = running.len() as u64;
            prop_assert!(u.running_mb >= run, "every running instance holds RAM");
        }
    }
}

#[test]
fn deployed_snapshots_restore_instead_of_booting_and_demotion_only_kills() {
    for kind in [PolicyKind::LruMem, PolicyKind::TieredLru] {
        let mut h = H::new(Config {
            deployed_snapshots: true,
            ..cfg(kind, 200)
        });
        let (s, a, lat) = h.go(0, A, 100);
        assert_eq!((s, lat), (Start::Lukewarm, 100_000), "{kind}");
        h.fin(S, a);
        let (s, b, _) = h.go(2 * S, B, 100);
        assert_eq!(s, Start::Lukewarm);
        h.fin(3 * S, b);
        // tiered: idle above the threshold (0.5 x 200) is demoted; the
        // deployed snapshot is already there, so the instance just goes
        assert!(
            h.out.iter().all(|a| matches!(a, Action::Kill { .. })),
            "{kind}: {:?}",
            h.out
        );
        let (s, _, _) = h.go(4 * S, C, 100);
        assert_eq!(s, Start::Lukewarm);
        assert_eq!(h.p.pending_transfers(), 0);
        assert_eq!(h.p.usage().disk_mb, 0);
    }
}

/// Instances charged by what they hold: declared while running, measured
/// (or the function's footprint) while idle, shared pages once.
#[test]
fn idle_instances_are_charged_what_they_hold() {
    let mut h = H::new(cfg(PolicyKind::LruMem, 1000));
    h.p.set_footprint(
        A,
        Footprint {
            idle_mb: None,
            shared_mb: 50,
        },
        &mut h.out,
    );
    let (_, a1, _) = h.go(0, A, 300);
    let (_, a2, _) = h.go(0, A, 300);
    assert_eq!(h.p.usage().ram_mb, 650, "two declared + shared once");
    h.p.measured(S, a1, 2, &mut h.out).unwrap();
    assert_eq!(
        h.p.usage().running_mb,
        600,
        "running keeps its declared memory"
    );
    h.fin(2 * S, a1);
    h.fin(2 * S, a2);
    let u = h.p.usage();
    // a2 was never measured: it takes the function's last measure
    assert_eq!((u.idle_mb, u.shared_mb, u.ram_mb), (4, 50, 54));
    // many more fit than the declared memory allows
    let mut idle = vec![];
    for _ in 0..3 {
        idle.push(h.go(3 * S, B, 300).1);
    }
    assert_eq!(h.p.usage().ram_mb, 954);
    for (k, b) in idle.into_iter().enumerate() {
        h.p.measured(4 * S, b, 1, &mut h.out).unwrap();
        h.fin(4 * S + k as u64, b);
    }
    assert_eq!(h.p.usage().ram_mb, 57);
    // a warm start holds the declared memory again
    let (s, a, _) = h.go(5 * S, A, 300);
    assert_eq!(s, Start::Warm);
    assert_eq!(h.p.usage().ram_mb, 57 - 2 + 300);
    // and an idle instance measured past the budget makes room
    h.fin(6 * S, a);
    h.p.measured(7 * S, a, 990, &mut h.out).unwrap();
    assert!(h.p.usage().ram_mb <= 1000, "{:?}", h.p.usage());
    assert!(!h.out.is_empty(), "something was given up");
}

#[test]
fn a_warm_start_without_room_for_its_declared_memory_is_rejected_and_stays_idle() {
    let mut h = H::new(cfg(PolicyKind::LruMem, 500));
    let (_, a, _) = h.go(0, A, 200);
    h.p.measured(0, a, 5, &mut h.out).unwrap();
    h.fin(S, a);
    let (_, b, _) = h.go(2 * S, B, 200);
    h.go(2 * S, C, 200);
    let mut out = vec![];
    assert_eq!(h.p.arrive(3 * S, A, 200, &mut out), Outcome::Rejected);
    assert_eq!(
        h.p.usage().idle_mb,
        5,
        "still idle, still charged its measure"
    );
    // once a running instance is gone, the warm start fits
    h.p.discard(4 * S, b).unwrap();
    let (s, a2, _) = h.go(5 * S, A, 200);
    assert_eq!((s, a2), (Start::Warm, a));
    assert_eq!(h.p.usage().ram_mb, 400);
}

#[test]
fn evicting_a_functions_last_instance_frees_its_shared_pages() {
    let mut h = H::new(cfg(PolicyKind::LruMem, 410));
    h.p.set_footprint(
        A,
        Footprint {
            idle_mb: Some(10),
            shared_mb: 100,
        },
        &mut h.out,
    );
    h.p.set_footprint(
        B,
        Footprint {
            idle_mb: Some(10),
            shared_mb: 100,
        },
        &mut h.out,
    );
    let (_, a, _) = h.go(0, A, 100);
    h.fin(S, a);
    assert_eq!(h.p.usage().ram_mb, 110);
    // B's first instance brings its shared pages, its second does not
    h.go(2 * S, B, 100);
    h.go(2 * S, B, 100);
    assert_eq!(h.p.usage().ram_mb, 410);
    assert!(h.out.is_empty(), "everything fit: {:?}", h.out);
    // C's 60 MiB: A's idle instance goes, and its shared pages with it
    h.go(3 * S, C, 60);
    assert_eq!(h.out, vec![Action::Kill { instance: a }]);
    assert_eq!(h.p.usage().shared_mb, 100);
    assert_eq!(h.p.usage().ram_mb, 360);
    assert!(
        h.p.measured(4 * S, a, 1, &mut h.out).is_err(),
        "a gone instance is stale"
    );
}

#[test]
fn an_arrival_that_cannot_fit_gives_nothing_up() {
    let mut h = H::new(cfg(PolicyKind::LruMem, 1000));
    let shared = Footprint {
        idle_mb: Some(1),
        shared_mb: 50,
    };
    h.p.set_footprint(A, shared, &mut h.out);
    let (_, a1, _) = h.go(0, A, 300);
    h.go(0, A, 300);
    h.go(0, A, 300);
    h.fin(S, a1);
    // 600 running + 1 idle + 50 shared: 351 more would need the shared
    // pages, which the running instances hold
    let mut out = vec![];
    assert_eq!(h.p.arrive(2 * S, B, 351, &mut out), Outcome::Rejected);
    assert!(out.is_empty(), "nothing given up for nothing: {out:?}");
    assert_eq!(h.p.usage().idle_mb, 1);
}

#[test]
fn a_patient_arrival_waits_for_running_instances_instead_of_evicting() {
    let mut h = H::new(cfg(PolicyKind::LruMem, 1000));
    let (_, a, _) = h.go(0, A, 300);
    h.p.measured(0, a, 2, &mut h.out).unwrap();
    h.fin(S, a);
    h.go(S, B, 400);
    h.go(S, C, 400);
    // 800 running + 2 idle: 300 more are short 102, which the running
    // instances give back when they end
    let mut out = vec![];
    let o = h.p.arrive_patiently(2 * S, D, 300, true, &mut out);
    assert_eq!((o, out.len()), (Outcome::Rejected, 0));
    // an impatient one gives the idle instance up... and still cannot fit
    assert_eq!(h.p.arrive(2 * S, D, 300, &mut out), Outcome::Rejected);
    // where the running instances could not give it back, idle ones go
    let mut h = H::new(cfg(PolicyKind::LruMem, 1000));
    let (_, a, _) = h.go(0, A, 600);
    h.fin(S, a);
    h.go(S, B, 50);
    let mut out = vec![];
    let o = h.p.arrive_patiently(2 * S, C, 450, false, &mut out);
    assert!(matches!(o, Outcome::Started { .. }), "{o:?}");
    assert_eq!(out, vec![Action::Kill { instance: a }]);
}

/// Pressure the budget does not see sheds idle instances in the policy's
/// order (least recently used first here), never a running one.
#[test]
fn shedding_gives_up_idle_instances_oldest_first() {
    let mut h = H::new(cfg(PolicyKind::LruMem, 10_000));
    let (_, a, _) = h.go(0, A, 100);
    let (_, b, _) = h.go(0, B, 100);
    let (_, c, _) = h.go(0, C, 100);
    h.fin(S, b);
    h.fin(2 * S, a);
    let before = h.p.usage().ram_mb;
    let mut out = vec![];
    assert_eq!(h.p.shed_idle(3 * S, 1, &mut out), (1, 100));
    assert_eq!(
        out,
        vec![Action::Kill { instance: b }],
        "the older idle one"
    );
    out.clear();
    assert_eq!(h.p.shed_idle(3 * S, 1_000, &mut out), (1, 100));
    assert_eq!(out, vec![Action::Kill { instance: a }]);
    // nothing idle is left: the running instance stays
    out.clear();
    assert_eq!(h.p.shed_idle(3 * S, 1, &mut out), (0, 0));
    assert_eq!(h.p.usage().ram_mb, before - 200);
    h.fin(4 * S, c);
}
