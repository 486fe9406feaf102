//! Snapshots of multi-threaded runtimes: threads started at init come back
//! in every restore, blocked where they were (a condition variable, a pool's
//! queue, a sleep), and keep working; what cannot be captured is refused by
//! name. Real sandboxes on the real runtime root; runs as root.
mod common;
use common::*;
use serde_json::{json, Value};
use thaw_checkpoint::{checkpoint, RestoreArgs, RestoreError};
use thaw_memory::tiering::CostParams;
use thaw_sandbox::Sandbox;
use thaw_snapshot_format::StateError;
use thaw_store::Snapshot;
use thaw_worker::RestoreRequest;
use thaw_worker::{InputSize, StrategyKind};

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

/// The kernel's names (`comm`) of the process's threads, sorted.
fn thread_names(pid: i32) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path().join("comm");
            std::fs::read_to_string(p).unwrap().trim().to_string()
        })
        .collect();
    names.sort();
    names
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
fn the_original_goes_on_after_its_snapshot() {
    let (mut fresh, _snap, _t) = snapshot_threads("threads");
    // main, ticker, 8 waiters, 4 pool threads
    assert_eq!(kernel_threads(fresh.pid()), 14);
    let first = round(&mut fresh, "original");
    assert_eq!(first["round"], 1);
    assert_eq!(kernel_threads(fresh.pid()), 14);
}

/// Two rounds of a restored `_test_threads`: every waiter answers, the
/// pool computes, the ticker ticks between them, no thread is lost.
fn two_rounds(sb: &mut Sandbox, what: &str, threads: usize) {
    assert_eq!(kernel_threads(sb.pid()), threads, "{what}");
    let a = round(sb, what);
    // the snapshot was taken before any round: every restore starts at 1
    assert_eq!(a["round"], 1, "{what}: {a}");
    assert_eq!(a["threads"], threads, "{what}: {a}");
    // the ticker sleeps 2 ms between ticks; on a loaded machine it may
    // wait longer for a CPU, so a stopped one is one that never ticks again
    let ta = a["ticks"].as_u64().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let mut n = 2;
    loop {
        std::thread::sleep(std::time::Duration::from_millis(6));
        let b = round(sb, what);
        assert_eq!(b["round"], n, "{what}: {b}");
        let tb = b["ticks"].as_u64().unwrap();
        if tb > ta {
            break;
        }
        let states = thread_calls(sb.pid());
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: the ticker stopped at {ta} ({states:?})"
        );
        eprintln!("{what}: no tick yet after round {n} ({ta}): {states:?}");
        n += 1;
    }
    assert_eq!(kernel_threads(sb.pid()), threads, "{what}");
}

#[test]
fn a_hundred_restores_with_each_strategy() {
    let w = worker();
    let t = tier("threads-hundred");
    let slow = disk_tier("threads-hundred-slow");
    let snap = w.snapshot("_test_threads", &t).unwrap();
    // a real TOSS layout, so `tiered` does not fall back to `uffd`
    w.make_tiered(
        "_test_threads",
        &t,
        &slow,
        &[InputSize::I],
        1,
        &CostParams::default(),
    )
    .unwrap_or_else(|e| panic!("tier layout of a threaded runtime: {e:#}"));
    for s in StrategyKind::ALL {
        for i in 0..100 {
            let what = format!("{s} restore {i}");
            let (mut sb, rep) = w
                .restore(RestoreRequest::new(&snap, s))
                .unwrap_or_else(|e| panic!("{what}: {e:?}"));
            assert_eq!(rep.strategy, s, "{what}: fell back");
            // main, ticker, 8 waiters, 4 pool threads
            two_rounds(&mut sb, &what, 14);
        }
    }
}

#[test]
fn a_restored_threaded_runtime_snapshots_again() {
    let w = worker();
    let (fresh, snap, t) = snapshot_threads("threads-again");
    drop(fresh);
    // eager: a mapped image could not be snapshotted again
    let (mut sb, _) = w
        .restore(RestoreRequest::new(&snap, StrategyKind::Eager))
        .unwrap();
    round(&mut sb, "restored");
    // its trampoline stays mapped, and the snapshot leaves it out
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", sb.pid())).unwrap();
    let tramp = format!("{:x}-", thaw_restorer::TRAMP_ADDR);
    assert!(maps.contains(&tramp), "no trampoline before the checkpoint");
    let dir = t.path.join("again");
    let (again, _) = checkpoint(&mut sb, &dir, "_test_threads", &w.root.hash)
        .unwrap_or_else(|e| panic!("checkpoint of a restored threaded runtime: {e:#}"));
    let state = thaw_snapshot_format::ProcessState::decode(&again.load_state().unwrap()).unwrap();
    let span =
        thaw_restorer::RESTORER_BASE..thaw_restorer::RESTORER_BASE + thaw_restorer::RESTORER_SPAN;
    assert!(
        state.vmas.iter().all(|v| !span.contains(&v.start)),
        "the snapshot holds a mapping of the restorer's span"
    );
    let after = round(&mut sb, "checkpointed twice");
    assert_eq!(after["round"], 2);
    let (mut sb2, _) = w
        .restore(RestoreRequest::new(&again, StrategyKind::Eager))
        .unwrap();
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
            let (mut sb, _) = w.restore(RestoreRequest::new(&snap, s)).unwrap();
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
    let msg = refusal(&mut fresh, &t, "_test_child");
    assert!(
        msg.contains("child process") && msg.contains("python3"),
        "{msg}"
    );
    // clone(CLONE_VM) without CLONE_THREAD: a process that shares the
    // runtime's memory is a child process all the same
    let (mut fresh, _) = w.start_fresh("_test_hidden_threads").unwrap();
    let out = explicit(&mut fresh, json!({"start": ["vm_child"]}));
    assert!(out["started"][0].as_i64().unwrap() > 0, "{out}");
    let msg = refusal(&mut fresh, &t, "_test_hidden_threads");
    assert!(
        msg.contains("child process") && msg.contains("python3"),
        "{msg}"
    );
}

/// The system call each thread is blocked in (`/proc/PID/task/TID/syscall`'s
/// number), sorted; `running` for one that is not in a call.
fn thread_calls(pid: i32) -> Vec<String> {
    let mut calls: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .map(|e| {
            let text = std::fs::read_to_string(e.unwrap().path().join("syscall")).unwrap();
            text.split_whitespace().next().unwrap_or("").to_string()
        })
        .collect();
    calls.sort();
    calls
}

#[test]
fn threads_hidden_from_the_agent_are_captured_whole() {
    let w = worker();
    let t = tier("threads-hidden");
    let (mut fresh, _) = w.start_fresh("_test_hidden_threads").unwrap();
    // a raw clone (the main thread's TLS, no rseq, no robust list), a libc
    // pthread, and a Python thread that renamed itself
    let out = explicit(
        &mut fresh,
        json!({"start": ["clone", "pthread", "renamed"]}),
    );
    assert_eq!(
        (out["round"].as_u64(), out["answer"].as_u64()),
        (Some(1), Some(7)),
        "{out}"
    );
    // Python knows two of the four
    assert_eq!(out["python_threads"], 2, "{out}");
    let pid = fresh.pid();
    assert_eq!(kernel_threads(pid), 4);
    let names = thread_names(pid);
    assert!(names.iter().any(|n| n == "renamed-worker"), "{names:?}");
    let dir = t.path.join("hidden");
    let (snap, _) = checkpoint(&mut fresh, &dir, "_test_hidden_threads", &w.root.hash)
        .unwrap_or_else(|e| panic!("checkpoint with hidden threads: {e:#}"));
    drop(fresh);
    for s in [StrategyKind::Eager, StrategyKind::Mmap, StrategyKind::Uffd] {
        for i in 0..5 {
            let what = format!("{s} restore {i}");
            let (mut sb, _) = w
                .restore(RestoreRequest::new(&snap, s))
                .unwrap_or_else(|e| panic!("{what}: {e:?}"));
            assert_eq!(thread_names(sb.pid()), names, "{what}: the threads' names");
            let out = explicit(&mut sb, json!({}));
            assert_eq!(
                (out["round"].as_u64(), out["answer"].as_u64()),
                (Some(2), Some(14)),
                "{what}: {out}"
            );
            assert_eq!(kernel_threads(sb.pid()), 4, "{what}");
            // both hidden threads are back in pause(2) (34)
            let in_pause = |pid| thread_calls(pid).iter().filter(|c| *c == "34").count();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            while in_pause(sb.pid()) != 2 && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            assert_eq!(
                in_pause(sb.pid()),
                2,
                "{what}: {:?}",
                thread_calls(sb.pid())
            );
        }
    }
}

/// A user function on numpy with Debian's threaded OpenBLAS (its own
/// package `libopenblas0-pthread`, whose libblas.so.3 alternative the
/// loader finds before the root's serial one) and a pool of 2.
const BLAS_MAIN: &str = r#"
import ctypes
import math
import os

# OpenBLAS sizes its pool when it is loaded, at numpy's import
os.environ["OPENBLAS_NUM_THREADS"] = "2"
import numpy as np

_blas = ctypes.CDLL("libblas.so.3")  # numpy's own, already loaded
_blas.openblas_get_config.restype = ctypes.c_char_p


class _DlInfo(ctypes.Structure):
    _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p),
                ("sname", ctypes.c_char_p), ("saddr", ctypes.c_void_p)]


def _library():
    info = _DlInfo()
    addr = ctypes.cast(_blas.openblas_get_config, ctypes.c_void_p)
    ctypes.CDLL(None).dladdr(addr, ctypes.byref(info))
    return os.path.realpath(info.fname.decode())


def init():
    handler({"n": 300, "seed": 0})


def handler(event):
    n, seed = int(event["n"]), int(event["seed"])
    rng = np.random.default_rng(seed)
    a = rng.random((n, n))
    b = rng.random((n, n))
    c = a @ b
    probes = [(0, 0), (n - 1, n - 1), (n // 2, n // 3)]
    worst = max(abs(c[i, j] - math.fsum(a[i, k] * b[k, j] for k in range(n))) for i, j in probes)
    return {
        "sum": float(c.sum()),
        "worst": worst,
        "blas_threads": _blas.openblas_get_num_threads(),
        "config": _blas.openblas_get_config().decode(),
        "library": _library(),
    }
"#;

#[test]
fn a_threaded_blas_keeps_its_pool_across_restores() {
    let w = worker();
    let t = disk_tier("threads-blas");
    let home = thaw_runtime::default_home();
    let tree = thaw_runtime::packages::ensure(
        &home,
        &t.path.join("packages"),
        &w.root,
        &["libopenblas0-pthread".to_string()],
        1 << 30,
        &mut |m| eprintln!("packages: {m}"),
    )
    .unwrap_or_else(|e| panic!("libopenblas0-pthread: {e:#}"));
    let code = t.path.join("code");
    std::fs::create_dir_all(&code).unwrap();
    std::fs::write(code.join("main.py"), BLAS_MAIN).unwrap();
    let func = thaw_worker::UserFunction {
        name: "blas".into(),
        runtime: thaw_worker::Runtime::Python,
        code_dir: code,
        handler: "main.handler".into(),
        init: Some("main.init".into()),
        before_snapshot: None,
        after_restore: None,
        env: Vec::new(),
        memory_bytes: 1 << 30,
        cpu_millis: None,
        cpu_weight: None,
        packages_dir: Some(tree.path.clone()),
        egress: None,
        root: None,
    };
    let (mut fresh, _) = w.start_user(&func, T).unwrap();
    // big enough for OpenBLAS to split it between its threads
    let event = json!({"n": 1000, "seed": 7});
    let want = explicit(&mut fresh, event.clone());
    assert_eq!(want["blas_threads"], 2, "{want}");
    assert!(want["worst"].as_f64().unwrap() < 1e-9, "{want}");
    let lib = want["library"].as_str().unwrap();
    assert!(
        lib.starts_with("/opt/thaw/packages/") && lib.contains("openblas-pthread"),
        "numpy is not on the package's threaded OpenBLAS: {want}"
    );
    // main and OpenBLAS's second thread
    let threads = kernel_threads(fresh.pid());
    assert_eq!(threads, 2, "{want}");
    let dir = t.path.join("snapshot");
    let (snap, _) = checkpoint(&mut fresh, &dir, "blas", &w.root.hash)
        .unwrap_or_else(|e| panic!("checkpoint of a threaded BLAS: {e:#}"));
    drop(fresh);
    for s in [StrategyKind::Eager, StrategyKind::Mmap, StrategyKind::Uffd] {
        for i in 0..3 {
            let what = format!("{s} restore {i}");
            let (mut sb, _) = w
                .restore(RestoreRequest::new(&snap, s).function(&func).pool(None))
                .unwrap_or_else(|e| panic!("{what}: {e:?}"));
            assert_eq!(kernel_threads(sb.pid()), threads, "{what}");
            // a lost pool thread would hang the multiply (OpenBLAS waits
            // for its share): the call's timeout fails the test
            let got = explicit(&mut sb, event.clone());
            assert_eq!(got, want, "{what}");
            assert_eq!(kernel_threads(sb.pid()), threads, "{what}");
        }
    }
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
    let e = match w.restore(RestoreRequest::new(&bad, StrategyKind::Eager)) {
        Ok(_) => panic!("a snapshot with a corrupt thread record restored"),
        Err(RestoreError::State {
            source: StateError::Corrupt(e),
            ..
        }) => e,
        Err(e) => panic!("not refused as a corrupt state: {e:#}"),
    };
    assert!(e.contains("thread 5") && e.contains("robust"), "{e}");
}

/// Threads blocked in rt_sigtimedwait (128) on an instruction of the
/// restorer's span: the recreated threads a `hold_threads` restore keeps
/// in its trampoline.
fn held_in_trampoline(pid: i32) -> usize {
    let span =
        thaw_restorer::RESTORER_BASE..thaw_restorer::RESTORER_BASE + thaw_restorer::RESTORER_SPAN;
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter(|e| {
            let text = std::fs::read_to_string(e.as_ref().unwrap().path().join("syscall")).unwrap();
            let f: Vec<&str> = text.split_whitespace().collect();
            let pc = f
                .last()
                .and_then(|p| u64::from_str_radix(p.trim_start_matches("0x"), 16).ok());
            f.first() == Some(&"128") && pc.is_some_and(|pc| span.contains(&pc))
        })
        .count()
}

#[test]
fn a_checkpoint_of_a_just_restored_instance_waits_for_threads_in_the_trampoline() {
    let w = worker();
    let (fresh, snap, t) = snapshot_threads("threads-held");
    drop(fresh);
    // eager: a mapped image could not be snapshotted again
    let (mut sb, _) = thaw_checkpoint::restore(RestoreArgs {
        hold_threads: true,
        ..RestoreArgs::new(
            &snap,
            &w.root.path,
            &w.root.hash,
            StrategyKind::Eager,
            &w.cfg,
        )
    })
    .unwrap_or_else(|e| panic!("restore holding its threads: {e:#}"));
    let pid = sb.pid();
    // all 13 recreated threads reach their last trampoline instruction and
    // stay there: nothing but a checkpoint's freeze lets them go
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while held_in_trampoline(pid) < 13 {
        assert!(
            std::time::Instant::now() < deadline,
            "the threads never reached their hold: {:?}",
            thread_calls(pid)
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(held_in_trampoline(pid), 13, "{:?}", thread_calls(pid));
    let dir = t.path.join("held");
    let (again, rep) = checkpoint(&mut sb, &dir, "_test_threads", &w.root.hash)
        .unwrap_or_else(|e| panic!("checkpoint with threads in the trampoline: {e:#}"));
    assert!(
        rep.trampoline_waits >= 1,
        "the freeze never found a thread in the trampoline: {rep:?}"
    );
    assert_eq!(held_in_trampoline(pid), 0, "{:?}", thread_calls(pid));
    let state = thaw_snapshot_format::ProcessState::decode(&again.load_state().unwrap()).unwrap();
    assert_eq!(state.threads.len(), 14);
    // the instance goes on, every thread it let go working
    two_rounds(&mut sb, "held, then checkpointed", 14);
    // and the snapshot, every thread taken outside the trampoline, restores whole
    let (mut sb2, _) = w
        .restore(RestoreRequest::new(&again, StrategyKind::Eager))
        .unwrap_or_else(|e| panic!("restore of the snapshot taken past the trampoline: {e:#}"));
    two_rounds(&mut sb2, "restored from past the trampoline", 14);
}

/// Each thread's state letter and tracer (/proc/PID/task/TID/status).
fn thread_sched(pid: i32) -> Vec<(i32, char, i32)> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let tid = e.file_name().to_str().unwrap().parse().unwrap();
            let status = std::fs::read_to_string(e.path().join("status")).unwrap();
            let field = |name: &str| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix(name))
                    .unwrap()
                    .trim()
                    .to_string()
            };
            let state = field("State:").chars().next().unwrap();
            (tid, state, field("TracerPid:").parse().unwrap())
        })
        .collect()
}

#[test]
fn a_thread_in_an_uninterruptible_wait_is_refused_by_name_and_left_untraced() {
    let w = worker();
    let t = tier("threads-vfork");
    let (mut fresh, _) = w.start_fresh("_test_hidden_threads").unwrap();
    // a Python thread waits for good in clone(CLONE_VFORK | CLONE_THREAD):
    // its new thread pauses, and it is no child process to be refused for
    let out = explicit(&mut fresh, json!({"start": ["renamed", "vfork_thread"]}));
    assert_eq!(out["answer"], 7, "{out}");
    let pid = fresh.pid();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let in_d = loop {
        let d: Vec<i32> = thread_sched(pid)
            .into_iter()
            .filter(|&(_, state, _)| state == 'D')
            .map(|(tid, _, _)| tid)
            .collect();
        if !d.is_empty() {
            break d;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no thread in state D: {:?}",
            thread_sched(pid)
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    assert_eq!(in_d.len(), 1, "{:?}", thread_sched(pid));
    assert_eq!(kernel_threads(pid), 4);
    let msg = refusal(&mut fresh, &t, "_test_hidden_threads");
    assert!(
        msg.contains(&format!("tid {}", in_d[0]))
            && msg.contains("uninterruptible wait (state D, in clone)"),
        "{msg}"
    );
    // refused before any thread was seized: none is left traced or stopped
    for (tid, state, tracer) in thread_sched(pid) {
        assert!(
            tracer == 0 && state != 't',
            "thread {tid}: {state}, traced by {tracer}"
        );
    }
    // and the instance goes on
    let out = explicit(&mut fresh, json!({}));
    assert_eq!(
        (out["round"].as_u64(), out["answer"].as_u64()),
        (Some(2), Some(14)),
        "{out}"
    );
}

#[test]
fn a_thread_held_by_a_debugger_is_refused_and_snapshots_once_let_go() {
    let w = worker();
    let t = tier("threads-traced");
    let (mut fresh, _) = w.start_fresh("_test_threads").unwrap();
    let pid = fresh.pid();
    // a thread blocked in a futex wait (a waiter's condition, the pool's
    // queue): stopped there, it holds no lock Python's main thread needs
    let in_futex = |tid: &i32| {
        let call = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).unwrap();
        call.split_whitespace().next() == Some("202")
    };
    let tid = thread_sched(pid)
        .into_iter()
        .map(|(tid, _, _)| tid)
        .find(|tid| *tid != pid && in_futex(tid))
        .unwrap_or_else(|| panic!("no thread in futex: {:?}", thread_calls(pid)));
    // this test is the debugger: one of the runtime's threads in a ptrace stop
    // SAFETY: ptrace and waitpid on a thread of our own sandbox, no buffers.
    unsafe {
        assert_eq!(libc::ptrace(libc::PTRACE_SEIZE, tid, 0, 0), 0, "seize");
        assert_eq!(
            libc::ptrace(libc::PTRACE_INTERRUPT, tid, 0, 0),
            0,
            "interrupt"
        );
        let mut status = 0;
        assert_eq!(libc::waitpid(tid, &mut status, libc::__WALL), tid);
        assert!(libc::WIFSTOPPED(status), "{status:#x}");
    }
    // SAFETY: gettid has no preconditions.
    let me = unsafe { libc::gettid() };
    let msg = refusal(&mut fresh, &t, "_test_threads");
    assert!(
        msg.contains(&format!("tid {tid}")) && msg.contains(&format!("traced by process {me}")),
        "{msg}"
    );
    // the refusal touched no thread: the debugger's stays its own
    for (other, state, tracer) in thread_sched(pid) {
        let want = if other == tid { me } else { 0 };
        assert_eq!(tracer, want, "thread {other} ({state})");
    }
    // SAFETY: as above; the thread is in its ptrace stop.
    assert_eq!(unsafe { libc::ptrace(libc::PTRACE_DETACH, tid, 0, 0) }, 0);
    let dir = t.path.join("let-go");
    let (snap, _) = checkpoint(&mut fresh, &dir, "_test_threads", &w.root.hash)
        .unwrap_or_else(|e| panic!("checkpoint once the debugger let go: {e:#}"));
    drop(fresh);
    let (mut sb, _) = w
        .restore(RestoreRequest::new(&snap, StrategyKind::Eager))
        .unwrap();
    two_rounds(&mut sb, "snapshot taken once the debugger let go", 14);
}
