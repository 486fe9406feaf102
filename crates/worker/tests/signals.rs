//! A restored instance keeps the signal state its init set up: handlers,
//! ignored signals, interval timers, blocked and queued signals. Each test
//! function checks itself; a fresh instance and every restore (each
//! strategy, and a snapshot of a restored instance) must answer alike.
//! Real sandboxes on the real runtime root; runs as root.
mod common;
use common::*;
use serde_json::json;
use thaw_worker::{RestoreRequest, StrategyKind};

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
