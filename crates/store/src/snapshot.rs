use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

pub const FORMAT_NAME: &str = "thaw-snapshot";
pub const FORMAT_VERSION: u32 = 1;
const MANIFEST: &str = "manifest.json";
const STATE: &str = "state.json";
const MEMORY: &str = "memory.img";
/// Manifests and state files are small; anything bigger is not ours.
const MAX_MANIFEST_BYTES: u64 = 1 << 20;
const MAX_STATE_BYTES: u64 = 64 << 20;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    pub name: String,
    pub len: u64,
    pub sha256: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: String,
    pub version: u32,
    pub id: String,
    pub function: String,
    pub runtime_root: String,
    pub created_unix: u64,
    pub state: FileEntry,
    pub memory: FileEntry,
}

/// Writes a snapshot into `<dir>.tmp-<pid>` and renames it into place on finish.
pub struct SnapshotWriter {
    tmp: PathBuf,
    dir: PathBuf,
    memory: File,
    memory_hash: Sha256,
    memory_len: u64,
    done: bool,
}

impl SnapshotWriter {
    /// Starts a snapshot at `dir`, which must not exist yet.
    pub fn create(dir: &Path) -> Result<Self> {
        if dir.exists() {
            bail!("snapshot {} already exists", dir.display());
        }
        let parent = dir.parent().context("snapshot path has no parent")?;
        fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        let name = dir
            .file_name()
            .context("snapshot path has no name")?
            .to_string_lossy();
        let tmp = parent.join(format!(".{name}.tmp-{}", std::process::id()));
        let _ = fs::remove_dir_all(&tmp);
        fs::create_dir(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        let memory = File::create(tmp.join(MEMORY)).context("creating memory image")?;
        Ok(SnapshotWriter {
            tmp,
            dir: dir.to_owned(),
            memory,
            memory_hash: Sha256::new(),
            memory_len: 0,
            done: false,
        })
    }

    /// Appends page data to the memory image; returns the offset it landed at.
    pub fn append_memory(&mut self, data: &[u8]) -> Result<u64> {
        let off = self.memory_len;
        self.memory
            .write_all(data)
            .context("writing memory image")?;
        self.memory_hash.update(data);
        self.memory_len += data.len() as u64;
        Ok(off)
    }

    pub fn memory_len(&self) -> u64 {
        self.memory_len
    }

    /// Writes state and manifest, fsyncs everything and renames into place.
    pub fn finish(
        mut self,
        id: &str,
        function: &str,
        runtime_root: &str,
        state: &[u8],
    ) -> Result<Snapshot> {
        self.memory.sync_all().context("syncing memory image")?;
        let memory = FileEntry {
            name: MEMORY.into(),
            len: self.memory_len,
            sha256: hex::encode(std::mem::take(&mut self.memory_hash).finalize()),
        };
        let state_entry = FileEntry {
            name: STATE.into(),
            len: state.len() as u64,
            sha256: sha256_hex(state),
        };
        write_synced(&self.tmp.join(STATE), state)?;
        let manifest = Manifest {
            format: FORMAT_NAME.into(),
            version: FORMAT_VERSION,
            id: id.into(),
            function: function.into(),
            runtime_root: runtime_root.into(),
            created_unix: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            state: state_entry,
            memory,
        };
        write_synced(
            &self.tmp.join(MANIFEST),
            &serde_json::to_vec_pretty(&manifest)?,
        )?;
        sync_dir(&self.tmp)?;
        fs::rename(&self.tmp, &self.dir)
            .with_context(|| format!("renaming snapshot into {}", self.dir.display()))?;
        if let Some(parent) = self.dir.parent() {
            sync_dir(parent)?;
        }
        self.done = true;
        Ok(Snapshot {
            dir: self.dir.clone(),
            manifest,
        })
    }
}

impl Drop for SnapshotWriter {
    fn drop(&mut self) {
        if !self.done {
            let _ = fs::remove_dir_all(&self.tmp);
        }
    }
}

fn write_synced(path: &Path, data: &[u8]) -> Result<()> {
    let mut f = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    f.write_all(data)?;
    f.sync_all()?;
    Ok(())
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("syncing {}", dir.display()))
}

pub fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// An opened, structurally checked snapshot.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub dir: PathBuf,
    pub manifest: Manifest,
}

impl Snapshot {
    /// Opens a snapshot directory: the manifest must parse, carry our format
    /// and version, and every file must exist with the recorded length.
    pub fn open(dir: &Path) -> Result<Snapshot> {
        let mpath = dir.join(MANIFEST);
        let raw = read_limited(&mpath, MAX_MANIFEST_BYTES)
            .with_context(|| format!("snapshot {}: cannot read its manifest", dir.display()))?;
        let manifest: Manifest = serde_json::from_slice(&raw)
            .with_context(|| format!("snapshot {}: manifest is corrupt", dir.display()))?;
        if manifest.format != FORMAT_NAME {
            bail!(
                "snapshot {}: not a thaw snapshot (format {:?})",
                dir.display(),
                manifest.format
            );
        }
        if manifest.version != FORMAT_VERSION {
            bail!(
                "snapshot {}: format version {} is not supported (this thaw reads version {FORMAT_VERSION})",
                dir.display(),
                manifest.version
            );
        }
        for e in [&manifest.state, &manifest.memory] {
            if e.name.contains('/') || e.name.starts_with('.') {
                bail!(
                    "snapshot {}: bad file name {:?} in manifest",
                    dir.display(),
                    e.name
                );
            }
            let p = dir.join(&e.name);
            let len = fs::metadata(&p)
                .with_context(|| format!("snapshot {}: {} is missing", dir.display(), e.name))?
                .len();
            if len != e.len {
                bail!(
                    "snapshot {}: {} is {len} bytes, manifest says {} (truncated or replaced)",
                    dir.display(),
                    e.name,
                    e.len
                );
            }
        }
        Ok(Snapshot {
            dir: dir.to_owned(),
            manifest,
        })
    }

    /// Reads the state file and checks its SHA-256 against the manifest.
    pub fn load_state(&self) -> Result<Vec<u8>> {
        let e = &self.manifest.state;
        let data = read_limited(&self.dir.join(&e.name), MAX_STATE_BYTES)?;
        if sha256_hex(&data) != e.sha256 {
            bail!(
                "snapshot {}: state checksum mismatch (corrupted)",
                self.dir.display()
            );
        }
        Ok(data)
    }

    pub fn memory_path(&self) -> PathBuf {
        self.dir.join(&self.manifest.memory.name)
    }

    /// Re-hashes the whole memory image. Restores skip this (it would read
    /// every page and defeat lazy restore); `thaw snapshot verify` and the
    /// first use of a snapshot in a process run it.
    pub fn verify_memory(&self) -> Result<()> {
        let mut f = File::open(self.memory_path())?;
        let mut h = Sha256::new();
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = f.read(&mut buf)?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
        }
        if hex::encode(h.finalize()) != self.manifest.memory.sha256 {
            bail!(
                "snapshot {}: memory image checksum mismatch (corrupted)",
                self.dir.display()
            );
        }
        Ok(())
    }

    /// Drops the snapshot's files (and any derived files beside it: working
    /// set, tier files) from the page cache, for cold-start runs.
    pub fn drop_page_cache(&self) -> Result<()> {
        for e in fs::read_dir(&self.dir)? {
            let p = e?.path();
            if p.is_file() {
                drop_file_cache(&p)?;
            }
        }
        Ok(())
    }
}

/// Evicts one file's pages from the page cache (a no-op on tmpfs, whose pages
/// are the file).
pub fn drop_file_cache(path: &Path) -> Result<()> {
    use std::os::fd::AsRawFd;
    let f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    // SAFETY: plain advisory call on a descriptor we own.
    let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if r != 0 {
        bail!("posix_fadvise(DONTNEED) on {}: errno {r}", path.display());
    }
    Ok(())
}

fn read_limited(path: &Path, max: u64) -> Result<Vec<u8>> {
    let f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut data = Vec::new();
    f.take(max + 1).read_to_end(&mut data)?;
    if data.len() as u64 > max {
        bail!("{} is larger than {max} bytes", path.display());
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("thaw-store-test-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    fn make(dir: &Path) -> Snapshot {
        let mut w = SnapshotWriter::create(dir).unwrap();
        assert_eq!(w.append_memory(&[1u8; 4096]).unwrap(), 0);
        assert_eq!(w.append_memory(&[2u8; 4096]).unwrap(), 4096);
        w.finish("id1", "helloworld", "roothash", b"{\"x\":1}")
            .unwrap()
    }

    #[test]
    fn round_trip_and_verify() {
        let base = tmpdir("rt");
        let s = make(&base.join("snap"));
        let o = Snapshot::open(&s.dir).unwrap();
        assert_eq!(o.manifest, s.manifest);
        assert_eq!(o.load_state().unwrap(), b"{\"x\":1}");
        o.verify_memory().unwrap();
        assert!(SnapshotWriter::create(&s.dir).is_err(), "never overwrites");
        // no temp dirs left behind
        assert_eq!(fs::read_dir(&base).unwrap().count(), 1);
    }

    #[test]
    fn detects_truncation_corruption_and_version() {
        let base = tmpdir("bad");
        let s = make(&base.join("snap"));
        let img = s.memory_path();
        let mut data = fs::read(&img).unwrap();
        data[10] ^= 0xff;
        fs::write(&img, &data).unwrap();
        let err = Snapshot::open(&s.dir).unwrap().verify_memory().unwrap_err();
        assert!(err.to_string().contains("checksum"), "{err}");
        fs::write(&img, &data[..4096]).unwrap();
        let err = Snapshot::open(&s.dir).unwrap_err();
        assert!(format!("{err:#}").contains("truncated"), "{err:#}");

        let s = make(&base.join("snap2"));
        fs::write(s.dir.join(STATE), b"{\"x\":2}").unwrap();
        let err = Snapshot::open(&s.dir).unwrap().load_state().unwrap_err();
        assert!(err.to_string().contains("checksum"), "{err}");

        let mut m = s.manifest.clone();
        m.version = 99;
        fs::write(s.dir.join(MANIFEST), serde_json::to_vec(&m).unwrap()).unwrap();
        let err = Snapshot::open(&s.dir).unwrap_err();
        assert!(err.to_string().contains("version 99"), "{err}");
        fs::write(s.dir.join(MANIFEST), b"{not json").unwrap();
        assert!(Snapshot::open(&s.dir).is_err());
    }

    #[test]
    fn abandoned_writer_leaves_nothing() {
        let base = tmpdir("abandon");
        {
            let mut w = SnapshotWriter::create(&base.join("snap")).unwrap();
            w.append_memory(&[0u8; 4096]).unwrap();
        }
        assert_eq!(fs::read_dir(&base).unwrap().count(), 0);
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_manifest_bytes_never_panic(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            let base = tmpdir("fuzz");
            fs::write(base.join(MANIFEST), &data).unwrap();
            let _ = Snapshot::open(&base);
        }
    }
}
