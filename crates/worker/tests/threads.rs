//! Snapshots of multi-threaded runtimes: threads started at init come back
//! in every restore, blocked where they were (a condition variable, a pool's
//! queue, a sleep), and keep working; what cannot be captured is refused by
//! name. Real sandboxes on the real runtime root; runs as root.
mod common;
use common::*;
use serde_json::{json, Value};
use thaw_sandbox::{checkpoint, Sandbox};
use thaw_store::Snapshot;
use thaw_worker::StrategyKind;

/// Threads of the process, as the kernel counts them.
fn kernel_threads(pid: i32) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// One round of `_test_threads`: every waiter answered, the pool computed.
fn round(sb: &mut Sandbox, what: &str) -> Value {
    let out = explicit(sb, json!({}));
    assert_eq!(out["answers"], out["want"], "{what}: waiters: {out}");
    assert_eq!(out["squares"], 332_833_500, "{what}: pool: {out}");
    out
}

fn snapshot_threads(tag: &str) -> (Sandbox, Snapshot, TestTier) {
    let w = worker();
    let t = tier(tag);
    let (mut fresh, _) = w.start_fresh("_test_threads").unwrap();
    let dir = w.snapshot_dir(&t, "_test_threads");
    let (snap, _) = checkpoint(&mut fresh, &dir, "_test_threads", &w.root.hash)
        .unwrap_or_else(|e| panic!("checkpoint of a threaded runtime: {e:#}"));
    (fresh, snap, t)
}

#[test]
fn threads_started_at_init_resume_with_every_strategy() {
    let w = worker();
    let (mut fresh, snap, _t) = snapshot_threads("threads");
    let threads = kernel_threads(fresh.pid());
    // main, ticker, 8 waiters, 4 pool threads
    assert_eq!(threads, 14);
    // the original goes on after its snapshot
    let first = round(&mut fresh, "original");
    assert_eq!(first["round"], 1);
    drop(fresh);
    let restores = 30;
    for i in 0..restores {
        let s = STRATEGIES[i % STRATEGIES.len()];
        let what = format!("restore {i} ({s})");
        let (mut sb, _) = w
            .restore(&snap, s)
            .unwrap_or_else(|e| panic!("{what}: {e:?}"));
        assert_eq!(kernel_threads(sb.pid()), threads, "{what}");
        let a = round(&mut sb, &what);
        // the snapshot was taken before any round: every restore starts at 1
        assert_eq!(a["round"], 1, "{what}: {a}");
        assert_eq!(a["threads"], 14, "{what}: {a}");
        std::thread::sleep(std::time::Duration::from_millis(30));
        let b = round(&mut sb, &what);
        assert_eq!(b["round"], 2, "{what}: {b}");
        // the ticker keeps ticking after the restore
        let (ta, tb) = (a["ticks"].as_u64().unwrap(), b["ticks"].as_u64().unwrap());
        assert!(tb > ta, "{what}: the ticker stopped ({ta} then {tb})");
        assert_eq!(kernel_threads(sb.pid()), threads, "{what}");
    }
}

#[test]
fn a_restored_threaded_runtime_snapshots_again() {
    let w = worker();
    let (fresh, snap, t) = snapshot_threads("threads-again");
    drop(fresh);
    // eager: a mapped image could not be snapshotted again
    let (mut sb, _) = w.restore(&snap, StrategyKind::Eager).unwrap();
    round(&mut sb, "restored");
    // its trampoline stays until now: no thread can still be in it
    let dir = t.path.join("again");
    let (again, _) = checkpoint(&mut sb, &dir, "_test_threads", &w.root.hash)
        .unwrap_or_else(|e| panic!("checkpoint of a restored threaded runtime: {e:#}"));
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", sb.pid())).unwrap();
    let tramp = format!("{:x}-", thaw_restorer::TRAMP_ADDR);
    assert!(
        !maps.contains(&tramp),
        "trampoline left after the checkpoint"
    );
    let after = round(&mut sb, "checkpointed twice");
    assert_eq!(after["round"], 2);
    let (mut sb2, _) = w.restore(&again, StrategyKind::Eager).unwrap();
    assert_eq!(round(&mut sb2, "second generation")["round"], 2);
    assert_eq!(kernel_threads(sb2.pid()), 14);
}

#[test]
fn threads_coming_and_going_during_the_freeze_are_captured_whole() {
    let w = worker();
    let t = tier("threads-churn");
    let mut captured = 0;
    for attempt in 0..5 {
        let (mut fresh, _) = w.start_fresh("_test_threads").unwrap();
        // a thread that keeps starting and joining others, unknown to the agent's checks
        explicit(&mut fresh, json!({"churn": true}));
        let dir = t.path.join(format!("churn-{attempt}"));
        let (snap, _) = match checkpoint(&mut fresh, &dir, "_test_threads", &w.root.hash) {
            Ok(s) => s,
            // refused by name is fine; half a process never is
            Err(e) => {
                let msg = format!("{e:#}");
                assert!(msg.contains("thread"), "{msg}");
                eprintln!("attempt {attempt} refused: {msg}");
                continue;
            }
        };
        captured += 1;
        for s in [StrategyKind::Eager, StrategyKind::Uffd] {
            let (mut sb, _) = w.restore(&snap, s).unwrap();
            let out = round(&mut sb, &format!("churn {attempt} {s}"));
            assert_eq!(out["round"], 2);
            // the churner goes on starting threads in the restored copy
            let n = kernel_threads(sb.pid());
            assert!((15..=17).contains(&n), "{n} threads");
        }
    }
    assert!(captured > 0, "every attempt was refused");
}

#[test]
fn child_processes_are_refused_by_name() {
    let w = worker();
    let t = tier("child");
    let (mut fresh, _) = w.start_fresh("_test_child").unwrap();
    let out = explicit(&mut fresh, json!({}));
    assert_eq!(out["running"], true, "{out}");
    let dir = t.path.join("child");
    let e = checkpoint(&mut fresh, &dir, "_test_child", &w.root.hash)
        .map(|_| ())
        .unwrap_err();
    let msg = format!("{e:#}");
    assert!(
        msg.contains("child process") && msg.contains("python3"),
        "{msg}"
    );
    assert!(!dir.exists(), "a refused checkpoint left a snapshot");
}

#[test]
fn a_corrupt_thread_record_is_refused_when_the_snapshot_is_read() {
    let w = worker();
    let (fresh, snap, t) = snapshot_threads("threads-corrupt");
    drop(fresh);
    // consistent checksums: only the state's own checks can notice
    let bad = with_state(&snap, &t.path.join("corrupt"), |s| {
        s.threads[5].kernel.robust_list.1 = 4096;
    });
    let e = match w.restore(&bad, StrategyKind::Eager) {
        Ok(_) => panic!("a snapshot with a corrupt thread record restored"),
        Err(e) => format!("{e:#}"),
    };
    assert!(e.contains("thread 5") && e.contains("robust"), "{e}");
}
