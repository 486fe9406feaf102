//! The snapshot store under a real worker: redeploys racing restores,
//! images that cannot change after verification, checkpoint refusing what
//! cannot restore, sandboxes in their own session.
mod common;
use common::*;
use serde_json::json;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use thaw_checkpoint::checkpoint;
use thaw_store::secure;
use thaw_worker::invoke;
use thaw_worker::InputSize;
use thaw_worker::RestoreRequest;
use thaw_worker::StrategyKind;

#[test]
fn restores_racing_redeploys_see_old_or_new_whole() {
    let w = worker();
    let t = tier("redeploy-race");
    let first = w.snapshot("helloworld", &t).unwrap().manifest.id;
    let done = AtomicBool::new(false);
    let restores = AtomicUsize::new(0);
    let mut ids = vec![first];
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                while !done.load(Ordering::Relaxed) {
                    let snap = w.snapshot("helloworld", &t).unwrap();
                    for strategy in [StrategyKind::Mmap, StrategyKind::Eager] {
                        let (mut sb, _) = w
                            .restore(RestoreRequest::new(&snap, strategy))
                            .unwrap_or_else(|e| panic!("restore of {}: {e:#}", snap.dir.display()));
                        let out = invoke(&mut sb, InputSize::I, T).unwrap();
                        w.check("helloworld", InputSize::I, &out.output).unwrap();
                        restores.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
        for _ in 0..4 {
            let (snap, _) = w.deploy("helloworld", &t).unwrap();
            ids.push(snap.manifest.id.clone());
        }
        done.store(true, Ordering::Relaxed);
    });
    assert!(
        restores.load(Ordering::Relaxed) >= 4,
        "the readers never ran"
    );
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 5, "every deploy is a new version: {ids:?}");
    // no reader holds the old versions any more: one publish later only the
    // current one is left
    let cur = w.deploy("helloworld", &t).unwrap().0;
    let versions = std::fs::read_dir(cur.dir.parent().unwrap())
        .unwrap()
        .count();
    assert_eq!(versions, 1, "old versions were not removed");
}

#[test]
fn a_changed_image_is_sealed_away_or_an_integrity_error() {
    let w = worker();
    for t in [tier("integrity"), disk_tier("integrity")] {
        let snap = w.snapshot("helloworld", &t).unwrap();
        let (mut sb, _) = w
            .restore(RestoreRequest::new(&snap, StrategyKind::Mmap))
            .unwrap();
        w.check(
            "helloworld",
            InputSize::I,
            &invoke(&mut sb, InputSize::I, T).unwrap().output,
        )
        .unwrap();
        drop(sb);
        // change every byte of one page in the middle, put the mtime back
        let path = snap.memory_path();
        let mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
        let on_disk = t.name == "disk";
        if on_disk {
            let write = std::fs::OpenOptions::new().write(true).open(&path);
            assert_eq!(
                write.unwrap_err().raw_os_error(),
                Some(libc::EPERM),
                "a published block-tier image must be immutable"
            );
            secure::set_immutable(&path, false).unwrap();
        }
        let mut data = std::fs::read(&path).unwrap();
        let mid = data.len() / 2 / 4096 * 4096;
        for b in &mut data[mid..mid + 4096] {
            *b ^= 0x5a;
        }
        std::fs::write(&path, &data).unwrap();
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
        if on_disk {
            secure::set_immutable(&path, true).unwrap();
            let e = format!(
                "{:#}",
                w.restore(RestoreRequest::new(&snap, StrategyKind::Mmap))
                    .err()
                    .unwrap()
            );
            assert!(
                e.contains("integrity") && e.contains(&*path.to_string_lossy()),
                "{e}"
            );
            drop(snap);
            secure::remove_tree(t.path.parent().unwrap()).unwrap();
        } else {
            // served from the sealed memfd verified before the change
            for strategy in [StrategyKind::Mmap, StrategyKind::Eager, StrategyKind::Uffd] {
                let (mut sb, _) = w.restore(RestoreRequest::new(&snap, strategy)).unwrap();
                let out = invoke(&mut sb, InputSize::I, T).unwrap();
                w.check("helloworld", InputSize::I, &out.output).unwrap();
            }
        }
    }
}

#[test]
fn checkpoint_refuses_a_file_mapped_from_private_tmp() {
    let w = worker();
    let t = tier("tmp-map");
    let (mut sb, _) = w.start_fresh("_test_tmp_map").unwrap();
    assert_eq!(explicit(&mut sb, json!({}))["first"], "x");
    let dir = t.path.join("tmp-map");
    let e = checkpoint(&mut sb, &dir, "_test_tmp_map", &w.root.hash)
        .map(|_| ())
        .unwrap_err();
    let msg = format!("{e:#}");
    assert!(
        msg.contains("scratch.bin") && msg.contains("read-only runtime root"),
        "{msg}"
    );
    assert!(!dir.exists(), "a refused checkpoint left a snapshot");
    // the runtime keeps serving
    assert_eq!(explicit(&mut sb, json!({}))["first"], "x");
}

#[test]
fn sandboxes_have_their_own_session_and_uid() {
    let w = worker();
    let (a, _) = w.start_fresh("helloworld").unwrap();
    let (b, _) = w.start_fresh("helloworld").unwrap();
    for sb in [&a, &b] {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", sb.pid())).unwrap();
        let f: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
        // fields 5 (pgrp) and 6 (sid), counted from 3 after the name
        let (pgrp, session): (i32, i32) = (f[2].parse().unwrap(), f[3].parse().unwrap());
        assert_eq!(
            (pgrp, session),
            (sb.pid(), sb.pid()),
            "a sandbox must lead its own session and process group"
        );
        // SAFETY: getpgrp has no preconditions.
        assert_ne!(pgrp, unsafe { libc::getpgrp() });
    }
    assert_ne!(a.uid(), b.uid(), "two live sandboxes share a uid");
    // their logs are private too
    let logs = &w.cfg.log_dir;
    assert_eq!(mode(logs), 0o700, "{}", logs.display());
    for sb in [&a, &b] {
        let log = logs.join(format!("{}.log", sb.id));
        assert_eq!(mode(&log), 0o600, "{}", log.display());
    }
}

fn mode(p: &std::path::Path) -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

#[test]
fn the_dram_tier_lives_under_home() {
    let w = worker();
    let t = w.tier("tmpfs").unwrap();
    assert!(t.path.starts_with(&w.home), "{}", t.path.display());
    assert!(secure::on_dram(t.path.parent().unwrap()).unwrap());
    secure::check_private_dir(t.path.parent().unwrap()).unwrap();
}

#[test]
fn gc_removes_slow_tier_files_of_vanished_versions_only() {
    let w = worker();
    let tiered = w.tier("disk").unwrap().path.join("tiered");
    let orphan = tiered.join("1-00000000deadbeef");
    let legacy = tiered.join(format!("legacy-layout-test-{}", std::process::id()));
    for d in [&orphan, &legacy] {
        secure::ensure_private_dir(d).unwrap();
        std::fs::write(d.join("slow.img"), b"x").unwrap();
    }
    let removed = w.gc().unwrap();
    assert!(removed.contains(&orphan), "{removed:?}");
    assert!(!orphan.exists());
    assert!(
        legacy.exists(),
        "files of another layout are not ours to remove"
    );
    secure::remove_tree(&legacy).unwrap();
}
