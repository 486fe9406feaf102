//! The sandbox's writable mounts (/tmp and /dev/shm) as part of a snapshot.
//!
//! At checkpoint the frozen runtime's mounts are walked from the host
//! through `/proc/PID/root`, one directory descriptor at a time and never
//! following a link (the function may have planted any name there): each
//! directory, regular file and symbolic link becomes a [`SavedFile`], and
//! file contents go into the snapshot's memory image after the pages, so
//! they share its checksum, its tier moves and its streaming. A restore
//! recreates them in the new sandbox's fresh mounts, owned by its uid,
//! before the runtime resumes; FIFOs are made again empty (the unread
//! bytes of an open one are its descriptor's). Anything else there (a
//! socket, a device) is a refusal: a restored instance must not differ from the snapshotted one.
use crate::checkpoint::Refusal;
use crate::error::Result;
use std::ffi::CString;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use thaw_error::{fail, Context, ResultExt};
use thaw_sandbox::HostError;
use thaw_snapshot_format::{
    split_mount, FileKind, SavedFile, MAX_PATH, MAX_SAVED_ENTRIES, SAVED_MOUNTS,
};

/// Deepest directory nesting walked.
const MAX_DEPTH: usize = 64;

/// What a walk of the mounts found: the entries (contents not read) and
/// what a snapshot cannot keep.
pub struct Scan {
    pub entries: Vec<SavedFile>,
    pub refusals: Vec<Refusal>,
    /// bytes of regular-file content
    pub bytes: u64,
}

/// Walks the sandbox's mounts of runtime `pid` without reading contents.
/// `cap`: most content bytes a snapshot keeps (over it is a refusal).
pub fn scan(pid: i32, cap: u64) -> Result<Scan> {
    let mut scan = Scan {
        entries: Vec::new(),
        refusals: Vec::new(),
        bytes: 0,
    };
    for mount in SAVED_MOUNTS {
        let root = open_mount(pid, mount)?;
        walk(&root, mount, 0, &mut scan)?;
    }
    if scan.bytes > cap {
        scan.refusals.push(Refusal::new(
            "files",
            format!(
                "/tmp and /dev/shm hold {} bytes, more than the {cap} bytes (the function's memory) a snapshot keeps",
                scan.bytes
            ),
        ));
    }
    if scan.entries.len() > MAX_SAVED_ENTRIES {
        scan.refusals.push(Refusal::new(
            "files",
            format!(
                "/tmp and /dev/shm hold {} entries, more than the {MAX_SAVED_ENTRIES} a snapshot keeps",
                scan.entries.len()
            ),
        ));
    }
    Ok(scan)
}

/// Copies the contents of `entries` (a [`scan`] of the same frozen
/// runtime) through `append`, which stores bytes and returns where they
/// landed in the image; fills in each file's `image_off`. A file whose
/// size changed since the scan fails the checkpoint.
pub fn save(
    pid: i32,
    entries: &mut [SavedFile],
    append: &mut dyn FnMut(&[u8]) -> Result<u64, thaw_store::StoreError>,
) -> Result<()> {
    let mut buf = Vec::new();
    for e in entries.iter_mut().filter(|e| e.kind == FileKind::File) {
        let (mount, rel) = split_mount(&e.path).map_err(HostError::Failed)?;
        let root = open_mount(pid, mount)?;
        let (parent, name) = open_parent(&root, rel)?;
        let fd = openat(&parent, name, libc::O_RDONLY | libc::O_NONBLOCK)
            .with_context(|| format!("opening {} of the sandbox", e.path))?;
        let f = File::from(fd);
        let st = f.metadata()?;
        if !st.is_file() || st.len() != e.len {
            fail!(
                HostError::Failed,
                "{} changed while the snapshot was taken",
                e.path
            );
        }
        buf.clear();
        (&f).take(e.len).read_to_end(&mut buf)?;
        if buf.len() as u64 != e.len {
            fail!(
                HostError::Failed,
                "{} shrank while the snapshot was taken",
                e.path
            );
        }
        e.image_off = if buf.is_empty() {
            0
        } else {
            append(&buf).with_context(|| format!("saving {} in the image", e.path))?
        };
    }
    Ok(())
}

/// Recreates `entries` in the mounts of the sandbox whose first process is
/// `pid` (its restorer, before the runtime resumes), owned by `uid`, with
/// contents from `image`. The mounts are fresh: nothing is there to follow.
pub fn restore(pid: i32, entries: &[SavedFile], image: &File, uid: u32) -> Result<()> {
    if entries.is_empty() {
        return Ok(());
    }
    let image_len = image.metadata()?.len();
    let mut roots = Vec::new();
    for mount in SAVED_MOUNTS {
        roots.push((mount, open_mount(pid, mount)?));
    }
    for e in entries {
        let (mount, rel) = split_mount(&e.path).map_err(HostError::Failed)?;
        let root = &roots
            .iter()
            .find(|(m, _)| *m == mount)
            .ok_or_else(|| HostError::Failed(format!("{} is on no saved mount", e.path)))?
            .1;
        let (parent, name) = open_parent(root, rel)?;
        let cname = cstring(name)?;
        let what = || format!("recreating {} in the sandbox", e.path);
        match e.kind {
            FileKind::Dir => {
                // SAFETY: mkdirat with a directory descriptor we hold and a
                // NUL-terminated name.
                check(unsafe { libc::mkdirat(parent.as_raw_fd(), cname.as_ptr(), 0o700) })
                    .with_context(what)?;
                let fd =
                    openat(&parent, name, libc::O_RDONLY | libc::O_DIRECTORY).with_context(what)?;
                own(&fd, uid, e.mode).with_context(what)?;
            }
            FileKind::File => {
                if e.image_off
                    .checked_add(e.len)
                    .is_none_or(|end| end > image_len)
                {
                    fail!(
                        HostError::Failed,
                        "{} lies outside the snapshot's image",
                        e.path
                    );
                }
                let fd = openat(&parent, name, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL)
                    .with_context(what)?;
                copy_range(image, e.image_off, &fd, e.len).with_context(what)?;
                own(&fd, uid, e.mode).with_context(what)?;
                let times = [
                    libc::timespec {
                        tv_sec: 0,
                        tv_nsec: libc::UTIME_OMIT,
                    },
                    libc::timespec {
                        tv_sec: e.mtime_ns.div_euclid(1_000_000_000),
                        tv_nsec: e.mtime_ns.rem_euclid(1_000_000_000),
                    },
                ];
                // SAFETY: futimens on a descriptor we own with two timespecs.
                check(unsafe { libc::futimens(fd.as_raw_fd(), times.as_ptr()) })
                    .with_context(what)?;
            }
            FileKind::Fifo => {
                // SAFETY: mknodat with a directory descriptor we hold and a
                // NUL-terminated name; a FIFO needs no device number.
                check(unsafe {
                    libc::mknodat(parent.as_raw_fd(), cname.as_ptr(), libc::S_IFIFO | 0o600, 0)
                })
                .with_context(what)?;
                let fd = openat(&parent, name, libc::O_PATH).with_context(what)?;
                // fchown/fchmod refuse an O_PATH descriptor: through its /proc link
                let p = format!("/proc/self/fd/{}", fd.as_raw_fd());
                std::os::unix::fs::chown(&p, Some(uid), Some(uid)).with_context(what)?;
                std::fs::set_permissions(
                    &p,
                    std::os::unix::fs::PermissionsExt::from_mode(e.mode & 0o7777),
                )
                .with_context(what)?;
            }
            FileKind::Symlink => {
                let target = cstring(&e.target)?;
                // SAFETY: symlinkat with NUL-terminated strings and a
                // directory descriptor we hold.
                check(unsafe {
                    libc::symlinkat(target.as_ptr(), parent.as_raw_fd(), cname.as_ptr())
                })
                .with_context(what)?;
                // SAFETY: as above; the link itself is changed, never followed.
                check(unsafe {
                    libc::fchownat(
                        parent.as_raw_fd(),
                        cname.as_ptr(),
                        uid,
                        uid,
                        libc::AT_SYMLINK_NOFOLLOW,
                    )
                })
                .with_context(what)?;
            }
        }
    }
    Ok(())
}

/// The sandbox's mount `mount` (a path inside it) seen from the host.
fn open_mount(pid: i32, mount: &str) -> Result<OwnedFd> {
    let path = format!("/proc/{pid}/root{mount}");
    let c = cstring(&path)?;
    // SAFETY: open with a NUL-terminated path; the result is checked.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(
            Context::new(format!("opening {path}"), std::io::Error::last_os_error()).into(),
        );
    }
    // SAFETY: a descriptor just returned to us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn walk(dir: &OwnedFd, prefix: &str, depth: usize, scan: &mut Scan) -> Result<()> {
    if depth > MAX_DEPTH {
        scan.refusals.push(Refusal::new(
            "files",
            format!("{prefix} is nested deeper than {MAX_DEPTH} directories"),
        ));
        return Ok(());
    }
    let mut names: Vec<Vec<u8>> = std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()))
        .with_context(|| format!("listing {prefix} of the sandbox"))?
        .map(|e| e.map(|e| e.file_name().as_bytes().to_vec()))
        .collect::<std::io::Result<_>>()?;
    names.sort();
    for raw in names {
        let name = String::from_utf8_lossy(&raw).into_owned();
        let path = format!("{prefix}/{name}");
        if name.as_bytes() != raw.as_slice() {
            scan.refusals.push(Refusal::new(
                "files",
                format!("{path} has a name that is not UTF-8"),
            ));
            continue;
        }
        if path.len() > MAX_PATH {
            scan.refusals.push(Refusal::new(
                "files",
                format!("a path under {prefix} is longer than {MAX_PATH} bytes"),
            ));
            continue;
        }
        if scan.entries.len() > MAX_SAVED_ENTRIES {
            return Ok(());
        }
        let st = fstatat(dir, &name)?;
        let mut entry = SavedFile {
            path: path.clone(),
            kind: FileKind::File,
            mode: st.st_mode & 0o7777,
            mtime_ns: st.st_mtime * 1_000_000_000 + st.st_mtime_nsec,
            image_off: 0,
            len: 0,
            target: String::new(),
        };
        match st.st_mode & libc::S_IFMT {
            libc::S_IFDIR => {
                entry.kind = FileKind::Dir;
                scan.entries.push(entry);
                let sub = openat(dir, &name, libc::O_RDONLY | libc::O_DIRECTORY)?;
                walk(&sub, &path, depth + 1, scan)?;
            }
            libc::S_IFREG => {
                entry.len = u64::try_from(st.st_size)
                    .with_context(|| format!("the size of {path} ({})", st.st_size))?;
                scan.bytes += entry.len;
                scan.entries.push(entry);
            }
            libc::S_IFIFO => {
                entry.kind = FileKind::Fifo;
                scan.entries.push(entry);
            }
            libc::S_IFLNK => {
                entry.kind = FileKind::Symlink;
                entry.target = readlinkat(dir, &name)?;
                scan.entries.push(entry);
            }
            other => scan.refusals.push(Refusal::new(
                "files",
                format!(
                    "{path} is a {}; a snapshot keeps only files, directories, symbolic links and FIFOs there",
                    kind_name(other)
                ),
            )),
        }
    }
    Ok(())
}

fn kind_name(fmt: libc::mode_t) -> &'static str {
    match fmt {
        libc::S_IFIFO => "FIFO",
        libc::S_IFSOCK => "socket",
        libc::S_IFCHR => "character device",
        libc::S_IFBLK => "block device",
        _ => "special file",
    }
}

/// The parent directory of `rel` below `root`, opened one component at a
/// time without following links, and the last component.
fn open_parent<'a>(root: &OwnedFd, rel: &'a str) -> Result<(OwnedFd, &'a str)> {
    let (dirs, name) = match rel.rsplit_once('/') {
        Some((d, n)) => (Some(d), n),
        None => (None, rel),
    };
    let mut cur = root.try_clone()?;
    for c in dirs.into_iter().flat_map(|d| d.split('/')) {
        cur = openat(&cur, c, libc::O_RDONLY | libc::O_DIRECTORY)?;
    }
    Ok((cur, name))
}

fn cstring(s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| HostError::Failed(format!("{s:?} contains a NUL byte")))
}

fn check(r: libc::c_int) -> std::io::Result<()> {
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// openat relative to `dir`, never following a link in the last component.
fn openat(dir: &OwnedFd, name: &str, flags: libc::c_int) -> Result<OwnedFd> {
    let c = cstring(name)?;
    // SAFETY: openat with a directory descriptor we hold and a
    // NUL-terminated name; the result is checked.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c.as_ptr(),
            flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            0o600,
        )
    };
    if fd < 0 {
        return Err(
            Context::new(format!("opening {name:?}"), std::io::Error::last_os_error()).into(),
        );
    }
    // SAFETY: a descriptor just returned to us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn fstatat(dir: &OwnedFd, name: &str) -> Result<libc::stat> {
    let c = cstring(name)?;
    // SAFETY: a zeroed stat is a valid out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstatat fills `st`; the link itself is examined.
    check(unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            c.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })
    .with_context(|| format!("examining {name:?}"))?;
    Ok(st)
}

fn readlinkat(dir: &OwnedFd, name: &str) -> Result<String> {
    let c = cstring(name)?;
    let mut buf = vec![0u8; 4097];
    // SAFETY: readlinkat writes at most buf.len() bytes into buf.
    let n = unsafe {
        libc::readlinkat(
            dir.as_raw_fd(),
            c.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    let Ok(n) = usize::try_from(n) else {
        return Err(Context::new(
            format!("reading the link {name:?}"),
            std::io::Error::last_os_error(),
        )
        .into());
    };
    if n >= buf.len() {
        fail!(
            HostError::Failed,
            "the link {name:?} is longer than 4096 bytes"
        );
    }
    buf.truncate(n);
    String::from_utf8(buf).map_err(|_| HostError::Failed(format!("the link {name:?} is not UTF-8")))
}

/// Sets owner and mode (after the owner: a chown clears set-id bits).
fn own(fd: &OwnedFd, uid: u32, mode: u32) -> Result<()> {
    // SAFETY: fchown and fchmod on a descriptor we own.
    check(unsafe { libc::fchown(fd.as_raw_fd(), uid, uid) })?;
    // SAFETY: as above.
    check(unsafe { libc::fchmod(fd.as_raw_fd(), mode & 0o7777) })?;
    Ok(())
}

/// Copies `len` bytes of `src` at `off` into `dst` in the kernel
/// (`sendfile` with an explicit offset: the image's file position, shared
/// with other users of the descriptor, is left alone).
fn copy_range(src: &File, off: u64, dst: &OwnedFd, len: u64) -> Result<()> {
    let mut at = libc::off_t::try_from(off).with_context(|| format!("copying at {off}"))?;
    let mut left = len;
    while left > 0 {
        let want = left.min(1 << 30) as usize;
        // SAFETY: sendfile between two descriptors we hold; `at` is ours.
        let n = unsafe { libc::sendfile(dst.as_raw_fd(), src.as_raw_fd(), &mut at, want) };
        let Ok(n) = u64::try_from(n) else {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e.into());
        };
        if n == 0 {
            // the image is shorter than the state says: fall back to a
            // read that names the problem
            let mut b = [0u8; 1];
            src.read_exact_at(&mut b, off + (len - left))?;
            fail!(HostError::Failed, "sendfile made no progress at {at}");
        }
        left -= n;
    }
    Ok(())
}
