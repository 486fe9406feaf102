//! Tiers as configuration: `$THAW_HOME/tiers.json`, or the defaults below
//! when the file is absent.
//!
//! Device profiles default to published figures ("FaaS in the Age of
//! (sub-)µs I/O", Table 1, for DRAM, Optane DCPM, Optane NVMe and a SATA flash SSD; a 7,200 rpm disk for
//! HDD) and are what `thaw tier setup` throttles the emulated devices to.
//! Prices are per GB-month and only their ratios matter to placement; the
//! defaults are list prices of the matching cloud products and are meant to
//! be edited.
use crate::error::{Result, TiersError};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use thaw_error::fail;
use thaw_error::{Context, ResultExt};

/// The configuration file, relative to the state home.
pub const CONFIG_FILE: &str = "tiers.json";
/// Directory (under the state home) holding the mount points of the
/// pmem/block tiers and the emulated devices' state.
pub const TIERS_DIR: &str = "tiers";

const GIB: u64 = 1 << 30;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// volatile memory (tmpfs)
    Dram,
    /// byte-addressable persistent memory (a DAX-capable filesystem)
    Pmem,
    /// a block device with a filesystem
    Block,
    /// an S3-compatible object store
    Remote,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Dram => "dram",
            Kind::Pmem => "pmem",
            Kind::Block => "block",
            Kind::Remote => "remote",
        }
    }
}

/// How fast a tier's device is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceProfile {
    /// sequential read bandwidth, MB/s (10^6 bytes)
    pub read_mbps: f64,
    /// sequential write bandwidth, MB/s
    pub write_mbps: f64,
    /// latency of one 4 KiB random read at queue depth 1, microseconds
    pub rand_read_4k_us: f64,
    /// requests the device serves at once (a disk: 1, one actuator; flash:
    /// several channels); the emulated device's latency layer runs this
    /// many; absent means 1
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_depth: Option<u32>,
    /// where the figures come from
    pub source: String,
}

impl DeviceProfile {
    fn declared(read_mbps: f64, write_mbps: f64, rand_read_4k_us: f64, source: &str) -> Self {
        DeviceProfile {
            read_mbps,
            write_mbps,
            rand_read_4k_us,
            queue_depth: None,
            source: source.into(),
        }
    }

    fn with_queue_depth(self, n: u32) -> Self {
        DeviceProfile {
            queue_depth: Some(n),
            ..self
        }
    }

    /// 4 KiB reads per second one reader at queue depth 1 gets.
    // float casts saturate (NaN, negatives to 0): the clamp wanted
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    pub fn read_iops(&self) -> u64 {
        (1e6 / self.rand_read_4k_us).round() as u64
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TierConfig {
    pub name: String,
    pub kind: Kind,
    /// where snapshots live (dram, pmem, block)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
    /// endpoint and bucket (remote), e.g. `http://10.77.0.2:9000/thaw`
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    pub capacity_bytes: u64,
    pub price_per_gb_month: f64,
    pub profile: DeviceProfile,
    /// stood in for by another kernel mechanism on this machine
    pub emulated: bool,
    /// restores allowed to read from the tier at once ("FaaS in the Age of
    /// (sub-)µs I/O": a SATA SSD saturates at about 4)
    pub max_concurrent_restores: u32,
    /// remote: one request's deadline, seconds (a store that hangs fails
    /// clearly after it; retries stop after the same time again); emulated
    /// block: the device's I/O timeout (a request held longer by a stalled
    /// device fails with EIO; default 30, the block layer's own)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_timeout_s: Option<u64>,
    /// emulated block tiers: the device's readahead in KiB (0 turns it off,
    /// the advice of "FaaS in the Age of (sub-)µs I/O" for snapshots); absent sets the kernel's default
    /// for a disk, 128 KiB
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_ahead_kb: Option<u32>,
}

impl TierConfig {
    /// Where an emulated pmem/block tier is mounted, and where the store
    /// looks for any pmem/block tier other than `tmpfs` and `disk`.
    pub fn mount_point(home: &Path, name: &str) -> PathBuf {
        home.join(TIERS_DIR).join(name)
    }

    /// The directory the tier's snapshots go into.
    pub fn snapshot_root(&self, home: &Path) -> Option<PathBuf> {
        match self.kind {
            Kind::Remote => None,
            _ => self
                .path
                .clone()
                .or_else(|| Some(Self::mount_point(home, &self.name).join("snapshots"))),
        }
    }

    /// One line for reports: "sata (block, emulated)".
    pub fn label(&self) -> String {
        format!(
            "{} ({}{})",
            self.name,
            self.kind.name(),
            if self.emulated { ", emulated" } else { "" }
        )
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TiersConfig {
    pub tiers: Vec<TierConfig>,
}

impl TiersConfig {
    /// The defaults: every tier that "FaaS in the Age of (sub-)µs I/O" and
    /// "Reducing FaaS Latency with Storage-backed Caching" use, emulated
    /// where this machine lacks the device.
    pub fn defaults(home: &Path) -> TiersConfig {
        let t = |name: &str,
                 kind: Kind,
                 path: Option<PathBuf>,
                 capacity_gib: u64,
                 price: f64,
                 profile: DeviceProfile,
                 emulated: bool,
                 max_conc: u32| TierConfig {
            name: name.into(),
            kind,
            path,
            url: None,
            capacity_bytes: capacity_gib * GIB,
            price_per_gb_month: price,
            profile,
            emulated,
            max_concurrent_restores: max_conc,
            request_timeout_s: None,
            read_ahead_kb: None,
        };
        let storage_study = "FaaS in the Age of (sub-)µs I/O, Table 1";
        let mut remote = t(
            "remote",
            Kind::Remote,
            None,
            64,
            0.023,
            DeviceProfile::declared(
                1250.0,
                1250.0,
                500.0,
                "Reducing FaaS Latency with Storage-backed Caching: 10 Gbit/s, 0.5 ms RTT",
            ),
            true,
            16,
        );
        remote.url = Some(crate::remote::RemoteNet::for_home(home).url());
        remote.request_timeout_s = Some(30);
        TiersConfig {
            tiers: vec![
                t(
                    "tmpfs",
                    Kind::Dram,
                    Some(PathBuf::from("/dev/shm/thaw/snapshots")),
                    4,
                    4.6,
                    DeviceProfile::declared(23000.0, 23000.0, 0.08, storage_study),
                    false,
                    64,
                ),
                t(
                    "pmem",
                    Kind::Pmem,
                    None,
                    4,
                    1.9,
                    DeviceProfile::declared(6800.0, 1850.0, 0.3, storage_study),
                    true,
                    16,
                ),
                t(
                    "disk",
                    Kind::Block,
                    Some(home.join("snapshots")),
                    32,
                    0.08,
                    DeviceProfile::declared(
                        1000.0,
                        1000.0,
                        61.0,
                        "this machine's disk (DESIGN.md floors)",
                    ),
                    false,
                    8,
                ),
                t(
                    "nvme",
                    Kind::Block,
                    None,
                    8,
                    0.125,
                    DeviceProfile::declared(2200.0, 2000.0, 10.0, storage_study)
                        .with_queue_depth(32),
                    true,
                    16,
                ),
                t(
                    "sata",
                    Kind::Block,
                    None,
                    8,
                    0.08,
                    DeviceProfile::declared(500.0, 500.0, 180.0, storage_study).with_queue_depth(8),
                    true,
                    4,
                ),
                t(
                    "hdd",
                    Kind::Block,
                    None,
                    8,
                    0.045,
                    DeviceProfile::declared(
                        150.0,
                        150.0,
                        6667.0,
                        "7,200 rpm disk: 150 MB/s, 150 IOPS",
                    )
                    .with_queue_depth(1),
                    true,
                    2,
                ),
                remote,
            ],
        }
    }

    /// `home/tiers.json`, or the defaults if it does not exist.
    pub fn load(home: &Path) -> Result<TiersConfig> {
        let p = home.join(CONFIG_FILE);
        let cfg = match std::fs::read(&p) {
            Ok(raw) => serde_json::from_slice(&raw)
                .with_context(|| format!("parsing tier configuration {}", p.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Self::defaults(home),
            Err(e) => return Err(Context::new(format!("reading {}", p.display()), e).into()),
        };
        cfg.validate(home).map_err(|e| match e {
            TiersError::Config(why) => {
                TiersError::Config(format!("tier configuration {}: {why}", p.display()))
            }
            e => e,
        })?;
        Ok(cfg)
    }

    /// Writes the configuration atomically (temp file, fsync, rename).
    pub fn save(&self, home: &Path) -> Result<()> {
        self.validate(home)?;
        let p = home.join(CONFIG_FILE);
        let tmp = home.join(format!(".{CONFIG_FILE}.tmp-{}", std::process::id()));
        let data = serde_json::to_vec_pretty(self)?;
        {
            use std::io::Write;
            let mut f = std::fs::File::create(&tmp)
                .with_context(|| format!("creating {}", tmp.display()))?;
            f.write_all(&data)?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, &p).with_context(|| format!("renaming onto {}", p.display()))?;
        Ok(())
    }

    pub fn get(&self, name: &str) -> Result<&TierConfig> {
        self.tiers.iter().find(|t| t.name == name).ok_or_else(|| {
            TiersError::Config(format!(
                "unknown tier {name:?} (configured: {})",
                self.tiers
                    .iter()
                    .map(|t| t.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
    }

    /// The tiers named in a comma-separated list, or all of them for `None`.
    pub fn select(&self, names: Option<&[String]>) -> Result<Vec<&TierConfig>> {
        match names {
            None => Ok(self.tiers.iter().collect()),
            Some(ns) => ns.iter().map(|n| self.get(n)).collect(),
        }
    }

    /// Rejects what would make setup, the store or placement misbehave.
    pub fn validate(&self, home: &Path) -> Result<()> {
        let mut seen = std::collections::HashSet::new();
        for t in &self.tiers {
            let n = &t.name;
            if n.is_empty()
                || n.len() > 32
                || !n
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
            {
                fail!(
                    TiersError::Config,
                    "tier name {n:?}: use 1-32 of a-z, 0-9, '_' and '-'"
                );
            }
            if !seen.insert(n.as_str()) {
                fail!(TiersError::Config, "tier {n:?} is configured twice");
            }
            if t.capacity_bytes == 0 {
                fail!(
                    TiersError::Config,
                    "tier {n}: capacity_bytes must be positive"
                );
            }
            if !(t.price_per_gb_month.is_finite() && t.price_per_gb_month >= 0.0) {
                fail!(
                    TiersError::Config,
                    "tier {n}: price_per_gb_month must be a non-negative number"
                );
            }
            let p = &t.profile;
            for (what, v) in [
                ("read_mbps", p.read_mbps),
                ("write_mbps", p.write_mbps),
                ("rand_read_4k_us", p.rand_read_4k_us),
            ] {
                if !(v.is_finite() && v > 0.0) {
                    fail!(
                        TiersError::Config,
                        "tier {n}: profile.{what} must be a positive number"
                    );
                }
            }
            if p.queue_depth.is_some_and(|q| q == 0 || q > 256) {
                fail!(
                    TiersError::Config,
                    "tier {n}: profile.queue_depth must be 1..256"
                );
            }
            if t.request_timeout_s.is_some_and(|s| s == 0 || s > 3600) {
                fail!(
                    TiersError::Config,
                    "tier {n}: request_timeout_s must be 1..3600"
                );
            }
            if t.request_timeout_s.is_some()
                && !(t.kind == Kind::Remote || (t.kind == Kind::Block && t.emulated))
            {
                fail!(
                    TiersError::Config,
                    "tier {n}: request_timeout_s is for remote and emulated block tiers"
                );
            }
            if t.max_concurrent_restores == 0 {
                fail!(
                    TiersError::Config,
                    "tier {n}: max_concurrent_restores must be at least 1"
                );
            }
            match t.kind {
                Kind::Remote => {
                    let url = t.url.as_deref().unwrap_or("");
                    if !url.starts_with("http://") && !url.starts_with("https://") {
                        fail!(
                            TiersError::Config,
                            "tier {n}: a remote tier needs url = http(s)://host:port/bucket"
                        );
                    }
                    if t.path.is_some() {
                        fail!(
                            TiersError::Config,
                            "tier {n}: a remote tier has a url, not a path"
                        );
                    }
                    if t.read_ahead_kb.is_some() {
                        fail!(
                            TiersError::Config,
                            "tier {n}: read_ahead_kb is for block tiers"
                        );
                    }
                }
                Kind::Pmem | Kind::Block | Kind::Dram => {
                    if t.url.is_some() {
                        fail!(TiersError::Config, "tier {n}: only a remote tier has a url");
                    }
                    if t.read_ahead_kb.is_some() && !(t.kind == Kind::Block && t.emulated) {
                        fail!(
                            TiersError::Config,
                            "tier {n}: read_ahead_kb is set on emulated block tiers only"
                        );
                    }
                    if t.read_ahead_kb.is_some_and(|k| k > 65536) {
                        fail!(
                            TiersError::Config,
                            "tier {n}: read_ahead_kb must be at most 65536"
                        );
                    }
                    if let Some(path) = &t.path {
                        if !path.is_absolute() {
                            fail!(
                                TiersError::Config,
                                "tier {n}: path {} must be absolute",
                                path.display()
                            );
                        }
                    }
                    // an emulated device is mounted where the store looks for it
                    if t.emulated && t.path.is_some() {
                        fail!(
                            TiersError::Config,
                            "tier {n}: an emulated tier is mounted at {}; leave its path out",
                            TierConfig::mount_point(home, n).display()
                        );
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate_and_round_trip() {
        let home = Path::new("/var/lib/thaw");
        let d = TiersConfig::defaults(home);
        d.validate(home).unwrap();
        let back: TiersConfig = serde_json::from_slice(&serde_json::to_vec(&d).unwrap()).unwrap();
        assert_eq!(back, d);
        for n in ["tmpfs", "pmem", "disk", "nvme", "sata", "hdd", "remote"] {
            d.get(n).unwrap();
        }
        assert_eq!(d.get("sata").unwrap().max_concurrent_restores, 4);
        assert_eq!(d.get("hdd").unwrap().profile.read_iops(), 150);
    }

    #[test]
    fn bad_configurations_are_refused() {
        let home = Path::new("/var/lib/thaw");
        type Breaker = Box<dyn Fn(&mut TierConfig)>;
        let cases: Vec<(&str, Breaker)> = vec![
            ("name", Box::new(|t| t.name = "../x".into())),
            ("capacity", Box::new(|t| t.capacity_bytes = 0)),
            ("price", Box::new(|t| t.price_per_gb_month = f64::NAN)),
            ("profile", Box::new(|t| t.profile.rand_read_4k_us = 0.0)),
            ("concurrent", Box::new(|t| t.max_concurrent_restores = 0)),
            ("queue depth", Box::new(|t| t.profile.queue_depth = Some(0))),
            ("io timeout", Box::new(|t| t.request_timeout_s = Some(0))),
            ("url", Box::new(|t| t.url = Some("ftp://x".into()))),
            ("path", Box::new(|t| t.path = Some("/mnt/x".into()))),
        ];
        for (what, f) in cases {
            let mut c = TiersConfig::defaults(home);
            let i = if what == "url" { 6 } else { 4 };
            f(&mut c.tiers[i]);
            assert!(c.validate(home).is_err(), "{what} accepted");
        }
        // an I/O timeout means something only where a request can stall
        let mut tmpfs_timeout = TiersConfig::defaults(home);
        tmpfs_timeout.tiers[0].request_timeout_s = Some(5);
        assert!(tmpfs_timeout.validate(home).is_err());
        let mut dup = TiersConfig::defaults(home);
        dup.tiers.push(dup.tiers[0].clone());
        assert!(dup.validate(home).is_err());
    }
}
