//! Snapshots of runtimes holding descriptors: every kind a snapshot keeps
//! comes back with its content, position and flags, with each strategy;
//! what cannot come back is refused by name; a state with a bad descriptor
//! record is refused when read. Real sandboxes on the real runtime root.
mod common;
use common::*;
use serde_json::{json, Value};
use thaw_checkpoint::{checkpoint, RestoreError};
use thaw_sandbox::Sandbox;
use thaw_snapshot_format::{FdKind, SavedFd, StateError};
use thaw_store::Snapshot;
use thaw_worker::RestoreRequest;
use thaw_worker::StrategyKind;

fn snapshot_of(f: &str, tag: &str) -> (Sandbox, Snapshot, TestTier) {
    let w = worker();
    let t = tier(tag);
    let (mut fresh, _) = w.start_fresh(f).unwrap();
    let dir = w.snapshot_dir(&t, f);
    let (snap, rep) = checkpoint(&mut fresh, &dir, f, &w.root.hash)
        .unwrap_or_else(|e| panic!("checkpoint of {f}: {e:#}"));
    assert!(rep.saved_fds > 0, "{f}: no descriptor saved");
    (fresh, snap, t)
}

/// What `_test_fds` must see on its first call, fresh or restored.
fn check_fds(out: &Value, what: &str) {
    let want = json!({
        "epoll": [["eventfd", 1], ["pipe", 1], ["socket", 1]],
        "root_file": [100, true],
        "dup_shares_offset": [110, true, 115],
        "tmp_file": [4, "456"],
        "append": ["init;call;", true],
        "dir": true,
        "devices": [1, true, 16],
        "pipe": ["pipe-data", false, true, false],
        "pipe_again": "again",
        "pipe_reversed": "reversed",
        "pipe_64k": [65536, true, false],
        "eventfd": [[1, 1, 1], 42],
        "timer_far": true,
        "timer_ticks": true,
        "signalfd": 12,
        "memfd": [6, "content", 2],
        "memfd_sealed": true,
        "socketpair": ["to-b", "to-a"],
        "socketpair_again": "ping",
        "listen": ["hello", "\u{0}thaw-test-fds"],
        "dgram": [1, 2],
    });
    for (k, v) in want.as_object().unwrap() {
        assert_eq!(&out[k], v, "{what}: {k} in {out}");
    }
}

#[test]
fn every_descriptor_kind_comes_back_with_its_content_and_position() {
    let w = worker();
    let (mut fresh, snap, _t) = snapshot_of("_test_fds", "fds");
    // the original goes on after its snapshot, with everything as it was
    check_fds(&explicit(&mut fresh, json!({})), "original");
    drop(fresh);
    for round in 0..2 {
        for s in STRATEGIES {
            let what = format!("{s} (round {round})");
            let (mut sb, _) = w
                .restore(RestoreRequest::new(&snap, s))
                .unwrap_or_else(|e| panic!("{what}: {e:#}"));
            check_fds(&explicit(&mut sb, json!({})), &what);
        }
    }
}

#[test]
fn a_fifo_of_tmp_comes_back_with_its_unread_bytes() {
    use std::os::unix::fs::PermissionsExt;
    let w = worker();
    let t = tier("fds-fifo");
    let (mut fresh, _) = w.start_fresh("_test_fifo").unwrap();
    // the function cannot make one (no mknod): made from outside, as its own
    let host = format!("/proc/{}/root/tmp/fifo", fresh.pid());
    let c = std::ffi::CString::new(host.clone()).unwrap();
    // SAFETY: mkfifo with a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o640) }, 0);
    let uid = fresh.uid();
    std::os::unix::fs::chown(&host, Some(uid), Some(uid)).unwrap();
    std::fs::set_permissions(&host, std::fs::Permissions::from_mode(0o640)).unwrap();
    assert_eq!(explicit(&mut fresh, json!({"open": true}))["opened"], true);
    let dir = t.path.join("fifo");
    let (snap, rep) = checkpoint(&mut fresh, &dir, "_test_fifo", &w.root.hash)
        .unwrap_or_else(|e| panic!("checkpoint with a FIFO: {e:#}"));
    assert_eq!(rep.saved_fds, 2);
    let want = json!({"read": "fifo-data", "again": "more", "mode": "0o10640"});
    assert_eq!(explicit(&mut fresh, json!({})), want, "original");
    drop(fresh);
    for s in [StrategyKind::Eager, StrategyKind::Uffd, StrategyKind::Mmap] {
        let (mut sb, _) = w
            .restore(RestoreRequest::new(&snap, s))
            .unwrap_or_else(|e| panic!("{s}: {e:#}"));
        assert_eq!(explicit(&mut sb, json!({})), want, "{s}");
    }
}

#[test]
fn a_descriptor_a_snapshot_cannot_keep_is_refused_by_name() {
    let w = worker();
    let t = tier("fds-refused");
    let (mut sb, _) = w.start_fresh("_test_leak_fd").unwrap();
    explicit(&mut sb, json!({}));
    let dir = t.path.join("leak");
    let e = checkpoint(&mut sb, &dir, "_test_leak_fd", &w.root.hash)
        .map(|_| ())
        .unwrap_err();
    let msg = format!("{e:#}");
    assert!(msg.contains("inotify"), "{msg}");
    assert!(msg.contains("a deleted file"), "{msg}");
    assert!(!dir.exists(), "a refused checkpoint left a snapshot");
    // the instance lives on, unchanged
    assert_eq!(explicit(&mut sb, json!({}))["open"], 2);
}

#[test]
fn a_bad_descriptor_record_is_refused_when_the_snapshot_is_read() {
    let w = worker();
    let (fresh, snap, t) = snapshot_of("_test_fds", "fds-corrupt");
    drop(fresh);
    let state = thaw_snapshot_format::ProcessState::decode(&snap.load_state().unwrap()).unwrap();
    let pos = |k: fn(&FdKind) -> bool| state.fds.iter().position(|f| k(&f.kind)).unwrap();
    let file = pos(|k| matches!(k, FdKind::File { .. }));
    let pipe = pos(|k| matches!(k, FdKind::Pipe { unread, .. } if unread.len > 0));
    type Edit = Box<dyn Fn(&mut Vec<SavedFd>)>;
    let cases: Vec<(&str, Edit, &str)> = vec![
        ("control-socket", Box::new(|f| f[0].fd = 3), "one of 0-3"),
        ("twice", Box::new(|f| f[1].fd = f[0].fd), "a duplicate"),
        (
            "escape",
            Box::new(move |f| {
                f[file].kind = FdKind::File {
                    path: "/tmp/../etc/shadow".into(),
                    pos: 0,
                }
            }),
            "not a plain path",
        ),
        (
            "outside-image",
            Box::new(move |f| {
                if let FdKind::Pipe { unread, .. } = &mut f[pipe].kind {
                    unread.image_off = 0;
                }
            }),
            "not after the pages",
        ),
        ("flags", Box::new(|f| f[0].flags |= 0o100), "unknown flags"),
    ];
    for (tag, edit, want) in cases {
        let bad = with_state(&snap, &t.path.join(tag), |s| edit(&mut s.fds));
        let e = match w.restore(RestoreRequest::new(&bad, StrategyKind::Eager)) {
            Ok(_) => panic!("{tag}: a bad descriptor record restored"),
            Err(RestoreError::State {
                source: StateError::Corrupt(e),
                ..
            }) => e,
            Err(e) => panic!("{tag}: not refused as a corrupt state: {e:#}"),
        };
        assert!(e.contains("descriptor") && e.contains(want), "{tag}: {e}");
    }
}

#[test]
fn a_restorer_that_cannot_recreate_a_descriptor_names_it() {
    let w = worker();
    let (fresh, snap, t) = snapshot_of("_test_fds", "fds-missing");
    drop(fresh);
    let state = thaw_snapshot_format::ProcessState::decode(&snap.load_state().unwrap()).unwrap();
    let tmp = state
        .fds
        .iter()
        .find(|f| matches!(&f.kind, FdKind::File { path, .. } if path == "/tmp/data.txt"))
        .unwrap()
        .fd;
    // a plain path that the restored /tmp does not hold: the restore fails
    // before the runtime resumes, naming the descriptor and the step
    let bad = with_state(&snap, &t.path.join("missing"), |s| {
        for f in &mut s.fds {
            if f.fd == tmp {
                f.kind = FdKind::File {
                    path: "/tmp/not-there.txt".into(),
                    pos: 0,
                };
            }
        }
    });
    let e = match w.restore(RestoreRequest::new(&bad, StrategyKind::Eager)) {
        Ok(_) => panic!("a descriptor of a missing file restored"),
        Err(e) => format!("{e:#}"),
    };
    assert!(
        e.contains("recreating a descriptor") && e.contains(&format!("(fd {tmp})")),
        "{e}"
    );
    assert!(e.contains("No such file"), "{e}");
}

/// Descriptors of the open file table a Node.js process holds at rest.
fn fd_kinds(pid: i32) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_str().unwrap().parse::<i32>().unwrap() > 3)
        .map(|e| {
            let l = std::fs::read_link(e.path()).unwrap();
            let l = l.to_string_lossy();
            l.split(':').next().unwrap().to_string()
        })
        .collect();
    out.sort();
    out
}

#[test]
fn node_functions_snapshot_and_restore_with_every_strategy() {
    use thaw_worker::{invoke, InputSize};
    let w = worker();
    for f in ["node_helloworld", "node_compress"] {
        let t = tier(&format!("fds-{f}"));
        let (mut fresh, _) = w.start_fresh(f).unwrap();
        let size = InputSize::I;
        let want = invoke(&mut fresh, size, T).unwrap().output;
        w.check(f, size, &want).unwrap();
        let kinds = fd_kinds(fresh.pid());
        let dir = w.snapshot_dir(&t, f);
        let (snap, rep) = checkpoint(&mut fresh, &dir, f, &w.root.hash)
            .unwrap_or_else(|e| panic!("checkpoint of {f}: {e:#}"));
        // libuv's epoll, eventfd and signal pipe at least
        assert!(rep.saved_fds >= 3, "{f}: {} descriptors", rep.saved_fds);
        drop(fresh);
        for s in STRATEGIES {
            for _ in 0..2 {
                let (mut sb, _) = w
                    .restore(RestoreRequest::new(&snap, s))
                    .unwrap_or_else(|e| panic!("{f} {s}: {e:#}"));
                assert_eq!(fd_kinds(sb.pid()), kinds, "{f} {s}");
                let out = invoke(&mut sb, size, T).unwrap().output;
                w.check(f, size, &out)
                    .unwrap_or_else(|e| panic!("{f} {s}: {e:#}"));
                // a second call: the event loop keeps working
                let out = invoke(&mut sb, size, T).unwrap().output;
                w.check(f, size, &out).unwrap();
            }
        }
    }
}

/// A restored Node.js instance snapshots again (the restorer's trampoline,
/// left mapped because it has several threads, is left out), and what that
/// snapshot restores answers as the first generation did.
#[test]
fn a_restored_node_instance_snapshots_again() {
    use thaw_worker::{invoke, InputSize};
    let w = worker();
    let f = "node_helloworld";
    let size = InputSize::I;
    let t = tier("node-again");
    let snap = w.snapshot(f, &t).unwrap();
    // eager: a mapped image could not be snapshotted again
    let (mut sb, _) = w
        .restore(RestoreRequest::new(&snap, StrategyKind::Eager))
        .unwrap();
    w.check(f, size, &invoke(&mut sb, size, T).unwrap().output)
        .unwrap();
    let (again, rep) = checkpoint(&mut sb, &t.path.join("again"), f, &w.root.hash)
        .unwrap_or_else(|e| panic!("checkpoint of a restored {f}: {e:#}"));
    assert!(rep.saved_fds >= 3, "{rep:?}");
    // the original goes on
    w.check(f, size, &invoke(&mut sb, size, T).unwrap().output)
        .unwrap();
    for s in [StrategyKind::Eager, StrategyKind::Mmap] {
        let (mut sb2, _) = w
            .restore(RestoreRequest::new(&again, s))
            .unwrap_or_else(|e| panic!("second generation {s}: {e:#}"));
        for _ in 0..2 {
            w.check(f, size, &invoke(&mut sb2, size, T).unwrap().output)
                .unwrap_or_else(|e| panic!("second generation {s}: {e:#}"));
        }
    }
}

/// V8 keeps the code it generates in executable memory, and the DRAM tier's
/// tmpfs is mounted `noexec`: a split whose fast file is there restores all
/// the same (the executable pages copied from it, not mapped), with the
/// answers of a fresh instance, call after call.
#[test]
fn a_node_function_restores_tiered_from_the_noexec_dram_tier() {
    use thaw_memory::tiering::CostParams;
    use thaw_worker::{invoke, InputSize};
    let w = worker();
    let f = "node_helloworld";
    let size = InputSize::I;
    let fast = dram_tier("node-tiered");
    let slow = disk_tier("node-tiered-slow");
    let snap = w.snapshot(f, &fast).unwrap();
    // SAFETY: statvfs fills the zeroed struct; the path is NUL-terminated.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    let dir = std::ffi::CString::new(snap.dir.to_str().unwrap()).unwrap();
    // SAFETY: as above.
    assert_eq!(unsafe { libc::statvfs(dir.as_ptr(), &mut st) }, 0);
    assert_ne!(
        st.f_flag & libc::ST_NOEXEC,
        0,
        "the DRAM tier is not noexec"
    );
    w.make_tiered(f, &fast, &slow, &[size], 1, &CostParams::default())
        .unwrap();
    for _ in 0..3 {
        let (mut sb, rep) = w
            .restore(RestoreRequest::new(&snap, StrategyKind::Tiered))
            .unwrap_or_else(|e| panic!("{f} tiered: {e:#}"));
        assert_eq!(rep.strategy, StrategyKind::Tiered, "{rep:?}");
        assert!(rep.figures.tier_warning.is_empty(), "{rep:?}");
        assert!(rep.copied_bytes > 0, "no executable page copied: {rep:?}");
        for _ in 0..2 {
            let out = invoke(&mut sb, size, T).unwrap().output;
            w.check(f, size, &out)
                .unwrap_or_else(|e| panic!("{f} tiered: {e:#}"));
        }
    }
}
