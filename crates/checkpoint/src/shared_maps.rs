//! Shared mappings of the sandbox's own memory: a `MAP_SHARED` mapping of a
//! file in its `/tmp` or `/dev/shm` (written or not, deleted or not: POSIX
//! semaphores and shared memory are deleted files of `/dev/shm`), shared
//! anonymous memory (`MAP_SHARED | MAP_ANONYMOUS`) and memfds.
//!
//! A file still there comes back as that file: the snapshot saves `/tmp` and
//! `/dev/shm` whole (`files.rs`), and the restorer maps the restored file
//! shared once the worker has written it, so writes through the mapping and
//! through the file meet as before. Everything else is a shared memory
//! *object*: its content is read from the frozen process
//! (`/proc/PID/map_files`) into the image once per object, however many
//! mappings it has, and the restorer makes it again as a memfd of the same
//! size mapped shared at each of them. Each restore makes its own, so clones
//! never see each other's writes. Refused by name: System V shared memory
//! and shared mappings of anything else.
use crate::checkpoint::{MapsLine, Refusal};
use crate::error::Result;
use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use thaw_error::ResultExt;
use thaw_memory::usize_of;
use thaw_snapshot_format::{Blob, SharedBacking, SharedObject, SHARED_NAME_MAX as NAME_MAX};

/// What a shared mapping's line in `/proc/PID/maps` is, before any file
/// is opened.
enum Kind<'a> {
    /// a file of the sandbox's /tmp or /dev/shm, by its path inside
    TmpFile(&'a str),
    /// a shared memory object, named
    Object(String),
}

const DELETED: &str = " (deleted)";

/// Whether `m` is a shared mapping this module handles (or refuses): any
/// shared mapping of the sandbox's own files or memory, and any writable or
/// anonymous one. Read-only shared mappings of the runtime root's files
/// (glibc's gconv cache) are left to the private-mapping path.
pub fn handles(m: &MapsLine) -> bool {
    let b = m.perms.as_bytes();
    if b.get(3) != Some(&b's') {
        return false;
    }
    m.inode == 0 || b.get(1) == Some(&b'w') || kind(m).is_ok()
}

fn kind(m: &MapsLine) -> std::result::Result<Kind<'_>, String> {
    let name = m.name.as_str();
    let (path, deleted) = match name.strip_suffix(DELETED) {
        Some(p) => (p, true),
        None => (name, false),
    };
    let in_sandbox = ["/tmp/", "/dev/shm/"]
        .iter()
        .any(|d| path.starts_with(d) && !path.split('/').any(|c| c == ".."));
    if in_sandbox && !deleted {
        return Ok(Kind::TmpFile(path));
    }
    if in_sandbox || path == "/dev/zero" && deleted {
        let base = path.rsplit('/').next().unwrap_or("shared");
        return Ok(Kind::Object(truncate(if deleted && path == "/dev/zero" {
            "shared-anonymous"
        } else {
            base
        })));
    }
    if let (Some(memfd), true) = (path.strip_prefix("/memfd:"), deleted) {
        return Ok(Kind::Object(truncate(memfd)));
    }
    Err(format!(
        "a shared mapping at {:#x}-{:#x} of {name}: only shared mappings of the sandbox's /tmp, /dev/shm, anonymous memory and memfds are kept (System V shared memory is not)",
        m.start, m.end
    ))
}

fn truncate(name: &str) -> String {
    let mut end = name.len().min(NAME_MAX);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    name[..end].to_string()
}

/// Why `m` (a mapping [`handles`] takes) cannot be kept, if it cannot.
pub fn refusal(m: &MapsLine) -> Option<String> {
    kind(m).err()
}

/// The shared mappings of a frozen process: each one's backing (in the
/// order of `maps`, `None` for a mapping this module does not handle) and
/// the objects, their contents appended to the image through `append`
/// (returning the image offset). Objects larger than `cap` bytes in all
/// are refused.
pub struct Captured {
    pub backing: Vec<Option<SharedBacking>>,
    pub objects: Vec<SharedObject>,
}

pub fn capture(
    pid: i32,
    maps: &[&MapsLine],
    cap: u64,
    append: &mut dyn FnMut(&[u8]) -> std::result::Result<u64, thaw_store::StoreError>,
) -> Result<std::result::Result<Captured, Vec<Refusal>>> {
    let root_tmp = |inside: &str| format!("/proc/{pid}/root{inside}");
    let mut backing = Vec::with_capacity(maps.len());
    let mut objects = Vec::new();
    let mut by_inode: HashMap<(u64, u64), u32> = HashMap::new();
    let mut total = 0u64;
    let mut refusals = Vec::new();
    for m in maps {
        if !handles(m) {
            backing.push(None);
            continue;
        }
        let object = match kind(m) {
            Err(why) => {
                refusals.push(Refusal::new("mapping", why));
                backing.push(None);
                continue;
            }
            Ok(Kind::TmpFile(path)) => {
                // that very file, which the saved /tmp and /dev/shm hold
                let st = std::fs::symlink_metadata(root_tmp(path))
                    .with_context(|| format!("the file {path} mapped shared"))?;
                let (maj, min) = (libc::major(st.dev()), libc::minor(st.dev()));
                if st.ino() != m.inode || (maj, min) != m.dev || !st.is_file() {
                    refusals.push(Refusal::new(
                        "mapping",
                        format!(
                            "a shared mapping at {:#x} of {path}, which was replaced since",
                            m.start
                        ),
                    ));
                    backing.push(None);
                    continue;
                }
                backing.push(Some(SharedBacking::File(path.to_string())));
                continue;
            }
            Ok(Kind::Object(name)) => name,
        };
        let mut f = File::open(format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end))
            .with_context(|| format!("opening the shared mapping at {:#x}", m.start))?;
        let st = f.metadata()?;
        let key = (st.dev(), st.ino());
        if let Some(&i) = by_inode.get(&key) {
            backing.push(Some(SharedBacking::Object(i)));
            continue;
        }
        total = total.saturating_add(st.size());
        if total > cap || objects.len() >= thaw_restorer::MAX_SHARED {
            refusals.push(Refusal::new(
                "mapping",
                format!(
                    "shared memory objects of {total} bytes or more than {} of them (at most {cap} bytes)",
                    thaw_restorer::MAX_SHARED
                ),
            ));
            backing.push(None);
            continue;
        }
        let mut data = Vec::with_capacity(usize_of(st.size()));
        (&mut f)
            .take(st.size())
            .read_to_end(&mut data)
            .with_context(|| format!("reading the shared mapping at {:#x}", m.start))?;
        let image_off = append(&data).context("writing a shared memory object")?;
        let i = u32::try_from(objects.len()).context("the shared memory objects' count")?;
        objects.push(SharedObject {
            name: object,
            size: st.size(),
            content: Blob {
                image_off,
                len: data.len() as u64,
            },
        });
        by_inode.insert(key, i);
        backing.push(Some(SharedBacking::Object(i)));
    }
    if !refusals.is_empty() {
        return Ok(Err(refusals));
    }
    Ok(Ok(Captured { backing, objects }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(perms: &str, inode: u64, name: &str) -> MapsLine {
        MapsLine {
            start: 0x1000,
            end: 0x3000,
            perms: perms.into(),
            offset: 0,
            dev: (0, 0x2a),
            inode,
            name: name.into(),
        }
    }

    #[test]
    fn shared_mappings_are_told_apart_by_what_backs_them() {
        let tmp = line("rw-s", 2, "/tmp/cache.bin");
        assert!(handles(&tmp) && matches!(kind(&tmp), Ok(Kind::TmpFile("/tmp/cache.bin"))));
        let sem = line("rw-s", 5, "/dev/shm/sem.abc (deleted)");
        assert!(matches!(kind(&sem), Ok(Kind::Object(n)) if n == "sem.abc"));
        let anon = line("rw-s", 41, "/dev/zero (deleted)");
        assert!(matches!(kind(&anon), Ok(Kind::Object(n)) if n == "shared-anonymous"));
        let memfd = line("rw-s", 7, "/memfd:cache (deleted)");
        assert!(matches!(kind(&memfd), Ok(Kind::Object(n)) if n == "cache"));
        // read-only shared mappings of the root are private ones
        assert!(!handles(&line("r--s", 9, "/usr/lib/locale/gconv.cache")));
        assert!(!handles(&line("rw-p", 0, "")));
        for refused in [
            line("rw-s", 0, "/SYSV00000000 (deleted)"),
            line("rw-s", 3, "/tmp/../etc/passwd"),
            line("rw-s", 3, "/opt/data.bin"),
        ] {
            assert!(handles(&refused), "{refused:?}");
            assert!(refusal(&refused).is_some(), "{refused:?}");
        }
    }
}
