//! Containers that are not thaw functions (a pod's sidecars: Knative's
//! queue-proxy, a log shipper) run natively with `runc`, from the bundle
//! containerd wrote, as runwasi runs its non-wasm containers. The runc
//! state of each container lives in its bundle, so nothing outlives the
//! bundle. runc's child processes are reaped by the shim's reaper (it
//! waits for every child), so each runc command is awaited through the
//! shim's exit monitor, never with a plain `wait`.
use containerd_shim::monitor::{monitor_subscribe, wait_pid, Topic};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use thaw_error::{fail, Context, ResultExt};

/// Why runc did not create or start a native container.
#[derive(Debug, thiserror::Error)]
pub enum RuncError {
    /// runc ran and failed (its logged errors, or a bad pid file)
    #[error("{0}")]
    Failed(String),
    /// runc could not be run or watched
    #[error(transparent)]
    Other(#[from] Context),
}

type Result<T, E = RuncError> = std::result::Result<T, E>;

/// The runc binary: `$THAW_RUNC`, else `runc` on the shim's PATH.
fn runc_binary() -> PathBuf {
    std::env::var_os("THAW_RUNC")
        .filter(|s| !s.is_empty())
        .map_or_else(|| PathBuf::from("runc"), PathBuf::from)
}

/// runc's state directory and log of the container in `bundle`.
fn state_root(bundle: &Path) -> PathBuf {
    bundle.join("runc-state")
}

fn log_file(bundle: &Path) -> PathBuf {
    bundle.join("runc-log.json")
}

/// The error messages runc logged (its log is JSON lines).
fn logged_errors(bundle: &Path) -> String {
    let text = std::fs::read_to_string(log_file(bundle)).unwrap_or_default();
    let msgs: Vec<String> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| matches!(v["level"].as_str(), Some("error" | "fatal")))
        .filter_map(|v| v["msg"].as_str().map(str::to_string))
        .collect();
    msgs.join("; ")
}

/// Runs `runc --root STATE --log LOG ARGS` with the given stdout/stderr and
/// waits for it through the shim's monitor.
fn runc(bundle: &Path, args: &[&str], stdout: Stdio, stderr: Stdio) -> Result<()> {
    let bin = runc_binary();
    let sub = monitor_subscribe(Topic::Pid).context("subscribing to exits")?;
    let child = Command::new(&bin)
        .arg("--root")
        .arg(state_root(bundle))
        .arg("--log")
        .arg(log_file(bundle))
        .args(["--log-format", "json"])
        .args(args)
        .current_dir(bundle)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .spawn()
        .with_context(|| format!("starting {} (is runc installed?)", bin.display()))?;
    let code = wait_pid(child.id().cast_signed(), sub); // a pid is below 2^22
    if code != 0 {
        let why = logged_errors(bundle);
        fail!(
            RuncError::Failed,
            "runc {} exited with {code}: {}",
            args.first().copied().unwrap_or(""),
            if why.is_empty() { "no message" } else { &why }
        );
    }
    Ok(())
}

/// `runc create`: the container's init exists (waiting for `start`) with
/// the stdio containerd gave; returns its pid.
pub fn create(bundle: &Path, id: &str, stdout: Stdio, stderr: Stdio) -> Result<u32> {
    let pid_file = bundle.join("runc.pid");
    let pid_arg = pid_file.to_string_lossy().into_owned();
    let bundle_arg = bundle.to_string_lossy().into_owned();
    runc(
        bundle,
        &[
            "create",
            "--bundle",
            &bundle_arg,
            "--pid-file",
            &pid_arg,
            id,
        ],
        stdout,
        stderr,
    )?;
    let text = std::fs::read_to_string(&pid_file)
        .with_context(|| format!("runc wrote no pid file {}", pid_file.display()))?;
    match text.trim().parse::<u32>() {
        Ok(pid) if pid > 1 => Ok(pid),
        _ => {
            delete(bundle, id);
            fail!(
                RuncError::Failed,
                "runc's pid file holds {text:?}, not a pid"
            );
        }
    }
}

/// `runc start`: the container's process runs.
pub fn start(bundle: &Path, id: &str) -> Result<()> {
    runc(bundle, &["start", id], Stdio::null(), Stdio::null())
}

/// `runc delete --force`: the container's processes and cgroup go (nothing
/// there is fine).
pub fn delete(bundle: &Path, id: &str) {
    if !state_root(bundle).join(id).exists() {
        return;
    }
    if let Err(e) = runc(
        bundle,
        &["delete", "--force", id],
        Stdio::null(),
        Stdio::null(),
    ) {
        log::warn!(
            "deleting the runc container {id}: {}",
            thaw_error::chain(&e)
        );
    }
}
