//! The shim's calls to the node daemon, without containerd: pods of one
//! image deploying at once make one version; a daemon that stays busy (a
//! function's or a root's lock held past its `lock_wait_ms`) is asked
//! again after each Retry-After until free, and given up on at the shim's
//! deadline naming what was busy.
mod common;

use common::*;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// An unpacked image root beside `base` holding an echo function, and the
/// function as the shim reads it from the image.
fn echo_function_root(base: &Path) -> (PathBuf, thaw_shim::daemon::Function) {
    let root = base.with_extension("root");
    std::fs::create_dir_all(root.join("function")).unwrap();
    std::fs::write(
        root.join("function/m.py"),
        "def handler(e):\n    return e\n",
    )
    .unwrap();
    let f = thaw_shim::daemon::Function {
        handler: "m.handler".into(),
        init: None,
        settings: json!({"memory_mb": 128}),
        root: None,
    };
    (root, f)
}

/// `ask` (with a 2.5 s deadline, the daemon's `lock_wait_ms` well under
/// it) fails as busy after more than one attempt, within its deadline,
/// its message naming each of `names`.
fn gives_up_busy<T: std::fmt::Debug>(
    ask: impl FnOnce() -> Result<T, thaw_shim::daemon::DaemonError>,
    names: &[&str],
) {
    let t = Instant::now();
    let e = ask().expect_err("the lock is held");
    let waited = t.elapsed();
    let msg = e.to_string();
    assert!(
        matches!(e, thaw_shim::daemon::DaemonError::Busy { attempts, .. } if attempts >= 2),
        "{msg}"
    );
    assert!(
        names.iter().all(|n| msg.contains(n)),
        "names {names:?} and the daemon's reason: {msg}"
    );
    assert!(
        waited >= Duration::from_millis(1000) && waited < Duration::from_secs(10),
        "bounded by its deadline: {waited:?}"
    );
}

#[test]
fn the_shims_deploy_gives_up_on_a_busy_daemon_at_its_deadline_naming_the_function() {
    let base = std::env::temp_dir().join(unique("shimbusy"));
    let daemon = Daemon::start_with(base.with_extension("home"), |c| c.limits.lock_wait_ms = 300);
    let (root, f) = echo_function_root(&base);
    let deploy = |deadline| {
        let mut steps = thaw_shim::service::Steps::new();
        thaw_shim::daemon::ensure_deployed_within(&daemon.socket(), &root, &f, &mut steps, deadline)
    };
    let name = deploy(Duration::from_secs(10))
        .expect("a first deploy")
        .name;
    let held = daemon.delete_and_hold(&name);
    gives_up_busy(
        || deploy(Duration::from_millis(2500)).map(|d| d.name),
        &[&name, "is busy"],
    );
    // once free, the same call deploys it
    drop(held);
    assert_eq!(
        deploy(Duration::from_secs(10)).expect("deployed").name,
        name
    );
    drop(daemon);
    let _ = std::fs::remove_dir_all(&root);
}

/// A root import the daemon answers busy (another import of the same key
/// holds it past `lock_wait_ms`): the shim asks again after Retry-After
/// until the key is free, and gives up at its deadline naming the root.
#[test]
fn the_shims_root_import_waits_out_a_busy_daemon_then_gives_up_at_its_deadline() {
    let base = std::env::temp_dir().join(unique("rootbusy"));
    let rootfs = base.join("rootfs");
    std::fs::create_dir_all(rootfs.join("usr/bin")).unwrap();
    std::fs::write(rootfs.join("usr/bin/python3"), "").unwrap();
    std::fs::set_permissions(
        rootfs.join("usr/bin/python3"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let daemon = Daemon::start_with(base.with_extension("home"), |c| {
        c.limits.lock_wait_ms = 200;
        c.image_roots_from = vec![base.clone()];
    });
    let key = "ab".repeat(32);
    let app = daemon.app();
    let hold = || {
        app.deploy_lock(&format!("root {key}"))
            .try_lock_owned()
            .expect("the root's import lock is free")
    };
    let import = |deadline| {
        thaw_shim::daemon::import_root_within(&daemon.socket(), &rootfs, Some(&key), deadline)
    };
    // held past the deadline: busy, named, after more than one attempt
    let held = hold();
    gives_up_busy(
        || import(Duration::from_millis(2500)),
        &[&key, "root filesystem", "busy"],
    );
    assert_eq!(daemon.imported_roots(), 0, "nothing copied meanwhile");
    // held for a while only: the import asks again and gets it
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1500));
        drop(held);
    });
    let t = Instant::now();
    assert_eq!(import(Duration::from_secs(20)).expect("imported"), key);
    assert!(
        t.elapsed() >= Duration::from_millis(1000),
        "it waited for the key: {:?}",
        t.elapsed()
    );
    release.join().unwrap();
    assert_eq!(daemon.imported_roots(), 1);
    drop(daemon);
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn pods_of_one_image_deploying_at_once_make_one_version() {
    let base = std::env::temp_dir().join(unique("shimonce"));
    let daemon = Daemon::start(base.with_extension("home"));
    let (root, f) = echo_function_root(&base);
    // three shims look the image up at once: none finds it, each deploys
    let names: Vec<String> = std::thread::scope(|s| {
        let pods: Vec<_> = (0..3)
            .map(|_| {
                s.spawn(|| {
                    let mut steps = thaw_shim::service::Steps::new();
                    thaw_shim::daemon::ensure_deployed(&daemon.socket(), &root, &f, &mut steps)
                        .expect("deployed")
                        .name
                })
            })
            .collect();
        pods.into_iter().map(|p| p.join().unwrap()).collect()
    });
    assert!(names.iter().all(|n| *n == names[0]), "{names:?}");
    let v = daemon.function(&names[0]);
    assert_eq!(v["version"], 1, "one version, not one per pod: {v}");
    drop(daemon);
    let _ = std::fs::remove_dir_all(&root);
}
