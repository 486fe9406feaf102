//! Each strategy driven through the `Strategy` trait alone, phase by phase,
//! on a small snapshot whose lazily served region is real memory of this
//! process (so REAP's prefetch, the page server and dax's write-set
//! recording run for real). Runs as root (userfaultfd, /dev/shm).
use std::fs::File;
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use thaw_memory::{
    usize_of, ImageSource, MemoryLayout, PageServer, Region, Run, PAGE_LEN, PAGE_SIZE,
};
use thaw_restore::{
    strategy, MemoryPlan, Need, Runtime, Strategy, StrategyKind, Target, WsMode, IMAGE_FD,
};
use thaw_restorer as r;

const ANON_PAGES: u64 = 4;
const FILE_PAGES: u64 = 2;
/// A file-backed region at an address this process never touches (below
/// its mappings): only planned, never filled.
const FILE_START: u64 = 0x10_0000;
const RW: u32 = (libc::PROT_READ | libc::PROT_WRITE) as u32;

/// A snapshot directory on tmpfs, its image and a layout whose anonymous
/// region is `mem` (fresh, untouched anonymous memory of this process).
struct Fixture {
    dir: PathBuf,
    image: File,
    layout: Arc<MemoryLayout>,
    prots: Vec<u32>,
    mem: u64,
}

impl Fixture {
    fn new(tag: &str) -> Fixture {
        let dir = PathBuf::from(format!(
            "/dev/shm/thaw-restore-test-{}-{tag}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let pages = ANON_PAGES + FILE_PAGES;
        let image = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.join("memory.img"))
            .unwrap();
        for p in 0..pages {
            image.write_all_at(&page_of(p), p * PAGE_SIZE).unwrap();
        }
        // SAFETY: a fresh private anonymous mapping; unmapped in Drop.
        let mem = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                usize_of(ANON_PAGES * PAGE_SIZE),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(mem, libc::MAP_FAILED);
        let mem = mem as u64;
        let layout = MemoryLayout {
            regions: vec![
                Region {
                    start: FILE_START,
                    end: FILE_START + FILE_PAGES * PAGE_SIZE,
                    anonymous: false,
                    runs: vec![Run {
                        addr: FILE_START,
                        len: FILE_PAGES * PAGE_SIZE,
                        file_off: ANON_PAGES * PAGE_SIZE,
                    }],
                },
                Region {
                    start: mem,
                    end: mem + ANON_PAGES * PAGE_SIZE,
                    anonymous: true,
                    runs: vec![Run {
                        addr: mem,
                        len: ANON_PAGES * PAGE_SIZE,
                        file_off: 0,
                    }],
                },
            ],
            image_len: pages * PAGE_SIZE,
        };
        let f = Fixture {
            dir,
            image,
            layout: Arc::new(layout),
            prots: vec![libc::PROT_READ as u32, RW],
            mem,
        };
        // after the fixture exists, so its Drop cleans up a failure
        f.layout.validate().unwrap();
        f
    }

    fn target(&self) -> Target<'_> {
        Target {
            dir: &self.dir,
            key: "snapshot-key",
            layout: &self.layout,
            prots: &self.prots,
            image: &self.image,
            drift_share: 0.25,
            arriving: None,
        }
    }

    /// Page `i` of the anonymous region, as this process sees it.
    fn mem_page(&self, i: u64) -> Vec<u8> {
        // SAFETY: inside the mapping made in `new`, alive until Drop.
        unsafe { std::slice::from_raw_parts((self.mem + i * PAGE_SIZE) as *const u8, PAGE_LEN) }
            .to_vec()
    }

    fn write_page(&self, i: u64) {
        // SAFETY: inside the mapping made in `new`, alive until Drop.
        unsafe { *((self.mem + i * PAGE_SIZE) as *mut u8) = 0xee };
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`; nothing refers to it any more.
        unsafe { libc::munmap(self.mem as *mut _, usize_of(ANON_PAGES * PAGE_SIZE)) };
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// An image that has wholly arrived (a streamed restore's stand-in).
struct Arrived;

impl thaw_restore::Arriving for Arrived {
    fn copied_pages(&self) -> Result<(), thaw_memory::BoxError> {
        Ok(())
    }
    fn working_set(&self) -> Result<(), thaw_memory::BoxError> {
        Ok(())
    }
}

fn page_of(p: u64) -> Vec<u8> {
    (0..PAGE_SIZE)
        .map(|i| u8::try_from((p * 7 + i % 251) % 256).unwrap())
        .collect()
}

/// The phases every restore runs before resume, in order.
fn prepare_and_plan(s: &mut dyn Strategy, t: &Target<'_>) -> MemoryPlan {
    s.prepare(t).unwrap();
    let p = s.plan(t).unwrap();
    assert_eq!(p.regions.len(), t.layout.regions.len());
    let runs: usize = p.regions.iter().map(|r| r.n_runs).sum();
    assert_eq!(runs, p.runs.len(), "every run belongs to one region");
    p
}

fn fills(p: &MemoryPlan) -> Vec<u32> {
    p.runs.iter().map(|r| r.fill).collect()
}

/// userfaultfd registered in missing mode over the fixture's anonymous region.
fn register_uffd(f: &Fixture) -> OwnedFd {
    const UFFDIO_API: u64 = 0xc018_aa3f;
    const UFFDIO_REGISTER: u64 = 0xc020_aa00;
    // SAFETY: plain syscall; the descriptor is owned below.
    let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC | libc::O_NONBLOCK) };
    assert!(
        fd >= 0,
        "userfaultfd (needs root): {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: fd was just created and is owned only here.
    let fd = unsafe { OwnedFd::from_raw_fd(i32::try_from(fd).unwrap()) };
    let mut api = [0xaau64, 0, 0];
    // SAFETY: UFFDIO_API reads and writes a struct uffdio_api (3 u64).
    let rc = unsafe {
        libc::ioctl(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            UFFDIO_API,
            api.as_mut_ptr(),
        )
    };
    assert_eq!(rc, 0, "UFFDIO_API: {}", std::io::Error::last_os_error());
    // struct uffdio_register: range (start, len), mode, ioctls
    let mut reg = [f.mem, ANON_PAGES * PAGE_SIZE, 1, 0];
    // SAFETY: UFFDIO_REGISTER reads and writes a struct uffdio_register (4 u64).
    let rc = unsafe {
        libc::ioctl(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            UFFDIO_REGISTER,
            reg.as_mut_ptr(),
        )
    };
    assert_eq!(
        rc,
        0,
        "UFFDIO_REGISTER: {}",
        std::io::Error::last_os_error()
    );
    fd
}

/// What callers ask of the strategy objects instead of their names.
#[test]
fn capabilities_are_the_strategies_own() {
    use StrategyKind::*;
    let streaming: Vec<_> = thaw_restore::kinds_where(|s| s.streams()).collect();
    assert_eq!(streaming, [Uffd, Reap]);
    assert_eq!(thaw_restore::names_of(streaming.into_iter()), "uffd, reap");
    let recording: Vec<_> = thaw_restore::kinds_where(|s| s.records_working_set()).collect();
    assert_eq!(recording, [Reap]);
    for k in StrategyKind::ALL {
        match strategy(k).needs() {
            None => assert!(![Dax, Tiered].contains(&k), "{k}"),
            Some(r) => {
                let want = match k {
                    Dax => (Need::ByteAddressableTier, Mmap),
                    Tiered => (Need::TierLayout, Uffd),
                    _ => panic!("{k} needs {}", r.needs),
                };
                assert_eq!((r.needs, r.otherwise), want);
                // what runs instead needs nothing more
                assert!(strategy(r.otherwise).needs().is_none(), "{k}");
            }
        }
    }
}

#[test]
fn registration_names_and_wire_format() {
    for k in StrategyKind::ALL {
        assert_eq!(strategy(k).kind(), k);
        assert_eq!(k.name().parse::<StrategyKind>().unwrap(), k);
        assert_eq!(serde_json::to_string(&k).unwrap(), format!("\"{k}\""));
    }
    let e = "fresh".parse::<StrategyKind>().unwrap_err();
    assert_eq!(e.name, "fresh");
    assert!(
        e.to_string()
            .contains("eager, mmap, uffd, reap, dax, tiered"),
        "{e}"
    );
}

#[test]
fn eager_copies_every_saved_page() {
    let f = Fixture::new("eager");
    let mut s = strategy(StrategyKind::Eager);
    let p = prepare_and_plan(s.as_mut(), &f.target());
    assert!(!p.lazy());
    assert_eq!(fills(&p), [r::FILL_COPY, r::FILL_COPY]);
    assert!(p.runs.iter().all(|r| r.img_fd == IMAGE_FD));
    assert_eq!(p.copied_bytes, (ANON_PAGES + FILE_PAGES) * PAGE_SIZE);
    assert_eq!((p.mapped_bytes, p.lazy_bytes), (0, 0));
    assert!(s.report().warnings.is_empty());
}

#[test]
fn mmap_maps_every_saved_page_and_copies_its_write_set() {
    let f = Fixture::new("mmap");
    let mut s = strategy(StrategyKind::Mmap);
    let p = prepare_and_plan(s.as_mut(), &f.target());
    assert!(!p.lazy() && p.extra_fds.is_empty());
    assert_eq!(fills(&p), [r::FILL_MAP, r::FILL_MAP]);
    assert_eq!(p.mapped_bytes, (ANON_PAGES + FILE_PAGES) * PAGE_SIZE);
    assert!(p.regions.iter().all(|r| r.flags == 0));
    assert_eq!((p.populated_bytes, s.report().write_set_pages), (0, 0));
    // the first response wrote one page: the next restore copies it on
    // write before resume, and says so; the rest stays lazily mapped
    f.write_page(1);
    let rt = Runtime {
        pid: std::process::id().cast_signed(),
        pager: None,
    };
    assert_eq!(s.after_first_response(&rt).write_set_pages, 1);
    let mut s = strategy(StrategyKind::Mmap);
    let p = prepare_and_plan(s.as_mut(), &f.target());
    assert_eq!(
        fills(&p),
        [r::FILL_MAP, r::FILL_MAP, r::FILL_POPULATE_WRITE]
    );
    assert_eq!(p.runs[2].addr, f.mem + PAGE_SIZE);
    assert_eq!(p.populated_bytes, PAGE_SIZE);
    assert_eq!(p.mapped_bytes, (ANON_PAGES + FILE_PAGES) * PAGE_SIZE);
    assert_eq!(s.report().write_set_pages, 1);
    // a write set recorded for another snapshot is refused, and re-recorded
    let other = Target {
        key: "another",
        ..f.target()
    };
    let mut s = strategy(StrategyKind::Mmap);
    let p = prepare_and_plan(s.as_mut(), &other);
    assert_eq!(p.populated_bytes, 0);
    assert!(s.report().warnings[0].contains("stale"), "{:?}", s.report());
}

#[test]
fn uffd_leaves_anonymous_memory_to_the_page_server() {
    let f = Fixture::new("uffd");
    let t = f.target();
    let mut s = strategy(StrategyKind::Uffd);
    assert!(s.streams());
    let p = prepare_and_plan(s.as_mut(), &t);
    assert!(p.lazy());
    assert_eq!(p.regions[1].flags, r::VMA_LAZY);
    assert_eq!(p.regions[1].n_runs, 0);
    // file-backed memory is outside userfaultfd's missing mode: copied
    assert_eq!(fills(&p), [r::FILL_COPY]);
    assert_eq!(p.lazy_bytes, ANON_PAGES * PAGE_SIZE);
    assert_eq!(p.copied_bytes, FILE_PAGES * PAGE_SIZE);
    let uffd = register_uffd(&f);
    assert!(!s.serve(&t, uffd.as_fd()).unwrap().record);
}

#[test]
fn reap_records_then_prefetches_and_detects_drift() {
    let f = Fixture::new("reap");
    let t = f.target();
    // no working set yet: this restore records one
    let mut s = strategy(StrategyKind::Reap);
    let p = prepare_and_plan(s.as_mut(), &t);
    assert!(p.lazy());
    // file pages are mapped from the image, not copied before resume...
    assert_eq!(fills(&p), [r::FILL_MAP]);
    assert_eq!(p.copied_bytes, 0);
    // ...unless the image is still arriving (a mapping would read its holes)
    let streamed = Target {
        arriving: Some(Arc::new(Arrived)),
        ..f.target()
    };
    let mut st = strategy(StrategyKind::Reap);
    assert_eq!(fills(&st.plan(&streamed).unwrap()), [r::FILL_COPY]);
    let uffd = register_uffd(&f);
    assert!(s.serve(&t, uffd.as_fd()).unwrap().record);
    assert_eq!(s.report().ws_mode, WsMode::Record);
    // the page server logs the pages "the first invocation" touches
    let source = Arc::new(ImageSource(f.image.try_clone().unwrap()));
    let pager = PageServer::spawn(
        uffd,
        f.layout.clone(),
        source.clone(),
        true,
        Box::new(|e| panic!("{e}")),
    )
    .unwrap();
    assert_eq!(f.mem_page(1), page_of(1));
    assert_eq!(f.mem_page(2), page_of(2));
    let rt = Runtime {
        pid: std::process::id().cast_signed(),
        pager: Some(&pager),
    };
    let out = s.after_first_response(&rt);
    assert_eq!(out.recorded_pages, 2, "{out:?}");
    // the file pages in this process's page tables: none (never mapped)
    let index: thaw_memory::working_set::WsIndex = serde_json::from_slice(
        &std::fs::read(f.dir.join(thaw_memory::working_set::WS_INDEX)).unwrap(),
    )
    .unwrap();
    assert_eq!(index.file_runs, Some(vec![]));
    drop(pager);
    // SAFETY: the fixture's own mapping: drop the served pages so the next
    // restore finds them missing again
    unsafe {
        libc::madvise(
            f.mem as *mut _,
            usize_of(ANON_PAGES * PAGE_SIZE),
            libc::MADV_DONTNEED,
        )
    };

    // the next restore installs them before resume, in one read
    let mut s = strategy(StrategyKind::Reap);
    prepare_and_plan(s.as_mut(), &t);
    let uffd = register_uffd(&f);
    assert!(!s.serve(&t, uffd.as_fd()).unwrap().record);
    let rep = s.report();
    assert_eq!((rep.ws_mode, rep.ws_pages), (WsMode::Prefetch, 2));
    // prefetched pages are there with no server running at all
    assert_eq!(f.mem_page(1), page_of(1));
    assert_eq!(f.mem_page(2), page_of(2));
    // two faults outside a 2-page working set exceed a 0.25 drift share
    let pager = PageServer::spawn(
        uffd,
        f.layout.clone(),
        source,
        false,
        Box::new(|e| panic!("{e}")),
    )
    .unwrap();
    assert_eq!(f.mem_page(0), page_of(0));
    assert_eq!(f.mem_page(3), page_of(3));
    let out = s.after_first_response(&Runtime {
        pid: 0,
        pager: Some(&pager),
    });
    assert_eq!(out.faults_after_prefetch, 2);
    assert!(out.drift);
    assert!(f.dir.join(thaw_memory::working_set::WS_STALE).exists());
}

#[test]
fn dax_populates_in_place_and_records_then_copies_its_write_set() {
    let f = Fixture::new("dax");
    let t = f.target();
    let mut s = strategy(StrategyKind::Dax);
    let p = prepare_and_plan(s.as_mut(), &t);
    assert!(!p.lazy());
    assert_eq!(fills(&p), [r::FILL_MAP_POPULATE, r::FILL_MAP_POPULATE]);
    // page tables built for the file-backed region; anonymous memory is
    // mapped from the image privately
    assert_eq!(p.regions[0].flags, r::VMA_POPULATE);
    assert_eq!(p.regions[1].flags, 0);
    assert_eq!(s.report().write_set_pages, 0);
    // "the first invocation" writes two pages of the anonymous region
    f.write_page(0);
    f.write_page(2);
    let out = s.after_first_response(&Runtime {
        pid: std::process::id().cast_signed(),
        pager: None,
    });
    assert_eq!(out.write_set_pages, 2, "{out:?}");
    // the next restore copies them before resume (writable mappings only)
    let mut s = strategy(StrategyKind::Dax);
    let p = prepare_and_plan(s.as_mut(), &t);
    assert_eq!(s.report().write_set_pages, 2);
    let writes: Vec<_> = p
        .runs
        .iter()
        .filter(|r| r.fill == r::FILL_POPULATE_WRITE)
        .collect();
    assert_eq!(writes.len(), 2);
    assert_eq!(
        (writes[0].addr, writes[1].addr),
        (f.mem, f.mem + 2 * PAGE_SIZE)
    );
    // a block device has no byte-addressable image to map in place
    let disk = PathBuf::from(format!("/var/tmp/thaw-restore-test-{}", std::process::id()));
    std::fs::create_dir_all(&disk).unwrap();
    let on_disk = Target {
        dir: &disk,
        ..f.target()
    };
    let e = strategy(StrategyKind::Dax).prepare(&on_disk).unwrap_err();
    std::fs::remove_dir_all(&disk).unwrap();
    assert!(
        matches!(e, thaw_restore::StrategyError::Unsuitable(_)),
        "{e:?}"
    );
}

#[test]
fn tiered_maps_from_both_tier_files_or_falls_back_to_uffd() {
    let f = Fixture::new("tiered");
    let t = f.target();
    // no layout: plain uffd, with a warning in the report
    let mut s = strategy(StrategyKind::Tiered);
    let p = prepare_and_plan(s.as_mut(), &t);
    assert_eq!(s.kind(), StrategyKind::Uffd);
    assert!(p.lazy());
    let rep = s.report();
    assert!(rep.tier_warning.contains("no tier layout"), "{rep:?}");
    assert_eq!(rep.warnings.len(), 1);

    // pages 0 and 1 hot in every epoch, the rest never touched
    let profile = thaw_memory::tiering::AccessProfile {
        epochs: 4,
        counts: [(f.mem, 4), (f.mem + PAGE_SIZE, 4)].into_iter().collect(),
        classes: Vec::new(),
    };
    // the slow file on tmpfs (byte-addressable: mapped in place like the
    // fast one), then on the disk (its pages fault in, readahead off)
    let disk = PathBuf::from(format!(
        "/var/tmp/thaw-restore-test-tiered-{}",
        std::process::id()
    ));
    for (slow_dir, in_place, fill) in [
        (f.dir.join("slow"), true, r::FILL_MAP),
        (disk.clone(), false, r::FILL_MAP_RANDOM),
    ] {
        thaw_memory::tiering::write(
            &f.dir,
            &slow_dir,
            if in_place { "pmem" } else { "disk" },
            t.key,
            &f.layout,
            &f.image,
            &profile,
            // any slowdown refused: the hot pages stay on the fast tier
            // (mappings free: the plan, not the model's smoothing, is tested)
            &thaw_memory::tiering::CostParams {
                max_slowdown: 1.0,
                map_us: 0.0,
                ..Default::default()
            },
        )
        .unwrap();
        let mut s = strategy(StrategyKind::Tiered);
        let p = prepare_and_plan(s.as_mut(), &t);
        assert_eq!(s.kind(), StrategyKind::Tiered);
        assert!(!p.lazy());
        assert_eq!(p.extra_fds.len(), 2);
        assert_eq!(p.mapped_bytes, (ANON_PAGES + FILE_PAGES) * PAGE_SIZE);
        let fast = p.runs.iter().filter(|r| r.img_fd == IMAGE_FD + 1);
        assert_eq!(fast.map(|r| r.len).sum::<u64>(), 2 * PAGE_SIZE);
        let slow: Vec<_> = p.runs.iter().filter(|r| r.img_fd == IMAGE_FD + 2).collect();
        assert!(!slow.is_empty() && slow.iter().all(|r| r.fill == fill));
        let rep = s.report();
        assert!(rep.slow_tier_share > 0.5);
        assert_eq!(rep.slow_in_place, in_place);
        assert_eq!(rep.slow_tier, if in_place { "pmem" } else { "disk" });
        // no write set yet: this restore records one at its first response
        assert_eq!(p.populated_bytes, 0);
        f.write_page(1);
        let out = s.after_first_response(&Runtime {
            pid: std::process::id().cast_signed(),
            pager: None,
        });
        assert!(out.write_set_pages >= 1, "{out:?}");
        // the next restore copies the written pages before resume, as mmap does
        let p = prepare_and_plan(strategy(StrategyKind::Tiered).as_mut(), &t);
        let writes: Vec<_> = p
            .runs
            .iter()
            .filter(|r| r.fill == r::FILL_POPULATE_WRITE)
            .collect();
        assert!(
            writes.iter().any(|w| w.addr == f.mem + PAGE_SIZE),
            "{writes:?}"
        );
        assert_eq!(p.populated_bytes, writes.iter().map(|w| w.len).sum::<u64>());
        std::fs::remove_file(f.dir.join(thaw_memory::write_set::WRITE_SET_FILE)).unwrap();
    }
    std::fs::remove_dir_all(&disk).unwrap();
}
