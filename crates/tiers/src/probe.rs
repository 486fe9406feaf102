//! `thaw tier probe`: a tier's sequential read bandwidth and 4 KiB random
//! read latency, measured from every kind of reader a restore has:
//! - `direct`: O_DIRECT reads (the page cache out of the way), as the
//!   worker's REAP read, from the worker and from a process in fresh memory
//!   and pids cgroups the way a sandbox is;
//! - `faults`: page faults on a mapping of the file (the `mmap` strategy's
//!   reads), with the device's readahead as it is set;
//! - `faults-random`: the same with `MADV_RANDOM` (one page per fault);
//! - `buffered`: 4 KiB `pread`s through the page cache (the restorer's
//!   copies of private file pages).
//!
//! Every reader must see the tier's throttle and latency. Besides the time
//! per read, each reports the bytes the device served per read (from the
//! device's own counters), which shows readahead at work.
use crate::error::{Result, TiersError};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Instant;
use thaw_error::fail;
use thaw_error::{Context, ResultExt};
use thaw_memory::usize_of;

const ALIGN: usize = 4096;
const SEQ_CHUNK: usize = 1 << 20;
/// Pause before each timed phase: blkio throttling accounts in slices of up
/// to 100 ms, and a phase must not pay for (or profit from) the last one.
const SETTLE: std::time::Duration = std::time::Duration::from_millis(250);
/// Each timed phase runs at least this long (passes over the file repeat),
/// so the throttle's up-front slice budget is a small part of it.
const PHASE: std::time::Duration = std::time::Duration::from_secs(1);
/// Bytes a page-at-a-time sequential phase reads.
const SEQ_CACHED: usize = 16 << 20;
/// Bound on random reads per phase.
const MAX_RAND_READS: usize = 50_000;

/// Where `thaw tier probe` leaves its measurements (in the home).
pub const PROBE_FILE: &str = "tier-probes.json";

/// The tiers' measured profiles, by tier name (empty if never probed).
pub fn load(home: &Path) -> std::collections::BTreeMap<String, Vec<ReaderResult>> {
    std::fs::read(home.join(PROBE_FILE))
        .ok()
        .and_then(|raw| serde_json::from_slice(&raw).ok())
        .unwrap_or_default()
}

/// What one reader measured on one file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReaderResult {
    /// "worker" or "sandbox-cgroup"
    pub reader: String,
    /// the reader's blkio cgroup ("/" is the root, where the throttle is)
    pub blkio_cgroup: String,
    /// false where the filesystem refused O_DIRECT (tmpfs): cached reads
    pub direct: bool,
    pub seq_read_mbps: f64,
    pub rand_reads: usize,
    pub rand_read_4k_us_mean: f64,
    pub rand_read_4k_us_median: f64,
    pub rand_read_4k_us_p99: f64,
    /// KiB the device read per random read (its sysfs counters; absent
    /// where the file is on no block device)
    #[serde(default)]
    pub device_kib_per_read: Option<f64>,
    /// page-fault readers: one more mapping of the file over part of a
    /// mapped region, as a restore maps each run of a split snapshot, µs
    #[serde(default)]
    pub map_us: Option<f64>,
}

/// The kinds of reader `measure_kind` runs.
pub const READER_KINDS: [&str; 4] = ["direct", "faults", "faults-random", "buffered"];

/// A buffer aligned for O_DIRECT.
struct Aligned {
    ptr: *mut u8,
    len: usize,
}

impl Aligned {
    fn new(len: usize) -> Aligned {
        let layout = std::alloc::Layout::from_size_align(len, ALIGN).expect("valid layout");
        // SAFETY: the layout has a non-zero size; a null return is handled.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        Aligned { ptr, len }
    }

    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: ptr points to len initialised bytes owned by self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Aligned {
    fn drop(&mut self) {
        let layout = std::alloc::Layout::from_size_align(self.len, ALIGN).expect("valid layout");
        // SAFETY: allocated in new() with this layout.
        unsafe { std::alloc::dealloc(self.ptr, layout) };
    }
}

/// Writes the probe file (`mib` MiB of non-zero data) and syncs it.
pub fn write_probe_file(path: &Path, mib: usize) -> Result<()> {
    if mib == 0 {
        fail!(TiersError::Failed, "the probe file must be at least 1 MiB");
    }
    let mut f =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut chunk = vec![0u8; SEQ_CHUNK];
    for (i, b) in chunk.iter_mut().enumerate() {
        #[allow(clippy::cast_possible_truncation)] // a byte pattern: the low byte is the point
        let byte = (i * 131 + 7) as u8;
        *b = byte;
    }
    for _ in 0..mib {
        f.write_all(&chunk)?;
    }
    f.sync_all()?;
    thaw_store::drop_file_cache(path)?;
    Ok(())
}

fn open_direct(path: &Path) -> Result<(std::fs::File, bool)> {
    match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
    {
        Ok(f) => Ok((f, true)),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            let f = std::fs::File::open(path)?;
            Ok((f, false))
        }
        Err(e) => Err(Context::new(format!("opening {}", path.display()), e).into()),
    }
}

/// Measures one file from this process.
pub fn measure(path: &Path, rand_reads: usize, reader: &str) -> Result<ReaderResult> {
    use std::os::unix::fs::FileExt;
    let (f, direct) = open_direct(path)?;
    let len = usize_of(f.metadata()?.len());
    if len < SEQ_CHUNK {
        fail!(
            TiersError::Failed,
            "probe file {} is shorter than 1 MiB",
            path.display()
        );
    }
    thaw_store::drop_file_cache(path)?;
    let mut buf = Aligned::new(SEQ_CHUNK);
    std::thread::sleep(SETTLE);
    let t0 = Instant::now();
    let mut total = 0usize;
    while total == 0 || t0.elapsed() < PHASE {
        let mut off = 0usize;
        while off + SEQ_CHUNK <= len {
            let n = f.read_at(buf.as_mut(), off as u64)?;
            if n == 0 {
                break;
            }
            off += n;
        }
        total += off;
        if !direct {
            thaw_store::drop_file_cache(path)?;
        }
    }
    let seq_read_mbps = total as f64 / t0.elapsed().as_secs_f64() / 1e6;
    thaw_store::drop_file_cache(path)?;
    // a fixed-seed LCG: the same offsets for every reader
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let pages = (len / ALIGN) as u64;
    let mut lat = Vec::with_capacity(rand_reads);
    let mut one = Aligned::new(ALIGN);
    std::thread::sleep(SETTLE);
    let sectors = device_sectors_read(path);
    let t1 = Instant::now();
    while lat.len() < rand_reads || (t1.elapsed() < PHASE && lat.len() < MAX_RAND_READS) {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let page = (x >> 33) % pages;
        let t = Instant::now();
        let n = f.read_at(one.as_mut(), page * ALIGN as u64)?;
        lat.push(t.elapsed().as_secs_f64() * 1e6);
        if n != ALIGN {
            fail!(
                TiersError::Failed,
                "short read of {n} bytes from {}",
                path.display()
            );
        }
    }
    let after = device_sectors_read(path);
    let mut r = summarize_reads(reader, direct, seq_read_mbps, lat);
    r.device_kib_per_read = sectors
        .zip(after)
        .map(|(a, b)| (b - a) as f64 * 512.0 / 1024.0 / r.rand_reads as f64);
    Ok(r)
}

/// Sectors the block device holding `path` has read so far (its sysfs
/// `stat`), if the file is on one.
fn device_sectors_read(path: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    let dev = thaw_store::block_device_dir(std::fs::metadata(path).ok()?.dev())?;
    let stat = std::fs::read_to_string(dev.join("stat")).ok()?;
    stat.split_whitespace().nth(2)?.parse().ok()
}

/// The same random pages as `measure`, read by page faults on a shared
/// read-only mapping (`random`: with `MADV_RANDOM`) or by buffered 4 KiB
/// `pread`s; sequential bandwidth by touching every page in order.
fn measure_cached(path: &Path, rand_reads: usize, kind: &str) -> Result<ReaderResult> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let len = usize_of(f.metadata()?.len());
    if len < SEQ_CHUNK {
        fail!(
            TiersError::Failed,
            "probe file {} is shorter than 1 MiB",
            path.display()
        );
    }
    let map = |advice: libc::c_int| -> Result<*const u8> {
        // a fresh read-only shared mapping of a file this function holds
        // open; only read through, and unmapped before returning
        let p = map_read(&f, std::ptr::null_mut(), len, libc::MAP_SHARED, 0)
            .map_err(|e| Context::new("mapping the probe file", e))?;
        // SAFETY: advice on the mapping just made.
        unsafe { libc::madvise(p, len, advice) };
        Ok(p as *const u8)
    };
    let unmap = |p: *const u8| {
        // SAFETY: p and len are the mapping made by `map`, used no more.
        unsafe { libc::munmap(p as *mut libc::c_void, len) };
    };
    let advice = if kind == "faults-random" {
        libc::MADV_RANDOM
    } else {
        libc::MADV_NORMAL
    };
    // sequential: every page of the first SEQ_CACHED bytes once, in order
    // (a page at a time is slow without readahead)
    let seq_len = len.min(SEQ_CACHED);
    thaw_store::drop_file_cache(path)?;
    std::thread::sleep(SETTLE);
    let t0 = Instant::now();
    let mut sum = 0u64;
    if kind == "buffered" {
        let mut buf = vec![0u8; ALIGN];
        for off in (0..seq_len).step_by(ALIGN) {
            f.read_exact_at(&mut buf, off as u64)?;
            sum += buf[0] as u64;
        }
    } else {
        let p = map(advice)?;
        for off in (0..seq_len).step_by(ALIGN) {
            // SAFETY: off < len, inside the mapping.
            sum += unsafe { std::ptr::read_volatile(p.add(off)) } as u64;
        }
        unmap(p);
    }
    let seq_read_mbps = seq_len as f64 / t0.elapsed().as_secs_f64() / 1e6;
    thaw_store::drop_file_cache(path)?;
    let p = if kind == "buffered" {
        std::ptr::null()
    } else {
        map(advice)?
    };
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let pages = (len / ALIGN) as u64;
    let mut lat = Vec::with_capacity(rand_reads);
    let mut buf = vec![0u8; ALIGN];
    std::thread::sleep(SETTLE);
    let sectors = device_sectors_read(path);
    for _ in 0..rand_reads {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let off = ((x >> 33) % pages) as usize * ALIGN;
        let t = Instant::now();
        if p.is_null() {
            f.read_exact_at(&mut buf, off as u64)?;
            sum += buf[0] as u64;
        } else {
            // SAFETY: off < len, inside the mapping.
            sum += unsafe { std::ptr::read_volatile(p.add(off)) } as u64;
        }
        lat.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let after = device_sectors_read(path);
    if !p.is_null() {
        unmap(p);
    }
    std::hint::black_box(sum);
    let mut r = summarize_reads(kind, false, seq_read_mbps, lat);
    if kind != "buffered" {
        r.map_us = Some(mapping_us(&f, len)?);
    }
    r.device_kib_per_read = sectors
        .zip(after)
        .map(|(a, b)| (b - a) as f64 * 512.0 / 1024.0 / rand_reads as f64);
    Ok(r)
}

/// One kind of reader (`READER_KINDS`) on one file from this process.
pub fn measure_kind(path: &Path, rand_reads: usize, kind: &str) -> Result<ReaderResult> {
    match kind {
        "direct" => measure(path, rand_reads, kind),
        "faults" | "faults-random" | "buffered" => measure_cached(path, rand_reads, kind),
        _ => fail!(
            TiersError::Failed,
            "unknown reader kind {kind:?} ({})",
            READER_KINDS.join(", ")
        ),
    }
}

// float casts saturate (NaN, negatives to 0): the clamp wanted
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn summarize_reads(
    reader: &str,
    direct: bool,
    seq_read_mbps: f64,
    mut lat: Vec<f64>,
) -> ReaderResult {
    let mean = lat.iter().sum::<f64>() / lat.len().max(1) as f64;
    lat.sort_by(f64::total_cmp);
    let pct = |p: f64| -> f64 {
        if lat.is_empty() {
            return 0.0;
        }
        lat[((lat.len() - 1) as f64 * p).round() as usize]
    };
    ReaderResult {
        reader: reader.into(),
        blkio_cgroup: cgroup_of("self", "blkio"),
        direct,
        seq_read_mbps,
        rand_reads: lat.len(),
        rand_read_4k_us_mean: mean,
        rand_read_4k_us_median: pct(0.5),
        rand_read_4k_us_p99: pct(0.99),
        device_kib_per_read: None,
        map_us: None,
    }
}

/// Mappings `mapping_us` times.
const MAP_PROBES: usize = 512;

/// One `mmap(MAP_FIXED)` of a page of `f` over a region mapped from it, at
/// a file offset that keeps it from merging with its neighbours (as a
/// split snapshot's runs alternate between two files), mean µs.
fn mapping_us(f: &std::fs::File, len: usize) -> Result<f64> {
    let pages = MAP_PROBES * 2;
    if len < pages * ALIGN {
        fail!(TiersError::Failed, "probe file shorter than {pages} pages");
    }
    let span = pages * ALIGN;
    // a private read-only mapping of a file held open; the fixed mappings
    // below stay inside it, and it is unmapped before returning
    let base = map_read(f, std::ptr::null_mut(), span, libc::MAP_PRIVATE, 0)
        .map_err(|e| Context::new("mapping the probe file", e))?;
    let t0 = Instant::now();
    let mut failed = None;
    for i in 0..MAP_PROBES {
        // every other page, from the far end of the file: no two merge
        let at = (base as usize + 2 * i * ALIGN) as *mut libc::c_void;
        let off = (len / ALIGN - 1 - i) * ALIGN;
        let fixed = libc::MAP_PRIVATE | libc::MAP_FIXED;
        if let Err(e) = map_read(f, at, ALIGN, fixed, off) {
            failed = Some(e);
            break;
        }
    }
    let us = t0.elapsed().as_secs_f64() * 1e6 / MAP_PROBES as f64;
    // SAFETY: the whole span mapped above, used no more.
    unsafe { libc::munmap(base, span) };
    match failed {
        Some(e) => Err(Context::new("mapping a page of the probe file", e).into()),
        None => Ok(us),
    }
}

/// `mmap` of `len` bytes of `f` at `off`, read-only, with `flags`, at
/// `addr` (a hint, or with `MAP_FIXED` the place: the caller's own mapping).
fn map_read(
    f: &std::fs::File,
    addr: *mut libc::c_void,
    len: usize,
    flags: libc::c_int,
    off: usize,
) -> std::io::Result<*mut libc::c_void> {
    let fd = std::os::fd::AsRawFd::as_raw_fd(f);
    let off = libc::off_t::try_from(off).map_err(std::io::Error::other)?;
    // SAFETY: a read-only mapping of an open file; with MAP_FIXED the
    // callers pass pages of a mapping they made and own, where nothing
    // else lives.
    let p = unsafe { libc::mmap(addr, len, libc::PROT_READ, flags, fd, off) };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    Ok(p)
}

/// A process's ("self" or a pid) cgroup in one v1 hierarchy.
pub fn cgroup_of(pid: &str, ctrl: &str) -> String {
    let tag = format!(":{ctrl}:");
    std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.split_once(tag.as_str()).map(|(_, p)| p.to_string()))
        })
        .unwrap_or_else(|| "?".into())
}

/// Child blkio cgroups that hold tasks: readers there escape a throttle set
/// in the root group (cgroup v1 throttling is flat).
pub fn blkio_escapees() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                let busy = std::fs::read_to_string(p.join("tasks"))
                    .map(|s| !s.trim().is_empty())
                    .unwrap_or(false);
                if busy {
                    out.push(p.clone());
                }
                walk(&p, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(Path::new("/sys/fs/cgroup/blkio"), &mut out);
    out
}

/// Runs `reader` (a command that waits for one line on stdin, then measures
/// and prints one JSON `ReaderResult`) inside fresh cgroups made like a
/// sandbox's, given by their `cgroup.procs` files (the caller makes and
/// removes them: this crate knows tiers, not sandboxes).
pub fn measure_in_sandbox_cgroups(
    mut reader: std::process::Command,
    procs_files: &[PathBuf],
) -> Result<ReaderResult> {
    use std::process::Stdio;
    let mut child = reader
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("starting the probe reader")?;
    let pid = child.id().to_string();
    let placed = procs_files.iter().try_for_each(|f| {
        std::fs::write(f, &pid).with_context(|| format!("writing {}", f.display()))
    });
    if let Err(e) = placed {
        let _ = child.kill();
        let _ = child.wait();
        return Err(e.into());
    }
    if let Some(mut stdin) = child.stdin.take() {
        writeln!(stdin)?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        fail!(
            TiersError::Failed,
            "the probe reader failed ({})",
            out.status
        );
    }
    Ok(serde_json::from_slice(&out.stdout).context("parsing the probe reader's result")?)
}

/// The reader side of `measure_in_sandbox_cgroups`: waits for the go line.
pub fn reader_main(path: &Path, rand_reads: usize, kind: &str) -> Result<()> {
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    let mut r = measure_kind(path, rand_reads, kind)?;
    r.reader = format!(
        "sandbox-cgroup {kind} (memory {})",
        cgroup_of("self", "memory")
    );
    thaw_output::outln!("{}", serde_json::to_string(&r)?);
    Ok(())
}

/// The remote tier's profile from the worker: sequential bandwidth is one
/// GET of a `mib` MiB sealed object (opening included, as a restore pays
/// it); access latency is one round trip (HEAD), `reads` times.
pub fn measure_remote(
    store: &crate::objects::RemoteStore,
    mib: usize,
    reads: usize,
) -> Result<ReaderResult> {
    if mib == 0 {
        fail!(
            TiersError::Failed,
            "the probe object must be at least 1 MiB"
        );
    }
    let name = format!(".probe-{}", std::process::id());
    // random bytes, sealed as an image is (uncompressed, by range): what
    // the link carries, not what LZ4 makes of a pattern
    let mut data = vec![0u8; mib << 20];
    crate::seal::random(&mut data)?;
    store.put_chunked(&name, &data, crate::seal::CHUNK)?;
    let measured = (|| -> Result<ReaderResult> {
        let mut total = 0usize;
        let t0 = Instant::now();
        while total == 0 || t0.elapsed() < PHASE {
            let back = store.get(&name, data.len() as u64)?;
            if back != data {
                fail!(TiersError::Failed, "the probe object came back different");
            }
            total += back.len();
        }
        let seq_read_mbps = total as f64 / t0.elapsed().as_secs_f64() / 1e6;
        let mut lat = Vec::with_capacity(reads);
        let t1 = Instant::now();
        while lat.len() < reads || (t1.elapsed() < PHASE && lat.len() < MAX_RAND_READS) {
            let t = Instant::now();
            if !store.exists(&name)? {
                fail!(TiersError::Failed, "the probe object vanished");
            }
            lat.push(t.elapsed().as_secs_f64() * 1e6);
        }
        Ok(summarize_reads(
            "worker (S3 GET; HEAD round trips)",
            false,
            seq_read_mbps,
            lat,
        ))
    })();
    let _ = store.delete(&name);
    measured
}
