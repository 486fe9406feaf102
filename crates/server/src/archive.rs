//! Unpacking deployed code strictly: relative paths only, no `..`, no links,
//! no devices, bounded entries and bytes (decompression bombs stop at the
//! limit, whatever the archive claims).
use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};

use crate::config::Limits;
use thaw_error::{fail, ResultExt};

pub use thaw_pack::ArchiveError;

type Result<T, E = ArchiveError> = std::result::Result<T, E>;

/// How the code arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    TarGz,
    Zip,
    /// One source file.
    File,
}

impl Format {
    pub fn parse(s: &str) -> Result<Format> {
        match s {
            "tar.gz" | "tgz" => Ok(Format::TarGz),
            "zip" => Ok(Format::Zip),
            "file" => Ok(Format::File),
            _ => fail!(
                ArchiveError::Refused,
                "code format {s:?}: use tar.gz, zip or file"
            ),
        }
    }
}

/// Unpacks `data` into `dest` (which must exist and be empty). Directories
/// are 0755 and files 0444: the sandbox's uid reads them through the
/// read-only mount; `dest`'s 0700 parent keeps everyone else out.
pub fn unpack(
    format: Format,
    data: &[u8],
    filename: &str,
    dest: &Path,
    lim: &Limits,
) -> Result<Stats> {
    if data.len() as u64 > lim.code_bytes {
        fail!(
            ArchiveError::Refused,
            "code of {} bytes exceeds the limit of {} bytes",
            data.len(),
            lim.code_bytes
        );
    }
    let mut out = Sink::new(dest, lim);
    match format {
        Format::File => {
            let rel = safe_relative(filename)?;
            let source = [".py", ".js", ".mjs", ".cjs", ".jar"]
                .iter()
                .any(|e| filename.ends_with(e));
            if rel.components().count() != 1 || !source {
                fail!(
                    ArchiveError::Refused,
                    "a single-file deploy needs a plain file name ending in .py (Python), .js, .mjs, .cjs (Node.js) or .jar (Java), got {filename:?}"
                );
            }
            out.file(&rel, &mut &data[..], false)?;
        }
        Format::TarGz => {
            let gz = flate2::read::GzDecoder::new(data);
            let mut ar = tar::Archive::new(gz);
            for entry in ar.entries().context("reading the tar.gz archive")? {
                let mut entry = entry.context("reading the tar.gz archive")?;
                let path = entry.path_bytes().into_owned();
                let name = String::from_utf8(path)
                    .map_err(|_| ArchiveError::Refused("archive entry name is not UTF-8".into()))?;
                let kind = entry.header().entry_type();
                if kind.is_dir() {
                    out.dir(&safe_relative(&name)?)?;
                } else if kind.is_file() {
                    let exec = entry.header().mode().is_ok_and(executable);
                    out.file(&safe_relative(&name)?, &mut entry, exec)?;
                } else if kind.is_pax_global_extensions()
                    || kind.is_pax_local_extensions()
                    || kind.is_gnu_longname()
                {
                    continue;
                } else {
                    fail!(
                        ArchiveError::Refused,
                        "archive entry {name:?} is a {}; only regular files and directories are allowed",
                        kind_name(kind)
                    );
                }
            }
        }
        Format::Zip => {
            let mut ar = zip::ZipArchive::new(std::io::Cursor::new(data))
                .context("reading the zip archive")?;
            if ar.len() as u64 > lim.archive_entries {
                fail!(
                    ArchiveError::Refused,
                    "archive has {} entries, limit {}",
                    ar.len(),
                    lim.archive_entries
                );
            }
            for i in 0..ar.len() {
                let mut f = ar.by_index(i).context("reading the zip archive")?;
                let name = f.name().to_string();
                if f.is_symlink() {
                    fail!(ArchiveError::Refused, "archive entry {name:?} is a symbolic link; only regular files and directories are allowed");
                }
                if f.is_dir() {
                    out.dir(&safe_relative(&name)?)?;
                } else {
                    let exec = f.unix_mode().is_some_and(executable);
                    out.file(&safe_relative(&name)?, &mut f, exec)?;
                }
            }
        }
    }
    if out.stats.files == 0 {
        fail!(ArchiveError::Refused, "the code holds no files");
    }
    Ok(out.stats)
}

fn kind_name(k: tar::EntryType) -> &'static str {
    if k.is_symlink() {
        "symbolic link"
    } else if k.is_hard_link() {
        "hard link"
    } else if k.is_character_special() || k.is_block_special() {
        "device"
    } else if k.is_fifo() {
        "fifo"
    } else {
        "special entry"
    }
}

/// Whether an entry's mode lets its owner execute it.
fn executable(mode: u32) -> bool {
    mode & 0o100 != 0
}

/// A relative path of normal components only.
pub fn safe_relative(name: &str) -> Result<PathBuf> {
    if name.is_empty() || name.len() > 1024 || name.contains('\0') {
        fail!(ArchiveError::Refused, "bad path {name:?} in the code");
    }
    let p = Path::new(name);
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::Normal(s) => out.push(s),
            Component::CurDir => {}
            Component::ParentDir => fail!(
                ArchiveError::Refused,
                "path {name:?} in the code leaves the tree (..)"
            ),
            Component::RootDir | Component::Prefix(_) => {
                fail!(
                    ArchiveError::Refused,
                    "path {name:?} in the code is absolute"
                )
            }
        }
    }
    if out.as_os_str().is_empty() {
        fail!(ArchiveError::Refused, "bad path {name:?} in the code");
    }
    Ok(out)
}

#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Stats {
    pub files: u64,
    pub bytes: u64,
}

struct Sink<'a> {
    dest: &'a Path,
    lim: &'a Limits,
    stats: Stats,
    entries: u64,
}

impl<'a> Sink<'a> {
    fn new(dest: &'a Path, lim: &'a Limits) -> Self {
        Sink {
            dest,
            lim,
            stats: Stats::default(),
            entries: 0,
        }
    }

    fn count(&mut self) -> Result<()> {
        self.entries += 1;
        if self.entries > self.lim.archive_entries {
            fail!(
                ArchiveError::Refused,
                "archive has more than {} entries",
                self.lim.archive_entries
            );
        }
        Ok(())
    }

    fn dir(&mut self, rel: &Path) -> Result<()> {
        self.count()?;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(self.dest.join(rel))
            .with_context(|| format!("creating {}", rel.display()))?;
        Ok(())
    }

    /// `executable`: the entry's owner may execute it (a custom runtime's
    /// `bootstrap`); the file is read-only either way.
    fn file(&mut self, rel: &Path, src: &mut dyn Read, executable: bool) -> Result<()> {
        self.count()?;
        if let Some(parent) = rel.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(self.dest.join(parent))?;
        }
        // create_new: a second entry with the same name cannot overwrite
        // (or follow) the first
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(if executable { 0o555 } else { 0o444 })
            .custom_flags(libc::O_NOFOLLOW)
            .open(self.dest.join(rel))
            .with_context(|| format!("archive entry {} (duplicate?)", rel.display()))?;
        let room = self.lim.unpacked_bytes - self.stats.bytes;
        let n = std::io::copy(&mut src.take(room + 1), &mut f)
            .with_context(|| format!("unpacking {}", rel.display()))?;
        if n > room {
            fail!(
                ArchiveError::Refused,
                "unpacked code exceeds the limit of {} bytes (decompression bomb?)",
                self.lim.unpacked_bytes
            );
        }
        self.stats.bytes += n;
        self.stats.files += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_relative_paths_pass() {
        assert_eq!(safe_relative("a/./b.py").unwrap(), PathBuf::from("a/b.py"));
        for bad in ["", "/abs", "../up", "a/../../up", "a/..", ".", "a\0b"] {
            assert!(safe_relative(bad).is_err(), "{bad:?}");
        }
        assert!(safe_relative(&"a/".repeat(600)).is_err());
    }
}
