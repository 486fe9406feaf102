//! `thaw runtime`, `thaw sim` and `thaw load` as subcommands of the one binary: the global
//! `--home` reaches `runtime`, help and bad arguments go through one parser,
//! and `sim` still tells flags given from defaults (calibration precedence).
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const THAW: &str = env!("CARGO_BIN_EXE_thaw");

fn thaw(args: &[&str]) -> Output {
    Command::new(THAW).args(args).output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_string()
}

/// A scratch directory, removed when dropped, also when a test fails
/// (`remove_dir_all` removes a `runtime` symlink, never what it points to).
struct Tmp(PathBuf);

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl std::ops::Deref for Tmp {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

fn tmp(tag: &str) -> Tmp {
    let d = PathBuf::from(format!("/dev/shm/thaw-subcmd-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    Tmp(d)
}

/// A home whose runtime store is the shared, already built one.
fn home_with_root(tag: &str) -> Tmp {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "these tests need root");
    let h = tmp(tag);
    let shared = thaw_runtime::default_home().join("runtime");
    std::os::unix::fs::symlink(&shared, h.join("runtime")).unwrap();
    let out = thaw(&["--home", h.to_str().unwrap(), "runtime", "build"]);
    assert!(out.status.success(), "runtime build: {}", text(&out.stderr));
    h
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn home_before_runtime_is_honoured() {
    let with = home_with_root("with");
    let empty = tmp("empty");
    // $THAW_HOME names a home with a root and --home one without, or the
    // other way round: --home wins both times
    for (home, env) in [(&*with, &*empty), (&*empty, &*with)] {
        let out = Command::new(THAW)
            .env("THAW_HOME", env)
            .args(["--home", s(home), "runtime", "info"])
            .output()
            .unwrap();
        let (o, e) = (text(&out.stdout), text(&out.stderr));
        if home == &*with {
            assert!(out.status.success(), "{e}");
            assert!(o.starts_with("hash "), "{o}");
        } else {
            assert!(!out.status.success(), "{o}");
            assert!(e.contains(s(&empty)) && e.contains("not built"), "{e}");
        }
    }
    // after the subcommand too
    let out = Command::new(THAW)
        .env("THAW_HOME", &*with)
        .args(["runtime", "info", "--home", s(&empty)])
        .output()
        .unwrap();
    assert!(
        text(&out.stderr).contains(s(&empty)),
        "{}",
        text(&out.stderr)
    );
    assert!(!out.status.success());
}

#[test]
fn runtime_subcommands_parse_and_list() {
    let h = home_with_root("list");
    let home = ["--home", s(&h)];
    let out = thaw(&[&home[..], &["runtime", "functions"]].concat());
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("helloworld"));
    let out = thaw(&[&home[..], &["runtime", "verify"]].concat());
    assert!(
        text(&out.stdout).contains("manifest ok"),
        "{}",
        text(&out.stderr)
    );
    let out = thaw(&["runtime", "--help"]);
    assert!(out.status.success());
    for sub in ["build", "verify", "functions", "check", "info", "figures"] {
        assert!(text(&out.stdout).contains(sub), "help lacks {sub}");
    }
    for bad in [
        &["runtime", "bogus"][..],
        &["runtime", "check", "helloworld"],
    ] {
        let out = thaw(&[&home[..], bad].concat());
        assert_eq!(out.status.code(), Some(2), "{bad:?} was accepted");
        assert!(text(&out.stderr).contains("Usage"), "{}", text(&out.stderr));
    }
    // a checker's verdict through the binary
    let mut c = Command::new(THAW)
        .args([&home[..], &["runtime", "check", "helloworld", "I"]].concat())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    c.stdin
        .take()
        .unwrap()
        .write_all(br#"{"message": "Hello, Wrld!", "length": 5}"#)
        .unwrap();
    let out = c.wait_with_output().unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("message"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn sim_runs_sweeps_and_keeps_flags_over_calibration() {
    let d = tmp("sim");
    let calib = d.join("c.json");
    std::fs::write(&calib, r#"{"version": 1, "defaults": {"cold_ms": 500}}"#).unwrap();
    let base = ["sim", "--quiet", "--functions", "20", "--hours", "0.05"];
    let run = |extra: &[&str]| -> serde_json::Value {
        let j = d.join("o.json");
        let out = thaw(&[&base[..], extra, &["--json", s(&j)]].concat());
        assert!(out.status.success(), "{extra:?}: {}", text(&out.stderr));
        serde_json::from_str(&std::fs::read_to_string(&j).unwrap()).unwrap()
    };
    // the file's value, unless the flag is given (even at its default)
    let v = run(&["--calibration", s(&calib)]);
    assert_eq!(v["config"]["cold_ms"], 500.0);
    let v = run(&["--calibration", s(&calib), "--cold-ms", "250"]);
    assert_eq!(v["config"]["cold_ms"], 250.0);
    // a sweep: one row per combination
    let csv = d.join("t.csv");
    let out = thaw(&[
        "sim",
        "sweep",
        "--quiet",
        "--functions",
        "20",
        "--hours",
        "0.05",
        "--policy",
        "ttl,lru-mem",
        "--ram-gb",
        "1,2",
        "--csv",
        s(&csv),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(&csv).unwrap().lines().count(),
        1 + 4
    );
    // several values without `sweep`, and options before `sweep`, are refused
    let out = thaw(&["sim", "--quiet", "--ram-gb", "1,2"]);
    assert!(text(&out.stderr).contains("sweep"), "{}", text(&out.stderr));
    assert!(!out.status.success());
    let out = thaw(&["sim", "--quiet", "sweep"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(thaw(&["sim", "sweep", "--help"]).status.success());
}

#[test]
fn load_is_a_subcommand_of_the_one_parser() {
    let out = thaw(&["load", "--help"]);
    assert!(out.status.success());
    let help = text(&out.stdout);
    for flag in ["--target", "--rps", "--trace", "--records", "--home"] {
        assert!(help.contains(flag), "help lacks {flag}: {help}");
    }
    // clap's usage error (2) for a bad flag; a bad value is the command's own (1)
    let out = thaw(&["load", "--target", "unix:/x", "--bogus"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("Usage"), "{}", text(&out.stderr));
    let out = thaw(&[
        "load",
        "--target",
        "https://example.org",
        "--functions",
        "f",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("--target"),
        "{}",
        text(&out.stderr)
    );
    // the global --home is accepted on either side (load keeps no state)
    let d = tmp("load");
    for args in [
        &["--home", s(&d), "load", "--target", "http://127.0.0.1:1"][..],
        &["load", "--target", "http://127.0.0.1:1", "--home", s(&d)],
    ] {
        let tail = [
            "--functions",
            "f",
            "--rps",
            "1",
            "--requests",
            "1",
            "--quiet",
        ];
        let out = thaw(&[args, &tail[..]].concat());
        let e = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {e}");
        assert!(e.contains("cannot reach"), "{args:?}: {e}");
    }
}
