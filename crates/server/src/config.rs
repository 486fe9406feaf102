//! Daemon configuration: defaults that serve a newcomer, an optional TOML
//! file (`--config`), and flags on top (the CLI fills [`Config`] fields).
use serde::Deserialize;
use std::path::{Path, PathBuf};
use thaw_error::{fail, Context, ResultExt};

/// Why the daemon's configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// a setting out of its range or of an unknown value (the message
    /// names it)
    #[error("{0}")]
    Invalid(String),
    /// the tier configuration the settings name
    #[error(transparent)]
    Tiers(#[from] thaw_tiers::TiersError),
    /// the file could not be read or parsed
    #[error(transparent)]
    Other(#[from] Context),
}

type Result<T, E = ConfigError> = std::result::Result<T, E>;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// State home: function registry, code, logs, disk-tier snapshots.
    pub home: PathBuf,
    /// Where the runtime root is built/cached (default: `home`).
    pub runtime_home: Option<PathBuf>,
    /// Unix socket (default `HOME/serve/thaw.sock`).
    pub socket: Option<PathBuf>,
    /// Optional TCP listener, `ADDR:PORT` (see [`Config::tcp_listen`]).
    pub listen: Option<String>,
    /// Bearer token for the TCP listener; required off loopback.
    pub token_file: Option<PathBuf>,
    /// `text` or `json`.
    pub log_format: String,
    /// RAM the policy may keep instances in: running ones charged their
    /// declared memory, idle ones what they hold (default:
    /// [`MEMORY_BUDGET_SHARE`] of the machine's RAM).
    pub memory_budget_mb: u64,
    /// What an idle instance is charged in that budget: `measured`, its own
    /// pages as measured (its function's snapshot pages counted once), or
    /// `declared`, its `memory_mb` as while it runs.
    pub memory_accounting: String,
    /// Memory pressure the budget does not see: when the kernel's PSI file
    /// reports tasks stalled on memory for this share of a second (percent,
    /// `some`), a quarter of the RAM idle instances hold is given up, in the
    /// policy's order, each second it lasts; 0 turns it off.
    pub memory_pressure_stall_pct: f64,
    /// The PSI file read for that (`/proc/pressure/memory`).
    pub memory_pressure_file: PathBuf,
    /// The two tiers snapshots live on (`[snapshot_tiers]`).
    pub snapshot_tiers: SnapshotTiers,
    /// Share snapshots with other nodes through the slow tier, which must
    /// be remote (see `crate::shared`): publish what this node takes,
    /// restore what another node published.
    pub shared_snapshots: bool,
    /// Snapshots the daemon keeps on the fast snapshot tier (tmpfs by
    /// default); past it the policy demotes the least recently used ones.
    pub dram_snapshot_mb: u64,
    /// Snapshots on the slow snapshot tier (the disk by default).
    pub disk_budget_mb: u64,
    /// `ttl`, `lru-mem`, `tiered-lru`, `greedy-dual`, `tiered-greedy-dual`.
    pub policy: String,
    /// `ttl`: how long an idle instance stays warm.
    pub keep_alive_s: u64,
    /// Tiered policies: share of the budget idle instances may fill.
    pub threshold: f64,
    pub limits: Limits,
    /// Seconds in-flight invocations get to finish after SIGTERM.
    pub drain_grace_s: u64,
    /// XDT: object table and call-chain limits (`[xdt.objects]`, `[xdt.chains]`).
    pub xdt: crate::xdt::config::XdtConfig,
    /// Directories whose subdirectories `POST /v1/roots` may import as a
    /// function's root filesystem (containerd's state directory, where
    /// the shim mounts each container's rootfs).
    pub image_roots_from: Vec<PathBuf>,
}

/// The daemon's snapshot tiers, by their names in the tier configuration
/// (`thaw tier list`): the policy's two levels below RAM.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SnapshotTiers {
    /// Lukewarm starts: a local tier (DRAM, PMEM or a block device).
    pub fast: String,
    /// One step slower: any other configured tier, local or remote (a
    /// restore from a remote tier streams the snapshot).
    pub slow: String,
}

impl Default for SnapshotTiers {
    fn default() -> Self {
        SnapshotTiers {
            fast: "tmpfs".into(),
            slow: "disk".into(),
        }
    }
}

impl SnapshotTiers {
    /// `FAST,SLOW` (the `--snapshot-tiers` flag).
    pub fn parse(text: &str) -> Result<SnapshotTiers> {
        match text.split(',').map(str::trim).collect::<Vec<_>>()[..] {
            [fast, slow] if !fast.is_empty() && !slow.is_empty() => Ok(SnapshotTiers {
                fast: fast.into(),
                slow: slow.into(),
            }),
            _ => fail!(
                ConfigError::Invalid,
                "snapshot tiers {text:?}: want FAST,SLOW (e.g. tmpfs,disk or tmpfs,remote)"
            ),
        }
    }

    /// Both, fastest first.
    pub fn names(&self) -> [&str; 2] {
        [&self.fast, &self.slow]
    }

    /// Checks both against the tier configuration: configured, distinct,
    /// and the fast one local (a deploy checkpoints onto it).
    pub fn check(&self, tiers: &thaw_tiers::TiersConfig) -> Result<()> {
        if self.fast == self.slow {
            fail!(
                ConfigError::Invalid,
                "snapshot_tiers: fast and slow are both {:?}; name two tiers",
                self.fast
            );
        }
        for name in self.names() {
            tiers
                .get(name)
                .with_context(|| format!("snapshot_tiers: tier {name:?}"))?;
        }
        if tiers.get(&self.fast)?.kind == thaw_tiers::Kind::Remote {
            fail!(
                ConfigError::Invalid,
                "snapshot_tiers: the fast tier {:?} is remote; it must be local (a deploy checkpoints onto it)",
                self.fast
            );
        }
        Ok(())
    }
}

/// Each pooled sandbox holds a uid, cgroups and five namespaces.
const MAX_SANDBOX_POOL: usize = 16;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Largest deploy code payload (archive or file, before base64).
    pub code_bytes: u64,
    /// Largest unpacked code tree.
    pub unpacked_bytes: u64,
    pub archive_entries: u64,
    /// Largest invocation event.
    pub event_bytes: u64,
    /// Default and largest per-function instance cap.
    pub instances_per_function: u32,
    pub max_instances_per_function: u32,
    /// The most instances the node holds, running and idle (0: what the
    /// daemon's descriptors, the kernel's pids and the sandbox uids allow).
    pub instances_per_node: u32,
    /// Requests that may wait for an instance, per function; past it: 429.
    pub queue_per_function: u32,
    pub default_timeout_ms: u64,
    pub max_timeout_ms: u64,
    pub default_memory_mb: u64,
    pub max_memory_mb: u64,
    /// Deploy: how long import + init (+ the sample event) may take.
    pub init_timeout_ms: u64,
    /// Deploy and delete: how long one waits for the function's lock, held
    /// by another deploy or delete of it or by a snapshot move (a delete
    /// waits for a whole transfer, to or from the remote tier too; a deploy
    /// only for the move's switch); past it: 503 `busy`.
    pub lock_wait_ms: u64,
    /// How long a snapshot move's switch to the new copy waits for the
    /// restores still opening the old one; past it the move is given up
    /// (the copy made is removed, the snapshot stays where it was).
    pub switch_wait_ms: u64,
    /// Each instance's log ring on disk (a function keeps its newest 16).
    pub log_bytes: u64,
    /// One invocation's captured output (the rest is cut, with a note).
    pub invocation_log_bytes: u64,
    pub prewarm_max: u32,
    /// Sandboxes built ahead per deployed version with a snapshot (each a
    /// restorer waiting for its plan, refilled in the background); 0: none.
    pub sandbox_pool: usize,
    /// Largest unpacked set of one function's own Debian packages.
    pub packages_bytes: u64,
    /// Largest root filesystem an image may bring (`POST /v1/roots`):
    /// bytes of its files, and entries.
    pub image_root_bytes: u64,
    pub image_root_files: u64,
    /// Lambda's asynchronous invocations accepted and not yet done (each
    /// tried up to three times); past it: 429.
    pub lambda_event_queue: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            code_bytes: 32 << 20,
            unpacked_bytes: 128 << 20,
            archive_entries: 10_000,
            event_bytes: 6 << 20,
            instances_per_function: 4,
            max_instances_per_function: 64,
            instances_per_node: 0,
            queue_per_function: 256,
            default_timeout_ms: 30_000,
            max_timeout_ms: 900_000,
            default_memory_mb: 512,
            max_memory_mb: 8192,
            init_timeout_ms: 120_000,
            lock_wait_ms: 60_000,
            switch_wait_ms: 90_000,
            log_bytes: 1 << 20,
            invocation_log_bytes: 64 << 10,
            prewarm_max: 64,
            sandbox_pool: 1,
            packages_bytes: 512 << 20,
            image_root_bytes: 8 << 30,
            image_root_files: 500_000,
            lambda_event_queue: 256,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            home: thaw_runtime::default_home(),
            runtime_home: None,
            socket: None,
            listen: None,
            token_file: None,
            log_format: "text".into(),
            memory_budget_mb: default_memory_budget_mb(),
            memory_accounting: "measured".into(),
            memory_pressure_stall_pct: 10.0,
            memory_pressure_file: PathBuf::from("/proc/pressure/memory"),
            snapshot_tiers: SnapshotTiers::default(),
            shared_snapshots: false,
            dram_snapshot_mb: 2048,
            disk_budget_mb: 50 * 1024,
            policy: "lru-mem".into(),
            keep_alive_s: 600,
            threshold: 0.9,
            limits: Limits::default(),
            drain_grace_s: 30,
            xdt: Default::default(),
            image_roots_from: vec![PathBuf::from("/run/containerd")],
        }
    }
}

/// Share of the machine's RAM (`MemTotal`) the instance budget is by
/// default; the rest stays with the host, the daemon and the snapshots on
/// the fast tier (tmpfs).
pub const MEMORY_BUDGET_SHARE: f64 = 0.5;

/// [`MEMORY_BUDGET_SHARE`] of `MemTotal`, or 4096 MiB where
/// `/proc/meminfo` cannot be read.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // a float of MiB, saturating
fn default_memory_budget_mb() -> u64 {
    let total_kb = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        m.lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
    });
    match total_kb {
        Some(kb) => ((kb >> 10) as f64 * MEMORY_BUDGET_SHARE) as u64,
        None => 4096,
    }
}

impl Config {
    /// Reads a TOML file (unknown keys are errors).
    pub fn from_file(path: &Path) -> Result<Config> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading config {}", path.display()))?;
        Ok(toml::from_str(&text).with_context(|| format!("config {}", path.display()))?)
    }

    /// `HOME/serve`: everything the daemon owns.
    pub fn state_dir(&self) -> PathBuf {
        self.home.join("serve")
    }

    /// Functions' unpacked Debian packages, one tree per content hash.
    pub fn packages_dir(&self) -> PathBuf {
        self.state_dir().join("packages")
    }

    pub fn socket_path(&self) -> PathBuf {
        self.socket
            .clone()
            .unwrap_or_else(|| self.state_dir().join("thaw.sock"))
    }

    pub fn runtime_home(&self) -> PathBuf {
        self.runtime_home
            .clone()
            .unwrap_or_else(|| self.home.clone())
    }

    /// The TCP address: `--listen`, else `127.0.0.1:PORT` when `port` (the
    /// `PORT` environment variable, read by the caller) is set.
    pub fn tcp_listen(&self, port: Option<&str>) -> Result<Option<std::net::SocketAddr>> {
        let text = match (&self.listen, port) {
            (Some(l), _) => l.clone(),
            (None, Some(p)) if !p.is_empty() => {
                let port: u16 = p
                    .parse()
                    .with_context(|| format!("PORT={p:?} is not a port number"))?;
                format!("127.0.0.1:{port}")
            }
            _ => return Ok(None),
        };
        let addr = text
            .parse()
            .with_context(|| format!("listen address {text:?} is not ADDR:PORT"))?;
        Ok(Some(addr))
    }

    pub fn validate(&self) -> Result<()> {
        if !matches!(self.log_format.as_str(), "text" | "json") {
            fail!(
                ConfigError::Invalid,
                "log format {:?}: use text or json",
                self.log_format
            );
        }
        if !matches!(self.memory_accounting.as_str(), "measured" | "declared") {
            fail!(
                ConfigError::Invalid,
                "memory accounting {:?}: use measured or declared",
                self.memory_accounting
            );
        }
        if !(0.0..=100.0).contains(&self.memory_pressure_stall_pct) {
            fail!(
                ConfigError::Invalid,
                "memory_pressure_stall_pct {}: want a percent in [0, 100] (0: off)",
                self.memory_pressure_stall_pct
            );
        }
        let l = &self.limits;
        if l.instances_per_function == 0 || l.instances_per_function > l.max_instances_per_function
        {
            fail!(
                ConfigError::Invalid,
                "instances_per_function must be in 1..=max_instances_per_function"
            );
        }
        if l.default_timeout_ms == 0 || l.default_timeout_ms > l.max_timeout_ms {
            fail!(
                ConfigError::Invalid,
                "default_timeout_ms must be in 1..=max_timeout_ms"
            );
        }
        if l.default_memory_mb < 16 || l.default_memory_mb > l.max_memory_mb {
            fail!(
                ConfigError::Invalid,
                "default_memory_mb must be in 16..=max_memory_mb"
            );
        }
        if l.sandbox_pool > MAX_SANDBOX_POOL {
            fail!(
                ConfigError::Invalid,
                "sandbox_pool must be at most {MAX_SANDBOX_POOL} (sandboxes per deployed version)"
            );
        }
        self.policy_config()?;
        self.tcp_listen(None)?;
        if self.shared_snapshots {
            let tiers = thaw_tiers::TiersConfig::load(&self.home)?;
            if tiers.get(&self.snapshot_tiers.slow)?.kind != thaw_tiers::Kind::Remote {
                fail!(
                    ConfigError::Invalid,
                    "shared_snapshots: the slow snapshot tier {:?} is not remote; snapshots are shared through a remote tier (e.g. snapshot_tiers = tmpfs,remote)",
                    self.snapshot_tiers.slow
                );
            }
        }
        Ok(())
    }

    /// The policy's levels below RAM are the daemon's snapshot tiers: its
    /// "disk" is the fast tier, its "network" the slow one
    /// (`instances::level_of`), with those tiers' device profiles (`thaw tier list`).
    pub fn policy_config(&self) -> Result<thaw_policy::Config> {
        let kind: thaw_policy::PolicyKind = self
            .policy
            .parse()
            .map_err(|e: thaw_policy::PolicyError| ConfigError::Invalid(e.to_string()))?;
        let tiers = thaw_tiers::TiersConfig::load(&self.home)?;
        self.snapshot_tiers.check(&tiers)?;
        let st = &self.snapshot_tiers;
        let (dram, disk) = (&tiers.get(&st.fast)?.profile, &tiers.get(&st.slow)?.profile);
        // MB/s to MiB/s
        let mib = |mbps: f64| mbps * 1e6 / (1u64 << 20) as f64;
        let c = thaw_policy::Config {
            ram_mb: self.memory_budget_mb,
            disk_mb: self.dram_snapshot_mb,
            net_mb: self.disk_budget_mb,
            threshold: self.threshold,
            keep_alive_us: self.keep_alive_s * 1_000_000,
            disk_read_mb_s: mib(dram.read_mbps),
            disk_write_mb_s: mib(dram.write_mbps),
            net_mb_s: mib(disk.read_mbps.min(disk.write_mbps)),
            ..thaw_policy::Config::thesis(kind)
        };
        c.validate()
            .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_overrides_defaults_and_unknown_keys_are_errors() {
        let c: Config = toml::from_str(
            "policy = \"ttl\"\nkeep_alive_s = 5\n[limits]\nqueue_per_function = 3\n",
        )
        .unwrap();
        assert_eq!((c.policy.as_str(), c.keep_alive_s), ("ttl", 5));
        assert_eq!(c.limits.queue_per_function, 3);
        assert_eq!(c.limits.event_bytes, Limits::default().event_bytes);
        c.validate().unwrap();
        let e = toml::from_str::<Config>("polcy = \"ttl\"\n").unwrap_err();
        assert!(e.to_string().contains("unknown field"), "{e}");
        let bad = Config {
            policy: "fifo".into(),
            ..Config::default()
        };
        assert!(
            matches!(bad.validate(), Err(ConfigError::Invalid(m)) if m.contains("unknown policy"))
        );
        let bad = Config {
            log_format: "xml".into(),
            ..Config::default()
        };
        assert!(matches!(bad.validate(), Err(ConfigError::Invalid(_))));
        let mut bad = Config::default();
        bad.limits.sandbox_pool = MAX_SANDBOX_POOL + 1;
        assert!(
            matches!(bad.validate(), Err(ConfigError::Invalid(m)) if m.contains("sandbox_pool"))
        );
    }

    #[test]
    fn listen_address_from_flag_or_port() {
        let c = Config {
            listen: Some("127.0.0.1:9000".into()),
            ..Config::default()
        };
        assert_eq!(c.tcp_listen(Some("1")).unwrap().unwrap().port(), 9000);
        let c = Config {
            listen: Some("localhost".into()),
            ..Config::default()
        };
        assert!(c.tcp_listen(None).is_err());
        // PORT counts only without --listen
        let a = Config::default().tcp_listen(Some("8089")).unwrap().unwrap();
        assert_eq!((a.ip().is_loopback(), a.port()), (true, 8089));
        assert!(Config::default().tcp_listen(Some("eighty")).is_err());
        assert!(Config::default().tcp_listen(Some("")).unwrap().is_none());
        assert!(Config::default().tcp_listen(None).unwrap().is_none());
    }
}
