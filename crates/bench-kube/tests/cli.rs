//! The `thaw-bench-kube` binary's arguments: what `thaw bench cri` and
//! `thaw bench kube` hand it. Bad ones are refused before anything starts.
use std::process::Command;

fn bench_kube(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_thaw-bench-kube"))
        .args(args)
        .output()
        .expect("running thaw-bench-kube")
}

#[test]
fn both_benchmarks_list_their_options() {
    for (command, option) in [("cri", "--cri-calls"), ("kube", "--two-nodes")] {
        let o = bench_kube(&[command, "--help"]);
        let help = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{command}: {o:?}");
        assert!(help.contains(option), "{command}: {help}");
    }
}

#[test]
fn bad_options_are_refused_naming_what_is_accepted() {
    for (args, named) in [
        (&["cri", "--cri-calls", "carrier-pigeon"][..], "grpc"),
        (&["kube", "--runs", "ten"][..], "--runs"),
        (&["cri", "--runs", "three"][..], "--runs"),
        (&["pods"][..], "unrecognized subcommand"),
    ] {
        let o = bench_kube(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(named), "{args:?}: {err}");
    }
}
