//! Helpers shared by the worker's integration tests.
#![allow(dead_code)]
use serde_json::Value;
use std::sync::OnceLock;
use std::time::Duration;
use thaw_sandbox::agent::{Reply, Request};
use thaw_sandbox::Sandbox;
use thaw_store::{Snapshot, Tier};
use thaw_worker::{RestoreRequest, StrategyKind, Worker};

pub const T: Duration = Duration::from_secs(60);

/// Every strategy a plain snapshot restores with (tiered needs a split).
pub const STRATEGIES: [thaw_worker::StrategyKind; 5] = [
    thaw_worker::StrategyKind::Eager,
    thaw_worker::StrategyKind::Mmap,
    thaw_worker::StrategyKind::Uffd,
    thaw_worker::StrategyKind::Reap,
    thaw_worker::StrategyKind::Dax,
];

pub fn worker() -> &'static Worker {
    static W: OnceLock<Worker> = OnceLock::new();
    W.get_or_init(|| {
        assert_eq!(
            // SAFETY: geteuid has no preconditions.
            unsafe { libc::geteuid() },
            0,
            "these tests need root (namespaces, ptrace, cgroups, userfaultfd)"
        );
        let home = thaw_runtime::default_home();
        Worker::new(&home, &mut |m| eprintln!("runtime: {m}")).expect("runtime root")
    })
}

/// A test's private tier; its directory is removed when the test drops it, so repeated
/// runs do not fill /dev/shm (RAM) or /var/tmp.
pub struct TestTier(Tier);

impl std::ops::Deref for TestTier {
    type Target = Tier;
    fn deref(&self) -> &Tier {
        &self.0
    }
}

impl Drop for TestTier {
    fn drop(&mut self) {
        let _ = thaw_store::secure::remove_tree(&self.0.path);
        // The per-process parent goes too once the last tier of this process is gone.
        if let Some(parent) = self.0.path.parent() {
            let _ = std::fs::remove_dir(parent);
        }
    }
}

/// A private tmpfs-backed tier per test, so parallel tests never share snapshots.
pub fn tier(tag: &str) -> TestTier {
    test_tier("/dev/shm", "tmpfs", "test tmpfs", tag)
}

/// A private tier on the machine's disk (/var/tmp), a block tier.
pub fn disk_tier(tag: &str) -> TestTier {
    test_tier("/var/tmp", "disk", "test disk", tag)
}

/// A private tier inside the home's own DRAM tier, whose tmpfs thaw mounts
/// `noexec` (unlike /dev/shm): files there cannot be mapped executable.
pub fn dram_tier(tag: &str) -> TestTier {
    let dram = worker().tier("tmpfs").expect("the DRAM tier");
    let root = dram.path.parent().expect("the DRAM tier's mount");
    test_tier(root, "tmpfs", "test DRAM tier", tag)
}

fn test_tier(
    root: impl AsRef<std::path::Path>,
    name: &'static str,
    description: &'static str,
    tag: &str,
) -> TestTier {
    let path = root
        .as_ref()
        .join(format!("thaw-test-{}", std::process::id()))
        .join(tag);
    thaw_store::secure::remove_tree(&path).expect("removing an old test tier");
    TestTier(Tier {
        name,
        path,
        emulated: false,
        description,
    })
}

pub fn call(sb: &mut Sandbox, req: Request) -> Reply {
    sb.call(&req, T).unwrap_or_else(|e| panic!("{req}: {e:#}"))
}

pub fn explicit(sb: &mut Sandbox, input: Value) -> Value {
    call(sb, Request::invoke_input(input))
        .into_invoke()
        .unwrap()
        .0
}

/// A copy of a snapshot's files in `dst`, opened.
pub fn copy_snapshot(src: &Snapshot, dst: &std::path::Path) -> Snapshot {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(&src.dir).unwrap().flatten() {
        std::fs::copy(e.path(), dst.join(e.file_name())).unwrap();
    }
    Snapshot::open(dst).unwrap()
}

/// Edits a snapshot's manifest in place (to make a tampered file's checksum consistent).
pub fn rewrite_manifest(dir: &std::path::Path, edit: impl FnOnce(&mut Value)) {
    let p = dir.join("manifest.json");
    let mut m: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    edit(&mut m);
    std::fs::write(&p, serde_json::to_vec(&m).unwrap()).unwrap();
}

/// A copy of `snap` in `d` whose process state `edit` changed, with
/// consistent checksums (so only the state's own checks can notice).
pub fn with_state(
    snap: &Snapshot,
    d: &std::path::Path,
    edit: impl FnOnce(&mut thaw_snapshot_format::ProcessState),
) -> Snapshot {
    let s = copy_snapshot(snap, d);
    let mut state = thaw_snapshot_format::ProcessState::decode(&s.load_state().unwrap()).unwrap();
    edit(&mut state);
    let bytes = state.encode();
    std::fs::write(d.join("state.json"), &bytes).unwrap();
    let sha = thaw_store::sha256_hex(&bytes);
    rewrite_manifest(d, |m| {
        m["state"]["sha256"] = serde_json::json!(sha);
        m["state"]["len"] = serde_json::json!(bytes.len());
    });
    Snapshot::open(d).unwrap()
}

/// Checkpoints `sb` (running `function`), which must be refused; returns the
/// refusal and checks that no snapshot was left behind.
pub fn refusal(sb: &mut Sandbox, t: &TestTier, function: &str) -> String {
    let w = worker();
    let dir = t.path.join(function);
    let e = thaw_checkpoint::checkpoint(sb, &dir, function, &w.root.hash)
        .map(|_| ())
        .unwrap_err();
    assert!(!dir.exists(), "a refused checkpoint left a snapshot");
    format!("{e:#}")
}

/// The strategies a plain snapshot restores with, besides `dax`.
pub const KINDS: [StrategyKind; 4] = [
    StrategyKind::Eager,
    StrategyKind::Mmap,
    StrategyKind::Uffd,
    StrategyKind::Reap,
];

/// The function's answer to its first invocation, with `ok` checked.
pub fn first_answer(sb: &mut Sandbox, what: &str, event: Value) -> Value {
    let out = explicit(sb, event);
    assert_eq!(out["ok"], true, "{what}: {out}");
    out
}

/// A fresh instance's first answer, then every restore's (each strategy,
/// twice for REAP: its recording run and a prefetching one), then the
/// answer of a restore of a snapshot taken of a restored instance: all
/// the same.
pub fn restores_answer_as_a_fresh_start(function: &str, tag: &str, event: Value) {
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
    let (again, _) = thaw_checkpoint::checkpoint(&mut sb, &dir, function, &w.root.hash)
        .unwrap_or_else(|e| panic!("{function}: checkpoint of a restored instance: {e:#}"));
    drop(sb);
    let (mut sb2, _) = w
        .restore(RestoreRequest::new(&again, StrategyKind::Mmap))
        .unwrap();
    let what = format!("{function} second generation");
    assert_eq!(first_answer(&mut sb2, &what, event), want, "{what}");
}
