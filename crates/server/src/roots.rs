//! Root filesystems of function images (`POST /v1/roots`). The node's
//! containerd shim names a container's rootfs at Create; the daemon copies
//! it into its home once per content key (containerd's mount goes at
//! Delete, and a snapshot taken over it must be restorable later), adds
//! the mount points the sandbox needs (the agent's directory `/opt/thaw`,
//! `/dev`, `/tmp`, `/proc`) and keeps it as `HOME/serve/roots/KEY/root`. A
//! deploy naming the key (`root`) runs its function there, with the
//! runtime root's agent bind-mounted read-only at `/opt/thaw`.
//!
//! The copy never follows a symbolic link of the image: each directory is
//! created by the copy itself, links are copied as links, and files are
//! opened with `O_NOFOLLOW` and created with `O_EXCL`. Devices, FIFOs and
//! sockets are left out (the sandbox makes its own /dev). The mount points
//! are made real directories (a link there is replaced), so the sandbox's
//! bind mounts cannot be led outside the copy.
//!
//! A root no version on disk names (the registry keeps the current and the
//! previous version of each function, and their snapshots) is removed at a
//! function's delete, after a deploy and at the daemon's start. A root is
//! held meanwhile by what may name it soon: a deploy naming it, from before
//! it opens the root until its record is written, and each import, until a
//! deploy naming its key ends or [`IMPORT_GRACE`] passes (the shim imports
//! at Create and deploys right after; at a start, the root's `root.json`
//! modification time, which each import sets, stands for the import's).
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet, VecDeque};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};
use thaw_error::{fail, Context, ResultExt};
use thaw_runtime::Runtime;

use crate::config::Config;

/// Why a root was not imported or cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum RootError {
    /// the request is wrong (a path outside what may be imported, a bad
    /// key, a tree over the limits)
    #[error("{0}")]
    Invalid(String),
    /// no root was imported under this key
    #[error("{0}")]
    NotFound(String),
    /// the root lacks what the function's runtime needs
    #[error("{0}")]
    Unusable(String),
    /// the host failed, with the step
    #[error(transparent)]
    Other(#[from] Context),
}

type Result<T, E = RootError> = std::result::Result<T, E>;

/// `POST /v1/roots`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImportRequest {
    /// The directory to copy (a container's rootfs), under one of the
    /// daemon's `image_roots_from` directories.
    pub path: PathBuf,
    /// The content key the caller gives it (64 hex digits, e.g. a digest
    /// of the image's layers); none: the digest of the copied tree.
    pub key: Option<String>,
}

/// An imported root, as `root.json` beside it records it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RootInfo {
    pub key: String,
    /// Digest of the copied tree (see [`tree_digest`]).
    pub tree: String,
    pub files: u64,
    pub bytes: u64,
    /// The runtimes whose program the root has ([`thaw_worker::root_program`]).
    pub runtimes: Vec<Runtime>,
}

/// A deployed version's root, as its record names it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RootRef {
    pub key: String,
    pub tree: String,
}

pub fn roots_dir(cfg: &Config) -> PathBuf {
    cfg.state_dir().join("roots")
}

/// The directory the function's sandbox pivots into.
pub fn root_path(cfg: &Config, key: &str) -> PathBuf {
    roots_dir(cfg).join(key).join("root")
}

/// What snapshots over the root record as their root, and restores check:
/// the copied tree and the runtime root whose agent runs on it.
pub fn function_root_hash(tree: &str, runtime_root: &str) -> String {
    let mut h = Sha256::new();
    h.update(b"thaw image root\0");
    h.update(tree.as_bytes());
    h.update(b"\0");
    h.update(runtime_root.as_bytes());
    hex::encode(h.finalize())
}

/// A digest of a directory tree (a function's code, an image's root): every path, its kind, executable bit and
/// contents, in sorted order (so it is the same on every node, whatever the
/// archive's timestamps or order).
pub fn tree_digest(root: &Path) -> std::io::Result<String> {
    fn walk(h: &mut Sha256, root: &Path, rel: &Path) -> std::io::Result<()> {
        let mut entries: Vec<_> =
            std::fs::read_dir(root.join(rel))?.collect::<std::io::Result<Vec<_>>>()?;
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let path = rel.join(e.file_name());
            let meta = std::fs::symlink_metadata(root.join(&path))?;
            h.update(path.as_os_str().as_encoded_bytes());
            h.update([0]);
            if meta.is_dir() {
                h.update(b"d\0");
                walk(h, root, &path)?;
            } else if meta.file_type().is_symlink() {
                h.update(b"l\0");
                h.update(
                    std::fs::read_link(root.join(&path))?
                        .as_os_str()
                        .as_encoded_bytes(),
                );
            } else {
                use std::os::unix::fs::PermissionsExt;
                let exec = meta.permissions().mode() & 0o111 != 0;
                h.update(if exec { b"x\0" } else { b"f\0" });
                let data = std::fs::read(root.join(&path))?;
                h.update((data.len() as u64).to_le_bytes());
                h.update(&data);
            }
            h.update([0]);
        }
        Ok(())
    }
    let mut h = Sha256::new();
    walk(&mut h, root, Path::new(""))?;
    Ok(hex::encode(h.finalize()))
}

fn check_key(key: &str) -> Result<()> {
    if key.len() != 64 || !key.bytes().all(|b| b.is_ascii_hexdigit()) {
        fail!(RootError::Invalid, "root key {key:?} is not 64 hex digits");
    }
    Ok(())
}

/// The imported root `key` (404 if there is none).
pub fn open(cfg: &Config, key: &str) -> Result<RootInfo> {
    check_key(key)?;
    let meta = roots_dir(cfg).join(key).join("root.json");
    let text = match std::fs::read(&meta) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => fail!(
            RootError::NotFound,
            "no root filesystem imported as {key} (import it first: POST /v1/roots)"
        ),
        Err(e) => return Err(Context::new(format!("reading {}", meta.display()), e).into()),
    };
    Ok(serde_json::from_slice(&text).with_context(|| format!("parsing {}", meta.display()))?)
}

/// Refuses a root that lacks `runtime`'s program, naming the path.
pub fn check_runtime(info: &RootInfo, runtime: Runtime) -> Result<()> {
    if !info.runtimes.contains(&runtime) {
        fail!(
            RootError::Unusable,
            "the image's root filesystem has no {} (a {runtime} function runs its agent with it; root {})",
            thaw_worker::root_program(runtime),
            info.key
        );
    }
    Ok(())
}

/// Imports `req.path` (unless `req.key` is imported already), holding the
/// root for the deploy that follows (see [`Pins`]). Returns the root and
/// whether this call copied it.
pub fn import(cfg: &Config, pins: &Pins, req: &ImportRequest) -> Result<(RootInfo, bool)> {
    if let Some(k) = &req.key {
        check_key(k)?;
        let mut held = pins.lock();
        if let Ok(info) = open(cfg, k) {
            touch(cfg, k);
            held.entry(k.clone())
                .or_default()
                .imports
                .push(Instant::now());
            return Ok((info, false));
        }
    }
    let src = allowed_source(cfg, &req.path)?;
    let dir = roots_dir(cfg);
    thaw_runtime::mkdir_private(&dir).context("making the roots directory")?;
    let staging = dir.join(format!(
        ".staging-{}-{}",
        std::process::id(),
        hex::encode(rand_bytes())
    ));
    std::fs::create_dir(&staging).with_context(|| format!("creating {}", staging.display()))?;
    let result = (|| {
        let root = staging.join("root");
        std::fs::create_dir(&root).with_context(|| format!("creating {}", root.display()))?;
        let mut budget = Budget {
            files: 0,
            bytes: 0,
            max_files: cfg.limits.image_root_files,
            max_bytes: cfg.limits.image_root_bytes,
        };
        copy_dir(&src, &root, &mut budget, 0)?;
        // the directory's own mode and owner, as the image has them
        copy_owner_mode(&src, &root)?;
        make_mount_points(&root)?;
        let tree = tree_digest(&root).with_context(|| format!("hashing {}", root.display()))?;
        let key = req.key.clone().unwrap_or_else(|| tree.clone());
        let runtimes = [Runtime::Python, Runtime::Nodejs]
            .into_iter()
            .filter(|&r| {
                resolve_in(&root, thaw_worker::root_program(r)).is_some_and(|p| {
                    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.mode() & 0o111 != 0)
                })
            })
            .collect::<Vec<_>>();
        if runtimes.is_empty() {
            fail!(
                RootError::Unusable,
                "the image's root filesystem has neither {} nor {}: thaw's agent runs with one of them",
                thaw_worker::root_program(Runtime::Python),
                thaw_worker::root_program(Runtime::Nodejs)
            );
        }
        let info = RootInfo {
            key,
            tree,
            files: budget.files,
            bytes: budget.bytes,
            runtimes,
        };
        let mut f = std::fs::File::create(staging.join("root.json")).context("root.json")?;
        f.write_all(&serde_json::to_vec_pretty(&info).context("encoding root.json")?)
            .context("writing root.json")?;
        // another import of the same key may have finished meanwhile: the
        // first one's copy stays
        let mut held = pins.lock();
        let published = match std::fs::rename(&staging, dir.join(&info.key)) {
            Ok(()) => (info, true),
            Err(_) if dir.join(&info.key).join("root.json").is_file() => {
                touch(cfg, &info.key);
                (open(cfg, &info.key)?, false)
            }
            Err(e) => return Err(Context::new("publishing the imported root", e).into()),
        };
        held.entry(published.0.key.clone())
            .or_default()
            .imports
            .push(Instant::now());
        Ok(published)
    })();
    if staging.exists() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    result
}

/// How long an import holds its root for a deploy naming it.
pub const IMPORT_GRACE: Duration = Duration::from_secs(600);

/// What holds roots no record names yet: imports and deploys in flight.
#[derive(Default)]
pub struct Pins(Mutex<HashMap<String, Pin>>);

#[derive(Default)]
pub struct Pin {
    /// deploys naming the key that have not ended
    deploys: usize,
    /// when each import of the key not yet followed by its deploy was made
    imports: Vec<Instant>,
}

impl Pin {
    fn holds(&mut self, now: Instant) -> bool {
        self.imports
            .retain(|&t| now.saturating_duration_since(t) < IMPORT_GRACE);
        self.deploys > 0 || !self.imports.is_empty()
    }
}

impl Pins {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Pin>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Holds `key` for a deploy naming it until the guard drops; the guard
    /// then lets go of one import of the key (the one this deploy follows).
    pub fn deploy(&self, key: &str) -> DeployPin<'_> {
        self.lock().entry(key.to_string()).or_default().deploys += 1;
        DeployPin {
            pins: self,
            key: key.to_string(),
        }
    }
}

/// A deploy's hold on its root ([`Pins::deploy`]).
pub struct DeployPin<'a> {
    pins: &'a Pins,
    key: String,
}

impl Drop for DeployPin<'_> {
    fn drop(&mut self) {
        let mut held = self.pins.lock();
        if let Some(p) = held.get_mut(&self.key) {
            p.deploys = p.deploys.saturating_sub(1);
            if !p.imports.is_empty() {
                p.imports.remove(0);
            }
            if p.deploys == 0 && p.imports.is_empty() {
                held.remove(&self.key);
            }
        }
    }
}

/// Marks `key` as imported now (its `root.json`'s modification time).
fn touch(cfg: &Config, key: &str) {
    let meta = roots_dir(cfg).join(key).join("root.json");
    if let Ok(f) = std::fs::File::options().write(true).open(&meta) {
        let _ = f.set_modified(SystemTime::now());
    }
}

/// The root keys the records of every version on disk name (the
/// registry's directory: one directory a function, one a version);
/// none when a record cannot be read (nothing is removed then).
fn named_roots(functions_dir: &Path) -> Option<HashSet<String>> {
    #[derive(Deserialize)]
    struct Named {
        #[serde(default)]
        root: Option<RootRef>,
    }
    let mut keys = HashSet::new();
    let functions = match std::fs::read_dir(functions_dir) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Some(keys),
        Err(e) => {
            tracing::warn!("roots kept: reading {}: {e}", functions_dir.display());
            return None;
        }
    };
    for f in functions.flatten() {
        let Ok(versions) = std::fs::read_dir(f.path()) else {
            continue;
        };
        for v in versions.flatten() {
            let rec = v.path().join("record.json");
            let text = match std::fs::read(&rec) {
                Ok(t) => t,
                // a version a deploy is still writing (its deploy holds its
                // root), or not a version
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(_) if !v.path().is_dir() => continue,
                Err(e) => {
                    tracing::warn!("roots kept: reading {}: {e}", rec.display());
                    return None;
                }
            };
            match serde_json::from_slice::<Named>(&text) {
                Ok(n) => keys.extend(n.root.map(|r| r.key)),
                Err(e) => {
                    tracing::warn!("roots kept: parsing {}: {e}", rec.display());
                    return None;
                }
            }
        }
    }
    Some(keys)
}

/// Removes the roots no version on disk names and nothing holds (see the
/// module's notes), and what imports or removals that died left. At a
/// start (`starting`), a root imported less than [`IMPORT_GRACE`] ago
/// (its `root.json`'s modification time) is held for the rest of it.
/// Returns the keys removed.
pub fn gc(cfg: &Config, functions_dir: &Path, pins: &Pins, starting: bool) -> Vec<String> {
    let dir = roots_dir(cfg);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut leftovers = Vec::new();
    let mut removed = Vec::new();
    {
        let mut held = pins.lock();
        let Some(named) = named_roots(functions_dir) else {
            return Vec::new();
        };
        let now = Instant::now();
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if name.starts_with(".staging-") || name.starts_with(".removing-") {
                // imports and removals in flight have these too: only a
                // start removes them
                if starting {
                    leftovers.push(e.path());
                }
                continue;
            }
            if check_key(&name).is_err() || named.contains(&name) {
                continue;
            }
            if starting {
                let age = std::fs::metadata(e.path().join("root.json"))
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| SystemTime::now().duration_since(t).ok());
                match age {
                    Some(a) if a >= IMPORT_GRACE => {}
                    // recent, or from the future: held as a fresh import
                    _ => {
                        let at = now.checked_sub(age.unwrap_or_default()).unwrap_or(now);
                        held.entry(name).or_default().imports.push(at);
                        continue;
                    }
                }
            }
            if held.get_mut(&name).is_some_and(|p| p.holds(now)) {
                continue;
            }
            held.remove(&name);
            // out of the keys' namespace at once: a deploy opening it from
            // here on finds none; the copy itself goes outside the lock
            let gone = dir.join(format!(".removing-{name}-{}", hex::encode(rand_bytes())));
            match std::fs::rename(e.path(), &gone) {
                Ok(()) => {
                    leftovers.push(gone);
                    removed.push(name);
                }
                Err(err) => tracing::warn!(key = %name, "removing an unused root: {err}"),
            }
        }
    }
    for p in leftovers {
        if let Err(err) = std::fs::remove_dir_all(&p) {
            tracing::warn!("removing {}: {err}", p.display());
        }
    }
    for k in &removed {
        tracing::info!(key = %k, "removed an image root no function uses");
    }
    removed
}

fn rand_bytes() -> [u8; 8] {
    let mut b = [0u8; 8];
    // SAFETY: getrandom writes at most b.len() bytes into b.
    unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    b
}

/// `path` if it is a directory strictly below one of `image_roots_from`
/// (after resolving its links).
fn allowed_source(cfg: &Config, path: &Path) -> Result<PathBuf> {
    if !path.is_absolute() {
        fail!(
            RootError::Invalid,
            "root path {} is not absolute",
            path.display()
        );
    }
    let real = path
        .canonicalize()
        .map_err(|e| RootError::Invalid(format!("root path {}: {e}", path.display())))?;
    let allowed = cfg.image_roots_from.iter().any(|a| {
        a.canonicalize()
            .is_ok_and(|a| real != a && real.starts_with(&a))
    });
    if !allowed {
        let from: Vec<String> = cfg
            .image_roots_from
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        fail!(
            RootError::Invalid,
            "root path {} is not below a directory roots may be imported from ({})",
            path.display(),
            from.join(", ")
        );
    }
    if !real.is_dir() {
        fail!(
            RootError::Invalid,
            "root path {} is not a directory",
            path.display()
        );
    }
    Ok(real)
}

struct Budget {
    files: u64,
    bytes: u64,
    max_files: u64,
    max_bytes: u64,
}

/// Deepest directory nesting copied.
const MAX_DEPTH: usize = 128;

fn copy_dir(src: &Path, dst: &Path, budget: &mut Budget, depth: usize) -> Result<()> {
    if depth > MAX_DEPTH {
        fail!(
            RootError::Invalid,
            "the root filesystem nests directories deeper than {MAX_DEPTH} ({})",
            src.display()
        );
    }
    let mut entries: Vec<_> = std::fs::read_dir(src)
        .with_context(|| format!("reading {}", src.display()))?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<std::io::Result<_>>()
        .with_context(|| format!("reading {}", src.display()))?;
    entries.sort();
    for name in entries {
        let (s, d) = (src.join(&name), dst.join(&name));
        let m = std::fs::symlink_metadata(&s).with_context(|| format!("{}", s.display()))?;
        budget.files += 1;
        if budget.files > budget.max_files {
            fail!(
                RootError::Invalid,
                "the root filesystem has more than {} entries",
                budget.max_files
            );
        }
        let ft = m.file_type();
        if ft.is_dir() {
            std::fs::create_dir(&d).with_context(|| format!("creating {}", d.display()))?;
            copy_dir(&s, &d, budget, depth + 1)?;
            copy_owner_mode(&s, &d)?;
        } else if ft.is_file() {
            budget.bytes += m.len();
            if budget.bytes > budget.max_bytes {
                fail!(
                    RootError::Invalid,
                    "the root filesystem holds more than {} bytes",
                    budget.max_bytes
                );
            }
            let mut from = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&s)
                .with_context(|| format!("opening {}", s.display()))?;
            let mut to = create_new(&d, 0o600)?;
            std::io::copy(&mut from, &mut to)
                .with_context(|| format!("copying {}", s.display()))?;
            std::os::unix::fs::fchown(&to, Some(m.uid()), Some(m.gid()))
                .with_context(|| format!("owner of {}", d.display()))?;
            to.set_permissions(std::fs::Permissions::from_mode(m.mode() & 0o7777))
                .with_context(|| format!("mode of {}", d.display()))?;
        } else if ft.is_symlink() {
            let target =
                std::fs::read_link(&s).with_context(|| format!("reading {}", s.display()))?;
            std::os::unix::fs::symlink(&target, &d)
                .with_context(|| format!("creating {}", d.display()))?;
            std::os::unix::fs::lchown(&d, Some(m.uid()), Some(m.gid()))
                .with_context(|| format!("owner of {}", d.display()))?;
        }
        // devices, FIFOs and sockets stay out: the sandbox makes its own /dev
    }
    Ok(())
}

/// `dst` (a directory the copy made) gets `src`'s owner and mode.
fn copy_owner_mode(src: &Path, dst: &Path) -> Result<()> {
    let m = std::fs::symlink_metadata(src).with_context(|| format!("{}", src.display()))?;
    std::os::unix::fs::lchown(dst, Some(m.uid()), Some(m.gid()))
        .with_context(|| format!("owner of {}", dst.display()))?;
    std::fs::set_permissions(dst, std::fs::Permissions::from_mode(m.mode() & 0o7777))
        .with_context(|| format!("mode of {}", dst.display()))?;
    Ok(())
}

/// The directories the sandbox mounts on, as real directories of the copy
/// (whatever the image had there that is not one is replaced), and
/// `/etc/resolv.conf` as a regular file (a function with egress gets its
/// own mounted there).
fn make_mount_points(root: &Path) -> Result<()> {
    for dir in [
        "dev",
        "tmp",
        "proc",
        "etc",
        thaw_sandbox::USER_CODE_DIR,
        thaw_sandbox::PACKAGES_DIR,
    ] {
        let mut at = root.to_path_buf();
        for part in Path::new(dir.trim_start_matches('/')).components() {
            at.push(part);
            match std::fs::symlink_metadata(&at) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => {
                    std::fs::remove_file(&at)
                        .with_context(|| format!("replacing {}", at.display()))?;
                    std::fs::create_dir(&at)
                        .with_context(|| format!("creating {}", at.display()))?;
                }
                Err(_) => std::fs::create_dir(&at)
                    .with_context(|| format!("creating {}", at.display()))?,
            }
        }
    }
    std::fs::set_permissions(root.join("tmp"), std::fs::Permissions::from_mode(0o1777))
        .context("mode of /tmp")?;
    let resolv = root.join("etc/resolv.conf");
    match std::fs::symlink_metadata(&resolv) {
        Ok(m) if m.is_file() => {}
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(&resolv)
            .with_context(|| format!("replacing {}", resolv.display()))?,
        Ok(_) => std::fs::remove_file(&resolv)
            .with_context(|| format!("replacing {}", resolv.display()))?,
        Err(_) => {}
    }
    if !resolv.is_file() {
        create_new(&resolv, 0o644)?;
    }
    Ok(())
}

/// A new file at `path` (never through a link, never an existing one).
fn create_new(path: &Path, mode: u32) -> Result<std::fs::File> {
    Ok(std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?)
}

/// Where `path` (absolute, as a process inside `root` names it) is on the
/// host, its links resolved inside `root` as a chroot would: none if it
/// does not exist or links loop.
pub fn resolve_in(root: &Path, path: &str) -> Option<PathBuf> {
    let mut parts: VecDeque<PathBuf> = Path::new(path)
        .components()
        .map(|c| PathBuf::from(c.as_os_str()))
        .collect();
    let mut at = PathBuf::new();
    let mut links = 0;
    while let Some(part) = parts.pop_front() {
        match Path::new(&part).components().next() {
            Some(Component::Normal(name)) => {
                let next = at.join(name);
                let m = std::fs::symlink_metadata(root.join(&next)).ok()?;
                if !m.file_type().is_symlink() {
                    at = next;
                    continue;
                }
                links += 1;
                if links > 40 {
                    return None;
                }
                let target = std::fs::read_link(root.join(&next)).ok()?;
                if target.is_absolute() {
                    at = PathBuf::new();
                }
                for c in target.components().rev() {
                    parts.push_front(PathBuf::from(c.as_os_str()));
                }
            }
            Some(Component::ParentDir) => {
                at.pop();
            }
            _ => {}
        }
    }
    Some(root.join(at))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deploy_ends_the_hold_of_one_import_and_imports_expire() {
        let pins = Pins::default();
        let now = Instant::now();
        let holds = |k: &str, at: Instant| pins.lock().get_mut(k).is_some_and(|p| p.holds(at));
        {
            let _deploy = pins.deploy("d");
            assert!(holds("d", now), "a deploy in flight holds its root");
        }
        assert!(pins.lock().get("d").is_none(), "nothing holds it after");
        pins.lock()
            .entry("k".into())
            .or_default()
            .imports
            .extend([now, now]);
        drop(pins.deploy("k"));
        assert!(holds("k", now), "the second import still holds it");
        assert!(!holds("k", now + IMPORT_GRACE), "until its grace passes");
        pins.lock().entry("k".into()).or_default().imports.push(now);
        drop(pins.deploy("k"));
        assert!(pins.lock().get("k").is_none(), "nothing holds it");
    }

    #[test]
    fn links_resolve_inside_the_root() {
        let d = std::env::temp_dir().join(format!("thaw-roots-resolve-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("usr/bin")).unwrap();
        std::fs::write(d.join("usr/bin/python3.11"), "").unwrap();
        std::os::unix::fs::symlink("python3.11", d.join("usr/bin/python3")).unwrap();
        std::os::unix::fs::symlink("/usr/bin/python3", d.join("usr/bin/py")).unwrap();
        std::os::unix::fs::symlink("../../../../etc", d.join("usr/bin/up")).unwrap();
        std::os::unix::fs::symlink("loop", d.join("loop")).unwrap();
        assert_eq!(
            resolve_in(&d, "/usr/bin/python3"),
            Some(d.join("usr/bin/python3.11"))
        );
        assert_eq!(
            resolve_in(&d, "/usr/bin/py"),
            Some(d.join("usr/bin/python3.11"))
        );
        // `..` stops at the root, as in a chroot: the host's /etc is not reached
        assert_eq!(resolve_in(&d, "/usr/bin/up/passwd"), None);
        assert_eq!(resolve_in(&d, "/loop"), None);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
