//! Storage tiers snapshots can live on. On these machines only DRAM (tmpfs)
//! and the one real disk exist; slower devices are emulated elsewhere and
//! always labelled so.
use anyhow::{bail, Result};
use std::path::PathBuf;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tier {
    pub name: &'static str,
    pub path: PathBuf,
    /// True when the device is stood in for by another kernel mechanism.
    pub emulated: bool,
    pub description: &'static str,
}

pub const TIER_NAMES: &[&str] = &["tmpfs", "disk"];

impl Tier {
    /// A tier by name, rooted under `home` (disk) or /dev/shm (tmpfs).
    pub fn by_name(name: &str, home: &std::path::Path) -> Result<Tier> {
        Ok(match name {
            "tmpfs" => Tier {
                name: "tmpfs",
                path: PathBuf::from("/dev/shm/thaw/snapshots"),
                emulated: false,
                description: "DRAM (tmpfs)",
            },
            "disk" => Tier {
                name: "disk",
                path: home.join("snapshots"),
                emulated: false,
                description: "local disk",
            },
            _ => bail!("unknown tier {name:?} (known: {})", TIER_NAMES.join(", ")),
        })
    }
}
