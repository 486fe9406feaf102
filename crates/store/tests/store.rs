//! The store's guarantees without a sandbox: private trees, versioned
//! publishing with readers that never mix versions, immutable images.
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use thaw_store::{secure, PathError, Snapshot, SnapshotWriter, StoreError, Tier};

fn root() {
    assert_eq!(
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() },
        0,
        "the store tests need root (chown, chattr)"
    );
}

/// A test tier that removes its directory when dropped (and the run's
/// directory once the last one is gone), so runs leave nothing behind in
/// /dev/shm. Immutable images are made mutable first by `remove_tree`.
struct TestTier(Tier);

impl std::ops::Deref for TestTier {
    type Target = Tier;
    fn deref(&self) -> &Tier {
        &self.0
    }
}

impl Drop for TestTier {
    fn drop(&mut self) {
        let _ = secure::remove_tree(&self.0.path);
        if let Some(base) = self.0.path.parent() {
            let _ = fs::remove_dir(base);
        }
    }
}

fn tier_on(fs_root: &str, tag: &str) -> TestTier {
    root();
    let base = PathBuf::from(fs_root).join(format!("thaw-store-it-{}", std::process::id()));
    let path = base.join(tag);
    secure::remove_tree(&path).unwrap();
    TestTier(Tier {
        name: "test",
        path,
        emulated: false,
        description: "test tier",
    })
}

fn write_version(lock: &thaw_store::DeployLock, fill: u8) -> Snapshot {
    write_version_of(lock, fill, 8192)
}

fn write_version_of(lock: &thaw_store::DeployLock, fill: u8, len: usize) -> Snapshot {
    let dir = lock.new_version_dir().unwrap();
    let mut w = SnapshotWriter::create(&dir).unwrap();
    w.append_memory(&vec![fill; len]).unwrap();
    let id = dir.file_name().unwrap().to_str().unwrap().to_string();
    w.finish(
        &id,
        "f",
        "roothash",
        format!("{{\"fill\":{fill}}}").as_bytes(),
    )
    .unwrap()
}

fn deploy(tier: &Tier, fill: u8) -> Snapshot {
    let lock = tier.lock_deploy("f-abc").unwrap();
    let snap = write_version(&lock, fill);
    lock.publish(&snap).unwrap()
}

fn versions(tier: &Tier) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(tier.function_dir("f-abc").join("versions"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    v.sort();
    v
}

fn modes_under(dir: &Path, out: &mut Vec<(PathBuf, u32)>) {
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let m = fs::symlink_metadata(&p).unwrap();
        if m.file_type().is_symlink() {
            continue;
        }
        out.push((p.clone(), m.mode() & 0o7777));
        if m.is_dir() {
            modes_under(&p, out);
        }
    }
}

#[test]
fn files_are_0600_under_0700() {
    let t = tier_on("/dev/shm", "modes");
    deploy(&t, 1);
    let mut all = vec![(
        t.path.clone(),
        fs::metadata(&t.path).unwrap().mode() & 0o7777,
    )];
    modes_under(&t.path, &mut all);
    assert!(all.len() >= 6, "{all:?}");
    for (p, mode) in all {
        let want = if p.is_dir() { 0o700 } else { 0o600 };
        assert_eq!(mode, want, "{} has mode {mode:o}", p.display());
    }
}

#[test]
fn a_tree_made_by_another_uid_is_refused() {
    let t = tier_on("/dev/shm", "foreign");
    // an unprivileged user got there first and planted a snapshot
    fs::create_dir_all(&t.path).unwrap();
    std::os::unix::fs::chown(&t.path, Some(65534), Some(65534)).unwrap();
    let err = t.lock_deploy("f-abc").err().unwrap();
    assert!(
        matches!(err.path_error(), Some(PathError::ForeignOwner { at, uid: 65534, .. }) if *at == t.path),
        "{err:?}"
    );
    let err = t.list().unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Path(PathError::ForeignOwner { uid: 65534, .. })
        ),
        "{err:?}"
    );
    // ours, but world-writable: anyone could have planted
    std::os::unix::fs::chown(&t.path, Some(0), Some(0)).unwrap();
    fs::set_permissions(&t.path, fs::Permissions::from_mode(0o1777)).unwrap();
    let err = t.lock_deploy("f-abc").err().unwrap();
    assert!(
        matches!(
            err.path_error(),
            Some(PathError::WritableByOthers { mode: 0o1777, .. })
        ),
        "{err:?}"
    );
    // a planted function directory inside our tier
    fs::set_permissions(&t.path, fs::Permissions::from_mode(0o700)).unwrap();
    let planted = t.function_dir("f-abc");
    fs::create_dir(&planted).unwrap();
    std::os::unix::fs::chown(&planted, Some(65534), None).unwrap();
    let err = t.open_current("f-abc").unwrap_err();
    assert!(
        matches!(err.path_error(), Some(PathError::ForeignOwner { at, uid: 65534, .. }) if *at == planted),
        "{err:?}"
    );
    // a symlinked tier root
    let link = tier_on("/dev/shm", "link");
    fs::create_dir_all(link.path.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink("/dev/shm", &link.path).unwrap();
    let err = link.lock_deploy("f-abc").err().unwrap();
    assert!(
        matches!(err.path_error(), Some(PathError::Symlink { at, .. }) if *at == link.path),
        "{err:?}"
    );
}

#[test]
fn publish_is_atomic_and_held_versions_survive() {
    let t = tier_on("/dev/shm", "versions");
    assert!(t.open_current("f-abc").unwrap().is_none());
    let a = deploy(&t, 1);
    assert_eq!(a.manifest.id, a.dir.file_name().unwrap().to_str().unwrap());
    assert!(
        thaw_store::is_version_id(&a.manifest.id),
        "{}",
        a.manifest.id
    );
    assert!(!thaw_store::is_version_id("helloworld-b698d65a9534fba8"));
    let held = t.open_current("f-abc").unwrap().unwrap();
    assert_eq!(held.manifest.id, a.manifest.id);
    drop(a);
    // a reader holds version 1: the redeploy must not remove it
    let b = deploy(&t, 2);
    assert_ne!(b.manifest.id, held.manifest.id);
    assert_eq!(versions(&t).len(), 2, "{:?}", versions(&t));
    assert_eq!(held.load_state().unwrap(), b"{\"fill\":1}");
    assert_eq!(
        t.open_current("f-abc").unwrap().unwrap().manifest.id,
        b.manifest.id
    );
    drop(held);
    drop(b);
    deploy(&t, 3);
    assert_eq!(
        versions(&t).len(),
        1,
        "unused versions are removed: {:?}",
        versions(&t)
    );
    let listed = t.list().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        listed[0].1.as_ref().unwrap().load_state().unwrap(),
        b"{\"fill\":3}"
    );
}

#[test]
fn readers_racing_deployers_see_one_whole_version() {
    let t = tier_on("/dev/shm", "race");
    deploy(&t, 0);
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        for fill in 1..=2u8 {
            let (t, stop) = (&t, &stop);
            s.spawn(move || {
                for _ in 0..40 {
                    deploy(t, fill);
                }
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
            });
        }
        for _ in 0..3 {
            s.spawn(|| {
                let mut n = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) || n < 50 {
                    let snap = t.open_current("f-abc").unwrap().expect("always a version");
                    let state = snap.load_state().unwrap();
                    let fill: u8 = String::from_utf8(state)
                        .unwrap()
                        .trim_start_matches("{\"fill\":")
                        .trim_end_matches('}')
                        .parse()
                        .unwrap();
                    let img = fs::read(snap.memory_path()).unwrap();
                    assert!(
                        img.iter().all(|&b| b == fill),
                        "state and image of two versions"
                    );
                    snap.verify_memory().unwrap();
                    n += 1;
                }
            });
        }
    });
}

#[test]
fn gc_removes_dead_owners_staging_only() {
    let t = tier_on("/dev/shm", "gc");
    deploy(&t, 1);
    let vdir = t.function_dir("f-abc").join("versions");
    // pid 1 started at boot, never at tick 1: a dead owner; ours is alive
    let dead = vdir.join(".123-dead.tmp-1.1");
    let live = vdir.join(format!(".456-live.tmp-{}", secure::owner_tag()));
    for d in [&dead, &live] {
        secure::ensure_private_dir(d).unwrap();
        fs::write(d.join("memory.img"), b"partial").unwrap();
    }
    // what the unversioned layout left: pid 0 never runs a worker, ours does
    let me = std::process::id();
    let legacy_dead = [
        t.path.join(".f-abc.new-0.tmp-0"),
        t.path.join("f-abc.old-0"),
        t.path.join("f-abc.new-0"),
    ];
    let legacy_live = [
        t.path.join(format!(".f-abc.new-{me}.tmp-{me}")),
        t.path.join(format!("f-abc.old-{me}")),
    ];
    for d in legacy_dead.iter().chain(&legacy_live) {
        secure::ensure_private_dir(d).unwrap();
    }
    let mut removed = thaw_store::gc_tier(&t).unwrap();
    removed.sort();
    let mut want = legacy_dead.to_vec();
    want.push(dead.clone());
    want.sort();
    assert_eq!(removed, want);
    assert!(!dead.exists() && live.exists());
    assert!(legacy_live.iter().all(|d| d.exists()));
    assert_eq!(versions(&t).len(), 2);
}

/// Flips one byte of a file and puts its mtime back, as an attacker would.
fn change_byte_keep_mtime(path: &Path, offset: usize) {
    let mtime = fs::metadata(path).unwrap().modified().unwrap();
    let mut data = fs::read(path).unwrap();
    data[offset] ^= 0xff;
    fs::write(path, &data).unwrap();
    fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
}

#[test]
fn a_changed_dram_image_cannot_reach_a_restore() {
    let t = tier_on("/dev/shm", "sealed");
    let snap = deploy(&t, 7);
    let img = snap.open_image().unwrap();
    let path = snap.memory_path();
    change_byte_keep_mtime(&path, 100);
    // the sealed memfd still holds the verified bytes, and cannot be written
    let again = snap.open_image().unwrap();
    let mut buf = vec![0u8; 8192];
    std::os::unix::fs::FileExt::read_exact_at(&again, &mut buf, 0).unwrap();
    assert!(buf.iter().all(|&b| b == 7));
    let err = std::os::unix::fs::FileExt::write_at(&img, b"x", 0).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EPERM), "{err}");
    // a fresh process (no memfd yet) sees the change as an integrity error
    let err = snap.verify_memory().unwrap_err();
    assert!(
        matches!(&err, StoreError::Integrity { path: p, .. } if *p == path),
        "{err:?}"
    );
}

/// The kB of `field` in the /proc/self/smaps entry of the mapping at `addr`
/// (every entry has every field, so the first one after its header is its).
fn smaps_field(addr: usize, field: &str) -> u64 {
    let smaps = fs::read_to_string("/proc/self/smaps").unwrap();
    let head = format!("{addr:x}-");
    let entry = smaps
        .split('\n')
        .skip_while(|l| !l.starts_with(&head))
        .skip(1)
        .find(|l| l.starts_with(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} for the mapping at {addr:#x}"));
    entry.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn a_dram_image_memfd_is_in_2mib_folios() {
    let mode = thaw_store::shmem_thp_mode();
    assert!(
        matches!(
            mode.as_deref(),
            Some("advise" | "always" | "within_size" | "force")
        ),
        "shmem THP is {mode:?}: DRAM-tier images need it at `advise` \
         (/sys/kernel/mm/transparent_hugepage/shmem_enabled, set by scripts/setup.sh)"
    );
    let t = tier_on("/dev/shm", "folios");
    let huge = 2usize << 20;
    let len = 3 * huge + 12345;
    let lock = t.lock_deploy("f-abc").unwrap();
    let version = write_version_of(&lock, 5, len);
    let snap = lock.publish(&version).unwrap();
    let img = snap.open_image().unwrap();
    // a read-only shared mapping 2 MiB-aligned: a read fault maps a 2 MiB
    // folio with one PMD entry (ShmemPmdMapped), a smaller one never
    let reserved = thaw_memory::huge_cache::Reservation::new((len + huge) as u64).unwrap();
    let base = thaw_memory::usize_of(reserved.huge_aligned());
    // SAFETY: MAP_FIXED inside our own reservation (which unmaps it).
    let p = unsafe {
        libc::mmap(
            base as *mut libc::c_void,
            len,
            libc::PROT_READ,
            libc::MAP_SHARED | libc::MAP_FIXED,
            std::os::fd::AsRawFd::as_raw_fd(&img),
            0,
        )
    };
    assert_eq!(p as usize, base, "{}", std::io::Error::last_os_error());
    for off in (0..len).step_by(huge) {
        assert_eq!(
            // SAFETY: inside the mapping, readable.
            unsafe { std::ptr::read_volatile((base + off) as *const u8) },
            5
        );
    }
    let pmd_kb = smaps_field(base, "ShmemPmdMapped");
    drop(reserved);
    assert_eq!(
        pmd_kb,
        3 * 2048,
        "the image's whole 2 MiB pieces are 2 MiB folios"
    );
}

#[test]
fn a_changed_block_image_is_impossible_or_an_integrity_error() {
    // /var/tmp is on the machine's disk (a block tier)
    let t = tier_on("/var/tmp", "immutable");
    assert!(
        !secure::on_dram(Path::new("/var/tmp")).unwrap(),
        "/var/tmp must be on a disk for this test"
    );
    let snap = deploy(&t, 9);
    snap.open_image().unwrap();
    let path = snap.memory_path();
    let err = fs::OpenOptions::new().write(true).open(&path).unwrap_err();
    assert_eq!(
        err.raw_os_error(),
        Some(libc::EPERM),
        "published files are immutable"
    );
    // root clears the flag, changes a byte, puts flag and mtime back
    secure::set_immutable(&path, false).unwrap();
    change_byte_keep_mtime(&path, 5);
    secure::set_immutable(&path, true).unwrap();
    let err = snap.open_image().unwrap_err();
    assert!(
        matches!(&err, StoreError::Integrity { path: p, .. } if *p == path),
        "{err:?}"
    );
    // flag left cleared: refused before any byte is read
    secure::set_immutable(&path, false).unwrap();
    let err = snap.open_image().unwrap_err();
    assert!(
        matches!(&err, StoreError::NotImmutable { path: p } if *p == path),
        "{err:?}"
    );
    drop(snap);
    secure::remove_tree(t.path.parent().unwrap()).unwrap();
}
