//! The `thaw` binary against the store: concurrent first invocations, a
//! deploy killed at random points and the cleanup after it, closed and full
//! output streams, bad `--home` values, dax on a block tier.
//!
//! Each test gets its own home under /dev/shm whose `runtime` is the shared,
//! already built runtime store (a symlink), so tiers are private to the test.
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const THAW: &str = env!("CARGO_BIN_EXE_thaw");

fn home(tag: &str) -> PathBuf {
    home_on("/dev/shm", tag)
}

/// A test home on the filesystem of `fs_root` (its disk tier is there too).
fn home_on(fs_root: &str, tag: &str) -> PathBuf {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "these tests need root");
    let shared = thaw_runtime::default_home().join("runtime");
    let h = PathBuf::from(format!(
        "{fs_root}/thaw-cli-test-{}-{tag}",
        std::process::id()
    ));
    thaw_store::secure::remove_tree(&h).unwrap();
    thaw_store::secure::ensure_private_dir(&h).unwrap();
    std::os::unix::fs::symlink(&shared, h.join("runtime")).unwrap();
    // build (or find) the root once, through the symlink
    let out = thaw(&h, &["runtime", "build"]);
    assert!(out.status.success(), "runtime build: {}", text(&out.stderr));
    h
}

fn thaw(home: &Path, args: &[&str]) -> Output {
    Command::new(THAW)
        .arg("--home")
        .arg(home)
        .args(args)
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_string()
}

fn assert_no_panic(out: &Output, what: &str) {
    let err = text(&out.stderr);
    assert!(!err.contains("panicked"), "{what} panicked: {err}");
    assert_ne!(out.status.code(), Some(101), "{what} exited 101: {err}");
}

#[test]
fn eight_concurrent_first_invocations_all_succeed_five_times_over() {
    let h = home("first");
    for round in 0..5 {
        let dram = h.join("dram/snapshots");
        thaw_store::secure::remove_tree(&dram).unwrap();
        let kids: Vec<_> = (0..8)
            .map(|_| {
                Command::new(THAW)
                    .arg("--home")
                    .arg(&h)
                    .args(["invoke", "lr_serving", "--check"])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for k in kids {
            let out = k.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "round {round}: {}{}",
                text(&out.stdout),
                text(&out.stderr)
            );
            assert!(text(&out.stdout).contains("\"checked\":true"));
        }
        let list = thaw(&h, &["snapshot", "list"]);
        let listed = text(&list.stdout);
        assert_eq!(listed.lines().count(), 1, "one published version: {listed}");
    }
    thaw_store::secure::remove_tree(&h).unwrap();
}

/// Names in a directory that carry `pid` as their owner.
fn owned_by(dir: &Path, pid: u32) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            thaw_store::secure::parse_owner(&e.file_name().to_string_lossy())
                .is_some_and(|(p, _)| p == pid)
        })
        .map(|e| e.path())
        .collect()
}

/// Every entry below `dir` whose name starts with a dot (staging, trash, temp links).
fn hidden_below(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().to_string();
        if name.starts_with('.') && name != ".dram.lock" {
            out.push(p.clone());
        }
        if p.is_dir() && !p.is_symlink() {
            hidden_below(&p, out);
        }
    }
}

#[test]
fn a_deploy_killed_at_twenty_random_points_leaves_nothing_after_the_next_start() {
    let h = home("kill");
    // one whole deploy gives the window to kill in
    let t = Instant::now();
    let out = thaw(&h, &["deploy", "lr_serving", "--tier", "disk"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let window = t.elapsed();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let mut seed = u64::try_from(nanos).unwrap() | 1;
    let mut points = Vec::new();
    let (mut cleaned, mut staging_cleaned) = (0, 0);
    for i in 0..20 {
        // xorshift: a kill point anywhere in the deploy (and a bit past it)
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let at = window.mul_f64((seed % 1000) as f64 / 1000.0 * 1.1);
        points.push(at);
        let tier = if i % 2 == 0 { "tmpfs" } else { "disk" };
        let mut child = Command::new(THAW)
            .arg("--home")
            .arg(&h)
            .args(["deploy", "lr_serving", "--tier", tier])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let pid = child.id();
        std::thread::sleep(at);
        // SAFETY: signalling the child we spawned (not yet reaped).
        unsafe { libc::kill(pid.cast_signed(), libc::SIGKILL) };
        child.wait().unwrap();
        // the next start cleans up (`thaw gc` is a start that does only that)
        let gc = thaw(&h, &["gc"]);
        assert!(
            gc.status.success(),
            "gc after kill {i}: {}",
            text(&gc.stderr)
        );
        let gc_out = text(&gc.stdout);
        if gc_out.contains(".tmp-") {
            staging_cleaned += 1;
        }
        if gc_out.lines().count() > 1 {
            cleaned += 1;
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut left = Vec::new();
        loop {
            left.clear();
            for ctrl in ["memory", "pids"] {
                left.extend(owned_by(
                    Path::new(&format!("/sys/fs/cgroup/{ctrl}/thaw")),
                    pid,
                ));
            }
            left.extend(owned_by(Path::new("/run/thaw/logs"), pid));
            hidden_below(&h.join("snapshots"), &mut left);
            hidden_below(&h.join("dram"), &mut left);
            if left.is_empty() || Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
            thaw(&h, &["gc"]);
        }
        assert!(left.is_empty(), "kill {i} at {at:?}: left {left:?}");
        for tier in ["tmpfs", "disk"] {
            let list = text(&thaw(&h, &["snapshot", "list", "--tier", tier]).stdout);
            assert!(!list.contains("BROKEN"), "kill {i} at {at:?}: {list}");
        }
    }
    eprintln!(
        "deploy window {window:?}: {cleaned} of 20 kills left state for gc, {staging_cleaned} a half-written snapshot"
    );
    assert!(
        cleaned >= 3,
        "too few kills hit a deploy at work ({cleaned} of 20): the test does not test"
    );
    // and the store still works
    let out = thaw(&h, &["invoke", "lr_serving", "--check", "--tier", "disk"]);
    assert!(
        out.status.success(),
        "after the kills ({points:?}): {}",
        text(&out.stderr)
    );
    thaw_store::secure::remove_tree(&h).unwrap();
}

#[test]
fn closed_or_full_output_ends_cleanly() {
    let h = home("output");
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = Command::new(THAW)
        .arg("--home")
        .arg(&h)
        .args(["invoke", "helloworld"])
        .stdout(full)
        .output()
        .unwrap();
    assert_no_panic(&out, "invoke > /dev/full");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("No space left"),
        "{}",
        text(&out.stderr)
    );

    // stdout a pipe whose reader is gone: exit 141, like a shell's SIGPIPE
    for args in [
        &["deploy", "helloworld"][..],
        &["snapshot", "list"][..],
        &["runtime", "build"][..],
    ] {
        // the reader is gone before the command starts
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = Command::new(THAW)
            .arg("--home")
            .arg(&h)
            .args(args)
            .stdout(writer)
            .output()
            .unwrap();
        assert_no_panic(&out, &args.join(" "));
        assert_eq!(
            out.status.code(),
            Some(141),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    // stderr closed too (progress and warnings are dropped, the work is done)
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Command::new(THAW)
        .arg("--home")
        .arg(&h)
        .args(["invoke", "helloworld", "--tier", "disk"])
        .stderr(writer)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(text(&out.stdout).contains("helloworld"));
    thaw_store::secure::remove_tree(&h).unwrap();
}

#[test]
fn bad_homes_are_named() {
    let file = PathBuf::from(format!(
        "/dev/shm/thaw-cli-test-{}-file",
        std::process::id()
    ));
    std::fs::write(&file, b"").unwrap();
    let missing = PathBuf::from(format!(
        "/dev/shm/thaw-cli-test-{}-missing",
        std::process::id()
    ));
    for (h, want) in [(&file, "not a directory"), (&missing, "does not exist")] {
        for args in [&["invoke", "helloworld"][..], &["runtime", "verify"][..]] {
            let out = thaw(h, args);
            let err = text(&out.stderr);
            assert!(
                !out.status.success(),
                "{args:?} with --home {}",
                h.display()
            );
            assert!(
                err.contains(want) && err.contains(&*h.to_string_lossy()),
                "{err}"
            );
            assert!(!missing.exists(), "a missing home was created");
        }
    }
    std::fs::remove_file(&file).unwrap();
}

#[test]
fn dax_needs_a_byte_addressable_tier() {
    // a home on the machine's disk: its disk tier is a block device, and its
    // DRAM tier is the tmpfs thaw mounts at HOME/dram
    let h = home_on("/var/tmp", "dax");
    let out = thaw(
        &h,
        &[
            "invoke",
            "helloworld",
            "--strategy",
            "dax",
            "--tier",
            "disk",
        ],
    );
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("byte-addressable"), "{err}");
    let out = thaw(
        &h,
        &["invoke", "helloworld", "--strategy", "dax", "--check"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(thaw_store::secure::on_dram(&h.join("dram")).unwrap());
    thaw_store::Tier::unmount_dram(&h).unwrap();
    assert!(!thaw_store::secure::on_dram(&h.join("dram")).unwrap());
    thaw_store::secure::remove_tree(&h).unwrap();
}
