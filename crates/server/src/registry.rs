//! Deployed functions on disk, under `HOME/serve/functions/NAME/`:
//!
//! * `vN/` one directory per deployed version: `code/` (the unpacked code),
//!   `record.json` (what [`Record`] says), `secrets.json` (secret env values);
//! * `current` names the live version. It is written to a temporary file,
//!   fsynced and renamed, so after a crash it names a whole version or none.
//!
//! Directories are 0700 and files 0600 (the code tree inside is 0755/0444 so
//! the sandbox uid can read it through its read-only mount; the 0700 parents
//! keep it from everyone else on the host).
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use thaw_error::{fail, Context, ResultExt};
use thaw_sandbox::StartStrategy;

/// What can go wrong with the function registry.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// a function name outside the allowed grammar
    #[error("{0}")]
    BadName(String),
    /// a record on disk that does not hold together
    #[error("{0}")]
    Corrupt(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Runtime(#[from] thaw_runtime::RuntimeError),
    #[error(transparent)]
    Path(#[from] thaw_store::PathError),
    /// the step that failed, with its cause
    #[error(transparent)]
    Other(#[from] Context),
}

type Result<T, E = RegistryError> = std::result::Result<T, E>;

/// What a deployed version is.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    pub name: String,
    pub version: u64,
    /// Functions of one owner may invoke each other and share references
    /// (XDT); records from before owners existed are `default`'s.
    #[serde(default = "default_owner")]
    pub owner: String,
    /// python, nodejs or provided (records from before Node.js functions: python)
    #[serde(default)]
    pub runtime: thaw_runtime::Runtime,
    pub handler: String,
    pub init: Option<String>,
    #[serde(default)]
    pub before_snapshot: Option<String>,
    pub after_restore: Option<String>,
    /// Why the function has no snapshot and boots every new instance (a
    /// deploy whose instance could not be snapshotted); none otherwise.
    #[serde(default)]
    pub snapshot_refused: Option<Vec<thaw_checkpoint::Refusal>>,
    /// Non-secret environment.
    pub env: BTreeMap<String, String>,
    /// Names of secret variables (values only in `secrets.json`).
    pub secret_env: Vec<String>,
    pub memory_mb: u64,
    /// CPU quota of each instance, thousandths of a CPU (none: unlimited).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_millis: Option<u64>,
    /// CPU weight of each instance, cgroup v2 units (none: the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_weight: Option<u64>,
    pub timeout_ms: u64,
    pub max_instances: u32,
    /// How new instances start: restored with a strategy, or booted (on
    /// disk and in the API, the strategy's name or `boot`).
    pub strategy: StartStrategy,
    pub tier: String,
    pub snapshot: Option<SnapshotInfo>,
    /// The function's own Debian packages (none for older records).
    #[serde(default)]
    pub packages: Option<PackagesInfo>,
    /// How strategy and tier were chosen (none for older records).
    #[serde(default)]
    pub placement: Option<crate::placement::PlacementInfo>,
    /// Network egress (none for older records: loopback only).
    #[serde(default)]
    pub network: Option<NetworkRequest>,
    /// The snapshot shared across nodes (daemons with `shared_snapshots`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared: Option<SharedInfo>,
    /// The image's root filesystem it runs on (none: the runtime root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<crate::roots::RootRef>,
    pub code_bytes: u64,
    pub code_files: u64,
    pub created_unix: u64,
}

pub fn default_owner() -> String {
    "default".to_string()
}

/// What the node did with the function's shared snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// this node took the snapshot and published it
    Published,
    /// this node restores the copy another node published
    Fetched,
    /// the published copy cannot resume here; this node took its own
    Refused,
    /// nothing is shared for this function (`reason` says why)
    Unshared,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Published => "published",
            Role::Fetched => "fetched",
            Role::Refused => "refused",
            Role::Unshared => "unshared",
        }
    }
}

/// The `shared` field of a function's record and GET.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SharedInfo {
    /// the share key (hex SHA-256)
    pub key: String,
    pub role: Role,
    /// why it was refused or not shared, or why publishing failed
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A function's own Debian packages: a tree in the daemon's package cache.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PackagesInfo {
    /// What the deploy asked for (sorted, deduplicated).
    pub requested: Vec<String>,
    /// The closure beyond the runtime root, `NAME=VERSION`, install order.
    pub resolved: Vec<String>,
    /// The tree's content hash (root + resolved packages): its cache name.
    pub hash: String,
    pub size_bytes: u64,
    pub files: u64,
    /// This deploy found the tree in the cache.
    pub reused: bool,
    /// Resolving (and, unless reused, downloading and unpacking) took this long.
    pub prepare_ms: f64,
}

impl PackagesInfo {
    pub fn new(t: &thaw_runtime::packages::Tree, prepare_ms: f64) -> PackagesInfo {
        let m = &t.manifest;
        PackagesInfo {
            requested: m.requested.clone(),
            resolved: m
                .packages
                .iter()
                .map(|p| format!("{}={}", p.name, p.version))
                .collect(),
            hash: m.hash.clone(),
            size_bytes: m.size_bytes,
            files: m.files,
            reused: t.reused,
            prepare_ms,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SnapshotInfo {
    pub id: String,
    pub dir: PathBuf,
    pub size_bytes: u64,
    pub init_ms: f64,
    pub import_ms: f64,
    pub checkpoint_ms: f64,
}

/// Function names: `[a-z0-9][a-z0-9_-]{0,62}`.
pub fn check_name(name: &str) -> Result<()> {
    let b = name.as_bytes();
    let ok = !b.is_empty()
        && b.len() <= 63
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter()
            .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_' || c == b'-');
    if !ok {
        let shown: String = name.chars().take(80).collect();
        fail!(
            RegistryError::BadName,
            "function name {shown:?} is invalid: use [a-z0-9][a-z0-9_-]{{0,62}}"
        );
    }
    Ok(())
}

/// What a function may reach on the network: `egress` rules `CIDR[:PORTS]`
/// (IPv4 or IPv6), a resolver, and per-instance caps.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkRequest {
    #[serde(default)]
    pub egress: Vec<String>,
    pub dns: Option<String>,
    pub max_connections: Option<u32>,
    pub bandwidth_mbit: Option<u32>,
}

impl NetworkRequest {
    pub fn policy(&self) -> Result<thaw_egress::Policy, String> {
        thaw_egress::Policy::parse(
            &self.egress,
            self.dns.as_deref(),
            self.max_connections,
            self.bandwidth_mbit,
        )
    }
}

pub use thaw_runtime::mkdir_private;

/// Writes `data` to `path` atomically (temp file, fsync, rename, fsync dir), 0600.
pub fn write_private(path: &Path, data: &[u8]) -> Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| RegistryError::Corrupt("no parent".into()))?;
    let tmp = dir.join(format!(
        ".{}.tmp-{}",
        path.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id()
    ));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("writing {}", tmp.display()))?;
    f.write_all(data)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(dir)?.sync_all()?;
    Ok(())
}

/// One function directory as found on disk.
pub struct Scanned {
    pub name: String,
    pub current: Option<u64>,
    pub stale: Vec<PathBuf>,
}

pub struct Registry {
    pub dir: PathBuf,
}

impl Registry {
    pub fn open(state_dir: &Path) -> Result<Registry> {
        let dir = state_dir.join("functions");
        mkdir_private(&dir)?;
        Ok(Registry { dir })
    }

    pub fn function_dir(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    pub fn version_dir(&self, name: &str, version: u64) -> PathBuf {
        self.function_dir(name).join(format!("v{version}"))
    }

    /// A fresh version number for `name` (above every version on disk).
    pub fn next_version(&self, name: &str) -> Result<u64> {
        let fdir = self.function_dir(name);
        mkdir_private(&fdir)?;
        let mut max = 0;
        for e in std::fs::read_dir(&fdir)?.flatten() {
            let n = e.file_name().to_string_lossy().to_string();
            if let Some(v) = n.strip_prefix('v').and_then(|v| v.parse::<u64>().ok()) {
                max = max.max(v);
            }
        }
        Ok(max + 1)
    }

    pub fn write_record(&self, rec: &Record, secrets: &BTreeMap<String, String>) -> Result<()> {
        let vdir = self.version_dir(&rec.name, rec.version);
        write_private(&vdir.join("secrets.json"), &serde_json::to_vec(secrets)?)?;
        write_private(&vdir.join("record.json"), &serde_json::to_vec_pretty(rec)?)
    }

    /// Makes `version` the live one.
    pub fn publish(&self, name: &str, version: u64) -> Result<()> {
        write_private(
            &self.function_dir(name).join("current"),
            version.to_string().as_bytes(),
        )
    }

    pub fn current_version(&self, name: &str) -> Option<u64> {
        std::fs::read_to_string(self.function_dir(name).join("current"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    pub fn load(&self, name: &str, version: u64) -> Result<(Record, BTreeMap<String, String>)> {
        let vdir = self.version_dir(name, version);
        let rec: Record = serde_json::from_slice(&std::fs::read(vdir.join("record.json"))?)
            .with_context(|| format!("{}/record.json", vdir.display()))?;
        let secrets = serde_json::from_slice(&std::fs::read(vdir.join("secrets.json"))?)
            .with_context(|| format!("{}/secrets.json", vdir.display()))?;
        if rec.name != name || rec.version != version {
            fail!(
                RegistryError::Corrupt,
                "{}: record names {}/v{}",
                vdir.display(),
                rec.name,
                rec.version
            );
        }
        Ok((rec, secrets))
    }

    /// Every function directory with its published version, and the
    /// leftovers (versions that are not current: half-written deploys or
    /// replaced ones).
    pub fn scan(&self) -> Result<Vec<Scanned>> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(&self.dir)?.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if check_name(&name).is_err() || !e.path().is_dir() {
                continue;
            }
            let cur = self.current_version(&name);
            let mut stale = Vec::new();
            for v in std::fs::read_dir(e.path())?.flatten() {
                let n = v.file_name().to_string_lossy().to_string();
                let ver = n.strip_prefix('v').and_then(|v| v.parse::<u64>().ok());
                if ver.is_some() && ver != cur {
                    stale.push(v.path());
                }
            }
            out.push(Scanned {
                name,
                current: cur,
                stale,
            });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use thaw_sandbox::StrategyKind;

    /// A registry in a directory of its own, removed when dropped.
    struct TempRegistry(Registry);

    impl TempRegistry {
        fn new(what: &str) -> TempRegistry {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos();
            let dir = std::env::temp_dir().join(format!(
                "thaw-registry-{what}-{}-{nanos}",
                std::process::id()
            ));
            TempRegistry(Registry::open(&dir).unwrap())
        }
    }

    impl Drop for TempRegistry {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0.dir);
        }
    }

    /// A record as the first daemon wrote it (strategy a plain string, none
    /// of the fields added since) and one of a boot deploy.
    fn old_record(name: &str, strategy: &str) -> String {
        format!(
            r#"{{
  "name": "{name}",
  "version": 1,
  "handler": "m.handler",
  "init": null,
  "after_restore": null,
  "env": {{}},
  "secret_env": [],
  "memory_mb": 128,
  "timeout_ms": 30000,
  "max_instances": 4,
  "strategy": "{strategy}",
  "tier": "tmpfs",
  "snapshot": null,
  "code_bytes": 10,
  "code_files": 1,
  "created_unix": 1700000000
}}"#
        )
    }

    #[test]
    fn records_with_string_strategies_load_and_keep_their_format() {
        let r = TempRegistry::new("old");
        for (name, wire, want) in [
            ("f-reap", "reap", StartStrategy::Restore(StrategyKind::Reap)),
            ("f-mmap", "mmap", StartStrategy::Restore(StrategyKind::Mmap)),
            ("f-boot", "boot", StartStrategy::Boot),
        ] {
            let vdir = r.0.version_dir(name, 1);
            mkdir_private(&r.0.function_dir(name)).unwrap();
            mkdir_private(&vdir).unwrap();
            write_private(&vdir.join("record.json"), old_record(name, wire).as_bytes()).unwrap();
            write_private(&vdir.join("secrets.json"), b"{}").unwrap();
            let (rec, _) = r.0.load(name, 1).unwrap();
            assert_eq!(rec.strategy, want, "{name}");
            assert_eq!(rec.owner, "default");
            // written back, the strategy is the same string
            r.0.write_record(&rec, &BTreeMap::new()).unwrap();
            let v: serde_json::Value =
                serde_json::from_slice(&std::fs::read(vdir.join("record.json")).unwrap()).unwrap();
            assert_eq!(v["strategy"], wire, "{name}");
        }
    }

    #[test]
    fn a_record_naming_no_known_strategy_is_refused_by_name() {
        let r = TempRegistry::new("bad");
        let vdir = r.0.version_dir("f", 1);
        mkdir_private(&r.0.function_dir("f")).unwrap();
        mkdir_private(&vdir).unwrap();
        write_private(
            &vdir.join("record.json"),
            old_record("f", "teleport").as_bytes(),
        )
        .unwrap();
        write_private(&vdir.join("secrets.json"), b"{}").unwrap();
        let e = format!("{:#}", r.0.load("f", 1).unwrap_err());
        assert!(e.contains("\"teleport\""), "{e}");
        assert!(e.contains("record.json"), "{e}");
    }
}
