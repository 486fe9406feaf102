//! Helpers shared by the worker's integration tests.
#![allow(dead_code)]
use serde_json::Value;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;
use thaw_sandbox::agent::{Reply, Request};
use thaw_sandbox::Sandbox;
use thaw_store::Tier;
use thaw_worker::Worker;

pub const T: Duration = Duration::from_secs(60);

pub fn worker() -> &'static Worker {
    static W: OnceLock<Worker> = OnceLock::new();
    W.get_or_init(|| {
        // SAFETY: geteuid has no preconditions.
        assert_eq!(
            unsafe { libc::geteuid() },
            0,
            "these tests need root (namespaces, ptrace, cgroups, userfaultfd)"
        );
        let home = thaw_runtime::default_home();
        Worker::new(&home, &mut |m| eprintln!("runtime: {m}")).expect("runtime root")
    })
}

/// A private tmpfs-backed tier per test, so parallel tests never share snapshots.
pub fn tier(tag: &str) -> Tier {
    let path = PathBuf::from(format!("/dev/shm/thaw-test-{}/{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&path);
    Tier {
        name: "tmpfs",
        path,
        emulated: false,
        description: "test tmpfs",
    }
}

/// A private tier on the machine's disk (/var/tmp), a block tier.
pub fn disk_tier(tag: &str) -> Tier {
    let path = PathBuf::from(format!("/var/tmp/thaw-test-{}/{tag}", std::process::id()));
    thaw_store::secure::remove_tree(&path).expect("removing an old test tier");
    Tier {
        name: "disk",
        path,
        emulated: false,
        description: "test disk",
    }
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
