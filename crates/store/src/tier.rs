//! Storage tiers snapshots can live on. On these machines only DRAM (tmpfs)
//! and the one real disk exist; slower devices are emulated elsewhere and
//! always labelled so.
//!
//! Every tier lives under the state home (`--home`): the disk tier in
//! `HOME/snapshots`, the DRAM tier in `HOME/dram/snapshots`, where `HOME/dram`
//! is a tmpfs that thaw mounts (mode 0700, root) on first use unless it
//! already is on one. Nothing lives on a shared world-writable path.
use crate::secure;
use anyhow::{bail, Context, Result};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

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
    /// A tier by name, rooted under `home`. For `tmpfs` this mounts the
    /// home's private DRAM tmpfs if it is not mounted yet.
    pub fn by_name(name: &str, home: &Path) -> Result<Tier> {
        Ok(match name {
            "tmpfs" => Tier {
                name: "tmpfs",
                path: dram_dir(home)?.join("snapshots"),
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

    /// The tier by name if it was ever set up under `home`, without creating
    /// or mounting anything (crash cleanup uses this).
    pub fn existing(name: &str, home: &Path) -> Result<Option<Tier>> {
        match name {
            "tmpfs" => {
                let dir = home.join("dram");
                if !dir.is_dir() || !secure::on_dram(&dir)? {
                    return Ok(None);
                }
            }
            "disk" => {}
            // a device tier that is not set up holds nothing
            _ if device_mount(name, home).is_err() => return Ok(None),
            _ => {}
        }
        let t = Tier::by_name(name, home)?;
        Ok(t.path.is_dir().then_some(t))
    }

    /// Unmounts the DRAM tier's tmpfs thaw mounted under `home` (for homes
    /// that are thrown away, like test homes); a no-op when none is mounted.
    pub fn unmount_dram(home: &Path) -> Result<()> {
        let dir = home.join("dram");
        let mounted = match (std::fs::metadata(home), std::fs::metadata(&dir)) {
            (Ok(h), Ok(d)) => {
                use std::os::unix::fs::MetadataExt;
                h.dev() != d.dev() && secure::on_dram(&dir)?
            }
            _ => false,
        };
        if !mounted {
            return Ok(());
        }
        let target = CString::new(dir.as_os_str().as_bytes()).context("home path holds a NUL")?;
        // SAFETY: umount2 with a NUL-terminated path that outlives the call.
        if unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) } != 0 {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("unmounting {}", dir.display()));
        }
        Ok(())
    }

    /// Creates the tier's root (0700, ours) if missing and checks it.
    pub fn ensure_root(&self) -> Result<()> {
        secure::ensure_private_dir(&self.path)
            .with_context(|| format!("tier {} at {}", self.name, self.path.display()))
    }
}

/// `HOME/dram`, a private tmpfs: mounted here (0700, root) unless the
/// directory already is on tmpfs (a home on /dev/shm, say). The check and the
/// mount run under a lock so two workers never stack two mounts.
fn dram_dir(home: &Path) -> Result<PathBuf> {
    let dir = home.join("dram");
    secure::ensure_private_dir(&dir)?;
    if secure::on_dram(&dir)? {
        return Ok(dir);
    }
    let _lock = secure::flock(&home.join(".dram.lock"), true, false)?;
    if secure::on_dram(&dir)? {
        return Ok(dir);
    }
    let target = CString::new(dir.as_os_str().as_bytes()).context("home path holds a NUL")?;
    // SAFETY: all arguments are NUL-terminated strings that outlive the call.
    let r = unsafe {
        libc::mount(
            c"thaw-dram".as_ptr(),
            target.as_ptr(),
            c"tmpfs".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            c"mode=0700,uid=0,gid=0".as_ptr().cast(),
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("mounting the DRAM tier's tmpfs on {}", dir.display()));
    }
    secure::check_private_dir(&dir)?;
    Ok(dir)
}

/// A device tier is a filesystem mounted at `home/tiers/NAME` (by
/// `thaw tier setup`, or by the operator for a real device); never a plain
/// directory, which would silently put the snapshots on another device.
fn device_tier(name: &'static str, description: &'static str, home: &Path) -> Result<Tier> {
    let mount = device_mount(name, home)?;
    Ok(Tier {
        name,
        path: mount.join("snapshots"),
        emulated: mount.join(EMULATED_MARKER).exists(),
        description,
    })
}

/// `home/tiers/NAME` if a filesystem is mounted there.
fn device_mount(name: &str, home: &Path) -> Result<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let mount = home.join("tiers").join(name);
    let dev = |p: &Path| std::fs::metadata(p).map(|m| m.dev()).ok();
    match (dev(&mount), dev(&home.join("tiers"))) {
        (Some(a), Some(b)) if a != b => Ok(mount),
        _ => bail!(
            "tier {name} is not set up: nothing is mounted at {} (run `thaw tier setup --tiers {name}`)",
            mount.display()
        ),
    }
}
