//! The runtime root: contents, layout, the content-addressed cache and reproducibility.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Instant;
use thaw_runtime::{default_home, ensure_root, RootInfo};

#[test]
fn cached_ensure_root_is_fast_and_changes_nothing() {
    let first = common::root();
    let dir_mtime = std::fs::metadata(&first.dir).unwrap().mtime_nsec();
    let t = Instant::now();
    let mut msgs = Vec::new();
    let again = ensure_root(&default_home(), &mut |m: &str| msgs.push(m.to_string())).unwrap();
    let el = t.elapsed();
    assert!(el.as_secs_f64() < 5.0, "cached ensure_root took {el:?}");
    assert_eq!(again.hash, first.hash);
    assert_eq!(again.path, first.path);
    assert_eq!(again.manifest, first.manifest);
    assert_eq!(
        std::fs::metadata(&first.dir).unwrap().mtime_nsec(),
        dir_mtime
    );
    assert!(!msgs.iter().any(|m| m.contains("unpacking")), "{msgs:?}");
    let opened = RootInfo::open(&default_home(), &first.hash).unwrap();
    assert_eq!(opened.manifest, first.manifest);
}

#[test]
fn root_layout_matches_the_contract() {
    let r = common::root();
    assert!(r.path.is_absolute());
    assert_eq!(r.hash.len(), 64);
    for d in ["dev", "proc", "tmp"] {
        let p = r.path.join(d);
        assert!(p.is_dir(), "/{d} missing");
        assert_eq!(std::fs::read_dir(&p).unwrap().count(), 0, "/{d} not empty");
    }
    for f in [
        "usr/bin/python3.11",
        "opt/thaw/agent.py",
        "opt/thaw/check.py",
        "opt/thaw/catalog.json",
        "opt/thaw/functions/_test_raise.py",
        "opt/thaw/functions/_test_hang.py",
        "opt/thaw/inputs/image_rotate/IV.jpg",
        "opt/thaw/inputs/lr_serving/model.pkl",
        "usr/lib/x86_64-linux-gnu/libblas.so.3",
        "usr/lib/x86_64-linux-gnu/liblapack.so.3",
        "etc/ld.so.cache",
        // the basic tools a function may run (coreutils)
        "bin/cat",
        "usr/bin/sleep",
        "usr/bin/ls",
    ] {
        assert!(r.path.join(f).exists(), "/{f} missing");
    }
    for pkg in [
        "python3-numpy",
        "python3-sklearn",
        "python3-pil",
        "python3-networkx",
        "python3-chameleon",
        "python3-pyaes",
        "python3.11",
        "coreutils",
        "nodejs",
        "node-pako",
    ] {
        assert!(
            r.manifest.packages.iter().any(|(n, _, _)| n == pkg),
            "{pkg} not in the manifest"
        );
    }
    // No build tools slipped in.
    for pkg in [
        "gcc-12",
        "g++-12",
        "perl",
        "python3-pythran",
        "libboost1.74-dev",
    ] {
        assert!(
            !r.manifest.packages.iter().any(|(n, _, _)| n == pkg),
            "{pkg} in the root"
        );
    }
    // Everything readable by uid 65534.
    let mut stack = vec![r.path.clone()];
    let mut n = 0;
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let m = std::fs::symlink_metadata(e.path()).unwrap();
            if m.file_type().is_symlink() {
                continue;
            }
            let mode = m.permissions().mode();
            assert!(
                mode & 0o004 != 0,
                "{} not world-readable",
                e.path().display()
            );
            if m.is_dir() {
                assert!(
                    mode & 0o001 != 0,
                    "{} not world-searchable",
                    e.path().display()
                );
                stack.push(e.path());
            }
            n += 1;
        }
    }
    assert!(n > 1000);
    let (argv, env) = r.agent_command("matmul");
    assert!(argv[0].starts_with('/'));
    assert!(r.path.join(argv[0].trim_start_matches('/')).exists());
    for (k, v) in [
        ("OPENBLAS_NUM_THREADS", "1"),
        ("OMP_NUM_THREADS", "1"),
        ("PYTHONDONTWRITEBYTECODE", "1"),
        ("HOME", "/tmp"),
    ] {
        assert!(
            env.iter().any(|(a, b)| a == k && b == v),
            "env lacks {k}={v}"
        );
    }
    assert_eq!(argv.last().unwrap(), "matmul");
    // Node functions get the Node agent, its thread pools pinned
    assert_eq!(
        r.runtime_of("node_helloworld"),
        thaw_runtime::Runtime::Nodejs
    );
    assert_eq!(r.runtime_of("matmul"), thaw_runtime::Runtime::Python);
    let (argv, env) = r.agent_command("node_helloworld");
    assert_eq!(argv[0], thaw_runtime::NODE);
    assert!(r.path.join(argv[0].trim_start_matches('/')).exists());
    assert!(argv.iter().any(|a| a == "/opt/thaw/agent.js"));
    assert!(env
        .iter()
        .any(|(a, b)| a == "UV_THREADPOOL_SIZE" && b == "1"));
}

#[test]
fn open_rejects_missing_and_mismatched_roots() {
    let r = common::root();
    let home = default_home();
    let e = RootInfo::open(&home, &"0".repeat(64))
        .unwrap_err()
        .to_string();
    assert!(e.contains("not built"), "{e}");
    assert!(RootInfo::open(&home, "abc").is_err());
    // A root directory whose manifest names another hash.
    let tmp = tempdir("open");
    let fake = thaw_runtime::roots_dir(&tmp).join("f".repeat(64));
    std::fs::create_dir_all(fake.join("root")).unwrap();
    std::fs::copy(r.dir.join("manifest.json"), fake.join("manifest.json")).unwrap();
    let e = RootInfo::open(&tmp, &"f".repeat(64))
        .unwrap_err()
        .to_string();
    assert!(e.contains("names hash"), "{e}");
    std::fs::remove_dir_all(&tmp).unwrap();
}

fn tempdir(tag: &str) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("thaw-rt-test-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    p
}

/// Rebuilds the root from scratch in a second home (sharing only the downloaded .debs)
/// and checks that the same inputs give the same hash and the same tree, byte for
/// byte; then that verify_full notices a change.
#[test]
fn rebuild_from_scratch_is_reproducible() {
    let r = common::root();
    let home2 = tempdir("rebuild");
    std::fs::create_dir_all(home2.join("runtime")).unwrap();
    let debs = default_home().join("runtime/debs");
    std::os::unix::fs::symlink(&debs, home2.join("runtime/debs")).unwrap();
    let t = Instant::now();
    let mut progress = |m: &str| {
        if !m.contains("unpacking") {
            eprintln!("rebuild: {m}")
        }
    };
    let r2 = ensure_root(&home2, &mut progress).unwrap();
    eprintln!("rebuild took {:.1}s", t.elapsed().as_secs_f64());
    assert_eq!(r2.hash, r.hash, "same inputs, different input hash");
    assert_eq!(
        r2.manifest.tree_hash, r.manifest.tree_hash,
        "same inputs, different tree: the build is not reproducible"
    );
    assert_eq!(r2.manifest.size_bytes, r.manifest.size_bytes);
    // Tamper with the copy: verify_full must notice.
    let victim = r2.path.join("opt/thaw/functions/helloworld.py");
    let mut text = std::fs::read_to_string(&victim).unwrap();
    text.push_str("\n# tampered\n");
    std::fs::write(&victim, text).unwrap();
    let e = r2.verify_full().unwrap_err().to_string();
    assert!(e.contains("changed since it was built"), "{e}");
    // And a half-built directory never looks valid.
    let half = thaw_runtime::roots_dir(&home2).join("a".repeat(64));
    std::fs::create_dir_all(half.join("root")).unwrap();
    assert!(RootInfo::open(&home2, &"a".repeat(64)).is_err());
    std::fs::remove_dir_all(&home2).unwrap();
    assert!(!Path::new(&home2).exists());
}

#[test]
fn verify_full_accepts_the_built_root() {
    let r = common::root();
    let t = Instant::now();
    r.verify_full().unwrap();
    eprintln!("verify_full took {:.1}s", t.elapsed().as_secs_f64());
}
