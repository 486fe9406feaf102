//! Versioned snapshots of one function on one tier, published atomically.
//!
//! ```text
//! TIER/NAME/                 0700
//!   deploy.lock              flock: one deployer at a time
//!   current -> versions/ID   the published version (a symlink, only ever readlink'ed)
//!   versions/ID/             one whole snapshot; its manifest's id is ID
//!   versions/.ID.tmp-OWNER   a snapshot being written (OWNER = pid.starttime)
//!   versions/.trash-OWNER-ID a version being removed
//! ```
//!
//! A deployer takes `deploy.lock`, writes a new version under a temporary
//! name, renames it to `versions/ID`, then points `current` at it by renaming
//! a new symlink over the old one: one atomic step. A reader resolves
//! `current` once, opens that version and holds a shared flock on its
//! directory for as long as it uses it (the [`Snapshot`] value), so it reads
//! one version only. Old versions are removed after a publish, and by crash
//! cleanup, but only when no reader holds their lock; a version still held is
//! left for the next publish or `thaw gc`.
use crate::secure::{self, FileLock};
use crate::{Snapshot, StoreError, Tier};
use std::fs;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use thaw_error::{Context, ResultExt};

type Result<T, E = StoreError> = std::result::Result<T, E>;

const CURRENT: &str = "current";
const VERSIONS: &str = "versions";
const DEPLOY_LOCK: &str = "deploy.lock";

/// Holds a function's deploy lock; see the module docs.
pub struct DeployLock {
    dir: PathBuf,
    _lock: FileLock,
}

fn check_name(name: &str) -> Result<()> {
    if name.is_empty()
        || name.starts_with('.')
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
    {
        return Err(StoreError::BadName { name: name.into() });
    }
    Ok(())
}

/// True for names [`DeployLock::new_version_dir`] makes (`SECS-16HEX`);
/// cleanup of files named after versions touches only those.
pub fn is_version_id(id: &str) -> bool {
    id.split_once('-').is_some_and(|(secs, rnd)| {
        !secs.is_empty()
            && secs.bytes().all(|b| b.is_ascii_digit())
            && rnd.len() == 16
            && rnd.bytes().all(|b| b.is_ascii_hexdigit())
    })
}

fn valid_version_id(id: &str) -> bool {
    !id.is_empty()
        && !id.starts_with('.')
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

impl Tier {
    /// The directory holding every version of snapshot `name` on this tier.
    pub fn function_dir(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Takes the deploy lock of snapshot `name` (blocking while another
    /// deployer holds it), creating the tier and function directories.
    pub fn lock_deploy(&self, name: &str) -> Result<DeployLock> {
        check_name(name)?;
        self.ensure_root()?;
        let dir = self.function_dir(name);
        secure::ensure_private_dir(&dir.join(VERSIONS))?;
        let lock = secure::flock(&dir.join(DEPLOY_LOCK), true, false)?
            .expect("a blocking flock returns a lock");
        Ok(DeployLock { dir, _lock: lock })
    }

    /// The published version of snapshot `name`, held for reading (None when
    /// nothing is published).
    pub fn open_current(&self, name: &str) -> Result<Option<Snapshot>> {
        check_name(name)?;
        let dir = self.function_dir(name);
        match fs::symlink_metadata(&dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            _ => secure::check_private_dir(&dir)?,
        }
        open_published(&dir)
    }

    /// Every snapshot name on this tier with its published version (or why
    /// it cannot be opened). Names without a published version are skipped.
    pub fn list(&self) -> Result<Vec<(String, Result<Snapshot>)>> {
        let rd = match fs::read_dir(&self.path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
            r => r.with_context(|| format!("reading {}", self.path.display()))?,
        };
        secure::check_private_dir(&self.path)?;
        let mut out = Vec::new();
        for e in rd {
            let e = e.with_context(|| format!("reading {}", self.path.display()))?;
            let name = e.file_name().to_string_lossy().to_string();
            if name.starts_with('.') || fs::symlink_metadata(e.path().join(CURRENT)).is_err() {
                continue;
            }
            match self.open_current(&name) {
                Ok(Some(s)) => out.push((name, Ok(s))),
                Ok(None) => {}
                Err(err) => out.push((name, Err(err))),
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }
}

/// Resolves `current` once, opens that version and takes its read lock. A
/// version removed between the readlink and the lock is noticed (the locked
/// directory is no longer the one at its path) and `current` re-read.
fn open_published(dir: &Path) -> Result<Option<Snapshot>> {
    for _ in 0..100 {
        let target = match fs::read_link(dir.join(CURRENT)) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(Context::new(format!("reading {}/current", dir.display()), e).into())
            }
        };
        let id = target
            .strip_prefix(VERSIONS)
            .ok()
            .and_then(|p| p.to_str())
            .filter(|id| valid_version_id(id))
            .ok_or_else(|| StoreError::Corrupt {
                dir: dir.to_owned(),
                what: format!("current points at {}, not at a version", target.display()),
            })?;
        let vdir = dir.join(VERSIONS).join(id);
        let lock = match secure::flock_dir(&vdir, false, false) {
            Ok(l) => l.expect("a blocking flock returns a lock"),
            Err(_) if !vdir.exists() => continue,
            Err(e) => return Err(e.into()),
        };
        // the directory we locked must still be the one at that path
        let held = lock_inode(&lock)?;
        match fs::symlink_metadata(&vdir) {
            Ok(m) if (m.dev(), m.ino()) == held => {}
            _ => continue,
        }
        secure::check_private_dir(&vdir)?;
        let mut snap = Snapshot::open(&vdir)?;
        if snap.manifest.id != id {
            return Err(StoreError::Integrity {
                path: vdir,
                what: format!("manifest id {:?}, not its version {id:?}", snap.manifest.id),
            });
        }
        snap.hold = Some(Arc::new(lock));
        return Ok(Some(snap));
    }
    Err(StoreError::Busy {
        dir: dir.to_owned(),
    })
}

fn lock_inode(lock: &FileLock) -> Result<(u64, u64)> {
    let m = lock.file().metadata().context("stat of a locked version")?;
    Ok((m.dev(), m.ino()))
}

impl DeployLock {
    /// The published version, if any (checked under the lock: another
    /// deployer may have published while we waited).
    pub fn current(&self) -> Result<Option<Snapshot>> {
        open_published(&self.dir)
    }

    /// Where to write a new version: `versions/ID` with a fresh, unique ID
    /// (time and randomness). The writer must put ID in the manifest.
    pub fn new_version_dir(&self) -> Result<PathBuf> {
        let mut rnd = [0u8; 8];
        fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut rnd))
            .context("reading /dev/urandom")?;
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        Ok(self
            .dir
            .join(VERSIONS)
            .join(format!("{secs}-{}", hex::encode(rnd))))
    }

    /// Publishes a copy of `src` (a snapshot of another name or tier) as a new
    /// version of this name. Image and state are checked against `src`'s
    /// manifest while they are copied, so a corrupt source is never copied.
    pub fn publish_copy(self, src: &Snapshot) -> Result<Snapshot> {
        let dir = self.new_version_dir()?;
        let id = dir
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| StoreError::BadPath { path: dir.clone() })?
            .to_string();
        let mut w = crate::SnapshotWriter::create(&dir)?;
        w.keep_machine(src.manifest.machine.clone());
        src.copy_image_into(&mut w)?;
        let state = src.load_state()?;
        let copy = w.finish(
            &id,
            &src.manifest.function,
            &src.manifest.runtime_root,
            &state,
        )?;
        self.publish(&copy)
    }

    /// Makes `snap` (written into a directory from [`Self::new_version_dir`])
    /// the published version with one atomic rename, then removes older
    /// versions no reader holds. Returns the new version, held for reading.
    pub fn publish(self, snap: &Snapshot) -> Result<Snapshot> {
        let id = snap
            .dir
            .file_name()
            .and_then(|n| n.to_str())
            .filter(|id| valid_version_id(id) && snap.dir == self.dir.join(VERSIONS).join(id))
            .ok_or_else(|| StoreError::NotAVersion {
                path: snap.dir.clone(),
                of: self.dir.clone(),
            })?
            .to_string();
        if snap.manifest.id != id {
            return Err(StoreError::Integrity {
                path: snap.dir.clone(),
                what: format!(
                    "manifest id {:?}; a version's id must be its name",
                    snap.manifest.id
                ),
            });
        }
        let tmp = self
            .dir
            .join(format!(".{CURRENT}.tmp-{}", secure::owner_tag()));
        let _ = fs::remove_file(&tmp);
        std::os::unix::fs::symlink(format!("{VERSIONS}/{id}"), &tmp)
            .with_context(|| format!("creating {}", tmp.display()))?;
        fs::rename(&tmp, self.dir.join(CURRENT))
            .with_context(|| format!("publishing {}", snap.dir.display()))?;
        crate::snapshot::sync_dir(&self.dir)?;
        let published = open_published(&self.dir)?.ok_or_else(|| StoreError::NotFound {
            dir: self.dir.join(CURRENT),
        })?;
        remove_unused_versions(&self.dir)?;
        Ok(published)
    }
}

/// Removes versions of one function that are neither published nor held by
/// a reader, and staging/trash directories whose owner is dead.
pub(crate) fn remove_unused_versions(dir: &Path) -> Result<Vec<PathBuf>> {
    let current = fs::read_link(dir.join(CURRENT)).ok();
    let vdir = dir.join(VERSIONS);
    let mut removed = Vec::new();
    let Ok(rd) = fs::read_dir(&vdir) else {
        return Ok(removed);
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let path = e.path();
        if let Some(rest) = name.strip_prefix('.') {
            // `.ID.tmp-OWNER` or `.trash-OWNER-ID`
            let owner = rest
                .split_once(".tmp-")
                .map(|(_, o)| o)
                .or_else(|| rest.strip_prefix("trash-"));
            if owner.is_some_and(secure::owned_by_dead) {
                secure::remove_tree(&path)?;
                removed.push(path);
            }
            continue;
        }
        if current.as_deref() == Some(Path::new(VERSIONS).join(&name).as_path()) {
            continue;
        }
        // held by a reader (or being opened): leave it
        let Ok(Some(lock)) = secure::flock_dir(&path, true, true) else {
            continue;
        };
        let trash = vdir.join(format!(".trash-{}-{name}", secure::owner_tag()));
        fs::rename(&path, &trash).with_context(|| format!("moving {} away", path.display()))?;
        drop(lock);
        secure::remove_tree(&trash)?;
        removed.push(path);
    }
    Ok(removed)
}

/// Crash cleanup of one tier: for every function, what dead deployers left
/// (staging and trash directories, stale `current` temp links) and versions
/// nobody uses. Returns what was removed.
pub fn gc_tier(tier: &Tier) -> Result<Vec<PathBuf>> {
    let mut removed = Vec::new();
    let Ok(rd) = fs::read_dir(&tier.path) else {
        return Ok(removed);
    };
    secure::check_private_dir(&tier.path)?;
    for e in rd.flatten() {
        let dir = e.path();
        if legacy_leftover_of_dead(&e.file_name().to_string_lossy()) {
            secure::remove_tree(&dir)?;
            removed.push(dir);
            continue;
        }
        if !dir.join(VERSIONS).is_dir() {
            continue;
        }
        // a deployer at work holds the lock; its staging is not garbage
        let Some(_lock) = secure::flock(&dir.join(DEPLOY_LOCK), true, true)? else {
            continue;
        };
        let rd = fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?;
        for l in rd.flatten() {
            let n = l.file_name().to_string_lossy().to_string();
            if n.strip_prefix(&format!(".{CURRENT}.tmp-"))
                .is_some_and(secure::owned_by_dead)
            {
                fs::remove_file(l.path())
                    .with_context(|| format!("removing {}", l.path().display()))?;
                removed.push(l.path());
            }
        }
        removed.extend(remove_unused_versions(&dir)?);
    }
    Ok(removed)
}

/// Names the unversioned layout (before versioned snapshots) left after a crash:
/// `.NAME.new-PID.tmp-PID` (a half-written deploy), `NAME.new-PID` (a
/// written one never swapped in) and `NAME.old-PID` (a replaced snapshot). They carry only a pid: one that is running may be a
/// live deployer and is left alone.
fn legacy_leftover_of_dead(name: &str) -> bool {
    let pid = if let Some(rest) = name.strip_prefix('.') {
        rest.rsplit_once(".tmp-")
            .filter(|(head, _)| head.contains(".new-"))
            .map(|(_, pid)| pid)
    } else {
        name.rsplit_once(".old-")
            .or_else(|| name.rsplit_once(".new-"))
            .map(|(_, pid)| pid)
    };
    pid.and_then(|p| p.parse::<u32>().ok())
        .is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists())
}
