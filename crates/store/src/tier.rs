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

pub const TIER_NAMES: &[&str] = &["tmpfs", "disk", "pmem", "nvme", "sata", "hdd"];

/// Written at the root of a device `thaw tier setup` emulates.
pub const EMULATED_MARKER: &str = ".thaw-emulated";

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
            "pmem" => device_tier("pmem", "persistent memory", home)?,
            "nvme" => device_tier("nvme", "NVMe SSD", home)?,
            "sata" => device_tier("sata", "SATA SSD", home)?,
            "hdd" => device_tier("hdd", "7,200 rpm disk", home)?,
            _ => bail!("unknown tier {name:?} (known: {})", TIER_NAMES.join(", ")),
        })
    }
}

/// A device tier is a filesystem mounted at `home/tiers/NAME` (by
/// `thaw tier setup`, or by the operator for a real device); never a plain
/// directory, which would silently put the snapshots on another device.
fn device_tier(
    name: &'static str,
    description: &'static str,
    home: &std::path::Path,
) -> Result<Tier> {
    use std::os::unix::fs::MetadataExt;
    let mount = home.join("tiers").join(name);
    let dev = |p: &std::path::Path| std::fs::metadata(p).map(|m| m.dev()).ok();
    match (dev(&mount), dev(&home.join("tiers"))) {
        (Some(a), Some(b)) if a != b => {}
        _ => bail!(
            "tier {name} is not set up: nothing is mounted at {} (run `thaw tier setup --tiers {name}`)",
            mount.display()
        ),
    }
    Ok(Tier {
        name,
        path: mount.join("snapshots"),
        emulated: mount.join(EMULATED_MARKER).exists(),
        description,
    })
}
