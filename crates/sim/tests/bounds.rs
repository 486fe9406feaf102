//! Bounded simulator input: line length, knob ranges, empty traces.

use std::path::{Path, PathBuf};
use thaw_sim::azure2021::Azure2021;
use thaw_sim::source::{Source, MAX_LINE_BYTES};

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("thaw-sim-bounds-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn cli(args: &[&str]) -> Result<(), thaw_sim::SimError> {
    thaw_sim::cli_main(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
}

/// The message of a run refused for its options or its input.
fn err_text(args: &[&str]) -> String {
    match cli(args) {
        Ok(()) => panic!("{args:?} was accepted"),
        Err(thaw_sim::SimError::Config(m) | thaw_sim::SimError::Input(m)) => m,
        Err(e) => panic!("{args:?}: not refused for its options or input: {e:#}"),
    }
}

/// Peak resident memory of this process, from /proc/self/status.
fn peak_rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = s.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn an_overlong_line_is_an_error_with_file_and_line() {
    let dir = tmpdir("long");
    let p = dir.join("t.csv");
    let mut text = String::from("app,func,end_timestamp,duration\na,f,1.0,0.5\n");
    text.push_str(&"x".repeat(MAX_LINE_BYTES + 10));
    text.push('\n');
    std::fs::write(&p, text).unwrap();
    let mut src = Azure2021::open(&p, 1, None, 0).unwrap();
    let mut got = None;
    for _ in 0..10 {
        match src.next_item() {
            Ok(Some(_)) => continue,
            Ok(None) => break,
            Err(e) => {
                got = Some(format!("{e:#}"));
                break;
            }
        }
    }
    let e = got.expect("an overlong line was read without an error");
    assert!(
        e.contains(&format!("{}:3: line longer", p.display())),
        "{e}"
    );
    // A line of exactly the limit (with its newline) is still read.
    let ok = dir.join("ok.csv");
    let mut text = String::from("app,func,end_timestamp,duration\n");
    let row = "a,f,1.0,0.5";
    text.push_str(row);
    text.push_str(&" ".repeat(MAX_LINE_BYTES - row.len() - 1));
    text.push('\n');
    std::fs::write(&ok, text).unwrap();
    let mut src = Azure2021::open(&ok, 1, None, 0).unwrap();
    assert!(matches!(
        src.next_item(),
        Ok(Some(thaw_sim::source::Item::Inv(_)))
    ));
}

#[test]
fn dev_zero_as_a_trace_fails_fast_in_bounded_memory() {
    let before = peak_rss_kib();
    let e = err_text(&["--quiet", "--trace", "/dev/zero", "--format", "azure2021"]);
    assert!(e.contains("/dev/zero:1: line longer"), "{e}");
    let dir = tmpdir("zero2019");
    std::os::unix::fs::symlink("/dev/zero", dir.join("invocations_per_function.csv")).unwrap();
    let e = err_text(&[
        "--quiet",
        "--trace",
        dir.to_str().unwrap(),
        "--format",
        "azure2019",
    ]);
    assert!(
        e.contains("invocations_per_function.csv:1: line longer"),
        "{e}"
    );
    let grown_mib = (peak_rss_kib().saturating_sub(before)) / 1024;
    assert!(grown_mib < 64, "peak memory grew by {grown_mib} MiB");
}

#[test]
fn knobs_out_of_range_are_rejected_naming_the_flag() {
    for (args, flag) in [
        (&["--hours", "1e18"][..], "--hours"),
        (&["--hours", "0"], "--hours"),
        (&["--rate-scale", "1e12"], "--rate-scale"),
        (&["--max-rate-per-min", "1e7"], "--max-rate-per-min"),
        (&["--functions", "1000000000"], "--functions"),
        (&["--mem-mb", "0"], "--mem-mb"),
        (&["--mem-mb", "2000000"], "--mem-mb"),
        (&["--max-concurrency", "0"], "--max-concurrency"),
    ] {
        let mut a = vec!["--quiet", "--functions", "10", "--hours", "0.01"];
        a.extend_from_slice(args);
        let e = err_text(&a);
        assert!(e.contains(flag), "{args:?}: {e}");
    }
    // The edges inside the range are accepted.
    cli(&[
        "--quiet",
        "--functions",
        "10",
        "--hours",
        "0.001",
        "--max-concurrency",
        "1",
        "--rate-scale",
        "1000",
        "--max-rate-per-min",
        "6000",
    ])
    .unwrap();
}

fn summary_of(args: &[&str], dir: &Path) -> serde_json::Value {
    let json = dir.join("out.json");
    let mut a = args.to_vec();
    a.extend_from_slice(&["--quiet", "--json", json.to_str().unwrap()]);
    cli(&a).unwrap();
    serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap()
}

#[test]
fn a_trace_without_invocations_warns() {
    let dir = tmpdir("empty");
    let t2021 = dir.join("empty.csv");
    std::fs::write(&t2021, "app,func,end_timestamp,duration\n").unwrap();
    let s = summary_of(
        &["--trace", t2021.to_str().unwrap(), "--format", "azure2021"],
        &dir,
    );
    assert_eq!(s["invocations"], 0);
    let w = s["warnings"].as_array().unwrap();
    assert_eq!(w.len(), 1, "{s}");
    assert!(w[0].as_str().unwrap().contains("no invocations"));

    // azure2019: a function whose every minute count is zero.
    let d2019 = dir.join("t2019");
    std::fs::create_dir_all(&d2019).unwrap();
    let mut inv = String::from("HashOwner,HashApp,HashFunction,Trigger");
    for m in 1..=1440 {
        inv.push_str(&format!(",{m}"));
    }
    inv.push_str("\no,a,f,http");
    inv.push_str(&",0".repeat(1440));
    inv.push('\n');
    std::fs::write(d2019.join("invocations_per_function_md.anon.d01.csv"), inv).unwrap();
    let s = summary_of(
        &["--trace", d2019.to_str().unwrap(), "--format", "azure2019"],
        &dir,
    );
    assert_eq!(s["invocations"], 0);
    assert_eq!(s["warnings"].as_array().unwrap().len(), 1, "{s}");

    // A trace with invocations carries no warning.
    let busy = dir.join("busy.csv");
    std::fs::write(&busy, "app,func,end_timestamp,duration\na,f,1.0,0.5\n").unwrap();
    let s = summary_of(
        &["--trace", busy.to_str().unwrap(), "--format", "azure2021"],
        &dir,
    );
    assert_eq!(s["invocations"], 1);
    assert!(s["warnings"].as_array().unwrap().is_empty(), "{s}");
}
