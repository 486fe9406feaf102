use crate::machine::MachineRecord;
use crate::secure::{self, FileLock, PathError};
use crate::TierError;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::ffi::CString;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use thaw_error::{Context, ResultExt};
use thaw_memory::huge_cache::Reservation;
use thaw_memory::usize_of;

type Result<T, E = StoreError> = std::result::Result<T, E>;

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
    /// The machine it was taken on (absent in snapshots from before the
    /// record existed: those are trusted as this machine's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<MachineRecord>,
}

/// Writes a snapshot into `<dir>.tmp-<pid>` and renames it into place on finish.
pub struct SnapshotWriter {
    tmp: PathBuf,
    dir: PathBuf,
    memory: File,
    memory_hash: Sha256,
    memory_len: u64,
    done: bool,
    machine: Option<MachineRecord>,
}

impl SnapshotWriter {
    /// Starts a snapshot at `dir`, which must not exist yet. It is written
    /// into `.NAME.tmp-OWNER` beside it (OWNER: this process's pid and start
    /// time, so crash cleanup can tell whose it is); everything is private
    /// (0700 directories, 0600 files).
    pub fn create(dir: &Path) -> Result<Self> {
        if dir.exists() {
            return Err(StoreError::Exists {
                dir: dir.to_owned(),
            });
        }
        let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
            return Err(StoreError::BadPath {
                path: dir.to_owned(),
            });
        };
        secure::ensure_private_dir(parent)?;
        let name = name.to_string_lossy();
        let tmp = parent.join(format!(".{name}.tmp-{}", secure::owner_tag()));
        secure::remove_tree(&tmp)?;
        std::fs::DirBuilder::new()
            .mode(secure::DIR_MODE)
            .create(&tmp)
            .with_context(|| format!("creating {}", tmp.display()))?;
        let memory = secure::create_private_file(&tmp.join(MEMORY))?;
        Ok(SnapshotWriter {
            tmp,
            dir: dir.to_owned(),
            memory,
            memory_hash: Sha256::new(),
            memory_len: 0,
            done: false,
            machine: Some(MachineRecord::this().clone()),
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

    /// A copy of another snapshot keeps the record of the machine that took it.
    pub fn keep_machine(&mut self, machine: Option<MachineRecord>) {
        self.machine = machine;
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
            machine: self.machine.take(),
        };
        let json = serde_json::to_vec_pretty(&manifest).context("encoding the manifest")?;
        write_synced(&self.tmp.join(MANIFEST), &json)?;
        // block tiers: the files are immutable for their life (a changed
        // byte needs CAP_LINUX_IMMUTABLE and leaves a new ctime); the DRAM
        // tier is served from sealed memfds instead (`Snapshot::open_image`)
        make_immutable(&self.tmp)?;
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
            hold: None,
        })
    }
}

/// The memory image as a byte sink, so a verified copy can stream into it.
impl Write for SnapshotWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.append_memory(buf).map_err(std::io::Error::other)?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for SnapshotWriter {
    fn drop(&mut self) {
        if !self.done {
            let _ = secure::remove_tree(&self.tmp);
        }
    }
}

/// On block tiers a snapshot's files are immutable for their life (a changed
/// byte needs CAP_LINUX_IMMUTABLE and leaves a new ctime); the DRAM tier is
/// served from sealed memfds instead (`Snapshot::open_image`). For a
/// snapshot directory written in full, before it is renamed into place.
pub fn make_immutable(dir: &Path) -> Result<(), PathError> {
    if secure::on_dram(dir)? {
        return Ok(());
    }
    for f in [MEMORY, STATE, MANIFEST] {
        secure::set_immutable(&dir.join(f), true).with_context(|| {
            format!(
                "snapshots on block tiers are made immutable; the filesystem of {} must support FS_IMMUTABLE_FL",
                dir.display()
            )
        })?;
    }
    Ok(())
}

fn write_synced(path: &Path, data: &[u8]) -> Result<(), PathError> {
    let mut f = secure::create_private_file(path)?;
    f.write_all(data)
        .and_then(|_| f.sync_all())
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

pub(crate) fn sync_dir(dir: &Path) -> Result<(), Context> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("syncing {}", dir.display()))
}

pub fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// What is wrong with a snapshot, for callers to match.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// no snapshot there (no manifest)
    #[error("snapshot {}: no such snapshot (no manifest)", dir.display())]
    NotFound { dir: PathBuf },
    /// the manifest does not parse, is not a thaw snapshot's, or does not
    /// match the files beside it (names, lengths)
    #[error("snapshot {}: {what}", dir.display())]
    Corrupt { dir: PathBuf, what: String },
    /// written in a format version this thaw does not read
    #[error("snapshot {}: format version {found} is not supported (this thaw reads version {FORMAT_VERSION})", dir.display())]
    Version { dir: PathBuf, found: u32 },
    /// a file does not match its checksum, or could have changed unseen
    #[error("integrity: {}: {what}", path.display())]
    Integrity { path: PathBuf, what: String },
    /// a block-tier image without FS_IMMUTABLE_FL: it could have changed
    /// unseen, so it is refused before any byte is read
    #[error("integrity: {}: not immutable (FS_IMMUTABLE_FL is not set); it may have been changed since it was written", path.display())]
    NotImmutable { path: PathBuf },
    /// taken on a machine whose CPU or kernel this one cannot stand in for
    #[error("snapshot {}: {what}", dir.display())]
    Machine { dir: PathBuf, what: String },
    /// a snapshot is already at the path a new one is to be written to
    #[error("snapshot {} already exists", dir.display())]
    Exists { dir: PathBuf },
    /// a snapshot path without a parent directory or a name
    #[error("{}: not a path a snapshot can be written to", path.display())]
    BadPath { path: PathBuf },
    /// a function (snapshot) name with characters a directory name must not have
    #[error("bad snapshot name {name:?}")]
    BadName { name: String },
    /// a snapshot to publish that is not a version directory of this name
    #[error("snapshot {} is not a version of {}", path.display(), of.display())]
    NotAVersion { path: PathBuf, of: PathBuf },
    /// other deployers kept publishing while this reader opened the name
    #[error("{}: the published version kept changing while being opened", dir.display())]
    Busy { dir: PathBuf },
    /// a manifest or state file beyond what thaw ever writes
    #[error("{} is larger than {max} bytes", path.display())]
    TooLarge { path: PathBuf, max: u64 },
    /// the tier the snapshot lives on
    #[error(transparent)]
    Tier(#[from] TierError),
    /// the directories and files around it: ownership, modes, I/O
    #[error(transparent)]
    Path(#[from] PathError),
    /// the host's side: I/O, memfds
    #[error(transparent)]
    Other(#[from] Context),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl StoreError {
    /// The refused or failed path behind this error, if that is what it is
    /// (directly, or under the tier's root).
    pub fn path_error(&self) -> Option<&PathError> {
        match self {
            StoreError::Path(e) => Some(e),
            StoreError::Tier(TierError::Path(e) | TierError::Root { source: e, .. }) => Some(e),
            _ => None,
        }
    }
}

/// An opened, structurally checked snapshot.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub dir: PathBuf,
    pub manifest: Manifest,
    /// A published version's read lock: while any clone of this value lives,
    /// the version is not removed.
    pub(crate) hold: Option<Arc<FileLock>>,
}

impl Snapshot {
    /// Opens a snapshot directory: the manifest must parse, carry our format
    /// and version, and every file must exist with the recorded length.
    pub fn open(dir: &Path) -> Result<Snapshot, StoreError> {
        let corrupt = |what: String| StoreError::Corrupt {
            dir: dir.to_owned(),
            what,
        };
        let mpath = dir.join(MANIFEST);
        if let Err(e) = fs::symlink_metadata(&mpath) {
            if e.kind() == std::io::ErrorKind::NotFound {
                return Err(StoreError::NotFound {
                    dir: dir.to_owned(),
                });
            }
        }
        let raw = read_limited(&mpath, MAX_MANIFEST_BYTES)?;
        let manifest: Manifest = serde_json::from_slice(&raw)
            .map_err(|e| corrupt(format!("manifest is corrupt: {e}")))?;
        if manifest.format != FORMAT_NAME {
            return Err(corrupt(format!(
                "not a thaw snapshot (format {:?})",
                manifest.format
            )));
        }
        if manifest.version != FORMAT_VERSION {
            return Err(StoreError::Version {
                dir: dir.to_owned(),
                found: manifest.version,
            });
        }
        if let Some(why) = manifest
            .machine
            .as_ref()
            .and_then(|m| m.mismatch(MachineRecord::this()))
        {
            return Err(StoreError::Machine {
                dir: dir.to_owned(),
                what: why,
            });
        }
        for e in [&manifest.state, &manifest.memory] {
            if e.name.contains('/') || e.name.starts_with('.') {
                return Err(corrupt(format!("bad file name {:?} in manifest", e.name)));
            }
            let len = match fs::symlink_metadata(dir.join(&e.name)) {
                Ok(m) => m.len(),
                Err(err) => return Err(corrupt(format!("{} is missing ({err})", e.name))),
            };
            if len != e.len {
                return Err(corrupt(format!(
                    "{} is {len} bytes, manifest says {} (truncated or replaced)",
                    e.name, e.len
                )));
            }
        }
        Ok(Snapshot {
            dir: dir.to_owned(),
            manifest,
            hold: None,
        })
    }

    /// Reads the state file and checks its SHA-256 against the manifest.
    pub fn load_state(&self) -> Result<Vec<u8>, StoreError> {
        let e = &self.manifest.state;
        let data = read_limited(&self.dir.join(&e.name), MAX_STATE_BYTES)?;
        if sha256_hex(&data) != e.sha256 {
            return Err(StoreError::Integrity {
                path: self.dir.join(&e.name),
                what: "state checksum mismatch (corrupted or changed)".into(),
            });
        }
        Ok(data)
    }

    pub fn memory_path(&self) -> PathBuf {
        self.dir.join(&self.manifest.memory.name)
    }

    /// Re-hashes the whole memory image (`thaw snapshot verify`; restores
    /// use [`Snapshot::open_image`]).
    pub fn verify_memory(&self) -> Result<(), StoreError> {
        let mut f = secure::open_nofollow(&self.memory_path())?;
        self.hash_image(&mut f, &mut std::io::sink())
    }

    /// Reads the whole image from `src`, copying it to `dst`, and checks its
    /// length and SHA-256 against the manifest.
    fn hash_image(&self, src: &mut File, dst: &mut dyn Write) -> Result<(), StoreError> {
        let mut h = Sha256::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut len = 0u64;
        loop {
            let n = src.read(&mut buf)?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
            dst.write_all(&buf[..n])?;
            len += n as u64;
        }
        if len != self.manifest.memory.len
            || hex::encode(h.finalize()) != self.manifest.memory.sha256
        {
            return Err(StoreError::Integrity {
                path: self.memory_path(),
                what: "memory image checksum mismatch (corrupted or changed)".into(),
            });
        }
        Ok(())
    }

    /// Streams this snapshot's memory image into `w`, checking it against the
    /// manifest on the way (an integrity error if it changed).
    pub fn copy_image_into(&self, w: &mut SnapshotWriter) -> Result<(), StoreError> {
        self.hash_image(&mut secure::open_nofollow(&self.memory_path())?, w)
    }

    /// The memory image, verified and unchangeable for as long as the
    /// returned file is used:
    /// - DRAM tier (tmpfs): the image is copied into a memfd while its
    ///   checksum is checked, and the memfd is sealed (no write, grow or
    ///   shrink). Loaded once per process and snapshot version; later
    ///   changes to the tmpfs file cannot reach a restore.
    /// - block tiers: the file must carry FS_IMMUTABLE_FL (set when the
    ///   snapshot was written); its checksum is checked on the first use in
    ///   this process and again whenever its ctime changes (clearing the
    ///   flag to write it changes the ctime, and ctime cannot be set back).
    pub fn open_image(&self) -> Result<File, StoreError> {
        let path = self.memory_path();
        let mut f = secure::open_nofollow(&path)?;
        let m = f.metadata()?;
        if !m.is_file() {
            return Err(StoreError::Integrity {
                path,
                what: "not a regular file".into(),
            });
        }
        let key = ImageKey {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            ctime_ns: m.ctime() as i128 * 1_000_000_000 + m.ctime_nsec() as i128,
            sha256: self.manifest.memory.sha256.clone(),
        };
        if secure::on_dram(&path)? {
            let mut cache = sealed_images().lock().unwrap_or_else(|p| p.into_inner());
            // the same inode with any ctime: the memfd holds what was verified
            if let Some(fd) = cache
                .iter()
                .find(|(k, _, _)| (k.dev, k.ino, &k.sha256) == (key.dev, key.ino, &key.sha256))
                .map(|(_, _, fd)| fd)
            {
                return Ok(fd.try_clone()?);
            }
            let memfd = self.load_sealed(&mut f)?;
            // forget images whose file is gone (a removed version)
            cache.retain(|(k, p, _)| {
                fs::symlink_metadata(p).is_ok_and(|m| (m.dev(), m.ino()) == (k.dev, k.ino))
            });
            cache.push((key, path, memfd.try_clone()?));
            return Ok(memfd);
        }
        let flags = secure::inode_flags(&f)
            .with_context(|| format!("reading the inode flags of {}", path.display()))?;
        if flags & secure::FS_IMMUTABLE_FL == 0 {
            return Err(StoreError::NotImmutable { path });
        }
        let seen = verified_images()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&key);
        if !seen {
            self.hash_image(&mut f, &mut std::io::sink())?;
            verified_images()
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(key);
        }
        Ok(f)
    }

    /// A new sealed memfd holding the verified image, bypassing the
    /// per-process cache of [`Snapshot::open_image`] (`thaw bench store`
    /// measures what that first load costs).
    pub fn seal_image(&self) -> Result<File, StoreError> {
        self.load_sealed(&mut secure::open_nofollow(&self.memory_path())?)
    }

    /// Copies the image into a new memfd, checking its checksum, and seals it.
    fn load_sealed(&self, src: &mut File) -> Result<File, StoreError> {
        let name = CString::new(format!("thaw-image:{}", self.manifest.id))
            .unwrap_or_else(|_| c"thaw-image".to_owned());
        // SAFETY: memfd_create with a NUL-terminated name.
        let fd = unsafe {
            libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
        };
        if fd < 0 {
            return Err(Context::new("memfd_create", std::io::Error::last_os_error()).into());
        }
        // SAFETY: fd was just created and is owned by nobody else.
        let mut memfd = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        let len = self.manifest.memory.len;
        memfd.set_len(len)?;
        if len == 0 {
            self.hash_image(src, &mut memfd)?;
        } else {
            let map = HugeFill::new(&memfd, len)?;
            // SAFETY: the mapping is ours, `len` bytes long, shared and
            // writable, and nothing else in this process refers into it.
            let mut dst =
                unsafe { std::slice::from_raw_parts_mut(map.base as *mut u8, usize_of(len)) };
            self.hash_image(src, &mut dst)?;
        }
        let seals =
            libc::F_SEAL_WRITE | libc::F_SEAL_GROW | libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL;
        // SAFETY: fcntl on a descriptor we own.
        if unsafe { libc::fcntl(memfd.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
            let e = std::io::Error::last_os_error();
            let what = format!("sealing the memfd of {}", self.memory_path().display());
            return Err(Context::new(what, e).into());
        }
        Ok(memfd)
    }

    /// Drops the snapshot's files (and any derived files beside it: working
    /// set, tier files) from the page cache, for cold-start runs.
    pub fn drop_page_cache(&self) -> Result<(), Context> {
        let reading = || format!("reading {}", self.dir.display());
        for e in fs::read_dir(&self.dir).with_context(reading)? {
            let p = e.with_context(reading)?.path();
            if p.is_file() {
                drop_file_cache(&p)?;
            }
        }
        Ok(())
    }
}

/// The host's transparent-huge-page mode for shmem (memfds among it), as
/// `/sys/kernel/mm/transparent_hugepage/shmem_enabled` selects it: `advise`
/// (what `scripts/setup.sh` sets) or `always`/`within_size`/`force` let
/// DRAM-tier images be filled in 2 MiB folios, `never`/`deny` keep them in
/// 4 KiB ones. `None` when the kernel has no such file.
pub fn shmem_thp_mode() -> Option<String> {
    let s = fs::read_to_string("/sys/kernel/mm/transparent_hugepage/shmem_enabled").ok()?;
    let start = s.find('[')? + 1;
    let end = start + s[start..].find(']')?;
    Some(s[start..end].to_string())
}

/// A shared, writable mapping of a fresh memfd marked `MADV_HUGEPAGE`, at a
/// 2 MiB-aligned address: writes through it allocate the memfd's pages in
/// large folios when the host's shmem THP setting allows it (`advise`, or a
/// per-size `hugepages-*kB/shmem_enabled` of `advise`), so that the
/// restored process's read faults map them in batches (fault-around over
/// large folios) or whole (a PMD). Unmapped on drop, before the memfd is
/// sealed against writes (`F_SEAL_WRITE` needs no writable mapping): the
/// mapping lies in `_reserved`, which unmaps it.
struct HugeFill {
    base: u64,
    _reserved: Reservation,
}

impl HugeFill {
    fn new(memfd: &File, len: u64) -> Result<HugeFill, StoreError> {
        let reserved =
            Reservation::huge(len).context("reserving address space for the image memfd")?;
        let base = reserved
            .map_huge(
                memfd,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
            )
            .context("mapping the image memfd")?;
        // SAFETY: advice on the mapping just made. A child forked meanwhile
        // by another thread must not inherit it (a writable mapping left in
        // the child would make the seal fail).
        if unsafe {
            libc::madvise(
                base as *mut libc::c_void,
                usize_of(len),
                libc::MADV_DONTFORK,
            )
        } != 0
        {
            let e = std::io::Error::last_os_error();
            return Err(Context::new("madvise(MADV_DONTFORK) on the image memfd", e).into());
        }
        Ok(HugeFill {
            base,
            _reserved: reserved,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ImageKey {
    dev: u64,
    ino: u64,
    len: u64,
    ctime_ns: i128,
    sha256: String,
}

/// Sealed memfds of DRAM-tier images, loaded and verified once per process.
type SealedImage = (ImageKey, PathBuf, File);

fn sealed_images() -> &'static Mutex<Vec<SealedImage>> {
    static CACHE: OnceLock<Mutex<Vec<SealedImage>>> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// Block-tier images verified in this process, by inode and ctime.
fn verified_images() -> &'static Mutex<HashSet<ImageKey>> {
    static SEEN: OnceLock<Mutex<HashSet<ImageKey>>> = OnceLock::new();
    SEEN.get_or_init(Default::default)
}

/// Evicts one file's pages from the page cache (a no-op on tmpfs, whose pages
/// are the file).
pub fn drop_file_cache(path: &Path) -> Result<(), Context> {
    use std::os::fd::AsRawFd;
    let f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    // SAFETY: plain advisory call on a descriptor we own.
    let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if r != 0 {
        let e = std::io::Error::from_raw_os_error(r);
        return Err(Context::new(
            format!("posix_fadvise(DONTNEED) on {}", path.display()),
            e,
        ));
    }
    Ok(())
}

/// Largest span one `POSIX_FADV_WILLNEED` asks for: the kernel reads at
/// most the device's I/O size (or its readahead, which may be 0) per hint.
const HINT_BYTES: u64 = 128 << 10;

/// The sysfs directory (`/sys/dev/block/MAJ:MIN`) of the block device that
/// holds files of device number `dev` (a `stat`'s `st_dev`); none for tmpfs
/// and other filesystems without one.
pub fn block_device_dir(dev: u64) -> Option<PathBuf> {
    let p = PathBuf::from(format!(
        "/sys/dev/block/{}:{}",
        libc::major(dev),
        libc::minor(dev)
    ));
    p.exists().then_some(p)
}

/// Asks the kernel to read `[off, off + len)` of `f` into the page cache
/// now, all of it at once (with the device's queue depth), in hints the
/// kernel does not cut short. A hint only: errors are ignored.
pub fn will_need(f: &File, off: u64, len: u64) {
    use std::os::fd::AsRawFd;
    let end = off.saturating_add(len);
    let mut at = off;
    while at < end {
        let n = HINT_BYTES.min(end - at);
        let (Ok(at_off), Ok(n_off)) = (libc::off_t::try_from(at), libc::off_t::try_from(n)) else {
            return; // past any file's end: nothing to hint
        };
        // SAFETY: a plain advisory syscall on a descriptor the caller owns.
        unsafe { libc::posix_fadvise(f.as_raw_fd(), at_off, n_off, libc::POSIX_FADV_WILLNEED) };
        at += n;
    }
}

/// Spans closer than this are asked for as one (what readahead would read).
const HINT_GAP: u64 = 32 << 10;

/// [`will_need`] over `spans` (offset, length) in ascending order, spans
/// less than 32 KiB apart asked for as one: fewer, larger device requests.
pub fn will_need_spans(f: &File, spans: impl IntoIterator<Item = (u64, u64)>) {
    let mut cur: Option<(u64, u64)> = None;
    for (off, len) in spans {
        let end = off.saturating_add(len);
        cur = match cur {
            Some((s, e)) if off >= e && off - e <= HINT_GAP => Some((s, end)),
            Some((s, e)) => {
                will_need(f, s, e - s);
                Some((off, end))
            }
            None => Some((off, end)),
        };
    }
    if let Some((s, e)) = cur {
        will_need(f, s, e - s);
    }
}

fn read_limited(path: &Path, max: u64) -> Result<Vec<u8>> {
    let f = secure::open_nofollow(path)?;
    // a state file spans several readahead windows, each one device trip
    // after the other when read in order: ask for all of it at once
    let reading = || format!("reading {}", path.display());
    let len = f.metadata().with_context(reading)?.len();
    if len <= max {
        will_need(&f, 0, len);
    }
    let mut data = Vec::with_capacity(usize_of(len.min(max)) + 1);
    f.take(max + 1)
        .read_to_end(&mut data)
        .with_context(reading)?;
    if data.len() as u64 > max {
        return Err(StoreError::TooLarge {
            path: path.to_owned(),
            max,
        });
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A private directory in /dev/shm, removed when dropped.
    struct TmpDir(PathBuf);

    impl std::ops::Deref for TmpDir {
        type Target = Path;
        fn deref(&self) -> &Path {
            &self.0
        }
    }

    impl AsRef<Path> for TmpDir {
        fn as_ref(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TmpDir {
        fn drop(&mut self) {
            let _ = secure::remove_tree(&self.0);
        }
    }

    fn tmpdir(tag: &str) -> TmpDir {
        let d = PathBuf::from(format!(
            "/dev/shm/thaw-store-test-{tag}-{}",
            std::process::id()
        ));
        secure::remove_tree(&d).unwrap();
        secure::ensure_private_dir(&d).unwrap();
        TmpDir(d)
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
        assert!(matches!(&err, StoreError::Integrity { path, .. } if *path == img));
        fs::write(&img, &data[..4096]).unwrap();
        let err = Snapshot::open(&s.dir).unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");

        let s = make(&base.join("snap2"));
        fs::write(s.dir.join(STATE), b"{\"x\":2}").unwrap();
        let err = Snapshot::open(&s.dir).unwrap().load_state().unwrap_err();
        assert!(matches!(err, StoreError::Integrity { .. }), "{err}");

        let mut m = s.manifest.clone();
        m.version = 99;
        fs::write(s.dir.join(MANIFEST), serde_json::to_vec(&m).unwrap()).unwrap();
        let err = Snapshot::open(&s.dir).unwrap_err();
        assert!(
            matches!(err, StoreError::Version { found: 99, .. }),
            "{err}"
        );
        fs::write(s.dir.join(MANIFEST), b"{not json").unwrap();
        let err = Snapshot::open(&s.dir).unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
        fs::remove_file(s.dir.join(MANIFEST)).unwrap();
        let err = Snapshot::open(&s.dir).unwrap_err();
        assert!(matches!(err, StoreError::NotFound { .. }), "{err}");
    }

    #[test]
    fn a_snapshot_of_another_kind_of_machine_is_refused() {
        let base = tmpdir("machine");
        let s = make(&base.join("snap"));
        assert_eq!(s.manifest.machine.as_ref(), Some(MachineRecord::this()));
        let mut forged = s.manifest.clone();
        let m = forged.machine.as_mut().unwrap();
        m.xsave_bytes += 4096;
        m.kernel_release = "9.9.9-forged".into();
        fs::write(s.dir.join(MANIFEST), serde_json::to_vec(&forged).unwrap()).unwrap();
        let err = Snapshot::open(&s.dir).unwrap_err();
        assert!(matches!(err, StoreError::Machine { .. }), "{err}");
        let msg = err.to_string();
        assert!(
            msg.contains("another kind of machine")
                && msg.contains("XSAVE area")
                && msg.contains("9.9.9-forged"),
            "{msg}"
        );
        // snapshots from before the record existed still open
        forged.machine = None;
        fs::write(s.dir.join(MANIFEST), serde_json::to_vec(&forged).unwrap()).unwrap();
        Snapshot::open(&s.dir).unwrap();
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
