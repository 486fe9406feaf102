//! Storage tiers snapshots can live on. On these machines only DRAM (tmpfs)
//! and the one real disk exist; slower devices are emulated elsewhere and
//! always labelled so.
//!
//! Every tier lives under the state home (`--home`): the disk tier in
//! `HOME/snapshots`, the DRAM tier in `HOME/dram/snapshots`, where `HOME/dram`
//! is a tmpfs that thaw mounts (mode 0700, root) on first use unless it
//! already is on one. Nothing lives on a shared world-writable path.
use crate::secure::{self, PathError};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use thaw_error::{Context, ResultExt};

/// Why a tier cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TierError {
    #[error("unknown tier {name:?} (known: {})", TIER_NAMES.join(", "))]
    Unknown { name: String },
    /// a device tier with nothing mounted at its directory
    #[error("tier {name} is not set up: nothing is mounted at {} (run `thaw tier setup --tiers {name}`)", mount.display())]
    NotSetUp { name: String, mount: PathBuf },
    /// the tier's root is not a private directory of ours
    #[error("tier {name} at {}", path.display())]
    Root {
        name: &'static str,
        path: PathBuf,
        #[source]
        source: PathError,
    },
    #[error(transparent)]
    Path(#[from] PathError),
    /// mounting the DRAM tier's tmpfs, unmounting it
    #[error(transparent)]
    Other(#[from] Context),
}

type Result<T, E = TierError> = std::result::Result<T, E>;

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
            _ => return Err(TierError::Unknown { name: name.into() }),
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
        let target = c_path(&dir)?;
        // SAFETY: umount2 with a NUL-terminated path that outlives the call.
        if unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) } != 0 {
            let e = std::io::Error::last_os_error();
            return Err(Context::new(format!("unmounting {}", dir.display()), e).into());
        }
        Ok(())
    }

    /// Creates the tier's root (0700, ours) if missing and checks it.
    pub fn ensure_root(&self) -> Result<()> {
        secure::ensure_private_dir(&self.path).map_err(|source| TierError::Root {
            name: self.name,
            path: self.path.clone(),
            source,
        })
    }
}

fn c_path(p: &Path) -> Result<CString> {
    Ok(CString::new(p.as_os_str().as_bytes())
        .with_context(|| format!("{}: path holds a NUL byte", p.display()))?)
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
    let target = c_path(&dir)?;
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
        let e = std::io::Error::last_os_error();
        let what = format!("mounting the DRAM tier's tmpfs on {}", dir.display());
        return Err(Context::new(what, e).into());
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
        _ => Err(TierError::NotSetUp {
            name: name.into(),
            mount,
        }),
    }
}
