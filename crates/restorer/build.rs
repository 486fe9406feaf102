//! Compiles the freestanding restorer (src/restorer.c) into a static ELF linked
//! at RESTORER_BASE; the thaw binary embeds it and execs it from a memfd.
use std::{env, path::PathBuf, process::Command};

fn main() {
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR")).join("restorer.elf");
    println!("cargo:rerun-if-changed=src/restorer.c");
    println!("cargo:rerun-if-changed=src/plan.h");
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
}
