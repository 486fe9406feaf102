//! Shared by the integration tests: the runtime root, built once (or found in the
//! cache) under $THAW_HOME or /var/lib/thaw.
#![allow(dead_code)]

use std::sync::OnceLock;
use thaw_runtime::{default_home, ensure_root, RootInfo};

pub fn require_root_user() {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    assert_eq!(
        uid, 0,
        "these tests need root: building the runtime root (chroot, ownership) and running \
         the agent in a sandbox (namespaces, cgroups, uid changes)"
    );
}

pub fn root() -> &'static RootInfo {
    static ROOT: OnceLock<RootInfo> = OnceLock::new();
    ROOT.get_or_init(|| {
        require_root_user();
        let home = default_home();
        let mut progress = |m: &str| eprintln!("runtime build: {m}");
        ensure_root(&home, &mut progress).expect("build the runtime root")
    })
}
