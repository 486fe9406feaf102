//! cgroup v1 memory and pids limits for one sandbox, and its CPU quota and
//! weight if it has them.
use crate::error::{HostError, Result};
use std::fs;
use std::path::PathBuf;
use thaw_error::{fail, ResultExt};
use thaw_pack::cpu::{cpu_weight_of_shares, shares_of_cpu_weight};

const ROOT: &str = "/sys/fs/cgroup";
const CONTROLLERS: [&str; 3] = ["memory", "pids", "cpu"];
/// The CFS period a sandbox's CPU quota is given over.
const CPU_PERIOD_US: u64 = 100_000;

/// The `thaw` directories under each controller sandboxes' cgroups live in.
pub(crate) fn hierarchies() -> Vec<PathBuf> {
    CONTROLLERS
        .iter()
        .map(|c| PathBuf::from(ROOT).join(c).join("thaw"))
        .collect()
}

/// The sandbox's cgroups; removed on drop (after its processes are gone).
#[derive(Debug)]
pub struct Cgroups {
    dirs: Vec<PathBuf>,
}

impl Cgroups {
    /// Creates `thaw/<name>` under the memory and pids hierarchies, and
    /// under the cpu one with a CFS quota of `cpu_millis` thousandths of a
    /// CPU and the `cpu.shares` of `cpu_weight` (cgroup v2 units, see
    /// [`shares_of_cpu_weight`]) if given.
    pub fn create(
        name: &str,
        memory_bytes: u64,
        pids_max: u64,
        cpu_millis: Option<u64>,
        cpu_weight: Option<u64>,
    ) -> Result<Cgroups> {
        let mut cg = Cgroups { dirs: Vec::new() };
        let mut settings = vec![
            ("memory", vec![("memory.limit_in_bytes", memory_bytes)]),
            ("pids", vec![("pids.max", pids_max)]),
        ];
        let mut cpu = Vec::new();
        if let Some(m) = cpu_millis {
            // the kernel takes no quota under 1 ms per period
            let quota = (m * CPU_PERIOD_US / 1000).max(1000);
            cpu.push(("cpu.cfs_period_us", CPU_PERIOD_US));
            cpu.push(("cpu.cfs_quota_us", quota));
        }
        if let Some(w) = cpu_weight {
            cpu.push(("cpu.shares", shares_of_cpu_weight(w)));
        }
        if !cpu.is_empty() {
            settings.push(("cpu", cpu));
        }
        for (ctrl, files) in settings {
            let hier = PathBuf::from(ROOT).join(ctrl);
            if !hier.join("cgroup.procs").exists() {
                fail!(
                    HostError::Failed,
                    "cgroup v1 {ctrl} controller is not mounted at {} (thaw needs it for sandbox limits)",
                    hier.display()
                );
            }
            let dir = hier.join("thaw").join(name);
            fs::create_dir_all(&dir)
                .with_context(|| format!("creating cgroup {}", dir.display()))?;
            cg.dirs.push(dir.clone());
            for (file, value) in files {
                fs::write(dir.join(file), value.to_string())
                    .with_context(|| format!("setting {file} = {value}"))?;
            }
        }
        Ok(cg)
    }

    /// The sandbox's CFS quota in thousandths of a CPU (None: unlimited,
    /// or no cpu cgroup).
    pub fn cpu_millis(&self) -> Option<u64> {
        let quota = positive(self.cpu_file("cpu.cfs_quota_us")?);
        let period = positive(self.cpu_file("cpu.cfs_period_us")?);
        Some(quota? * 1000 / period?)
    }

    /// The sandbox's CPU weight (cgroup v2 units) as its cgroup's
    /// `cpu.shares` has it (None: no cpu cgroup, so the host's default).
    pub fn cpu_weight(&self) -> Option<u64> {
        positive(self.cpu_file("cpu.shares")?).map(cpu_weight_of_shares)
    }

    /// A number from one of the cpu controller's files.
    fn cpu_file(&self, file: &str) -> Option<i64> {
        let d = self
            .dirs
            .iter()
            .find(|d| d.starts_with(format!("{ROOT}/cpu")))?;
        fs::read_to_string(d.join(file)).ok()?.trim().parse().ok()
    }

    /// Files a child's pid goes into before it runs anything.
    pub fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.join("cgroup.procs")).collect()
    }

    /// One of the memory controller's files, read whole.
    fn memory_file(&self, file: &str) -> Option<String> {
        let d = self
            .dirs
            .iter()
            .find(|d| d.starts_with(format!("{ROOT}/memory")))?;
        fs::read_to_string(d.join(file)).ok()
    }

    /// A number from one of the memory controller's files.
    fn memory_stat(&self, file: &str) -> Option<u64> {
        self.memory_file(file)?.trim().parse().ok()
    }

    /// The number on the line `key` of a memory controller file of
    /// `key value` lines.
    fn memory_keyed(&self, file: &str, key: &str) -> Option<u64> {
        let text = self.memory_file(file)?;
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
    }

    /// Peak memory use of the sandbox so far.
    pub fn memory_peak(&self) -> Option<u64> {
        self.memory_stat("memory.max_usage_in_bytes")
    }

    /// Memory charged to the sandbox now: what it added to the machine's DRAM
    /// (page-cache pages it shares with others are charged to whoever read them first).
    pub fn memory_usage(&self) -> Option<u64> {
        self.memory_stat("memory.usage_in_bytes")
    }

    /// Anonymous memory charged to the sandbox (the `rss` line of
    /// memory.stat): its private copies, without the page-cache pages it
    /// happened to read first.
    pub fn memory_anon(&self) -> Option<u64> {
        self.memory_keyed("memory.stat", "rss")
    }

    /// Tasks the kernel's OOM killer killed in this cgroup (the `oom_kill`
    /// line of memory.oom_control).
    pub fn oom_kills(&self) -> u64 {
        self.memory_keyed("memory.oom_control", "oom_kill")
            .unwrap_or(0)
    }

    /// Times the memory limit was hit (failcnt).
    pub fn memory_failcnt(&self) -> u64 {
        self.memory_stat("memory.failcnt").unwrap_or(0)
    }

    /// Removes the cgroups; retries for up to two seconds while the kernel
    /// finishes tearing the last task down, then says so if it could not.
    pub fn remove(&mut self) {
        for d in self.dirs.drain(..) {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
            loop {
                match fs::remove_dir(&d) {
                    Ok(()) => break,
                    Err(_) if !d.exists() => break,
                    Err(e) if std::time::Instant::now() > deadline => {
                        tracing::warn!("could not remove cgroup {}: {e}", d.display());
                        break;
                    }
                    Err(_) => std::thread::sleep(std::time::Duration::from_millis(2)),
                }
            }
        }
    }
}

/// A cgroup v1 value that counts only when positive (-1: no limit).
fn positive(v: i64) -> Option<u64> {
    u64::try_from(v).ok().filter(|&v| v > 0)
}

impl Drop for Cgroups {
    fn drop(&mut self) {
        self.remove();
    }
}
