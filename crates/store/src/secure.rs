//! Ownership of the worker's state on disk: private directories (0700, ours,
//! reached without symlinks), private files (0600), owner tags that name a
//! process by pid *and* start time, and removal of trees whose files were made
//! immutable.
use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;
use thaw_error::{Context, ResultExt};

/// Why a path was refused as (or on the way to) a private directory, or
/// what failed while checking or making it.
#[derive(Debug, thiserror::Error)]
pub enum PathError {
    #[error("{}: \"..\" is not allowed here", path.display())]
    ParentDir { path: PathBuf },
    /// `at` (`path` itself or one of its ancestors) is a symlink
    #[error("{} is a symlink; thaw's state must be reached without symlinks (refusing {})", at.display(), path.display())]
    Symlink { at: PathBuf, path: PathBuf },
    /// `at` (`path` itself or one of its ancestors) is not a directory
    #[error("{} is not a directory (needed for {})", at.display(), path.display())]
    NotDirectory { at: PathBuf, path: PathBuf },
    /// `at` belongs to another user (an ancestor may also be root's)
    #[error("{} is owned by uid {uid} (this worker runs as uid {euid}); refusing to keep state under it (it is not root's or ours)", at.display())]
    ForeignOwner { at: PathBuf, uid: u32, euid: u32 },
    /// others can write `at` (an ancestor may if it is sticky)
    #[error("{} is writable by others (mode {mode:o}){}; refusing to keep state under it (anyone could have planted files)", at.display(), if *ancestor { " without the sticky bit" } else { "" })]
    WritableByOthers {
        at: PathBuf,
        mode: u32,
        ancestor: bool,
    },
    #[error(transparent)]
    Io(#[from] Context),
}

type Result<T, E = PathError> = std::result::Result<T, E>;

/// Permission bits of a private directory / file.
pub const DIR_MODE: u32 = 0o700;
pub const FILE_MODE: u32 = 0o600;

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// Checks every existing ancestor of `path` (not `path` itself): a real
/// directory (no symlink), owned by root or us, and not writable by others
/// unless sticky (so nobody else can swap a component under us).
fn check_ancestors(path: &Path) -> Result<()> {
    let mut cur = PathBuf::new();
    let comps: Vec<Component> = path.components().collect();
    for c in &comps[..comps.len().saturating_sub(1)] {
        match c {
            Component::ParentDir => {
                return Err(PathError::ParentDir {
                    path: path.to_owned(),
                })
            }
            Component::CurDir => continue,
            _ => cur.push(c),
        }
        let m = match fs::symlink_metadata(&cur) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Context::new(format!("checking {}", cur.display()), e).into()),
        };
        check_meta(&m, &cur, path, true)?;
    }
    Ok(())
}

/// Refuses `at` (`path` itself, or one of its ancestors when `ancestor`)
/// unless it is a real directory owned by us (or by root, for an ancestor)
/// that others cannot write (an ancestor may if it is sticky).
fn check_meta(m: &fs::Metadata, at: &Path, path: &Path, ancestor: bool) -> Result<()> {
    let (at, path) = (at.to_owned(), path.to_owned());
    if m.file_type().is_symlink() {
        return Err(PathError::Symlink { at, path });
    }
    if !m.is_dir() {
        return Err(PathError::NotDirectory { at, path });
    }
    if m.uid() != euid() && !(ancestor && m.uid() == 0) {
        return Err(PathError::ForeignOwner {
            at,
            uid: m.uid(),
            euid: euid(),
        });
    }
    let mode = m.mode() & 0o7777;
    if mode & 0o022 != 0 && !(ancestor && mode & 0o1000 != 0) {
        return Err(PathError::WritableByOthers { at, mode, ancestor });
    }
    Ok(())
}

/// Checks that `path` is a private directory of ours: not a symlink, owned
/// by this worker's uid, mode 0700 at most. A directory we own that others
/// can read but not write (made by an older thaw) is tightened to 0700; one
/// others can write, or owned by anyone else, is refused.
pub fn check_private_dir(path: &Path) -> Result<()> {
    check_ancestors(path)?;
    let m = fs::symlink_metadata(path).with_context(|| format!("{}", path.display()))?;
    check_meta(&m, path, path, false)?;
    if m.mode() & 0o077 != 0 {
        fs::set_permissions(path, fs::Permissions::from_mode(DIR_MODE))
            .with_context(|| format!("making {} private", path.display()))?;
    }
    Ok(())
}

/// Creates `path` (and missing parents) as private directories and checks it.
pub fn ensure_private_dir(path: &Path) -> Result<()> {
    check_ancestors(path)?;
    if let Err(e) = fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(path)
    {
        if e.raw_os_error() == Some(libc::ENOTDIR) {
            return Err(PathError::NotDirectory {
                at: path.to_owned(),
                path: path.to_owned(),
            });
        }
        return Err(Context::new(format!("creating {}", path.display()), e).into());
    }
    check_private_dir(path)
}

/// Creates a new private file (0600), refusing to follow a symlink.
pub fn create_private_file(path: &Path) -> Result<File> {
    Ok(OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?)
}

/// Opens an existing file for reading without following a symlink.
pub fn open_nofollow(path: &Path) -> Result<File> {
    Ok(OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?)
}

/// A process's start time in clock ticks since boot (/proc/PID/stat field 22).
pub fn process_start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    // fields after the command name start at field 3
    after.split_whitespace().nth(22 - 3)?.parse().ok()
}

/// This process as an owner tag, `PID.STARTTIME`: names of cgroups, logs and
/// staging directories carry it so that crash cleanup can tell a live
/// worker's state (never touched) from a dead one's.
pub fn owner_tag() -> &'static str {
    static TAG: OnceLock<String> = OnceLock::new();
    TAG.get_or_init(|| {
        let pid = std::process::id();
        format!("{pid}.{}", process_start_time(pid).unwrap_or(0))
    })
}

/// Parses an owner tag at the start of `name` (`PID.START` followed by `-`,
/// `.` or the end); None for names that do not carry one.
pub fn parse_owner(name: &str) -> Option<(u32, u64)> {
    let (pid, rest) = name.split_once('.')?;
    let end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    if end == 0 || !matches!(rest[end..].chars().next(), None | Some('-') | Some('.')) {
        return None;
    }
    Some((pid.parse().ok()?, rest[..end].parse().ok()?))
}

/// True when the process an owner tag names is still running (same pid,
/// same start time: a recycled pid is not the owner).
pub fn owner_alive(pid: u32, start: u64) -> bool {
    process_start_time(pid) == Some(start)
}

/// True when `name` carries an owner tag whose process is gone.
pub fn owned_by_dead(name: &str) -> bool {
    matches!(parse_owner(name), Some((pid, start)) if !owner_alive(pid, start))
}

const FS_IOC_GETFLAGS: libc::c_ulong = 0x8008_6601;
const FS_IOC_SETFLAGS: libc::c_ulong = 0x4008_6602;
pub const FS_IMMUTABLE_FL: libc::c_long = 0x10;

/// The inode flags (chattr) of an open file.
pub fn inode_flags(f: &File) -> std::io::Result<libc::c_long> {
    let mut flags: libc::c_long = 0;
    // SAFETY: FS_IOC_GETFLAGS writes one long into `flags`, which outlives the call.
    let r = unsafe { libc::ioctl(f.as_raw_fd(), FS_IOC_GETFLAGS, &mut flags) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(flags)
}

/// Sets or clears FS_IMMUTABLE_FL on `path` (a regular file).
pub fn set_immutable(path: &Path, on: bool) -> Result<()> {
    let f = open_nofollow(path)?;
    let mut flags = inode_flags(&f)
        .with_context(|| format!("reading the inode flags of {}", path.display()))?;
    flags = if on {
        flags | FS_IMMUTABLE_FL
    } else {
        flags & !FS_IMMUTABLE_FL
    };
    // SAFETY: FS_IOC_SETFLAGS reads one long from `flags`, which outlives the call.
    let r = unsafe { libc::ioctl(f.as_raw_fd(), FS_IOC_SETFLAGS, &flags) };
    if r != 0 {
        let what = if on { "setting" } else { "clearing" };
        let e = std::io::Error::last_os_error();
        return Err(
            Context::new(format!("{what} FS_IMMUTABLE_FL on {}", path.display()), e).into(),
        );
    }
    Ok(())
}

/// Removes a tree, first clearing FS_IMMUTABLE_FL on files that carry it
/// (published snapshot files on block tiers). Never follows symlinks.
pub fn remove_tree(path: &Path) -> Result<()> {
    let m = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Context::new(format!("removing {}", path.display()), e).into()),
    };
    if m.is_dir() {
        for e in fs::read_dir(path).with_context(|| format!("reading {}", path.display()))? {
            let e = e.with_context(|| format!("reading {}", path.display()))?;
            remove_tree(&e.path())?;
        }
        fs::remove_dir(path).with_context(|| format!("removing {}", path.display()))?;
        return Ok(());
    }
    if m.is_file() {
        if let Ok(f) = open_nofollow(path) {
            if inode_flags(&f).is_ok_and(|fl| fl & FS_IMMUTABLE_FL != 0) {
                set_immutable(path, false)?;
            }
        }
    }
    match fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(Context::new(format!("removing {}", path.display()), e).into())
        }
        _ => Ok(()),
    }
}

/// The filesystem type (statfs f_type) holding `path`.
pub fn fs_type(path: &Path) -> Result<i64> {
    let c = CString::new(path.as_os_str().as_bytes())
        .with_context(|| format!("{}: path holds a NUL byte", path.display()))?;
    // SAFETY: statfs fills the zeroed struct; c is NUL-terminated and outlives the call.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(Context::new(format!("statfs {}", path.display()), e).into());
    }
    Ok(st.f_type)
}

pub const TMPFS_MAGIC: i64 = 0x0102_1994;
pub const RAMFS_MAGIC: i64 = 0x8584_58f6;

/// True when `path` is on DRAM-backed memory (tmpfs or ramfs).
pub fn on_dram(path: &Path) -> Result<bool> {
    let t = fs_type(path)?;
    Ok(t == TMPFS_MAGIC || t == RAMFS_MAGIC)
}

/// An exclusive or shared flock held for the life of the value.
#[derive(Debug)]
pub struct FileLock(File);

impl FileLock {
    /// The locked file (or directory).
    pub fn file(&self) -> &File {
        &self.0
    }
}

/// Takes a flock on the lock file `path` (created 0600 if missing).
/// `nonblock`: Ok(None) when someone else holds it.
pub fn flock(path: &Path, exclusive: bool, nonblock: bool) -> Result<Option<FileLock>> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .with_context(|| format!("opening lock {}", path.display()))?;
    lock_open_file(f, path, exclusive, nonblock)
}

/// Takes a flock on the existing directory `path` (never creates anything:
/// a directory removed meanwhile is an error, not a new file).
pub fn flock_dir(path: &Path, exclusive: bool, nonblock: bool) -> Result<Option<FileLock>> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    lock_open_file(f, path, exclusive, nonblock)
}

fn lock_open_file(
    f: File,
    path: &Path,
    exclusive: bool,
    nonblock: bool,
) -> Result<Option<FileLock>> {
    let mut op = if exclusive {
        libc::LOCK_EX
    } else {
        libc::LOCK_SH
    };
    if nonblock {
        op |= libc::LOCK_NB;
    }
    loop {
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(f.as_raw_fd(), op) } == 0 {
            return Ok(Some(FileLock(f)));
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EWOULDBLOCK) if nonblock => return Ok(None),
            _ => return Err(Context::new(format!("flock {}", path.display()), e).into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_tags_parse_and_tell_live_from_dead() {
        let tag = owner_tag();
        let (pid, start) = parse_owner(tag).expect("own tag parses");
        assert_eq!(pid, std::process::id());
        assert!(owner_alive(pid, start));
        assert!(
            !owner_alive(pid, start + 1),
            "a recycled pid is not the owner"
        );
        assert_eq!(parse_owner("123.456-7"), Some((123, 456)));
        assert_eq!(parse_owner("123.456.log"), Some((123, 456)));
        assert_eq!(parse_owner("123-7"), None, "old names carry no start time");
        assert_eq!(parse_owner("x.1"), None);
        assert!(!owned_by_dead(&format!("{tag}-1")));
        assert!(!owned_by_dead("helloworld-abc"));
    }

    #[test]
    fn private_dirs_are_made_0700_and_foreign_ones_refused() {
        let base = PathBuf::from(format!("/dev/shm/thaw-secure-test-{}", std::process::id()));
        let _ = remove_tree(&base);
        let d = base.join("a/b");
        ensure_private_dir(&d).unwrap();
        for p in [&base, &base.join("a"), &d] {
            assert_eq!(
                fs::metadata(p).unwrap().mode() & 0o7777,
                0o700,
                "{}",
                p.display()
            );
        }
        // someone else's directory
        let foreign = base.join("foreign");
        fs::create_dir(&foreign).unwrap();
        std::os::unix::fs::chown(&foreign, Some(65534), None).unwrap();
        let err = check_private_dir(&foreign).unwrap_err();
        assert!(
            matches!(&err, PathError::ForeignOwner { at, uid: 65534, .. } if *at == foreign),
            "{err:?}"
        );
        let err = ensure_private_dir(&foreign.join("x")).unwrap_err();
        assert!(
            matches!(&err, PathError::ForeignOwner { at, uid: 65534, .. } if *at == foreign),
            "{err:?}"
        );
        // world-writable, ours
        let open = base.join("open");
        fs::create_dir(&open).unwrap();
        fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
        let err = check_private_dir(&open).unwrap_err();
        assert!(
            matches!(err, PathError::WritableByOthers { mode: 0o777, .. }),
            "{err:?}"
        );
        // a symlink in the path
        std::os::unix::fs::symlink(&d, base.join("link")).unwrap();
        let err = ensure_private_dir(&base.join("link/c")).unwrap_err();
        assert!(
            matches!(&err, PathError::Symlink { at, .. } if *at == base.join("link")),
            "{err:?}"
        );
        // readable by others but ours: tightened
        let loose = base.join("loose");
        fs::create_dir(&loose).unwrap();
        fs::set_permissions(&loose, fs::Permissions::from_mode(0o755)).unwrap();
        check_private_dir(&loose).unwrap();
        assert_eq!(fs::metadata(&loose).unwrap().mode() & 0o777, 0o700);
        remove_tree(&base).unwrap();
    }
}
