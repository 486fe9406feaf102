//! A function's code directory packed as the daemon's deploy takes it:
//! entries in a stable order, regular files and directories only.
use std::path::{Path, PathBuf};
use thaw_error::{fail, Context, ResultExt};

/// Why a function's code was refused or could not be unpacked or packed
/// (the daemon's unpacking and this crate's packing alike).
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// code the daemon does not take: its format, a path, a link, an entry
    /// kind, a size or a count over the limits
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// the step that failed, with its cause
    #[error(transparent)]
    Other(#[from] Context),
}

type Result<T, E = ArchiveError> = std::result::Result<T, E>;

/// One entry of a function's code directory, parents before children.
pub struct CodeEntry {
    /// Path relative to the directory.
    pub rel: PathBuf,
    /// Path on the host.
    pub path: PathBuf,
    pub is_dir: bool,
}

/// The entries of a code directory in a stable order (sorted per directory,
/// each directory before what it holds), leaving out `__pycache__` and dot
/// files; anything but regular files and directories (a symbolic link
/// among them) is refused, as the daemon refuses it in an archive.
pub fn code_entries(dir: &Path) -> Result<Vec<CodeEntry>> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(dir.join(&rel))
            .with_context(|| format!("reading {}", dir.join(&rel).display()))?
            .collect::<std::io::Result<_>>()?;
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let name = e.file_name();
            let s = name.to_string_lossy();
            if s == "__pycache__" || s.starts_with('.') {
                continue;
            }
            let r = rel.join(&name);
            let t = e.file_type()?;
            if !t.is_dir() && !t.is_file() {
                fail!(
                    ArchiveError::Refused,
                    "{} is not a regular file or directory",
                    e.path().display()
                );
            }
            if t.is_dir() {
                stack.push(r.clone());
            }
            out.push(CodeEntry {
                rel: r,
                path: e.path(),
                is_dir: t.is_dir(),
            });
        }
    }
    Ok(out)
}

/// Packs a directory into a tar.gz (regular files and directories only;
/// symbolic links are refused, like the daemon refuses them).
pub fn pack_dir(dir: &Path) -> Result<Vec<u8>> {
    pack_entries(&code_entries(dir)?)
}

/// Packs `entries` (as [`code_entries`] lists them) as [`pack_dir`] does:
/// for a caller that checked the listing first and packs what it checked.
pub fn pack_entries(entries: &[CodeEntry]) -> Result<Vec<u8>> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut ar = tar::Builder::new(gz);
    ar.follow_symlinks(false);
    for e in entries {
        if e.is_dir {
            ar.append_dir(&e.rel, &e.path)?;
        } else {
            ar.append_path_with_name(&e.path, &e.rel)?;
        }
    }
    Ok(ar.into_inner()?.finish()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("thaw-pack-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn packs_files_and_directories_in_order_leaving_caches_out() {
        let d = tmp("order");
        std::fs::create_dir_all(d.join("b/__pycache__")).unwrap();
        std::fs::write(d.join("b/__pycache__/x.pyc"), "c").unwrap();
        std::fs::write(d.join("b/m.py"), "m").unwrap();
        std::fs::write(d.join("a.py"), "a").unwrap();
        std::fs::write(d.join(".hidden"), "h").unwrap();
        let rels: Vec<_> = code_entries(&d)
            .unwrap()
            .into_iter()
            .map(|e| e.rel.to_string_lossy().into_owned())
            .collect();
        assert_eq!(rels, ["a.py", "b", "b/m.py"]);
        let tgz = pack_dir(&d).unwrap();
        let mut ar = tar::Archive::new(flate2::read::GzDecoder::new(&tgz[..]));
        let mut got = Vec::new();
        for e in ar.entries().unwrap() {
            let mut e = e.unwrap();
            let mut body = String::new();
            e.read_to_string(&mut body).unwrap();
            got.push((e.path().unwrap().to_string_lossy().into_owned(), body));
        }
        let got: Vec<_> = got.iter().map(|(p, b)| (p.as_str(), b.as_str())).collect();
        assert_eq!(got, [("a.py", "a"), ("b", ""), ("b/m.py", "m")]);
        assert_eq!(pack_dir(&d).unwrap(), tgz, "the same tree packs the same");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_symbolic_link_is_refused() {
        let d = tmp("link");
        std::fs::write(d.join("a.py"), "a").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", d.join("l")).unwrap();
        let e = pack_dir(&d).unwrap_err();
        assert!(matches!(e, ArchiveError::Refused(_)), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
