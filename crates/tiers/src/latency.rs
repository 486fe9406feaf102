//! Per-I/O latency for the emulated block devices: a FUSE filesystem that
//! holds one file, the device's backing store, and serves every request to
//! it after the device profile's access latency.
//!
//! The loop device of an emulated block tier sits on this file, so every
//! reader of the tier (the worker's REAP read, the sandbox's page faults,
//! the restorer's copies, the kernel's readahead) reaches the same queue and
//! pays the same latency, whichever process or cgroup it is in. This kernel
//! has no device-mapper `delay`, nbd, ublk or null_blk, which would add the
//! latency in the block layer instead; FUSE is built in.
//!
//! The model, per device:
//! - `queue_depth` channels serve requests at once (a disk has one
//!   actuator; flash has several). The kernel submits the loop device's
//!   direct I/O to this file asynchronously (`FUSE_ASYNC_DIO`), so that
//!   many requests reach the channels at once; without it each request
//!   waited for the one before and every device had a queue depth of 1;
//! - a request holds a channel for at least the profile's 4 KiB random-read
//!   latency, unless it starts where one of the device's recent requests
//!   ended (a sequential stream: no seek on a disk, the controller's own
//!   read-ahead on flash), whichever channel served that one; the backing
//!   file is read in that time;
//! - bandwidth stays with the blkio throttle on the loop device.
//!
//! A stall (SIGUSR1, ended by SIGUSR2; `thaw tier stall`) holds every
//! request; one held longer than the device's I/O timeout fails with EIO, as
//! a block layer fails a command that timed out, so a reader of a stalled
//! device gets an error within a deadline instead of hanging.
use crate::error::Result;
use fuser::{
    FileAttr, FileType, Filesystem, MountOption, ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyWrite, Request,
};
use std::collections::VecDeque;
use std::ffi::OsStr;
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use thaw_error::{Context, ResultExt};

/// The one file the filesystem holds: the device's contents.
pub const DEVICE_FILE: &str = "device";
const ROOT_INO: u64 = 1;
const FILE_INO: u64 = 2;
/// Attributes never change behind the kernel's back: cache them.
const ATTR_TTL: Duration = Duration::from_secs(3600);
/// Requests the kernel keeps in flight to the device (asynchronous direct
/// I/O counts as background requests): above the deepest queue a profile has.
const MAX_BACKGROUND: u16 = 256;
/// End offsets of the device's most recent requests: where a sequential
/// stream continues.
const RECENT_ENDS: usize = 64;
/// The last stretch of an access's latency, spun rather than slept.
const SPIN: Duration = Duration::from_micros(25);
/// How often a held request looks whether the stall ended.
const STALL_POLL: Duration = Duration::from_millis(5);

static STALLED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stall(_: libc::c_int) {
    STALLED.store(true, Ordering::SeqCst);
}

extern "C" fn on_resume(_: libc::c_int) {
    STALLED.store(false, Ordering::SeqCst);
}

/// The device's timing, from the tier's profile.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub access_latency: Duration,
    pub queue_depth: usize,
    pub io_timeout: Duration,
}

struct ReadRequest {
    offset: u64,
    size: u32,
    arrived: Instant,
    reply: ReplyData,
}

struct LatencyFs {
    backing: Arc<File>,
    size: Arc<AtomicU64>,
    requests: mpsc::Sender<ReadRequest>,
    uid: u32,
    gid: u32,
}

impl LatencyFs {
    fn attr(&self, ino: u64) -> FileAttr {
        let now = SystemTime::now();
        let (kind, perm, size, nlink) = if ino == ROOT_INO {
            (FileType::Directory, 0o700, 0, 2)
        } else {
            (
                FileType::RegularFile,
                0o600,
                self.size.load(Ordering::SeqCst),
                1,
            )
        };
        FileAttr {
            ino,
            size,
            blocks: size.div_ceil(512),
            atime: now,
            mtime: now,
            ctime: now,
            crtime: now,
            kind,
            perm,
            nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }
}

impl Filesystem for LatencyFs {
    fn init(
        &mut self,
        _req: &Request<'_>,
        config: &mut fuser::KernelConfig,
    ) -> Result<(), libc::c_int> {
        // the loop device's requests in flight together, as the queue depth
        // needs; a kernel without asynchronous direct I/O serves them one
        // at a time (still correct, only without parallel channels)
        let _ = config.add_capabilities(fuser::consts::FUSE_ASYNC_DIO);
        let _ = config.set_max_background(MAX_BACKGROUND);
        let _ = config.set_congestion_threshold(MAX_BACKGROUND * 3 / 4);
        Ok(())
    }

    fn lookup(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        if parent == ROOT_INO && name == DEVICE_FILE {
            reply.entry(&ATTR_TTL, &self.attr(FILE_INO), 0);
        } else {
            reply.error(libc::ENOENT);
        }
    }

    fn getattr(&mut self, _req: &Request<'_>, ino: u64, _fh: Option<u64>, reply: ReplyAttr) {
        match ino {
            ROOT_INO | FILE_INO => reply.attr(&ATTR_TTL, &self.attr(ino)),
            _ => reply.error(libc::ENOENT),
        }
    }

    fn open(&mut self, _req: &Request<'_>, ino: u64, _flags: i32, reply: ReplyOpen) {
        if ino != FILE_INO {
            return reply.error(libc::EISDIR);
        }
        // no page cache at this layer: the filesystem on the loop device
        // above has its own, and a second copy would hide the latency
        reply.opened(0, fuser::consts::FOPEN_DIRECT_IO);
    }

    fn read(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        size: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyData,
    ) {
        let (FILE_INO, Ok(offset)) = (ino, u64::try_from(offset)) else {
            return reply.error(libc::EINVAL);
        };
        let req = ReadRequest {
            offset,
            size,
            arrived: Instant::now(),
            reply,
        };
        if let Err(mpsc::SendError(req)) = self.requests.send(req) {
            req.reply.error(libc::EIO);
        }
    }

    fn write(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        data: &[u8],
        _write_flags: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyWrite,
    ) {
        let (FILE_INO, Ok(offset), Ok(written)) =
            (ino, u64::try_from(offset), u32::try_from(data.len()))
        else {
            return reply.error(libc::EINVAL);
        };
        let end = offset + data.len() as u64;
        if end > self.size.load(Ordering::SeqCst) {
            // a device does not grow
            return reply.error(libc::ENOSPC);
        }
        match self.backing.write_all_at(data, offset) {
            Ok(()) => reply.written(written),
            Err(e) => reply.error(e.raw_os_error().unwrap_or(libc::EIO)),
        }
    }

    fn flush(&mut self, _req: &Request<'_>, _ino: u64, _fh: u64, _lo: u64, reply: ReplyEmpty) {
        reply.ok();
    }

    fn fsync(&mut self, _req: &Request<'_>, _ino: u64, _fh: u64, _ds: bool, reply: ReplyEmpty) {
        match self.backing.sync_data() {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e.raw_os_error().unwrap_or(libc::EIO)),
        }
    }

    fn fallocate(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        length: i64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        // the loop device turns discards into hole punches: pass them on,
        // so the sparse backing file shrinks with the tier
        if ino != FILE_INO {
            return reply.error(libc::EINVAL);
        }
        // SAFETY: plain syscall on a descriptor this process owns.
        let r = unsafe {
            libc::fallocate(
                std::os::fd::AsRawFd::as_raw_fd(&*self.backing),
                mode,
                offset,
                length,
            )
        };
        if r == 0 {
            reply.ok()
        } else {
            reply.error(
                std::io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::EIO),
            )
        }
    }

    fn readdir(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        mut reply: ReplyDirectory,
    ) {
        if ino != ROOT_INO {
            return reply.error(libc::ENOTDIR);
        }
        let entries = [
            (ROOT_INO, FileType::Directory, "."),
            (ROOT_INO, FileType::Directory, ".."),
            (FILE_INO, FileType::RegularFile, DEVICE_FILE),
        ];
        let skip = usize::try_from(offset).unwrap_or(0);
        for (next, (ino, kind, name)) in (1i64..).zip(&entries).skip(skip) {
            if reply.add(*ino, next, *kind, name) {
                break;
            }
        }
        reply.ok();
    }
}

/// Where the device's recent requests ended; a request starting at one of
/// them continues a stream.
#[derive(Default)]
struct Streams(Mutex<VecDeque<u64>>);

impl Streams {
    /// Records the request [offset, offset + len); true when it continues
    /// a recent one.
    fn continues(&self, offset: u64, len: u64) -> bool {
        let mut ends = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let hit = ends.iter().position(|&e| e == offset);
        if let Some(i) = hit {
            ends.remove(i);
        }
        if ends.len() == RECENT_ENDS {
            ends.pop_front();
        }
        ends.push_back(offset + len);
        hit.is_some()
    }
}

/// One channel of the device: serves requests one at a time.
fn channel(
    backing: Arc<File>,
    queue: Arc<Mutex<mpsc::Receiver<ReadRequest>>>,
    streams: Arc<Streams>,
    timing: Timing,
) {
    loop {
        let next = queue.lock().map(|q| q.recv());
        let Ok(Ok(req)) = next else { return };
        while STALLED.load(Ordering::SeqCst) && req.arrived.elapsed() < timing.io_timeout {
            std::thread::sleep(STALL_POLL);
        }
        if STALLED.load(Ordering::SeqCst) {
            req.reply.error(libc::EIO);
            continue;
        }
        let start = Instant::now();
        // known at pickup, so a stream's next request finds it while this
        // one is still being served
        let sequential = streams.continues(req.offset, req.size as u64);
        let mut buf = vec![0u8; req.size as usize];
        let n = match read_full_at(&backing, &mut buf, req.offset) {
            Ok(n) => n,
            Err(e) => {
                req.reply.error(e.raw_os_error().unwrap_or(libc::EIO));
                continue;
            }
        };
        if !sequential {
            wait_until(start + timing.access_latency);
        }
        req.reply.data(&buf[..n]);
    }
}

/// Sleeps until `due`, spinning the last [`SPIN`] of it: a sleeping thread
/// wakes about 20 us late on this VM even with no timer slack (and 50 us
/// later with the default slack, which [`serve`] turns off), so a 10 us
/// access (the NVMe profile) slept whole took 30-90 us.
fn wait_until(due: Instant) {
    let now = Instant::now();
    if due > now + SPIN {
        std::thread::sleep(due - now - SPIN);
    }
    while Instant::now() < due {
        std::hint::spin_loop();
    }
}

fn read_full_at(f: &File, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match f.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

fn install_stall_signals() -> Result<()> {
    for (sig, handler) in [
        (libc::SIGUSR1, on_stall as extern "C" fn(libc::c_int)),
        (libc::SIGUSR2, on_resume as extern "C" fn(libc::c_int)),
    ] {
        // SAFETY: a zeroed sigaction is a valid starting value; the handlers
        // only store to an atomic, which is async-signal-safe.
        let r = unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = handler as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut())
        };
        if r != 0 {
            let e = std::io::Error::last_os_error();
            return Err(Context::new("installing the stall signals", e).into());
        }
    }
    Ok(())
}

/// Serves the device at `mountpoint` until it is unmounted.
pub fn serve(backing: &Path, mountpoint: &Path, name: &str, timing: Timing) -> Result<()> {
    install_stall_signals()?;
    // sleep to the microsecond, not the default 50 us timer slack (the
    // channels below inherit it): an NVMe access is 10 us
    // SAFETY: prctl on this thread with an integer argument.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1u64) };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(backing)
        .with_context(|| format!("opening {}", backing.display()))?;
    let size = Arc::new(AtomicU64::new(file.metadata()?.size()));
    let backing = Arc::new(file);
    let (tx, rx) = mpsc::channel();
    let rx = Arc::new(Mutex::new(rx));
    let streams = Arc::new(Streams::default());
    for _ in 0..timing.queue_depth.max(1) {
        let (b, q, st) = (backing.clone(), rx.clone(), streams.clone());
        std::thread::spawn(move || channel(b, q, st, timing));
    }
    // SAFETY: getuid/getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let fs = LatencyFs {
        backing,
        size,
        requests: tx,
        uid,
        gid,
    };
    let opts = [
        MountOption::FSName(name.to_string()),
        MountOption::Subtype("thaw-latency".into()),
        MountOption::NoDev,
        MountOption::NoSuid,
        MountOption::NoExec,
        MountOption::NoAtime,
    ];
    fuser::mount2(fs, mountpoint, &opts)
        .with_context(|| format!("serving the latency device at {}", mountpoint.display()))?;
    Ok(())
}

/// The file a tier's loop device attaches to, under the FUSE mount.
pub fn device_path(mountpoint: &Path) -> PathBuf {
    mountpoint.join(DEVICE_FILE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_never_end_early() {
        // spun only (shorter than SPIN), and slept then spun
        for us in [0, 5, 10, 40, 180] {
            let due = Instant::now() + Duration::from_micros(us);
            wait_until(due);
            assert!(Instant::now() >= due, "{us} us wait ended early");
        }
        // a due time already past returns at once
        wait_until(Instant::now() - Duration::from_millis(1));
    }
}
