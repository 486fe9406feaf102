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

pub const TIER_NAMES: &[&str] = &["tmpfs", "disk"];

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
            _ => bail!("unknown tier {name:?} (known: {})", TIER_NAMES.join(", ")),
        })
    }

    /// The tier by name if it was ever set up under `home`, without creating
    /// or mounting anything (crash cleanup uses this).
    pub fn existing(name: &str, home: &Path) -> Result<Option<Tier>> {
        if name == "tmpfs" {
            let dir = home.join("dram");
            if !dir.is_dir() || !secure::on_dram(&dir)? {
                return Ok(None);
            }
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
