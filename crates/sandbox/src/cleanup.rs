//! Crash cleanup: what dead workers left behind (cgroups and the processes
//! still in them, sandbox logs). Names carry the owning worker's pid and
//! start time (`thaw_store::secure::owner_tag`), so a live worker's state is
//! never touched, even when its pid was recycled.
use crate::cgroup;
use crate::error::Result;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use thaw_error::{Context, ResultExt};
use thaw_store::secure;

/// Removes dead workers' cgroups (killing any sandbox still in them, e.g.
/// one reparented to init), their egress bridges and rules, and their log
/// files in `log_dir`. Returns what was removed.
pub fn gc(log_dir: &Path) -> Result<Vec<PathBuf>> {
    let mut removed = Vec::new();
    for hier in cgroup::hierarchies() {
        let Ok(rd) = fs::read_dir(&hier) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if e.path().is_dir() && secure::owned_by_dead(&name) {
                remove_cgroup(&e.path())?;
                removed.push(e.path());
            }
        }
    }
    removed.extend(thaw_egress::gc().into_iter().map(PathBuf::from));
    if let Ok(rd) = fs::read_dir(log_dir) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if name.ends_with(".log") && secure::owned_by_dead(&name) {
                fs::remove_file(e.path())
                    .with_context(|| format!("removing {}", e.path().display()))?;
                removed.push(e.path());
            }
        }
    }
    Ok(removed)
}

/// Kills every task in a cgroup and removes it once the kernel let them go.
fn remove_cgroup(dir: &Path) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let procs = fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
            // SAFETY: kill has no memory-safety preconditions; the pid is a
            // task of a dead worker's sandbox cgroup.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        match fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(_) if !dir.exists() => return Ok(()),
            Err(e) if Instant::now() > deadline => {
                return Err(Context::new(format!("removing cgroup {}", dir.display()), e).into());
            }
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}
