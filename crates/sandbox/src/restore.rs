//! Restore: rebuild a snapshot's runtime in a fresh sandbox. The restorer
//! (crates/restorer) recreates the mappings and fills them as the memory
//! strategy says, and on the worker's go-ahead resumes the runtime itself:
//! its trampoline unmaps the restorer and rt_sigreturns with a frame the
//! worker built from the saved CPU state ([`crate::sigframe`]). The worker
//! then greets the agent, which unmaps the trampoline and re-seeds its
//! random generators.
use crate::pool::Prebuilt;
use crate::sigframe;
use crate::state::ProcessState;
use crate::ReapState;
use crate::{seccomp, Sandbox, SandboxConfig};
use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;
use serde_json::json;
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use thaw_memory::tiering::{self, TierKind, TierLayout};
use thaw_memory::write_set::{self, WriteSet};
use thaw_memory::{working_set, Fill, ImageSource, PageServer, PageSource, RestoreStrategy};
use thaw_restorer as r;
use thaw_store::Snapshot;

/// Descriptors the memory image and the TOSS tier files sit at inside the
/// restorer (sent with the plan in this order).
const IMAGE_FD: RawFd = r::PLAN_FD_BASE;
const FAST_FD: RawFd = r::PLAN_FD_BASE + 1;
const SLOW_FD: RawFd = r::PLAN_FD_BASE + 2;

/// Timings and byte counts of one restore (the caller adds the first invocation).
#[derive(Debug, Clone, Default, Serialize)]
pub struct RestoreReport {
    pub strategy: String,
    /// read and check the snapshot's state file
    pub state_load_ms: f64,
    /// namespaces, mounts, cgroups, exec of the restorer (with a pool:
    /// taking a sandbox built ahead)
    pub sandbox_ms: f64,
    /// the sandbox came from a [`crate::SandboxPool`]
    pub pooled: bool,
    /// the restorer rebuilding the address space (as it measured itself)
    pub memory_setup_ms: f64,
    /// go-ahead to the restorer (it unmaps itself and rt_sigreturns into the
    /// runtime), agent handshake
    pub resume_ms: f64,
    /// restore request to the agent's "restored" reply
    pub total_ms: f64,
    /// bytes the restorer copied from the image before resume
    pub copied_bytes: u64,
    /// bytes mapped from the image file (faulted in by the kernel on use)
    pub mapped_bytes: u64,
    /// bytes left to the page server
    pub lazy_bytes: u64,
    /// REAP: "record", "prefetch", or "" for other strategies
    pub ws_mode: String,
    /// REAP: pages in the working set installed before resume
    pub ws_pages: u64,
    /// REAP: bytes of working set read (one read)
    pub ws_bytes: u64,
    /// REAP: installing the working set before resume (on the critical path)
    pub prefetch_ms: f64,
    /// REAP: reading the working set (overlapped with building the sandbox)
    pub ws_read_ms: f64,
    /// REAP: why a recorded working set could not be used (restore fell back to uffd)
    pub ws_warning: String,
    /// dax: pages copied before resume because the first invocation of an
    /// earlier clone wrote them (0: none recorded yet; this restore records)
    pub write_set_pages: u64,
    /// TOSS: share of saved memory on the slow tier
    pub slow_tier_share: f64,
    /// TOSS: why the tier layout could not be used (restore fell back to uffd)
    pub tier_warning: String,
}

/// How long the restorer may take to rebuild memory and report. Generous:
/// an eager restore reads the whole image before reporting, and 64 of them
/// at once from one disk took over 10 s on a loaded 2-core machine (the
/// concurrency benchmark); a restorer that is truly stuck is still caught.
const RESTORER_REPORT_DEADLINE: Duration = Duration::from_secs(60);

/// Restores `snap` with `strategy` into a new sandbox on `root`.
pub fn restore(
    snap: &Snapshot,
    root: &Path,
    root_hash: &str,
    strategy: &dyn RestoreStrategy,
    cfg: &SandboxConfig,
) -> Result<(Sandbox, RestoreReport)> {
    restore_with(snap, root, root_hash, strategy, cfg, Hooks::default())
}

/// [`restore`] into `prebuilt`, a sandbox taken from a [`crate::SandboxPool`]
/// (built now if `None`, or if it was built on another root).
pub fn restore_prebuilt(
    snap: &Snapshot,
    root: &Path,
    root_hash: &str,
    strategy: &dyn RestoreStrategy,
    cfg: &SandboxConfig,
    prebuilt: Option<Prebuilt>,
) -> Result<(Sandbox, RestoreReport)> {
    let hooks = Hooks {
        prebuilt,
        ..Hooks::default()
    };
    restore_with(snap, root, root_hash, strategy, cfg, hooks)
}

/// [`restore`], calling `on_spawn` with the restorer's pid once the restorer
/// runs and before it is sent its plan (it waits for the plan). A seam for
/// tests that must act on the restorer at a chosen point of its work, e.g.
/// stop it under ptrace; `on_spawn` must let it run on before the restorer
/// reports ready, because the restore then waits for it to resume itself.
pub fn restore_observed(
    snap: &Snapshot,
    root: &Path,
    root_hash: &str,
    strategy: &dyn RestoreStrategy,
    cfg: &SandboxConfig,
    on_spawn: &mut dyn FnMut(i32),
) -> Result<(Sandbox, RestoreReport)> {
    let hooks = Hooks {
        on_spawn: Some(on_spawn),
        ..Hooks::default()
    };
    restore_with(snap, root, root_hash, strategy, cfg, hooks)
}

/// What a streamed restore waits for, each as late as it can.
pub trait Arriving: Send + Sync {
    /// The image pages the restorer copies before resume (file-backed
    /// regions' private pages): waited for before the plan is sent.
    fn copied_pages(&self) -> Result<()>;
    /// The REAP working set's files beside the snapshot: waited for by the
    /// working-set reader, while the sandbox is being built.
    fn working_set(&self) -> Result<()>;
}

/// A streamed restore's inputs.
pub struct Streamed {
    /// the local file the image is arriving in
    pub image: File,
    /// serves lazily restored pages, waiting for those not there yet
    pub source: Arc<dyn PageSource>,
    pub arriving: Arc<dyn Arriving>,
}

/// [`restore`] from an image that is still arriving (the remote tier's
/// streamed restore): see [`Streamed`]. Only a lazy
/// strategy qualifies. REAP needs a usable working set: recording one
/// would read pages that may not be there yet.
pub fn restore_streamed(
    snap: &Snapshot,
    root: &Path,
    root_hash: &str,
    strategy: &dyn RestoreStrategy,
    cfg: &SandboxConfig,
    streamed: Streamed,
) -> Result<(Sandbox, RestoreReport)> {
    let anon = thaw_memory::Region {
        start: 0,
        end: thaw_memory::PAGE_SIZE,
        anonymous: true,
        runs: vec![],
    };
    if strategy.fill(&anon) != Fill::Lazy || strategy.uses_tiers() {
        bail!(
            "a streamed restore needs a lazy strategy (uffd or reap), not {}",
            strategy.name()
        );
    }
    let hooks = Hooks {
        pager_source: Some(streamed.source),
        image: Some((streamed.image, streamed.arriving)),
        ..Hooks::default()
    };
    restore_with(snap, root, root_hash, strategy, cfg, hooks)
}

/// Extra control for the profiler (where lazy pages come from, and whether
/// the page server logs fault addresses) and for tests (`on_spawn`).
#[derive(Default)]
pub(crate) struct Hooks<'a> {
    pub pager_source: Option<Arc<dyn PageSource>>,
    pub record: bool,
    /// restore this state instead of the snapshot's (the profiler turns file
    /// mappings into lazily served anonymous ones)
    pub state: Option<ProcessState>,
    /// called with the restorer's pid before it is sent its plan
    pub on_spawn: Option<&'a mut dyn FnMut(i32)>,
    /// a sandbox built ahead (see [`crate::pool`]); built here when absent
    pub prebuilt: Option<Prebuilt>,
    /// the image to restore from instead of the snapshot's verified one
    /// (a streamed restore's partly arrived file: never record from it)
    pub image: Option<(File, Arc<dyn Arriving>)>,
}

pub(crate) fn restore_with(
    snap: &Snapshot,
    root: &Path,
    root_hash: &str,
    strategy: &dyn RestoreStrategy,
    cfg: &SandboxConfig,
    hooks: Hooks<'_>,
) -> Result<(Sandbox, RestoreReport)> {
    let Hooks {
        pager_source,
        record: record_faults,
        state: state_override,
        on_spawn,
        prebuilt,
        image: streamed_image,
    } = hooks;
    let arriving = streamed_image.as_ref().map(|(_, a)| a.clone());
    let streamed = arriving.is_some();
    let t0 = Instant::now();
    let mut rep = RestoreReport {
        strategy: strategy.name().into(),
        ..Default::default()
    };
    if snap.manifest.runtime_root != root_hash {
        bail!(
            "snapshot {} was taken on runtime root {}, but the root given is {root_hash}; rebuild the snapshot",
            snap.manifest.id,
            snap.manifest.runtime_root
        );
    }
    if !root.is_dir() {
        bail!("runtime root {} is missing", root.display());
    }
    let state = match state_override {
        Some(s) => s,
        None => ProcessState::decode(&snap.load_state()?)
            .with_context(|| format!("snapshot {}", snap.dir.display()))?,
    };
    if strategy.uses_write_set() && !thaw_store::secure::on_dram(&snap.dir)? {
        bail!(
            "the dax strategy maps the image in place and needs a byte-addressable tier (DRAM/pmem); snapshot {} is on a block device",
            snap.dir.display()
        );
    }
    // verified, and unchangeable while in use (sealed memfd or immutable
    // file); a streamed image is verified chunk by chunk as it arrives
    let image = match streamed_image {
        Some((f, _)) => f,
        None => snap.open_image()?,
    };
    rep.state_load_ms = ms(t0);
    if !streamed && !strategy.uses_tiers() && !thaw_store::secure::on_dram(&snap.dir)? {
        request_copies(&image, &state, strategy);
    }

    // TOSS: pages come from the fast and slow tier files; if the layout is
    // missing or bad, fall back to plain uffd rather than risk a wrong runtime
    let uffd_fallback;
    let mut strategy = strategy;
    let mut tiers = None;
    if strategy.uses_tiers() {
        match load_tiers(snap, &state) {
            Ok(t) => {
                rep.slow_tier_share = t.0.slow_share;
                tiers = Some(t);
            }
            Err(e) => {
                rep.tier_warning = format!("{e:#}");
                thaw_output::errln!(
                    "thaw: warning: tier layout of {} unusable ({e:#}); restoring with plain uffd",
                    snap.dir.display()
                );
                uffd_fallback = thaw_memory::strategy_by_name("uffd")?;
                strategy = uffd_fallback.as_ref();
                rep.strategy = "uffd".into();
            }
        }
    }

    // REAP: read the working set (one large O_DIRECT read) while the sandbox
    // is being built; it is installed once the userfaultfd arrives
    let ws_loader = strategy.uses_working_set().then(|| {
        let (dir, key, layout) = (snap.dir.clone(), snapshot_key(snap), state.memory.clone());
        let arriving = arriving.clone();
        std::thread::spawn(move || {
            if let Some(a) = arriving {
                a.working_set()?;
            }
            working_set::load(&dir, &key, &layout)
        })
    });

    // dax: the pages earlier clones wrote are copied before resume
    let mut write_set = None;
    if strategy.uses_write_set() {
        match write_set::load(&snap.dir, &snapshot_key(snap), &state.memory) {
            Ok(ws) => write_set = ws,
            Err(e) => thaw_output::errln!("thaw: warning: {e:#}; recording a new dax write set"),
        }
        rep.write_set_pages = write_set.as_ref().map(|w| w.pages()).unwrap_or(0);
    }

    let t1 = Instant::now();
    let mut sb = match prebuilt.filter(|p| p.sb.root == root) {
        Some(p) => {
            rep.pooled = true;
            p.sb
        }
        None => Prebuilt::build(root, cfg)?.sb,
    };
    let pid = sb.pid;
    rep.sandbox_ms = ms(t1);
    let plan = build_plan(
        &state,
        strategy,
        sb.uid(),
        tiers.as_ref().map(|t| &t.0),
        write_set.as_ref(),
        &mut rep,
    )?;
    let lazy = plan.header.flags & r::PLAN_LAZY != 0;
    let encoded = plan.encode().map_err(|e| anyhow!(e))?;

    if strategy.uses_write_set() && write_set.is_none() {
        sb.dax_record = Some(crate::DaxRecord {
            dir: snap.dir.clone(),
            key: snapshot_key(snap),
            regions: state
                .memory
                .regions
                .iter()
                .map(|r| (r.start, r.end))
                .collect(),
        });
    }

    if let Some(f) = on_spawn {
        f(pid);
    }
    if let Some(a) = &arriving {
        a.copied_pages()?;
    }
    let sock = sb.channel().socket().try_clone()?;
    sock.set_read_timeout(Some(RESTORER_REPORT_DEADLINE))?;
    let mut plan_fds = vec![image.as_raw_fd()];
    if let Some((_, fast, slow)) = &tiers {
        plan_fds.extend([fast.as_raw_fd(), slow.as_raw_fd()]);
    }
    crate::cmsg::send_with_fds(&sock, &encoded, &plan_fds)
        .context("sending the plan to the restorer")?;
    let (uffd, first) = if lazy {
        recv_uffd(&sock)?
    } else {
        (None, None)
    };
    let mut raw = [0u8; r::STATUS_BYTES];
    let start = match first {
        Some(b) => {
            raw[0] = b;
            1
        }
        None => 0,
    };
    (&sock).read_exact(&mut raw[start..]).map_err(|e| {
        if matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ) {
            anyhow!(
                "restorer did not report within {} s: {}",
                RESTORER_REPORT_DEADLINE.as_secs(),
                sb.log_tail(300)
            )
        } else {
            anyhow!("restorer died before reporting ({e}): {}", sb.log_tail(300))
        }
    })?;
    let status = r::RestorerStatus::decode(&raw).map_err(|e| anyhow!(e))?;
    if !status.ok {
        bail!(
            "restorer failed while {} (item {}): {}",
            status.step_name(),
            status.detail,
            std::io::Error::from_raw_os_error(status.err)
        );
    }
    rep.memory_setup_ms = status.setup_ns as f64 / 1e6;
    if lazy {
        let uffd = uffd.ok_or_else(|| anyhow!("restorer did not send its userfaultfd"))?;
        let layout = Arc::new(state.memory.clone());
        let mut record = record_faults;
        if let Some(loader) = ws_loader {
            let key = snapshot_key(snap);
            let ws = loader
                .join()
                .map_err(|_| anyhow!("working-set reader panicked"))?;
            let t = Instant::now();
            let ws = ws.and_then(|ws| match ws {
                Some(ws) => ws.install(uffd.as_raw_fd()).map(|_| Some(ws)),
                None => Ok(None),
            });
            match ws {
                Ok(Some(ws)) => {
                    rep.ws_mode = "prefetch".into();
                    rep.ws_pages = ws.index.pages();
                    rep.ws_bytes = ws.index.ws_len;
                    // reading overlapped the sandbox set-up: report both
                    rep.prefetch_ms = ms(t);
                    rep.ws_read_ms = ws.load_ns as f64 / 1e6;
                    sb.reap = Some(ReapState {
                        dir: snap.dir.clone(),
                        key,
                        ws_pages: rep.ws_pages,
                        drift_share: cfg.drift_share,
                        record: false,
                        image: image.try_clone()?,
                        layout: layout.clone(),
                    });
                }
                Ok(None) | Err(_) if streamed => {
                    let why = ws
                        .err()
                        .map_or("none was recorded".into(), |e| format!("{e:#}"));
                    bail!("a streamed REAP restore needs a usable working set: {why}");
                }
                Ok(None) | Err(_) => {
                    if let Err(e) = ws {
                        rep.ws_warning = format!("{e:#}");
                        thaw_output::errln!("thaw: warning: working set of {} unusable ({e:#}); restoring with plain uffd and recording a new one", snap.dir.display());
                    }
                    rep.ws_mode = "record".into();
                    record = true;
                    sb.reap = Some(ReapState {
                        dir: snap.dir.clone(),
                        key,
                        ws_pages: 0,
                        drift_share: cfg.drift_share,
                        record: true,
                        image: image.try_clone()?,
                        layout: layout.clone(),
                    });
                }
            }
        }
        let pid_for_kill = pid;
        let on_fatal = Box::new(move |why: String| {
            thaw_output::errln!(
                "thaw: page server for pid {pid_for_kill} failed: {why}; killing the sandbox"
            );
            // SAFETY: signalling our own child; reaped by Sandbox::kill.
            unsafe { libc::kill(pid_for_kill, libc::SIGKILL) };
        });
        let source: Arc<dyn PageSource> = match pager_source {
            Some(s) => s,
            None => Arc::new(ImageSource(image.try_clone()?)),
        };
        sb.pager = Some(PageServer::spawn(uffd, layout, source, record, on_fatal)?);
    }

    let t2 = Instant::now();
    (&sock)
        .write_all(&[r::RESUME_BYTE])
        .context("resuming the runtime")?;
    let mut seed = [0u8; 32];
    rand::Rng::fill(&mut rand::thread_rng(), &mut seed[..]);
    sb.call(
        &json!({
            "op": "restored",
            "seed": hex::encode(seed),
            "unmap": [r::TRAMP_ADDR, r::TRAMP_SIZE],
        }),
        Duration::from_secs(30),
    )
    .context("the restored runtime did not answer")?;
    rep.resume_ms = ms(t2);
    rep.total_ms = ms(t0);
    Ok((sb, rep))
}

/// Identifies a snapshot's exact contents, for files derived from it.
pub fn snapshot_key(snap: &Snapshot) -> String {
    format!("{}:{}", snap.manifest.id, snap.manifest.memory.sha256)
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// Runs `verify` (a checksum over the TOSS tier files) the first time this
/// process uses those files, and again whenever one changed: keyed by
/// device, inode, size and ctime (unlike mtime, ctime cannot be set back).
/// A full hash on every restore would read every page and defeat lazy restore.
fn verify_once(files: &[&File], verify: impl FnOnce() -> Result<()>) -> Result<()> {
    let keys = files
        .iter()
        .map(|f| image_key(f))
        .collect::<Result<Vec<_>>>()?;
    let seen = {
        let v = verified().lock().unwrap_or_else(|p| p.into_inner());
        keys.iter().all(|k| v.contains(k))
    };
    if !seen {
        verify()?;
        verified()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(keys);
    }
    Ok(())
}

type ImageKey = (u64, u64, u64, i64);

fn verified() -> &'static Mutex<HashSet<ImageKey>> {
    static SEEN: OnceLock<Mutex<HashSet<ImageKey>>> = OnceLock::new();
    SEEN.get_or_init(Default::default)
}

fn image_key(image: &File) -> Result<ImageKey> {
    let m = image.metadata()?;
    Ok((
        m.dev(),
        m.ino(),
        m.size(),
        m.ctime_nsec() + m.ctime() * 1_000_000_000,
    ))
}

/// The restorer ELF in a sealed memfd, made once per process.
pub(crate) fn restorer_memfd() -> Result<RawFd> {
    static FD: OnceLock<OwnedFd> = OnceLock::new();
    if let Some(fd) = FD.get() {
        return Ok(fd.as_raw_fd());
    }
    // SAFETY: memfd_create with a static NUL-terminated name.
    let fd = unsafe {
        libc::memfd_create(
            c"thaw-restorer".as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        )
    };
    if fd < 0 {
        bail!("memfd_create: {}", std::io::Error::last_os_error());
    }
    // SAFETY: fd was just created and is owned here.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut f = File::from(owned);
    f.write_all(r::RESTORER_ELF)?;
    let seals = libc::F_SEAL_WRITE | libc::F_SEAL_GROW | libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL;
    // SAFETY: fcntl on our own descriptor.
    unsafe { libc::fcntl(f.as_raw_fd(), libc::F_ADD_SEALS, seals) };
    let _ = FD.set(OwnedFd::from(f));
    Ok(FD.get().expect("just set").as_raw_fd())
}

/// The tier layout, checked (CRCs once per process), and both files opened.
fn load_tiers(snap: &Snapshot, state: &ProcessState) -> Result<(TierLayout, File, File)> {
    let tl = tiering::load(&snap.dir, &snapshot_key(snap), &state.memory)?
        .ok_or_else(|| anyhow!("no tier layout (run `thaw tier` first)"))?;
    let fast = File::open(&tl.fast.path)?;
    let slow = File::open(&tl.slow.path)?;
    verify_once(&[&fast, &slow], || tiering::verify_files(&tl))?;
    Ok((tl, fast, slow))
}

/// The fill a region gets: a lazy strategy copies the private pages of
/// file mappings (the page server serves anonymous memory only).
fn region_fill(strategy: &dyn RestoreStrategy, region: &thaw_memory::Region) -> Fill {
    match strategy.fill(region) {
        Fill::Lazy if !region.anonymous => Fill::Copy,
        f => f,
    }
}

/// Largest readahead one hint asks for: the kernel caps a hint at the
/// device's I/O size (or its readahead, which may be 0).
const HINT_BYTES: u64 = 128 << 10;
/// Runs closer than this are asked for as one (what readahead would read).
const HINT_GAP: u64 = 32 << 10;

/// The restorer `pread`s the runs it copies one after another, each a
/// synchronous trip to the device on a block tier. Asked for here, all at
/// once, they are read while the sandbox is being built and with the
/// device's whole queue depth; the restorer's reads then find them cached.
/// A hint only: if the kernel drops it, the restorer reads as before.
fn request_copies(image: &File, state: &ProcessState, strategy: &dyn RestoreStrategy) {
    let mut spans: Vec<(u64, u64)> = Vec::new();
    for region in &state.memory.regions {
        if region_fill(strategy, region) != Fill::Copy {
            continue;
        }
        for run in &region.runs {
            match spans.last_mut() {
                Some((_, end)) if run.file_off >= *end && run.file_off - *end <= HINT_GAP => {
                    *end = run.file_off + run.len;
                }
                _ => spans.push((run.file_off, run.file_off + run.len)),
            }
        }
    }
    for (start, end) in spans {
        let mut off = start;
        while off < end {
            let len = HINT_BYTES.min(end - off);
            // SAFETY: a plain advisory syscall on a descriptor we own.
            unsafe {
                libc::posix_fadvise(
                    image.as_raw_fd(),
                    off as libc::off_t,
                    len as libc::off_t,
                    libc::POSIX_FADV_WILLNEED,
                )
            };
            off += len;
        }
    }
}

fn build_plan(
    state: &ProcessState,
    strategy: &dyn RestoreStrategy,
    uid: u32,
    tiers: Option<&TierLayout>,
    write_set: Option<&WriteSet>,
    rep: &mut RestoreReport,
) -> Result<r::Plan> {
    let mut tier_runs = tiers.map(|t| t.runs.iter().peekable());
    let mut write_ranges = write_set.map(|w| w.ranges.iter().peekable());
    let mut plan = r::Plan::default();
    let mut paths: HashMap<&str, i32> = HashMap::new();
    let mut lazy = false;
    for (v, region) in state.vmas.iter().zip(&state.memory.regions) {
        let fill = region_fill(strategy, region);
        let mut flags = 0;
        if region.anonymous {
            flags |= r::VMA_ANON;
        }
        if v.growsdown {
            flags |= r::VMA_GROWSDOWN;
        }
        let path_off = match &v.path {
            Some(p) => *paths
                .entry(p.as_str())
                .or_insert_with(|| plan.add_string(p)),
            None => -1,
        };
        if fill == Fill::MapPopulate && !region.anonymous {
            flags |= r::VMA_POPULATE;
        }
        let first_run = plan.runs.len() as u32;
        if fill == Fill::Lazy {
            flags |= r::VMA_LAZY;
            lazy = true;
            rep.lazy_bytes += region.saved_bytes();
        } else if let Some(tr) = tier_runs.as_mut() {
            while let Some(t) = tr.next_if(|t| t.addr < region.end) {
                let slow = t.tier == TierKind::Slow;
                plan.runs.push(r::PlanRun {
                    addr: t.addr,
                    len: t.len,
                    img_off: t.off,
                    img_fd: if slow { SLOW_FD } else { FAST_FD },
                    // readahead off on the slow tier: its pages are the sparse,
                    // rarely touched ones (the SYSTOR'22 advice)
                    fill: if slow {
                        r::FILL_MAP_RANDOM
                    } else {
                        r::FILL_MAP
                    },
                });
                rep.mapped_bytes += t.len;
            }
        } else {
            for run in &region.runs {
                plan.runs.push(r::PlanRun {
                    addr: run.addr,
                    len: run.len,
                    img_off: run.file_off,
                    img_fd: IMAGE_FD,
                    fill: match fill {
                        Fill::Map => r::FILL_MAP,
                        Fill::MapPopulate => r::FILL_MAP_POPULATE,
                        _ => r::FILL_COPY,
                    },
                });
                if matches!(fill, Fill::Map | Fill::MapPopulate) {
                    rep.mapped_bytes += run.len;
                } else {
                    rep.copied_bytes += run.len;
                }
            }
        }
        if let Some(wr) = write_ranges.as_mut() {
            while let Some(&(a, len)) = wr.next_if(|w| w.0 < region.end) {
                if v.prot & libc::PROT_WRITE as u32 != 0 && a >= region.start {
                    plan.runs.push(r::PlanRun {
                        addr: a,
                        len,
                        img_off: 0,
                        img_fd: -1,
                        fill: r::FILL_POPULATE_WRITE,
                    });
                }
            }
        }
        plan.vmas.push(r::PlanVma {
            start: v.start,
            end: v.end,
            file_off: v.file_off,
            prot: v.prot,
            flags,
            path_off,
            first_run,
            n_runs: plan.runs.len() as u32 - first_run,
            reserved: 0,
        });
    }
    plan.header = r::PlanHeader {
        vdso_block_start: state.vdso.start,
        vdso_offset: state.vdso.vdso_offset,
        vdso_pieces: state.vdso.pieces.clone(),
        mm: state.mm.clone(),
        uid,
        gid: uid,
        flags: if lazy { r::PLAN_LAZY } else { 0 },
        fs_base: state.regs[sigframe::FS_BASE],
        gs_base: state.regs[sigframe::GS_BASE],
    };
    plan.auxv = state.auxv.clone();
    plan.filter = seccomp::filter();
    plan.frame = sigframe::build(state, r::TRAMP_FRAME)?;
    Ok(plan)
}

/// Receives the restorer's userfaultfd. If the restorer failed before sending
/// it, the byte read is the first of its status record and is handed back.
fn recv_uffd(sock: &std::os::unix::net::UnixStream) -> Result<(Option<OwnedFd>, Option<u8>)> {
    let got = crate::cmsg::recv_one_byte(sock, std::mem::size_of::<RawFd>())?;
    if got.read != 1 {
        bail!("restorer closed its socket before handing over userfaultfd");
    }
    let fd = match got.control {
        Some((libc::SOL_SOCKET, libc::SCM_RIGHTS, data)) if data.len() >= 4 => {
            let raw = RawFd::from_ne_bytes(data[..4].try_into().expect("4 bytes"));
            // SAFETY: the kernel just installed this descriptor for us.
            Some(unsafe { OwnedFd::from_raw_fd(raw) })
        }
        _ => None,
    };
    match (got.byte, fd) {
        (b'U', Some(fd)) => Ok((Some(fd), None)),
        (b, None) => Ok((None, Some(b))),
        (_, Some(_)) => bail!("restorer sent a descriptor with an unexpected tag"),
    }
}
