//! The records of the sandbox's saved /tmp and /dev/shm and their checks.
use crate::StateError;
use serde::{Deserialize, Serialize};
use thaw_error::fail;

/// The mounts a snapshot keeps, as paths inside the sandbox (its /tmp and
/// its private /dev/shm).
pub const SAVED_MOUNTS: [&str; 2] = ["/tmp", "/dev/shm"];
/// Most entries a snapshot keeps (the state file carries one record each).
pub const MAX_SAVED_ENTRIES: usize = 65_536;
/// Longest saved path.
pub const MAX_PATH: usize = 4096;

/// What a [`SavedFile`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FileKind {
    Dir,
    File,
    Symlink,
    /// a named pipe (its unread bytes, if any end is open, are a descriptor's)
    Fifo,
}

/// One entry of the sandbox's /tmp or /dev/shm at checkpoint (see
/// `thaw-checkpoint`'s `files`). Parents come before their children.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedFile {
    /// the path inside the sandbox (`/tmp/model.bin`)
    pub path: String,
    pub kind: FileKind,
    /// permission bits (07777)
    pub mode: u32,
    pub mtime_ns: i64,
    /// regular files: where the content is in the memory image
    pub image_off: u64,
    /// regular files: content bytes
    pub len: u64,
    /// symbolic links: the target
    pub target: String,
}

/// `/tmp/a/b` -> (`/tmp`, `a/b`).
pub fn split_mount(path: &str) -> std::result::Result<(&'static str, &str), String> {
    SAVED_MOUNTS
        .iter()
        .find_map(|m| {
            path.strip_prefix(m)
                .and_then(|r| r.strip_prefix('/'))
                .map(|r| (*m, r))
        })
        .ok_or_else(|| format!("{path:?} is not on a saved mount"))
}

/// Checks a saved path (what [`crate::ProcessState::decode`] accepts).
pub fn check_path(path: &str) -> Result<(), StateError> {
    let (_, rel) = split_mount(path).map_err(StateError::Corrupt)?;
    if rel
        .split('/')
        .any(|c| c.is_empty() || c == "." || c == ".." || c.contains('\0'))
        || path.len() > MAX_PATH
    {
        fail!(StateError::Corrupt, "{path:?} is not a plain path");
    }
    Ok(())
}

/// Saved files must be plain paths on the saved mounts, each parent saved
/// before its children, with sane modes and ranges.
pub(crate) fn check_files(files: &[SavedFile]) -> Result<(), StateError> {
    if files.len() > MAX_SAVED_ENTRIES {
        fail!(
            StateError::Corrupt,
            "process state: {} saved files",
            files.len()
        );
    }
    let mut dirs = std::collections::HashSet::new();
    for f in files {
        check_path(&f.path).map_err(|e| e.within("process state: a saved file"))?;
        let parent = f.path.rsplit_once('/').map_or("", |(p, _)| p);
        if !SAVED_MOUNTS.contains(&parent) && !dirs.contains(parent) {
            fail!(
                StateError::Corrupt,
                "process state: saved file {:?} comes before its directory",
                f.path
            );
        }
        if f.mode & !0o7777 != 0 || f.image_off.checked_add(f.len).is_none() {
            fail!(
                StateError::Corrupt,
                "process state: saved file {:?} is malformed",
                f.path
            );
        }
        if f.kind != FileKind::Symlink && !f.target.is_empty()
            || f.kind != FileKind::File && f.len != 0
        {
            fail!(
                StateError::Corrupt,
                "process state: saved file {:?} is malformed",
                f.path
            );
        }
        if f.kind == FileKind::Dir && !dirs.insert(f.path.as_str()) {
            fail!(
                StateError::Corrupt,
                "process state: directory {:?} saved twice",
                f.path
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saved_paths_must_be_plain_and_on_a_saved_mount() {
        for ok in ["/tmp/a", "/tmp/a/b.bin", "/dev/shm/sem.x"] {
            check_path(ok).unwrap();
        }
        for bad in [
            "/tmp",
            "/tmp/",
            "/etc/passwd",
            "/tmpx/a",
            "/tmp/../etc",
            "/tmp/a//b",
            "/tmp/./a",
            "/dev/shm/../../x",
            "tmp/a",
        ] {
            assert!(check_path(bad).is_err(), "{bad}");
        }
        assert_eq!(split_mount("/dev/shm/a/b").unwrap(), ("/dev/shm", "a/b"));
    }
}
