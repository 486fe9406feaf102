//! `thaw bench cri` and `thaw bench kube`: run by `thaw-bench-kube`, a
//! binary built beside this one (`cargo build --release -p
//! thaw-bench-kube`; scripts/bench.sh builds it), which links the shim's
//! containerd/CRI harness so that `thaw` does not.
use anyhow::{bail, Context, Result};
use clap::Args;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The benchmark's own options, handed to `thaw-bench-kube` as they are.
#[derive(Args, Debug)]
#[command(disable_help_flag = true)]
pub struct BenchKubeArgs {
    /// `thaw bench cri --help` / `thaw bench kube --help` list them
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<OsString>,
}

/// `thaw bench cri` and `thaw bench kube` take the same pass-through args.
pub type BenchCriArgs = BenchKubeArgs;

/// `thaw-bench-kube` beside this binary.
fn bench_binary() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("locating the thaw binary")?;
    let bin = exe.with_file_name("thaw-bench-kube");
    if !bin.is_file() {
        bail!(
            "{} is missing: the Kubernetes benchmarks are a binary of their own (cargo build --release -p thaw-bench-kube; scripts/bench.sh builds it)",
            bin.display()
        );
    }
    Ok(bin)
}

/// Runs `thaw-bench-kube --home HOME COMMAND ARGS...`; its exit status is ours.
fn forward(home: &Path, command: &str, a: BenchKubeArgs) -> Result<()> {
    let bin = bench_binary()?;
    let status = std::process::Command::new(&bin)
        .arg("--home")
        .arg(home)
        .arg(command)
        .args(a.args)
        .status()
        .with_context(|| format!("running {}", bin.display()))?;
    if !status.success() {
        bail!("thaw bench {command} failed ({status})");
    }
    Ok(())
}

pub fn bench(home: &Path, a: BenchCriArgs) -> Result<()> {
    forward(home, "cri", a)
}

pub fn bench_kube(home: &Path, a: BenchKubeArgs) -> Result<()> {
    forward(home, "kube", a)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_missing_bench_binary_is_named_with_how_to_build_it() {
        // the test binary's directory (target/*/deps) holds no thaw-bench-kube
        let e = super::bench_binary().unwrap_err().to_string();
        assert!(
            e.contains("thaw-bench-kube is missing")
                && e.contains("cargo build --release -p thaw-bench-kube"),
            "{e}"
        );
    }
}
