//! A restored instance keeps the signal state its init set up: handlers,
//! ignored signals, interval timers, blocked and queued signals. Each test
//! function checks itself; a fresh instance and every restore (each
//! strategy, and a snapshot of a restored instance) must answer alike.
//! Real sandboxes on the real runtime root; runs as root.
mod common;
use common::*;
use serde_json::{json, Value};
use thaw_sandbox::{checkpoint, Sandbox};
use thaw_worker::{RestoreRequest, StrategyKind};

/// The strategies a plain snapshot restores with, besides `dax`.
const KINDS: [StrategyKind; 4] = [
    StrategyKind::Eager,
    StrategyKind::Mmap,
    StrategyKind::Uffd,
    StrategyKind::Reap,
];

/// The function's answer to its first invocation, with `ok` checked.
fn first_answer(sb: &mut Sandbox, what: &str, event: Value) -> Value {
    let out = explicit(sb, event);
    assert_eq!(out["ok"], true, "{what}: {out}");
    out
}

/// A fresh instance's first answer, then every restore's (each strategy,
/// twice for REAP: its recording run and a prefetching one), then the
/// answer of a restore of a snapshot taken of a restored instance: all
/// the same.
fn restores_answer_as_a_fresh_start(function: &str, tag: &str, event: Value) {
    let w = worker();
    let (mut fresh, _) = w.start_fresh(function).unwrap();
    let want = first_answer(&mut fresh, &format!("{function} fresh"), event.clone());
    drop(fresh);
    let t = tier(tag);
    let snap = w.snapshot(function, &t).unwrap();
    for s in KINDS {
        let runs = if s == StrategyKind::Reap { 2 } else { 1 };
        for i in 0..runs {
            let what = format!("{function} {s} restore {i}");
            let (mut sb, rep) = w
                .restore(RestoreRequest::new(&snap, s))
                .unwrap_or_else(|e| panic!("{what}: {e:?}"));
            assert_eq!(rep.strategy, s, "{what}: fell back");
            assert_eq!(first_answer(&mut sb, &what, event.clone()), want, "{what}");
        }
    }
    // a second generation: a restored instance, snapshotted before it ran
    let (mut sb, _) = w
        .restore(RestoreRequest::new(&snap, StrategyKind::Eager))
        .unwrap();
    let dir = t.path.join("again");
    let (again, _) = checkpoint(&mut sb, &dir, function, &w.root.hash)
        .unwrap_or_else(|e| panic!("{function}: checkpoint of a restored instance: {e:#}"));
    drop(sb);
    let (mut sb2, _) = w
        .restore(RestoreRequest::new(&again, StrategyKind::Mmap))
        .unwrap();
    let what = format!("{function} second generation");
    assert_eq!(first_answer(&mut sb2, &what, event), want, "{what}");
}

#[test]
fn python_signal_state_set_at_init_survives_every_restore() {
    restores_answer_as_a_fresh_start("_test_signals", "signals-py", json!({}));
}

#[test]
fn a_python_handler_changed_after_a_restore_runs() {
    let w = worker();
    let t = tier("signals-change");
    let snap = w.snapshot("_test_signals", &t).unwrap();
    let (mut sb, _) = w
        .restore(RestoreRequest::new(&snap, StrategyKind::Mmap))
        .unwrap();
    let out = first_answer(&mut sb, "changed handler", json!({"change": true}));
    assert_eq!(out["counts"]["changed"], 1, "{out}");
    assert_eq!(out["counts"]["usr1"], 1, "{out}");
}

#[test]
fn node_signal_listeners_added_at_load_survive_every_restore() {
    restores_answer_as_a_fresh_start("_test_node_signals", "signals-node", json!({}));
}

#[test]
fn posix_timers_and_signals_queued_for_other_threads_are_refused_by_name() {
    let w = worker();
    let t = tier("signals-refused");
    let (mut fresh, _) = w.start_fresh("_test_signal_refusals").unwrap();
    let msg = refusal(&mut fresh, &t, "_test_signal_refusals");
    assert!(
        msg.contains("POSIX timer 0 (timer_create: signal 14, clock 1)"),
        "{msg}"
    );
    assert!(msg.contains("signal 12 queued for thread"), "{msg}");
    // refused, and the original goes on
    assert_eq!(explicit(&mut fresh, json!({}))["ok"], true);
}
