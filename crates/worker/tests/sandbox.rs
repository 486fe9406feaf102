//! Sandbox checkpoint/restore against the real runtime root (built on first
//! use, cached by content hash). Runs as root; fails loudly without it.
mod common;
use common::*;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::{Arc, Barrier};
use std::time::Duration;
use thaw_checkpoint::RestoreArgs;
use thaw_checkpoint::{checkpoint, RestoreError};
use thaw_sandbox::agent::{Reply, Request};
use thaw_sandbox::{Sandbox, SandboxConfig};
use thaw_store::{Snapshot, StoreError};
use thaw_worker::invoke;
use thaw_worker::InputSize;
use thaw_worker::RestoreRequest;
use thaw_worker::StrategyKind;

/// No cgroup of ours is left without processes, and no child is a zombie.
/// Other tests run in parallel and may be between killing a sandbox and
/// removing its cgroups, so an empty cgroup only counts as leaked if it is
/// still there a moment later.
fn assert_nothing_leaked() {
    let prefix = format!("{}-", thaw_store::secure::owner_tag());
    let empty_cgroups = || {
        let mut out = Vec::new();
        for ctrl in ["memory", "pids"] {
            let dir = PathBuf::from(format!("/sys/fs/cgroup/{ctrl}/thaw"));
            for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let name = e.file_name().to_string_lossy().to_string();
                let procs =
                    std::fs::read_to_string(e.path().join("cgroup.procs")).unwrap_or_default();
                if name.starts_with(&prefix) && procs.trim().is_empty() {
                    out.push(e.path());
                }
            }
        }
        out
    };
    let suspects = empty_cgroups();
    if !suspects.is_empty() {
        std::thread::sleep(Duration::from_secs(2));
        for p in suspects {
            let procs = std::fs::read_to_string(p.join("cgroup.procs")).unwrap_or_default();
            assert!(
                !p.exists() || !procs.trim().is_empty(),
                "leaked empty cgroup {}",
                p.display()
            );
        }
    }
    let me = std::process::id();
    for t in std::fs::read_dir(format!("/proc/{me}/task"))
        .unwrap()
        .flatten()
    {
        let kids = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
        for pid in kids.split_whitespace() {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let state = stat
                .rsplit(')')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .next()
                .unwrap_or("");
            assert_ne!(state, "Z", "zombie child {pid}");
        }
    }
}

/// A restored runtime resumed on its own (no tracer) and holds nothing of
/// the restorer: no mapping in its span, trampoline included.
fn assert_no_restorer_left(pid: i32) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    assert!(status.contains("TracerPid:\t0\n"), "{status}");
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let (lo, hi) = (
        thaw_restorer::RESTORER_BASE,
        thaw_restorer::RESTORER_BASE + thaw_restorer::RESTORER_SPAN,
    );
    for line in maps.lines() {
        let range = line.split_whitespace().next().unwrap();
        let (a, b) = range.split_once('-').unwrap();
        let a = u64::from_str_radix(a, 16).unwrap();
        let b = u64::from_str_radix(b, 16).unwrap();
        assert!(b <= lo || a >= hi, "restorer memory left: {line}");
    }
}

#[test]
fn restore_with_each_strategy_continues_where_it_stopped() {
    let w = worker();
    let t = tier("strategies");
    for f in ["helloworld", "matmul"] {
        let (mut fresh, _) = w.start_fresh(f).unwrap();
        let dir = w.snapshot_dir(&t, f);
        let (snap, rep) = checkpoint(&mut fresh, &dir, f, &w.root.hash).unwrap();
        assert!(rep.saved_pages > 100, "{rep:?}");
        // the original keeps serving after its snapshot
        let out = invoke(&mut fresh, InputSize::I, T).unwrap();
        w.check(f, InputSize::I, &out.output).unwrap();
        for s in [StrategyKind::Eager, StrategyKind::Mmap, StrategyKind::Uffd] {
            let (mut sb, rep) = w.restore(RestoreRequest::new(&snap, s)).unwrap();
            assert_no_restorer_left(sb.pid());
            for size in [InputSize::I, InputSize::II] {
                let inv = invoke(&mut sb, size, T).unwrap();
                w.check(f, size, &inv.output)
                    .unwrap_or_else(|e| panic!("{f} {s} {size}: {e:#}"));
            }
            // the snapshot was taken before any invocation: the count continues from 0
            let h = call(&mut sb, Request::Health);
            assert!(
                matches!(h, Reply::Health { invocations: 2, .. }),
                "{f} {s}: {h:?}"
            );
            if s == StrategyKind::Uffd {
                let faults = sb.pager().unwrap().stats.faults();
                assert!(faults > 0, "uffd restore served no faults");
                assert!(rep.lazy_bytes > 0);
            } else {
                assert!(sb.pager().is_none());
            }
        }
    }
    assert_nothing_leaked();
}

#[test]
fn sixteen_concurrent_clones_are_isolated() {
    let w = worker();
    let t = tier("clones");
    let (mut fresh, _) = w.start_fresh("_test_state").unwrap();
    let (snap, _) = checkpoint(
        &mut fresh,
        &w.snapshot_dir(&t, "_test_state"),
        "_test_state",
        &w.root.hash,
    )
    .unwrap();
    drop(fresh);
    let n = 16;
    let barrier = Arc::new(Barrier::new(n));
    let snap = Arc::new(snap);
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let (b, snap) = (barrier.clone(), snap.clone());
            std::thread::spawn(move || {
                let s = [
                    StrategyKind::Eager,
                    StrategyKind::Mmap,
                    StrategyKind::Uffd,
                    StrategyKind::Reap,
                    StrategyKind::Dax,
                ][i % 5];
                let (mut sb, _) = worker()
                    .restore(RestoreRequest::new(&snap, s))
                    .unwrap_or_else(|e| panic!("clone {i} ({s}): {e:#}"));
                let before = explicit(&mut sb, json!({}));
                assert_eq!(
                    before["value"],
                    Value::Null,
                    "clone {i} sees another clone's write"
                );
                explicit(&mut sb, json!({"set": format!("clone-{i}")}));
                b.wait(); // every clone has written
                let after = explicit(&mut sb, json!({}));
                assert_eq!(
                    after["value"],
                    format!("clone-{i}"),
                    "clone {i} lost or shares its write"
                );
                assert_eq!(
                    after["ballast"].as_array().unwrap().len(),
                    1,
                    "clone {i}: pages from other clones"
                );
                b.wait(); // keep all alive until every clone has checked
                after["random"].as_f64().unwrap()
            })
        })
        .collect();
    let randoms: Vec<f64> = handles
        .into_iter()
        .map(|h| h.join().expect("clone thread"))
        .collect();
    let mut uniq = randoms.clone();
    uniq.sort_by(f64::total_cmp);
    uniq.dedup();
    assert_eq!(uniq.len(), n, "clones share random state: {randoms:?}");
    // the snapshot is untouched by all those writes
    snap.verify_memory().unwrap();
    let (mut sb, _) = w
        .restore(RestoreRequest::new(&snap, StrategyKind::Mmap))
        .unwrap();
    assert_eq!(explicit(&mut sb, json!({}))["value"], Value::Null);
    drop(sb);
    assert_nothing_leaked();
}

/// The error of a restore (or of opening the snapshot) that must fail.
fn restore_error(snap_dir: &std::path::Path, root: &std::path::Path, hash: &str) -> RestoreError {
    let res = Snapshot::open(snap_dir)
        .map_err(RestoreError::from)
        .and_then(|s| {
            let cfg = SandboxConfig::default();
            thaw_checkpoint::restore(RestoreArgs::new(&s, root, hash, StrategyKind::Eager, &cfg))
        });
    match res {
        Ok(_) => panic!("restore of {} should have failed", snap_dir.display()),
        Err(e) => e,
    }
}

fn restore_err(snap_dir: &std::path::Path, root: &std::path::Path, hash: &str) -> String {
    format!("{:#}", restore_error(snap_dir, root, hash))
}

/// The store's verdict on a snapshot a restore refused.
fn store_error(snap_dir: &std::path::Path, root: &std::path::Path, hash: &str) -> StoreError {
    match restore_error(snap_dir, root, hash) {
        RestoreError::Snapshot(e) => e,
        other => panic!("not the store's error: {other:#}"),
    }
}

#[test]
fn bad_snapshots_are_refused_with_clear_errors() {
    let w = worker();
    let t = tier("bad");
    let (snap, _) = w.deploy("helloworld", &t).unwrap();
    let (root, hash) = (w.root.path.as_path(), w.root.hash.as_str());

    let d = t.path.join("truncated");
    let s = copy_snapshot(&snap, &d);
    let img = s.memory_path();
    let len = std::fs::metadata(&img).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&img)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let e = store_error(&d, root, hash);
    assert!(matches!(e, StoreError::Corrupt { .. }), "{e}");

    let d = t.path.join("state-corrupt");
    let s = copy_snapshot(&snap, &d);
    let st = s.dir.join("state.json");
    let mut data = std::fs::read(&st).unwrap();
    let mid = data.len() / 2;
    data[mid] ^= 0x01;
    std::fs::write(&st, &data).unwrap();
    let e = store_error(&d, root, hash);
    assert!(matches!(e, StoreError::Integrity { .. }), "{e}");

    let d = t.path.join("memory-corrupt");
    let s = copy_snapshot(&snap, &d);
    let mut data = std::fs::read(s.memory_path()).unwrap();
    data[4096 * 3 + 17] ^= 0xff;
    std::fs::write(s.memory_path(), &data).unwrap();
    let e = store_error(&d, root, hash);
    assert!(matches!(e, StoreError::Integrity { .. }), "{e}");

    let d = t.path.join("version");
    copy_snapshot(&snap, &d);
    rewrite_manifest(&d, |m| m["version"] = json!(999));
    let e = store_error(&d, root, hash);
    assert!(matches!(e, StoreError::Version { found: 999, .. }), "{e}");

    let d = t.path.join("not-json");
    copy_snapshot(&snap, &d);
    std::fs::write(d.join("manifest.json"), b"\x00garbage").unwrap();
    let e = store_error(&d, root, hash);
    assert!(matches!(e, StoreError::Corrupt { .. }), "{e}");

    // a root that changed (different hash) or vanished
    let e = restore_error(&snap.dir, root, &"0".repeat(64));
    assert!(
        matches!(&e, RestoreError::OtherRoot { given, .. } if given == &"0".repeat(64)),
        "{e}"
    );
    let e = restore_err(
        &snap.dir,
        std::path::Path::new("/nonexistent/thaw-root"),
        hash,
    );
    assert!(e.contains("missing"), "{e}");
    assert_nothing_leaked();
}

/// A copy of `snap` whose first file mapping points at `path` (with a
/// consistent checksum, so only the restorer can notice).
fn with_mapping_path(snap: &Snapshot, d: &std::path::Path, path: &str) -> Snapshot {
    with_state(snap, d, |state| {
        let vma = state.vmas.iter_mut().find(|v| v.path.is_some()).unwrap();
        vma.path = Some(path.into());
    })
}

#[test]
fn restore_failing_half_way_leaves_nothing_behind() {
    let w = worker();
    let t = tier("halfway");
    let (snap, _) = w.deploy("helloworld", &t).unwrap();
    // the restorer fails after the sandbox is built, and says at which step
    // and with which errno, through the typed error
    let cases = [
        // a file the root does not have: open fails
        ("bad-path", "/usr/lib/thaw-no-such-file.so", 5, libc::ENOENT),
        // a directory opens but cannot be mapped
        ("dir-path", "/usr/lib", 6, libc::ENODEV),
    ];
    for (name, path, want_step, want_errno) in cases {
        let s = with_mapping_path(&snap, &t.path.join(name), path);
        let cfg = SandboxConfig::default();
        let e = thaw_checkpoint::restore(RestoreArgs::new(
            &s,
            &w.root.path,
            &w.root.hash,
            StrategyKind::Eager,
            &cfg,
        ))
        .map(|_| ())
        .unwrap_err();
        let text = format!("{e:#}");
        match e {
            RestoreError::Restorer {
                step,
                step_name,
                errno,
                ..
            } => {
                assert_eq!((step, errno), (want_step, want_errno), "{name}: {text}");
                assert!(text.contains(step_name), "{text}");
            }
            other => panic!("{name}: not a restorer failure: {other:#}"),
        }
    }
    let e = restore_err(&t.path.join("bad-path"), &w.root.path, &w.root.hash);
    assert!(e.contains("opening a runtime file"), "{e}");
    assert!(e.contains("No such file or directory"), "the errno: {e}");
    assert_nothing_leaked();
}

#[test]
fn checkpoint_refuses_child_processes_and_extra_descriptors() {
    let w = worker();
    let t = tier("uncooperative");
    for (f, word) in [
        ("_test_child", "child process"),
        ("_test_leak_fd", "fd 4: inotify"),
    ] {
        let (mut sb, _) = w.start_fresh(f).unwrap();
        explicit(&mut sb, json!({}));
        let e = checkpoint(&mut sb, &t.path.join(f), f, &w.root.hash)
            .map(|_| ())
            .unwrap_err();
        let msg = format!("{e:#}");
        assert!(msg.contains(word), "{f}: {msg}");
        assert!(
            !t.path.join(f).exists(),
            "a refused checkpoint left a snapshot"
        );
    }
    // through the worker the refusal is a variant with every reason
    let (mut sb, _) = w.start_fresh("_test_child").unwrap();
    explicit(&mut sb, json!({}));
    match w.checkpoint_as(&mut sb, &t, "child-as", "_test_child") {
        Err(thaw_worker::WorkerError::NotCheckpointable(nc)) => {
            assert!(!nc.reasons.is_empty(), "{nc}");
        }
        other => panic!("not refused as not checkpointable: {:?}", other.map(|_| ())),
    }
}

fn escape_sandbox(cfg: &SandboxConfig) -> Sandbox {
    let w = worker();
    let (argv, env) = w.root.agent_command("_test_escape");
    let mut sb = Sandbox::start(cfg, &w.root.path, &argv, &env).unwrap();
    call(&mut sb, Request::Load);
    sb
}

fn assert_contained(sb: &mut Sandbox, attack: &str) {
    let out = explicit(sb, json!({"attack": attack}));
    assert_eq!(out["escaped"], false, "{attack}: {out}");
}

#[test]
fn hostile_code_is_contained_fresh_and_restored() {
    let w = worker();
    let cfg = SandboxConfig {
        memory_bytes: 256 << 20,
        ..SandboxConfig::default()
    };
    let mut sb = escape_sandbox(&cfg);
    let t = tier("escape");
    let (snap, _) = checkpoint(
        &mut sb,
        &t.path.join("escape"),
        "_test_escape",
        &w.root.hash,
    )
    .unwrap();
    let (mut restored, _) = thaw_checkpoint::restore(RestoreArgs::new(
        &snap,
        &w.root.path,
        &w.root.hash,
        StrategyKind::Mmap,
        &cfg,
    ))
    .unwrap();
    for attack in [
        "read_host",
        "ptrace",
        "network",
        "write_root",
        "mount",
        "fork_bomb",
    ] {
        assert_contained(&mut sb, attack);
        assert_contained(&mut restored, attack);
    }
    // past its memory limit the runtime dies; the worker reports it and goes on
    let e = sb
        .call(&Request::invoke_input(json!({"attack": "alloc"})), T)
        .unwrap_err();
    assert!(
        !sb.is_alive(),
        "sandbox survived allocating past its limit: {e:#}"
    );
    let msg = format!("{e:#}");
    assert!(
        msg.contains("OOM killer") && msg.contains("memory limit"),
        "an OOM kill must be reported as one: {msg}"
    );
    let (mut next, _) = w.start_fresh("helloworld").unwrap();
    w.check(
        "helloworld",
        InputSize::I,
        &invoke(&mut next, InputSize::I, T).unwrap().output,
    )
    .unwrap();
}

#[test]
fn hung_function_is_killed_and_reported() {
    let w = worker();
    let (mut sb, _) = w.start_fresh("_test_hang").unwrap();
    let e = sb
        .call(&Request::invoke_input(json!({})), Duration::from_secs(2))
        .unwrap_err();
    assert!(
        matches!(e, thaw_sandbox::SandboxError::Timeout { .. }),
        "{e:?}"
    );
    assert!(!sb.is_alive());
    assert!(sb.call(&Request::Health, T).is_err());
}

#[test]
fn unknown_function_and_size_get_clear_errors() {
    let w = worker();
    let e = w.start_fresh("no_such_fn").map(|_| ()).unwrap_err();
    assert!(
        matches!(&e, thaw_worker::WorkerError::UnknownFunction { name, .. } if name == "no_such_fn"),
        "{e:?}"
    );
    let (mut sb, _) = w.start_fresh("helloworld").unwrap();
    // a size the suite does not have, sent as it is (the library's sizes are typed)
    let e = sb
        .call(&Request::invoke_size("XL"), T)
        .map(|_| ())
        .unwrap_err();
    assert!(
        matches!(&e, thaw_sandbox::SandboxError::Agent(a) if a.kind() == thaw_sandbox::agent::ErrorKind::BadRequest),
        "{e:?}"
    );
    // a bad request does not hurt the instance
    w.check(
        "helloworld",
        InputSize::I,
        &invoke(&mut sb, InputSize::I, T).unwrap().output,
    )
    .unwrap();
}
