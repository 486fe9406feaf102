//! The userfaultfd page server: one thread per lazily restored sandbox that
//! answers each missing-page fault with the saved page (or a zero page).
//!
//! Every fault address comes from the kernel on behalf of an untrusted
//! process; it is checked against the layout before anything is served, and an
//! address outside the lazily served regions stops the server and reports a
//! fatal error (the caller kills the sandbox rather than leave it hanging).
use crate::layout::Region;
use crate::layout::{MemoryLayout, PAGE_SIZE};
use crate::uffd;
use crate::PAGE_LEN;
use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use thaw_error::BoxError;

const UFFD_EVENT_PAGEFAULT: u8 = 0x12;

/// Where a lazily served page's contents come from.
pub trait PageSource: Send + Sync {
    /// Fills `buf` with the page at `addr` of `region`; false means a zero page.
    fn read_page(&self, region: &Region, addr: u64, buf: &mut [u8]) -> Result<bool, BoxError>;
}

/// Pages straight from a snapshot's memory image.
pub struct ImageSource(pub File);

/// What a fault that misses the page cache asks the device for: the aligned
/// block around its page. A fault on a mapped file gets such a read-around
/// from the kernel; a page server's `pread` of one page does not, so
/// without it every lazily served page was a device trip of its own.
const READ_AROUND: u64 = 64 << 10;

impl PageSource for ImageSource {
    fn read_page(&self, region: &Region, addr: u64, buf: &mut [u8]) -> Result<bool, BoxError> {
        match region.image_offset(addr) {
            Some(off) => {
                if !read_cached(&self.0, buf, off) {
                    let start = off & !(READ_AROUND - 1);
                    // SAFETY: an advisory call on a descriptor we own.
                    unsafe {
                        libc::posix_fadvise(
                            self.0.as_raw_fd(),
                            libc::off_t::try_from(start).unwrap_or(libc::off_t::MAX),
                            READ_AROUND.cast_signed(),
                            libc::POSIX_FADV_WILLNEED,
                        )
                    };
                    self.0.read_exact_at(buf, off)?;
                }
                Ok(true)
            }
            None => Ok(false),
        }
    }
}

/// Fills `buf` from `f` at `off` only if all of it is in the page cache
/// (`RWF_NOWAIT`); false on a miss, a short read or any error (the caller
/// then reads it the ordinary way, and reports any error).
fn read_cached(f: &File, buf: &mut [u8], off: u64) -> bool {
    let iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let Ok(off) = libc::off_t::try_from(off) else {
        return false;
    };
    // SAFETY: one iovec over `buf`, which outlives the call.
    let n = unsafe { libc::preadv2(f.as_raw_fd(), &iov, 1, off, libc::RWF_NOWAIT) };
    usize::try_from(n) == Ok(buf.len())
}

/// Counters a restore reports; shared with the server thread.
#[derive(Debug, Default)]
pub struct FaultStats {
    pub faults: AtomicU64,
    pub bytes_read: AtomicU64,
    pub zero_pages: AtomicU64,
    pub serve_ns: AtomicU64,
}

impl FaultStats {
    pub fn faults(&self) -> u64 {
        self.faults.load(Ordering::Relaxed)
    }
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read.load(Ordering::Relaxed)
    }
}

/// A running page server. Dropping it stops the thread.
pub struct PageServer {
    stop_w: Option<OwnedFd>,
    thread: Option<JoinHandle<()>>,
    pub stats: Arc<FaultStats>,
    error: Arc<Mutex<Option<Arc<ServeError>>>>,
    recorded: Arc<Mutex<Vec<u64>>>,
}

/// Why a page server stopped serving (its sandbox must then be killed).
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("page server poll: {0}")]
    Poll(std::io::Error),
    #[error("reading userfaultfd: {0}")]
    Read(std::io::Error),
    /// a fault the layout does not serve lazily: never answered from the image
    #[error("fault at {addr:#x} outside every lazily served region: refused")]
    Outside { addr: u64 },
    /// the page source failed (an image read, a streamed chunk that did not come)
    #[error("reading page {addr:#x}: {}", thaw_error::chain(&**error))]
    Source { addr: u64, error: BoxError },
    #[error("installing page {addr:#x}: {error}")]
    Install { addr: u64, error: uffd::UffdError },
}

impl PageServer {
    /// Serves faults on `uffd` for the anonymous regions of `layout` from
    /// `source`. `on_fatal` runs (on the server thread) when the server cannot
    /// go on; it should kill the sandbox. With `record`, every served page
    /// address is logged in fault order (REAP's working-set recording).
    pub fn spawn(
        uffd: OwnedFd,
        layout: Arc<MemoryLayout>,
        source: Arc<dyn PageSource>,
        record: bool,
        on_fatal: Box<dyn FnOnce(&ServeError) + Send>,
    ) -> std::io::Result<PageServer> {
        let mut pipe = [0; 2];
        // SAFETY: pipe2 writes two descriptors into the array we own.
        if unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: both descriptors were just created and are owned here only.
        let (stop_r, stop_w) = unsafe {
            use std::os::fd::FromRawFd;
            (OwnedFd::from_raw_fd(pipe[0]), OwnedFd::from_raw_fd(pipe[1]))
        };
        let stats = Arc::new(FaultStats::default());
        let error = Arc::new(Mutex::new(None));
        let recorded = Arc::new(Mutex::new(Vec::new()));
        let ctx = Serve {
            uffd,
            stop_r,
            layout,
            source,
            stats: stats.clone(),
            recorded: record.then(|| recorded.clone()),
        };
        let err = error.clone();
        let thread = std::thread::Builder::new()
            .name("thaw-pager".into())
            .spawn(move || {
                if let Err(e) = ctx.run() {
                    let e = Arc::new(e);
                    *err.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.clone());
                    on_fatal(&e);
                }
            })?;
        Ok(PageServer {
            stop_w: Some(stop_w),
            thread: Some(thread),
            stats,
            error,
            recorded,
        })
    }

    /// The fatal error that stopped the server, if any.
    pub fn error(&self) -> Option<Arc<ServeError>> {
        self.error.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Page addresses served so far, in fault order (empty unless recording).
    pub fn recorded(&self) -> Vec<u64> {
        self.recorded
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Takes the recorded addresses, leaving the log empty (one profiling epoch).
    pub fn take_recorded(&self) -> Vec<u64> {
        std::mem::take(&mut *self.recorded.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Stops the server thread and waits for it.
    pub fn stop(&mut self) {
        self.stop_w.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for PageServer {
    fn drop(&mut self) {
        self.stop();
    }
}

struct Serve {
    uffd: OwnedFd,
    stop_r: OwnedFd,
    layout: Arc<MemoryLayout>,
    source: Arc<dyn PageSource>,
    stats: Arc<FaultStats>,
    recorded: Option<Arc<Mutex<Vec<u64>>>>,
}

impl Serve {
    fn run(&self) -> Result<(), ServeError> {
        let mut page = vec![0u8; PAGE_LEN];
        let mut msgs = [0u8; 32 * 16];
        loop {
            let mut fds = [
                libc::pollfd {
                    fd: self.uffd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: self.stop_r.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: fds is a valid array of two pollfd structs.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(ServeError::Poll(e));
            }
            if fds[1].revents != 0 {
                return Ok(()); // asked to stop
            }
            if fds[0].revents & (libc::POLLERR | libc::POLLHUP) != 0 {
                return Ok(()); // the sandbox's memory is gone
            }
            // SAFETY: reading into our own buffer of the given length.
            let got =
                unsafe { libc::read(self.uffd.as_raw_fd(), msgs.as_mut_ptr().cast(), msgs.len()) };
            let Ok(got) = usize::try_from(got) else {
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EAGAIN)
                    || e.kind() == std::io::ErrorKind::Interrupted
                {
                    continue;
                }
                return Err(ServeError::Read(e));
            };
            if got == 0 {
                return Ok(());
            }
            for msg in msgs[..got].chunks_exact(32) {
                if msg[0] != UFFD_EVENT_PAGEFAULT {
                    continue;
                }
                let addr = u64::from_le_bytes(msg[16..24].try_into().expect("8 bytes"));
                if !self.serve(addr & !(PAGE_SIZE - 1), &mut page)? {
                    return Ok(()); // the sandbox is gone
                }
            }
        }
    }

    /// Serves one page; Ok(false) when the sandbox has gone away.
    fn serve(&self, addr: u64, buf: &mut [u8]) -> Result<bool, ServeError> {
        let t = std::time::Instant::now();
        let region = self
            .layout
            .region_of(addr)
            .filter(|r| r.anonymous)
            .ok_or(ServeError::Outside { addr })?;
        let fd = self.uffd.as_raw_fd();
        let has_data = self
            .source
            .read_page(region, addr, buf)
            .map_err(|error| ServeError::Source { addr, error })?;
        // count before installing: the install wakes the faulting thread, and
        // whoever it answers may read these counters right away
        self.stats.faults.fetch_add(1, Ordering::Relaxed);
        if let Some(rec) = &self.recorded {
            rec.lock().unwrap_or_else(|p| p.into_inner()).push(addr);
        }
        let res = if has_data {
            self.stats
                .bytes_read
                .fetch_add(PAGE_SIZE, Ordering::Relaxed);
            uffd::copy(fd, addr, buf.as_ptr() as u64, PAGE_SIZE, false)
        } else {
            self.stats.zero_pages.fetch_add(1, Ordering::Relaxed);
            uffd::zeropage(fd, addr, PAGE_SIZE, false)
        };
        self.stats.serve_ns.fetch_add(
            t.elapsed().as_nanos().try_into().unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        if let Err(e) = res {
            return match e {
                u if u.target_gone() => Ok(false),
                error => Err(ServeError::Install { addr, error }),
            };
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Run;
    use crate::usize_of;
    use std::os::fd::{FromRawFd, RawFd};
    use std::sync::atomic::AtomicBool;

    const UFFDIO_API: libc::c_ulong = 0xc018_aa3f;
    const UFFDIO_REGISTER: libc::c_ulong = 0xc020_aa00;
    const UFFDIO_UNREGISTER: libc::c_ulong = 0x8010_aa01;

    /// An anonymous mapping of `pages` registered with a fresh userfaultfd.
    fn registered(pages: usize) -> (RawFd, u64, u64) {
        let len = pages as u64 * PAGE_SIZE;
        // SAFETY: fresh anonymous mapping and a new userfaultfd; results checked.
        unsafe {
            let addr = libc::mmap(
                std::ptr::null_mut(),
                usize_of(len),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(addr, libc::MAP_FAILED);
            let fd = RawFd::try_from(libc::syscall(
                libc::SYS_userfaultfd,
                libc::O_CLOEXEC | libc::O_NONBLOCK,
            ))
            .unwrap();
            assert!(
                fd >= 0,
                "userfaultfd unavailable (run as root): {}",
                std::io::Error::last_os_error()
            );
            let mut api = [0xAAu64, 0, 0];
            assert_eq!(libc::ioctl(fd, UFFDIO_API, api.as_mut_ptr()), 0);
            let mut reg = [addr as u64, len, 1, 0];
            assert_eq!(libc::ioctl(fd, UFFDIO_REGISTER, reg.as_mut_ptr()), 0);
            (fd, addr as u64, len)
        }
    }

    fn image(dir_tag: &str, byte: u8) -> File {
        let p = std::env::temp_dir().join(format!("thaw-ps-{dir_tag}-{}", std::process::id()));
        std::fs::write(&p, vec![byte; PAGE_LEN]).unwrap();
        File::open(&p).unwrap()
    }

    #[test]
    fn image_pages_read_the_same_cached_or_not() {
        // 64 pages, each filled with its own number
        let p = std::env::temp_dir().join(format!("thaw-ps-around-{}", std::process::id()));
        let data: Vec<u8> = (0..64u8).flat_map(|i| vec![i; PAGE_LEN]).collect();
        std::fs::write(&p, &data).unwrap();
        let f = File::open(&p).unwrap();
        // out of the page cache (as far as it can be), so the first reads miss
        // SAFETY: advisory calls on our own descriptor.
        unsafe {
            libc::fdatasync(f.as_raw_fd());
            libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED);
        }
        let region = Region {
            start: 0x100000,
            end: 0x100000 + 64 * PAGE_SIZE,
            anonymous: true,
            runs: vec![Run {
                addr: 0x100000,
                len: 64 * PAGE_SIZE,
                file_off: 0,
            }],
        };
        let src = ImageSource(f);
        let mut buf = vec![0u8; PAGE_LEN];
        for page in [37u64, 36, 1, 63, 37] {
            assert!(src
                .read_page(&region, 0x100000 + page * PAGE_SIZE, &mut buf)
                .unwrap());
            assert!(buf.iter().all(|&b| u64::from(b) == page), "page {page}");
        }
        // a short read (past the end) is a miss, not a page
        assert!(!read_cached(&src.0, &mut buf, 64 * PAGE_SIZE - 100));
        let _ = std::fs::remove_file(&p);
    }

    #[test]
    fn serves_saved_and_zero_pages_and_counts() {
        let (fd, addr, len) = registered(2);
        let layout = MemoryLayout {
            regions: vec![Region {
                start: addr,
                end: addr + len,
                anonymous: true,
                runs: vec![Run {
                    addr,
                    len: PAGE_SIZE,
                    file_off: 0,
                }],
            }],
            image_len: PAGE_SIZE,
        };
        // SAFETY: fd is a fresh descriptor handed to the server.
        let uffd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut ps = PageServer::spawn(
            uffd,
            Arc::new(layout),
            Arc::new(ImageSource(image("ok", 7))),
            true,
            Box::new(|e| panic!("{e}")),
        )
        .unwrap();
        // SAFETY: reading our own mapping; the server fills it.
        let (a, b) = unsafe { (*(addr as *const u8), *((addr + PAGE_SIZE) as *const u8)) };
        assert_eq!((a, b), (7, 0));
        assert_eq!(ps.stats.faults(), 2);
        assert_eq!(ps.stats.bytes_read(), PAGE_SIZE);
        assert_eq!(ps.recorded(), vec![addr, addr + PAGE_SIZE]);
        ps.stop();
    }

    #[test]
    fn refuses_faults_outside_its_regions() {
        let (fd, addr, len) = registered(1);
        // the layout describes some other range: the fault must not be served
        let layout = MemoryLayout {
            regions: vec![Region {
                start: 0x1000,
                end: 0x2000,
                anonymous: true,
                runs: vec![],
            }],
            image_len: 0,
        };
        let refused = Arc::new(AtomicBool::new(false));
        let r2 = refused.clone();
        let on_fatal = Box::new(move |why: &ServeError| {
            assert!(matches!(why, ServeError::Outside { .. }), "{why}");
            r2.store(true, Ordering::SeqCst);
            // let the faulting thread go on: a real caller kills the sandbox instead
            let range = [addr, len];
            // SAFETY: unregistering the range we registered on our own userfaultfd.
            unsafe { libc::ioctl(fd, UFFDIO_UNREGISTER, range.as_ptr()) };
        });
        // SAFETY: fd is a fresh descriptor handed to the server.
        let uffd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut ps = PageServer::spawn(
            uffd,
            Arc::new(layout),
            Arc::new(ImageSource(image("bad", 1))),
            false,
            on_fatal,
        )
        .unwrap();
        // SAFETY: touching our own mapping; after the unregister it is a plain zero page.
        let v = unsafe { *(addr as *const u8) };
        assert_eq!(v, 0);
        assert!(refused.load(Ordering::SeqCst));
        assert!(matches!(
            *ps.error().unwrap(),
            ServeError::Outside { addr: a } if a == addr
        ));
        assert_eq!(ps.stats.faults(), 0, "nothing was served");
        ps.stop();
    }
}
