//! Compiles the freestanding restorer (src/restorer.c) into a static ELF linked
//! at RESTORER_BASE; the thaw binary embeds it and execs it from a memfd. Also
//! compiles and runs src/abi.c, which dumps plan.h's struct layout and step
//! table as Rust constants (OUT_DIR/abi.rs): lib.rs checks its #[repr(C)]
//! mirrors against them, so a plan.h that drifts from the Rust side fails the
//! build.
use std::{env, path::PathBuf, process::Command};

fn main() {
    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    let out = out_dir.join("restorer.elf");
    println!("cargo:rerun-if-changed=src/restorer.c");
    println!("cargo:rerun-if-changed=src/plan.h");
    println!("cargo:rerun-if-changed=src/abi.c");
    let cc = env::var("CC").unwrap_or_else(|_| "gcc".into());
    let status = Command::new(&cc)
        .args([
            "-O2",
            "-static",
            "-nostdlib",
            "-ffreestanding",
            "-fno-stack-protector",
            "-fno-asynchronous-unwind-tables",
            "-fPIE",
            "-no-pie",
            "-fcf-protection=none",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-Wl,-Ttext-segment=0x200000000",
            "-Wl,--build-id=none",
            "-Wl,-z,noexecstack",
            "-o",
        ])
        .arg(&out)
        .arg("src/restorer.c")
        .status()
        .unwrap_or_else(|e| panic!("cannot run {cc} to build the restorer: {e} (install gcc)"));
    assert!(status.success(), "building the restorer with {cc} failed");

    let dump = out_dir.join("abi-dump");
    let status = Command::new(&cc)
        .args(["-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&dump)
        .arg("src/abi.c")
        .status()
        .unwrap_or_else(|e| panic!("cannot run {cc} to build the ABI dump: {e}"));
    assert!(
        status.success(),
        "building the plan ABI dump with {cc} failed"
    );
    let rust = Command::new(&dump)
        .output()
        .unwrap_or_else(|e| panic!("running the plan ABI dump: {e}"));
    assert!(rust.status.success(), "the plan ABI dump failed");
    std::fs::write(out_dir.join("abi.rs"), rust.stdout).expect("writing abi.rs");
}
