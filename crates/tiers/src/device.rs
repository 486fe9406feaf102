//! The emulated devices behind the tiers this machine lacks, and their
//! teardown. Both are idempotent and find what an interrupted run left.
//!
//! - `pmem` (emulated): a size-limited tmpfs, which like DAX-mapped
//!   persistent memory is mapped without a page-cache copy.
//! - `block` (emulated): a sparse file on the real disk, served through the
//!   latency layer (`latency.rs`: a FUSE file that answers each request
//!   after the profile's access latency), attached to a loop device with
//!   direct I/O (so no layer below the tier's filesystem keeps a page
//!   cache), an ext4 filesystem on it, and cgroup v1 blkio bandwidth
//!   throttles on the loop device set from the tier's device profile.
//!
//! The throttles go into the root blkio cgroup. Under cgroup v1 blkio
//! throttling is flat: a rule limits the tasks of the cgroup it is written
//! in, together. thaw's worker and its sandboxes never leave the root blkio
//! cgroup (sandboxes get memory and pids groups only), so the worker's REAP
//! read, the sandbox's page faults, the restorer's copies and writeback all
//! share the one limit. A task some other program places in a child blkio
//! cgroup would escape it; `probe` reports any such cgroup. This kernel has
//! no device-mapper, nbd or ublk, which would allow a limit at the device.
use crate::config::{Kind, TierConfig, TIERS_DIR};
use crate::error::{Result, TiersError};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use thaw_error::fail;
use thaw_error::{Context, ResultExt};

const BLKIO_ROOT: &str = "/sys/fs/cgroup/blkio";
/// The kernel's readahead for a block device (128 KiB).
const DEFAULT_READ_AHEAD_KB: u32 = 128;
const THROTTLE_FILES: [&str; 4] = [
    "blkio.throttle.read_bps_device",
    "blkio.throttle.read_iops_device",
    "blkio.throttle.write_bps_device",
    "blkio.throttle.write_iops_device",
];

/// What `setup`/`status` found or made for one tier.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DeviceState {
    pub tier: String,
    pub ready: bool,
    /// e.g. "/dev/loop3 (7:3), ext4, direct I/O, blkio read 500 MB/s"
    pub detail: String,
    /// the block device number, for block tiers that are attached
    pub devno: Option<(u32, u32)>,
}

/// Runs a tool, returning its stdout; the error names the command and its stderr.
pub(crate) fn run(prog: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(prog).args(args).output().with_context(|| {
        format!("running {prog} (is it installed? scripts/setup.sh installs it)")
    })?;
    if !out.status.success() {
        fail!(
            TiersError::Device,
            "{prog} {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn devices_dir(home: &Path) -> PathBuf {
    home.join(TIERS_DIR).join(".devices")
}

/// The sparse file behind an emulated block tier.
pub fn backing_file(home: &Path, tier: &str) -> PathBuf {
    devices_dir(home).join(format!("{tier}.img"))
}

/// Where a block tier's latency layer is mounted.
fn latency_mount(home: &Path, tier: &str) -> PathBuf {
    devices_dir(home).join(format!("{tier}.latency"))
}

fn latency_pid_file(home: &Path, tier: &str) -> PathBuf {
    devices_dir(home).join(format!("{tier}.latency.pid"))
}

/// The file a block tier's loop device is attached to.
pub fn loop_file(home: &Path, tier: &str) -> PathBuf {
    crate::latency::device_path(&latency_mount(home, tier))
}

/// The device timing a block tier's latency layer emulates.
pub fn timing(t: &TierConfig) -> crate::latency::Timing {
    crate::latency::Timing {
        access_latency: std::time::Duration::from_secs_f64(t.profile.rand_read_4k_us / 1e6),
        queue_depth: t.profile.queue_depth.unwrap_or(1) as usize,
        io_timeout: std::time::Duration::from_secs(t.request_timeout_s.unwrap_or(30)),
    }
}

/// The latency layer's process, if it is alive and ours (its command line
/// names its mount point, so a reused pid is never signalled).
pub fn latency_pid(home: &Path, tier: &str) -> Option<i32> {
    let pid: i32 = std::fs::read_to_string(latency_pid_file(home, tier))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let mp = latency_mount(home, tier);
    String::from_utf8_lossy(&cmd)
        .contains(mp.to_string_lossy().as_ref())
        .then_some(pid)
}

/// Stalls (every request held, failing with EIO after the I/O timeout) or
/// resumes a block tier's emulated device.
pub fn stall(home: &Path, t: &TierConfig, on: bool) -> Result<()> {
    if !(t.kind == Kind::Block && t.emulated) {
        fail!(
            TiersError::Config,
            "tier {}: only an emulated block device can be stalled",
            t.name
        );
    }
    let Some(pid) = latency_pid(home, &t.name) else {
        fail!(
            TiersError::Device,
            "tier {}: its device is not set up",
            t.name
        );
    };
    let sig = if on { libc::SIGUSR1 } else { libc::SIGUSR2 };
    // SAFETY: a plain signal to the latency process, checked by its command line.
    if unsafe { libc::kill(pid, sig) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(Context::new("signalling the latency layer", e).into());
    }
    Ok(())
}

/// Starts the latency layer over the backing file (the `thaw` binary,
/// `thaw tier latency-device`, in its own session) and waits for its mount.
fn start_latency_layer(home: &Path, t: &TierConfig, img: &Path) -> Result<PathBuf> {
    let mp = latency_mount(home, &t.name);
    if mounted_source(&mp)?.is_some() {
        if latency_pid(home, &t.name).is_some() {
            return Ok(mp);
        }
        // its server died: the mount is dead, clear it and start again
        let _ = run("umount", &["-l", &path_str(&mp)?]);
    }
    // (the mounted root is the latency layer's, which takes no chmod)
    mkdir_private(&mp)?;
    let tm = timing(t);
    let exe = std::env::current_exe().context("locating the thaw binary")?;
    let log = std::fs::File::create(devices_dir(home).join(format!("{}.latency.log", t.name)))?;
    let mut cmd = Command::new(exe);
    cmd.args(["tier", "latency-device", "--backing"])
        .arg(img)
        .arg("--mount")
        .arg(&mp)
        .args([
            "--name",
            &format!("thaw-{}", t.name),
            "--latency-ns",
            &tm.access_latency.as_nanos().to_string(),
            "--queue-depth",
            &tm.queue_depth.to_string(),
            "--io-timeout-ms",
            &tm.io_timeout.as_millis().to_string(),
        ])
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    in_own_session(&mut cmd);
    let mut child = cmd.spawn().context("starting the latency layer")?;
    std::fs::write(latency_pid_file(home, &t.name), child.id().to_string())?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while mounted_source(&mp)?.is_none() {
        if let Some(st) = child.try_wait()? {
            fail!(
                TiersError::Device,
                "the latency layer exited at start ({st}; log: {})",
                devices_dir(home)
                    .join(format!("{}.latency.log", t.name))
                    .display()
            );
        }
        if std::time::Instant::now() > deadline {
            fail!(
                TiersError::Device,
                "the latency layer did not mount {} within 10 s",
                mp.display()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // it outlives this command and is reaped by init
    std::mem::forget(child);
    Ok(mp)
}

/// Makes `cmd` start in a session of its own, so that it outlives the
/// command that starts it and no terminal signal reaches it.
pub(crate) fn in_own_session(cmd: &mut Command) {
    // SAFETY: setsid is async-signal-safe and touches no memory.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(cmd, || {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Unmounts the latency layer (its server then exits) and waits for its process.
fn stop_latency_layer(home: &Path, tier: &str) -> Result<()> {
    let mp = latency_mount(home, tier);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while mounted_source(&mp)?.is_some() {
        // a just-detached loop device may hold the file a moment longer
        match run("umount", &[&path_str(&mp)?]) {
            Ok(_) => {}
            Err(e) if std::time::Instant::now() > deadline => {
                return Err(Context::new("unmounting the latency layer", e).into())
            }
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(50)),
        }
    }
    if let Some(pid) = latency_pid(home, tier) {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while Path::new(&format!("/proc/{pid}")).exists() && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        if latency_pid(home, tier).is_some() {
            // SAFETY: a plain signal to our latency process (checked by command line).
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
    let _ = std::fs::remove_file(latency_pid_file(home, tier));
    let _ = std::fs::remove_file(devices_dir(home).join(format!("{tier}.latency.log")));
    remove_dir_if_present(&mp)
}

/// Mount points from /proc/self/mountinfo (octal escapes decoded), with the
/// mount source.
fn mounts() -> Result<Vec<(PathBuf, String)>> {
    let raw = std::fs::read_to_string("/proc/self/mountinfo")?;
    let unescape = |s: &str| -> String {
        let b = s.as_bytes();
        let mut out = Vec::with_capacity(b.len());
        let mut i = 0;
        while i < b.len() {
            if b[i] == b'\\' && i + 3 < b.len() {
                if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 4], 8) {
                    out.push(v);
                    i += 4;
                    continue;
                }
            }
            out.push(b[i]);
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    };
    Ok(raw
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let sep = f.iter().position(|x| *x == "-")?;
            Some((
                PathBuf::from(unescape(f.get(4)?)),
                unescape(f.get(sep + 2)?),
            ))
        })
        .collect())
}

/// The source of the mount at `mp`, if something is mounted there.
pub fn mounted_source(mp: &Path) -> Result<Option<String>> {
    Ok(mounts()?
        .into_iter()
        .rev()
        .find(|(p, _)| p == mp)
        .map(|(_, s)| s))
}

/// Mount points under `dir` (for the leave-nothing-behind check).
pub fn mounts_under(dir: &Path) -> Result<Vec<PathBuf>> {
    Ok(mounts()?
        .into_iter()
        .map(|(p, _)| p)
        .filter(|p| p.starts_with(dir))
        .collect())
}

/// Loop devices whose backing file is `file`.
pub fn loops_backed_by(file: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir("/sys/block") else {
        return Ok(out);
    };
    let want = file.canonicalize().unwrap_or_else(|_| file.to_path_buf());
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with("loop") {
            continue;
        }
        if let Ok(b) = std::fs::read_to_string(e.path().join("loop/backing_file")) {
            let b = b.trim_end_matches('\n');
            // the kernel appends " (deleted)" when the file is gone
            let b = b.strip_suffix(" (deleted)").unwrap_or(b);
            if Path::new(b) == want || Path::new(b) == file {
                out.push(PathBuf::from("/dev").join(&name));
            }
        }
    }
    Ok(out)
}

fn devno(dev: &Path) -> Result<(u32, u32)> {
    let md = std::fs::metadata(dev).with_context(|| format!("stat {}", dev.display()))?;
    let rdev = md.rdev();
    Ok((libc::major(rdev), libc::minor(rdev)))
}

/// Throttle rules for `devno` in the root blkio cgroup, as (file, value).
pub fn throttle_rules(devno: (u32, u32)) -> Result<Vec<(String, u64)>> {
    let key = format!("{}:{}", devno.0, devno.1);
    let mut out = Vec::new();
    for f in THROTTLE_FILES {
        let p = Path::new(BLKIO_ROOT).join(f);
        let raw =
            std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
        for l in raw.lines() {
            let mut it = l.split_whitespace();
            if it.next() == Some(key.as_str()) {
                if let Some(v) = it.next().and_then(|v| v.parse().ok()) {
                    out.push((f.to_string(), v));
                }
            }
        }
    }
    Ok(out)
}

fn write_throttle(devno: (u32, u32), values: [u64; 4]) -> Result<()> {
    if !Path::new(BLKIO_ROOT).join(THROTTLE_FILES[0]).exists() {
        fail!(TiersError::Device, "cgroup v1 blkio throttling is not available at {BLKIO_ROOT} (needed to emulate block devices)");
    }
    for (f, v) in THROTTLE_FILES.iter().zip(values) {
        let p = Path::new(BLKIO_ROOT).join(f);
        std::fs::write(&p, format!("{}:{} {v}", devno.0, devno.1))
            .with_context(|| format!("writing {} ({}:{} {v})", p.display(), devno.0, devno.1))?;
    }
    Ok(())
}

fn mkdir_private(p: &Path) -> Result<()> {
    std::fs::create_dir_all(p).with_context(|| format!("creating {}", p.display()))?;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o700))?;
    Ok(())
}

/// Creates (or finds) the device behind one tier and leaves it ready.
/// Real (non-emulated) tiers are only checked.
pub fn setup(home: &Path, t: &TierConfig) -> Result<DeviceState> {
    match (t.kind, t.emulated) {
        (Kind::Pmem, true) => setup_pmem(home, t),
        (Kind::Block, true) => setup_block(home, t),
        (Kind::Remote, true) => crate::remote::setup(home, t),
        (Kind::Dram, true) => fail!(
            TiersError::Config,
            "tier {}: an emulated dram tier makes no sense",
            t.name
        ),
        _ => check_real(home, t),
    }
}

/// A random read at least this slow (us) is a mechanical seek: the device
/// is marked rotational.
const SEEK_US: f64 = 1000.0;

/// Removes what `setup` made for one tier; refuses while snapshots are on it
/// unless `force`.
pub fn teardown(home: &Path, t: &TierConfig, force: bool) -> Result<()> {
    if !t.emulated {
        return Ok(());
    }
    if let Some(root) = t.snapshot_root(home) {
        let n = count_entries(&root);
        if n > 0 && !force {
            fail!(TiersError::Busy,
                "tier {} holds {n} snapshot(s) under {}; move them off or pass --force to destroy them",
                t.name,
                root.display()
            );
        }
    }
    match t.kind {
        Kind::Pmem => teardown_mount(home, t),
        Kind::Block => teardown_block(home, t),
        Kind::Remote => crate::remote::teardown(home, t),
        Kind::Dram => Ok(()),
    }
}

/// Whether a tier's device is there, without changing anything.
pub fn status(home: &Path, t: &TierConfig) -> Result<DeviceState> {
    let mut st = DeviceState {
        tier: t.name.clone(),
        ready: false,
        detail: String::new(),
        devno: None,
    };
    match (t.kind, t.emulated) {
        (Kind::Remote, true) => return crate::remote::status(home, t),
        (Kind::Pmem | Kind::Block, true) => {
            let mp = TierConfig::mount_point(home, &t.name);
            match mounted_source(&mp)? {
                None => st.detail = "not set up (thaw tier setup)".into(),
                Some(src) => {
                    st.ready = true;
                    st.detail = format!("{src} on {}", mp.display());
                    if t.kind == Kind::Block {
                        let d = devno(Path::new(&src))?;
                        st.devno = Some(d);
                        st.detail += &describe_throttle(d)?;
                        let tm = timing(t);
                        match latency_pid(home, &t.name) {
                            Some(pid) => {
                                st.detail += &format!(
                                    ", latency layer pid {pid}: {:.0} us per access, queue depth {}, I/O timeout {} s",
                                    tm.access_latency.as_secs_f64() * 1e6,
                                    tm.queue_depth,
                                    tm.io_timeout.as_secs()
                                )
                            }
                            None => {
                                st.ready = false;
                                st.detail += ", LATENCY LAYER NOT RUNNING (thaw tier setup)";
                            }
                        }
                        let ra = read_ahead_file(Path::new(&src))
                            .ok()
                            .and_then(|f| std::fs::read_to_string(f).ok());
                        if let Some(ra) = ra {
                            st.detail += &format!(", readahead {} KiB", ra.trim());
                        }
                    }
                }
            }
        }
        _ => return check_real(home, t),
    }
    Ok(st)
}

fn describe_throttle(d: (u32, u32)) -> Result<String> {
    let rules = throttle_rules(d)?;
    let get = |f: &str| rules.iter().find(|(n, _)| n == f).map(|(_, v)| *v);
    Ok(match get(THROTTLE_FILES[0]) {
        Some(bps) => format!(", blkio throttle read {:.0} MB/s", bps as f64 / 1e6),
        None => ", NOT THROTTLED".into(),
    })
}

fn check_real(_home: &Path, t: &TierConfig) -> Result<DeviceState> {
    let (ready, detail) = match t.kind {
        Kind::Remote => (
            true,
            format!("{} (not checked)", t.url.as_deref().unwrap_or("")),
        ),
        _ => {
            let Some(root) = t.snapshot_root(_home) else {
                fail!(
                    TiersError::Config,
                    "tier {}: a local tier needs a path",
                    t.name
                );
            };
            // the tier's directory is created on first use: what exists of
            // its path must be a directory this process can write
            let anchor = root
                .ancestors()
                .find(|p| p.exists())
                .unwrap_or(Path::new("/"));
            let writable = anchor.is_dir() && writable(anchor);
            let detail = if writable {
                root.display().to_string()
            } else {
                format!("{} is not a writable directory", anchor.display())
            };
            (writable, detail)
        }
    };
    Ok(DeviceState {
        tier: t.name.clone(),
        ready,
        detail,
        devno: None,
    })
}

fn writable(p: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: c is a valid NUL-terminated path.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}

fn count_entries(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                .count()
        })
        .unwrap_or(0)
}

fn setup_pmem(home: &Path, t: &TierConfig) -> Result<DeviceState> {
    let mp = TierConfig::mount_point(home, &t.name);
    mkdir_private(&mp)?;
    // Persistent memory in fsdax mode maps files with 2 MiB pages where
    // they are aligned, as the DRAM tier's images are: a tmpfs of 4 KiB
    // pages would charge the slow tier faults the device does not take.
    if mounted_source(&mp)?.is_none() {
        let opts = format!(
            "size={},mode=0700,nodev,nosuid,huge=within_size",
            t.capacity_bytes
        );
        let src = format!("thaw-{}", t.name);
        run(
            "mount",
            &["-t", "tmpfs", "-o", &opts, &src, &path_str(&mp)?],
        )?;
    } else {
        // set up before huge pages were asked for
        run(
            "mount",
            &["-o", "remount,huge=within_size", &path_str(&mp)?],
        )?;
    }
    finish_mount(&mp, "a size-limited tmpfs with 2 MiB pages")?;
    status(home, t)
}

/// The snapshot directory and the marker by which the store labels the tier emulated.
fn finish_mount(mp: &Path, how: &str) -> Result<()> {
    std::fs::set_permissions(mp, std::fs::Permissions::from_mode(0o700))?;
    mkdir_private(&mp.join("snapshots"))?;
    std::fs::write(
        mp.join(thaw_store::EMULATED_MARKER),
        format!("emulated by thaw tier setup: {how}\n"),
    )?;
    Ok(())
}

fn path_str(p: &Path) -> Result<String> {
    match p.to_str() {
        Some(s) => Ok(s.into()),
        None => fail!(TiersError::Config, "path {} is not UTF-8", p.display()),
    }
}

fn setup_block(home: &Path, t: &TierConfig) -> Result<DeviceState> {
    let mp = TierConfig::mount_point(home, &t.name);
    let img = backing_file(home, &t.name);
    mkdir_private(&devices_dir(home))?;
    mkdir_private(&mp)?;
    let fresh = !img.exists();
    if fresh {
        // sparse: the disk holds only what the tier holds
        let f =
            std::fs::File::create(&img).with_context(|| format!("creating {}", img.display()))?;
        f.set_len(t.capacity_bytes)?;
        f.sync_all()?;
    }
    let lat = start_latency_layer(home, t, &img)?;
    let file = crate::latency::device_path(&lat);
    let dev = match loops_backed_by(&file)?.into_iter().next() {
        Some(d) => d,
        None => {
            let out = run(
                "losetup",
                &["--find", "--show", "--direct-io=on", &path_str(&file)?],
            )?;
            PathBuf::from(out.trim())
        }
    };
    let dev_s = path_str(&dev)?;
    let has_fs = run("blkid", &["-p", "-o", "value", "-s", "TYPE", &dev_s])
        .map(|s| s.trim() == "ext4")
        .unwrap_or(false);
    if !has_fs {
        // inode tables written now, not by a background thread during measurements
        run(
            "mkfs.ext4",
            &[
                "-q",
                "-F",
                "-m",
                "0",
                "-i",
                "1048576",
                "-E",
                "lazy_itable_init=0,lazy_journal_init=0",
                "-L",
                &format!("thaw-{}", t.name),
                &dev_s,
            ],
        )?;
    }
    match mounted_source(&mp)? {
        Some(src) if Path::new(&src) == dev => {}
        Some(src) => fail!(
            TiersError::Device,
            "{} is already mounted from {src}, not from the tier's device {}",
            mp.display(),
            dev.display()
        ),
        None => {
            run(
                "mount",
                &[
                    "-t",
                    "ext4",
                    "-o",
                    "noatime,nodev,nosuid",
                    &dev_s,
                    &path_str(&mp)?,
                ],
            )?;
        }
    }
    finish_mount(
        &mp,
        "loop device over a per-I/O latency layer (FUSE) over a sparse file, ext4, blkio throttle",
    )?;
    let d = devno(&dev)?;
    // absent: what the kernel gives a disk (VM_READAHEAD_PAGES); a loop
    // device over the latency layer would otherwise inherit 2-2.5 MiB from
    // its optimal I/O size, which no real SSD or HDD of the profiles has
    {
        let kb = configured_read_ahead_kb(t);
        let name = device_name(&dev)?;
        // a profile whose random read costs a seek says so, as a real disk
        // does, so readers can prefer fewer, larger requests (REAP's hints).
        // Before the readahead: changing it resets the queue's readahead.
        let rotational = if t.profile.rand_read_4k_us >= SEEK_US {
            "1"
        } else {
            "0"
        };
        let f = Path::new("/sys/block").join(name).join("queue/rotational");
        std::fs::write(&f, rotational).with_context(|| format!("writing {}", f.display()))?;
        let f = Path::new("/sys/block")
            .join(name)
            .join("queue/read_ahead_kb");
        std::fs::write(&f, kb.to_string()).with_context(|| format!("writing {}", f.display()))?;
    }
    // bandwidth only: the latency layer limits random reads per second
    // (queue depth / access latency), which an IOPS cap would count
    // against large sequential reads as well
    let p = &t.profile;
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // floats saturate
    let (read_bps, write_bps) = ((p.read_mbps * 1e6) as u64, (p.write_mbps * 1e6) as u64);
    write_throttle(d, [read_bps, 0, write_bps, 0])?;
    status(home, t)
}

fn teardown_mount(home: &Path, t: &TierConfig) -> Result<()> {
    let mp = TierConfig::mount_point(home, &t.name);
    while mounted_source(&mp)?.is_some() {
        run("umount", &[&path_str(&mp)?])
            .with_context(|| format!("tier {}: is a process still using it?", t.name))?;
    }
    remove_dir_if_present(&mp)
}

fn remove_dir_if_present(p: &Path) -> Result<()> {
    match std::fs::remove_dir_all(p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Context::new(format!("removing {}", p.display()), e).into()),
    }
}

fn teardown_block(home: &Path, t: &TierConfig) -> Result<()> {
    teardown_mount(home, t)?;
    let img = backing_file(home, &t.name);
    let saved = saved_read_ahead(home, &t.name);
    let mut devs = loops_backed_by(&loop_file(home, &t.name))?;
    // a device made before the latency layer existed sits on the file itself
    devs.extend(loops_backed_by(&img)?);
    for dev in devs {
        // rules stay with the device number, which the next loop user would inherit
        write_throttle(devno(&dev)?, [0; 4])?;
        if let Ok(kb) = std::fs::read_to_string(&saved) {
            std::fs::write(read_ahead_file(&dev)?, kb.trim())?;
        }
        run("losetup", &["--detach", &path_str(&dev)?])?;
    }
    let _ = std::fs::remove_file(&saved);
    stop_latency_layer(home, &t.name)?;
    match std::fs::remove_file(&img) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Context::new(format!("removing {}", img.display()), e).into()),
    }
    Ok(())
}

/// The readahead file (`/sys/block/loopN/queue/read_ahead_kb`) of an
/// emulated block tier that is set up.
fn tier_read_ahead_file(home: &Path, t: &TierConfig) -> Result<PathBuf> {
    if !(t.kind == Kind::Block && t.emulated) {
        fail!(
            TiersError::Config,
            "tier {}: readahead is set on emulated block tiers only",
            t.name
        );
    }
    let mp = TierConfig::mount_point(home, &t.name);
    let Some(src) = mounted_source(&mp)? else {
        fail!(
            TiersError::Device,
            "tier {} is not set up (thaw tier setup)",
            t.name
        );
    };
    read_ahead_file(Path::new(&src))
}

/// The readahead `thaw tier setup` gives a tier's device (KiB).
pub fn configured_read_ahead_kb(t: &TierConfig) -> u32 {
    t.read_ahead_kb.unwrap_or(DEFAULT_READ_AHEAD_KB)
}

/// The tier device's block-layer readahead in KiB (0: off).
pub fn read_ahead_kb(home: &Path, t: &TierConfig) -> Result<u32> {
    let f = tier_read_ahead_file(home, t)?;
    let raw = std::fs::read_to_string(&f).with_context(|| format!("reading {}", f.display()))?;
    Ok(raw
        .trim()
        .parse()
        .with_context(|| format!("{}: {raw:?}", f.display()))?)
}

/// Sets the tier device's readahead. 0 turns it off: a buffered read or a
/// page fault on a file of the tier brings in only the pages it asks for.
/// `thaw tier setup` sets the configured value again.
pub fn set_read_ahead_kb(home: &Path, t: &TierConfig, kb: u32) -> Result<()> {
    let f = tier_read_ahead_file(home, t)?;
    std::fs::write(&f, kb.to_string()).with_context(|| format!("writing {}", f.display()))?;
    Ok(())
}

fn device_name(dev: &Path) -> Result<&std::ffi::OsStr> {
    match dev.file_name() {
        Some(n) => Ok(n),
        None => fail!(TiersError::Device, "{}: not a device path", dev.display()),
    }
}

fn read_ahead_file(dev: &Path) -> Result<PathBuf> {
    let name = device_name(dev)?;
    Ok(Path::new("/sys/block")
        .join(name)
        .join("queue/read_ahead_kb"))
}

fn saved_read_ahead(home: &Path, tier: &str) -> PathBuf {
    devices_dir(home).join(format!("{tier}.read_ahead_kb"))
}

/// Removes the tiers' shared directories once nothing is left in them.
pub fn tidy(home: &Path) {
    let _ = std::fs::remove_dir(devices_dir(home));
    // lock files only; a holder keeps its descriptor
    let _ = std::fs::remove_dir_all(home.join(TIERS_DIR).join(".slots"));
    let _ = std::fs::remove_dir(home.join(TIERS_DIR));
}

/// Space the tier's snapshots take: the filesystem's use for a tier on its
/// own device, otherwise the allocated blocks under its snapshot directory.
pub fn used_bytes(home: &Path, t: &TierConfig) -> Result<u64> {
    let Some(root) = t.snapshot_root(home) else {
        return Ok(0);
    };
    fn walk(p: &Path) -> u64 {
        let Ok(md) = std::fs::symlink_metadata(p) else {
            return 0;
        };
        let own = md.blocks() * 512;
        if md.is_dir() {
            own + std::fs::read_dir(p)
                .map(|rd| rd.flatten().map(|e| walk(&e.path())).sum())
                .unwrap_or(0)
        } else {
            own
        }
    }
    Ok(walk(&root))
}
