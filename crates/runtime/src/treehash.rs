//! Content hash of a directory tree: every entry in sorted path order with its type,
//! permission bits, owner, and the sha256 of its contents (files) or its target
//! (symlinks). Timestamps are not hashed, so identical builds hash identically.

use crate::error::{Result, RuntimeError};
use sha2::{Digest, Sha256};
use std::fs;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use thaw_error::{fail, ResultExt};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeHash {
    pub hash: String,
    pub files: u64,
    pub size_bytes: u64,
}

fn file_digest(p: &Path, buf: &mut [u8]) -> Result<[u8; 32]> {
    let mut f = fs::File::open(p).with_context(|| format!("open {}", p.display()))?;
    let mut h = Sha256::new();
    loop {
        let n = f.read(buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().into())
}

/// Hashes the tree under `root` (the root itself is not part of the records).
pub fn hash_tree(root: &Path) -> Result<TreeHash> {
    let mut h = Sha256::new();
    let mut files = 0u64;
    let mut size = 0u64;
    let mut buf = vec![0u8; 1 << 20];
    walk(root, b"", &mut h, &mut files, &mut size, &mut buf)?;
    Ok(TreeHash {
        hash: hex::encode(h.finalize()),
        files,
        size_bytes: size,
    })
}

fn walk(
    dir: &Path,
    rel: &[u8],
    h: &mut Sha256,
    files: &mut u64,
    size: &mut u64,
    buf: &mut [u8],
) -> Result<()> {
    let mut names: Vec<_> = fs::read_dir(dir)
        .with_context(|| format!("read {}", dir.display()))?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<std::io::Result<_>>()?;
    names.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    for name in names {
        let p = dir.join(&name);
        let mut r = rel.to_vec();
        r.push(b'/');
        r.extend_from_slice(name.as_bytes());
        let m = fs::symlink_metadata(&p)?;
        let ft = m.file_type();
        let kind: &[u8] = if ft.is_dir() {
            b"d"
        } else if ft.is_symlink() {
            b"l"
        } else if ft.is_file() {
            b"f"
        } else {
            fail!(
                RuntimeError::Corrupt,
                "unexpected special file {} in the runtime root",
                p.display()
            );
        };
        h.update(kind);
        h.update((r.len() as u64).to_le_bytes());
        h.update(&r);
        h.update((m.mode() & 0o7777).to_le_bytes());
        h.update(m.uid().to_le_bytes());
        h.update(m.gid().to_le_bytes());
        if ft.is_symlink() {
            let t = fs::read_link(&p)?;
            h.update((t.as_os_str().len() as u64).to_le_bytes());
            h.update(t.as_os_str().as_bytes());
        } else if ft.is_file() {
            *files += 1;
            *size += m.len();
            h.update(m.len().to_le_bytes());
            h.update(file_digest(&p, buf)?);
        } else {
            walk(&p, &r, h, files, size, buf)?;
        }
    }
    Ok(())
}
