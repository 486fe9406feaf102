//! Restore: rebuild a snapshot's runtime in a fresh sandbox. The restorer
//! (crates/restorer) recreates the mappings and fills them as the memory
//! strategy says, and on the worker's go-ahead resumes the runtime itself:
//! its trampoline unmaps the restorer and rt_sigreturns with a frame the
//! worker built from the saved CPU state ([`crate::sigframe`]). The worker
//! then greets the agent, which unmaps the trampoline and re-seeds its
//! random generators.
use crate::error::Result;
use crate::sigframe;
use crate::RestoreError;
use serde::Serialize;
use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use thaw_error::{fail, Context, ResultExt};
use thaw_memory::{ImageSource, PageServer, PageSource};
use thaw_restore::{Arriving, MemoryPlan, StrategyKind, StrategyReport, Streamed, Target};
use thaw_restorer as r;
use thaw_sandbox::HostError;
use thaw_sandbox::Prebuilt;
use thaw_sandbox::{seccomp, Sandbox, SandboxConfig};
use thaw_snapshot_format::ProcessState;
use thaw_snapshot_format::SharedBacking;
use thaw_store::Snapshot;

/// Timings and byte counts of one restore (the caller adds the first invocation).
#[derive(Debug, Clone, Serialize)]
pub struct RestoreReport {
    /// the strategy the restore ran as (a tiered restore that fell back: uffd)
    pub strategy: StrategyKind,
    /// read and check the snapshot's state file (once per process and
    /// state: later restores find it decoded), open the image
    pub state_load_ms: f64,
    /// namespaces, mounts, cgroups, exec of the restorer (with a pool:
    /// taking a sandbox built ahead)
    pub sandbox_ms: f64,
    /// the sandbox came from a [`thaw_sandbox::SandboxPool`]
    pub pooled: bool,
    /// block tiers: asking the kernel for the image pages the restorer
    /// will copy or map (`POSIX_FADV_WILLNEED`), before the sandbox build
    pub hint_ms: f64,
    /// the restorer rebuilding the address space (as it measured itself)
    pub memory_setup_ms: f64,
    /// of `memory_setup_ms`: building page tables and copying a write set
    /// ahead (the plan's populated runs)
    pub populate_ms: f64,
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
    /// bytes of mapped image copied on write before resume (a write set)
    pub populated_bytes: u64,
    /// recreating the saved /tmp and /dev/shm (beside the restorer's work)
    pub files_ms: f64,
    /// content bytes of the saved files copied in
    pub file_bytes: u64,
    /// the strategy's own figures and warnings
    #[serde(flatten)]
    pub figures: StrategyReport,
}

/// How long the restorer may take to rebuild memory and report. Generous:
/// an eager restore reads the whole image before reporting, and 64 of them
/// at once from one disk took over 10 s on a loaded 2-core machine (the
/// concurrency benchmark); a restorer that is truly stuck is still caught.
const RESTORER_REPORT_DEADLINE: Duration = Duration::from_secs(60);

/// What [`restore`] restores, and how.
pub struct RestoreArgs<'a> {
    pub snapshot: &'a Snapshot,
    /// the runtime root the snapshot was taken on
    pub root: &'a Path,
    /// the root's hash (a snapshot of another root is refused)
    pub root_hash: &'a str,
    pub strategy: StrategyKind,
    pub cfg: &'a SandboxConfig,
    /// a sandbox taken from a [`thaw_sandbox::SandboxPool`]; built here if `None`,
    /// or if it was built on another root
    pub prebuilt: Option<Prebuilt>,
    /// the image is still arriving (the remote tier's streamed restore):
    /// only a strategy that [`streams`](thaw_restore::Strategy::streams)
    /// qualifies. REAP then needs a usable working set: recording one
    /// would read pages that may not be there yet.
    pub streamed: Option<Streamed>,
    /// called with the restorer's pid once the restorer runs and before it
    /// is sent its plan (it waits for the plan). A seam for tests that must
    /// act on the restorer at a chosen point of its work, e.g. stop it
    /// under ptrace; it must let the restorer run on before it reports
    /// ready, because the restore then waits for it to resume itself.
    pub on_spawn: Option<&'a mut dyn FnMut(i32)>,
    /// A seam for tests: the recreated threads (the main thread aside) wait
    /// on their last instruction in the restorer's trampoline until a
    /// checkpoint's freeze interrupts them (the restorer's
    /// `PLAN_HOLD_THREADS`), so that checkpoint deterministically finds
    /// them there and must let them go on before it freezes the runtime.
    pub hold_threads: bool,
}

impl<'a> RestoreArgs<'a> {
    /// `snapshot` with `strategy` into a sandbox built now, from the
    /// snapshot's own verified image.
    pub fn new(
        snapshot: &'a Snapshot,
        root: &'a Path,
        root_hash: &'a str,
        strategy: StrategyKind,
        cfg: &'a SandboxConfig,
    ) -> RestoreArgs<'a> {
        RestoreArgs {
            snapshot,
            root,
            root_hash,
            strategy,
            cfg,
            prebuilt: None,
            streamed: None,
            on_spawn: None,
            hold_threads: false,
        }
    }
}

/// Restores a snapshot into a new sandbox as `args` say.
pub fn restore(args: RestoreArgs<'_>) -> Result<(Sandbox, RestoreReport), RestoreError> {
    let RestoreArgs {
        snapshot,
        root,
        root_hash,
        strategy,
        cfg,
        prebuilt,
        streamed,
        on_spawn,
        hold_threads,
    } = args;
    let mut hooks = Hooks {
        on_spawn,
        hold_threads,
        prebuilt,
        ..Hooks::default()
    };
    if let Some(streamed) = streamed {
        if !thaw_restore::strategy(strategy).streams() {
            return Err(thaw_restore::StrategyError::Unsuitable(format!(
                "a streamed restore needs a strategy that restores from an arriving image ({}), not {strategy}",
                thaw_restore::names_of(thaw_restore::kinds_where(|s| s.streams()))
            ))
            .into());
        }
        hooks.pager_source = Some(streamed.source);
        hooks.image = Some((streamed.image, streamed.arriving));
    }
    restore_with(snapshot, root, root_hash, strategy, cfg, hooks)
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
    /// see [`RestoreArgs::hold_threads`]
    pub hold_threads: bool,
    /// a sandbox built ahead (see [`thaw_sandbox::pool`]); built here when absent
    pub prebuilt: Option<Prebuilt>,
    /// the image to restore from instead of the snapshot's verified one
    /// (a streamed restore's partly arrived file: never record from it)
    pub image: Option<(File, Arc<dyn Arriving>)>,
}

/// The snapshot's state and image, read and checked before any sandbox
/// is touched.
struct Loaded {
    state: Arc<ProcessState>,
    image: File,
    /// the root's code files being brought into the page cache in large
    /// folios (see [`huge_code`]), joined before resume
    huge: Option<std::thread::JoinHandle<()>>,
    key: String,
    layout: Arc<thaw_memory::MemoryLayout>,
    /// protection of each region's mapping
    prots: Vec<u32>,
}

/// What the restorer reported once memory was rebuilt.
struct Rebuilt {
    status: r::RestorerStatus,
    /// the restorer's userfaultfd, for a strategy that leaves pages lazy
    uffd: Option<OwnedFd>,
    files_ms: f64,
}

pub(crate) fn restore_with(
    snap: &Snapshot,
    root: &Path,
    root_hash: &str,
    kind: StrategyKind,
    cfg: &SandboxConfig,
    hooks: Hooks<'_>,
) -> Result<(Sandbox, RestoreReport), RestoreError> {
    let Hooks {
        pager_source,
        record: record_faults,
        state: state_override,
        on_spawn,
        hold_threads,
        prebuilt,
        image: streamed_image,
    } = hooks;
    let arriving = streamed_image.as_ref().map(|(_, a)| a.clone());
    let t0 = Instant::now();
    let loaded = load(snap, root, root_hash, state_override, streamed_image)?;
    let state_load_ms = ms(t0);
    let target = Target {
        dir: &snap.dir,
        key: &loaded.key,
        layout: &loaded.layout,
        prots: &loaded.prots,
        image: &loaded.image,
        drift_share: cfg.drift_share,
        arriving: arriving.clone(),
    };

    // phase 1, prepare: overlaps building the sandbox (REAP's read)
    let mut strategy = thaw_restore::strategy(kind);
    strategy.prepare(&target)?;
    // phase 2, plan: what the restorer maps, copies and leaves lazy (it
    // needs no sandbox, so on a block tier the copies can be asked for now)
    let mut memory = strategy.plan(&target)?;
    let hinted = Instant::now();
    if arriving.is_none()
        && !thaw_store::secure::on_dram(&snap.dir).map_err(thaw_store::StoreError::from)?
    {
        request_copies(&loaded.image, &memory.runs);
    }
    let hint_ms = ms(hinted);

    let t1 = Instant::now();
    let (mut sb, pooled) = match prebuilt.filter(|p| p.root() == root) {
        Some(p) => (p.into_sandbox(), true),
        None => (Prebuilt::build(root, cfg)?.into_sandbox(), false),
    };
    let sandbox_ms = ms(t1);

    let lazy = memory.lazy();
    let (sock, files_awaited) = send_plan(
        snap,
        &loaded,
        &mut memory,
        &sb,
        hold_threads,
        on_spawn,
        &arriving,
    )?;
    let rebuilt = await_restorer(&sock, &loaded, &sb, lazy, files_awaited)?;
    if let Some(uffd) = rebuilt.uffd {
        // phase 3, serve: the strategy's prefetch, then the page server
        let serve = strategy.serve(&target, uffd.as_fd())?;
        let source: Arc<dyn PageSource> = match pager_source {
            Some(s) => s,
            None => Arc::new(ImageSource(loaded.image.try_clone()?)),
        };
        let pager = start_pager(&sb, uffd, &loaded, source, record_faults || serve.record)?;
        sb.attach_pager(pager);
    }
    if let Some(h) = loaded.huge {
        // the runtime's first faults find the page cache as asked
        let _ = h.join();
    }
    let t2 = Instant::now();
    resume(&mut sb, &sock, loaded.state.threads.len())?;
    let status = &rebuilt.status;
    let rep = RestoreReport {
        strategy: strategy.kind(),
        state_load_ms,
        sandbox_ms,
        pooled,
        hint_ms,
        memory_setup_ms: status.setup_ns as f64 / 1e6,
        populate_ms: status.populate_ns as f64 / 1e6,
        resume_ms: ms(t2),
        total_ms: ms(t0),
        copied_bytes: memory.copied_bytes,
        mapped_bytes: memory.mapped_bytes,
        lazy_bytes: memory.lazy_bytes,
        populated_bytes: memory.populated_bytes,
        files_ms: rebuilt.files_ms,
        file_bytes: loaded.state.files.iter().map(|f| f.len).sum(),
        figures: strategy.report(),
    };
    // phase 4 runs when the caller reports the first response
    sb.keep_strategy(strategy);
    Ok((sb, rep))
}

/// Checks the snapshot was taken on this root, and reads its state (or
/// takes the one given) and its image (or the streamed one arriving).
fn load(
    snap: &Snapshot,
    root: &Path,
    root_hash: &str,
    state_override: Option<ProcessState>,
    streamed_image: Option<(File, Arc<dyn Arriving>)>,
) -> Result<Loaded, RestoreError> {
    if snap.manifest.runtime_root != root_hash {
        return Err(RestoreError::OtherRoot {
            id: snap.manifest.id.clone(),
            taken_on: snap.manifest.runtime_root.clone(),
            given: root_hash.to_string(),
        });
    }
    if !root.is_dir() {
        return Err(
            HostError::Failed(format!("runtime root {} is missing", root.display())).into(),
        );
    }
    let state = match state_override {
        Some(s) => Arc::new(s),
        None => snapshot_state(snap)?,
    };
    // verified, and unchangeable while in use (sealed memfd or immutable
    // file); a streamed image is verified chunk by chunk as it arrives
    let image = match streamed_image {
        Some((f, _)) => f,
        None => snap.open_image()?,
    };
    let huge = huge_code(root, &state.vmas);
    Ok(Loaded {
        key: snapshot_key(snap),
        layout: Arc::new(state.memory.clone()),
        prots: state.vmas.iter().map(|v| v.prot).collect(),
        state,
        image,
        huge,
    })
}

/// Builds the restorer's plan (memory, threads, descriptors, signals) and
/// sends it, with the image and the strategy's descriptors, to the
/// restorer waiting in `sb`; returns the socket it reports on, and whether
/// it waits for the saved files before reopening any of /tmp.
fn send_plan(
    snap: &Snapshot,
    loaded: &Loaded,
    memory: &mut MemoryPlan,
    sb: &Sandbox,
    hold_threads: bool,
    on_spawn: Option<&mut dyn FnMut(i32)>,
    arriving: &Option<Arc<dyn Arriving>>,
) -> Result<(std::os::unix::net::UnixStream, bool), RestoreError> {
    let state = &loaded.state;
    let mut plan = build_plan(state, memory, sb.uid(), sb.ip_sockets())?;
    if hold_threads {
        plan.header.flags |= r::PLAN_HOLD_THREADS;
    }
    crate::fds::to_plan(&state.fds, loaded.image.metadata()?.len(), &mut plan).map_err(
        |source| RestoreError::State {
            dir: snap.dir.clone(),
            source,
        },
    )?;
    let encoded = plan
        .encode()
        .map_err(|e| Context::new("encoding the restorer's plan", e))?;
    if let Some(f) = on_spawn {
        f(sb.pid());
    }
    if let Some(a) = arriving {
        a.copied_pages()
            .map_err(|e| Context::new("waiting for the image's copied pages", e))?;
    }
    let sock = sb.control_socket().try_clone()?;
    sock.set_read_timeout(Some(RESTORER_REPORT_DEADLINE))?;
    let mut plan_fds = vec![loaded.image.as_raw_fd()];
    plan_fds.extend(&memory.extra_fds);
    thaw_sandbox::cmsg::send_with_fds(&sock, &encoded, &plan_fds)
        .context("sending the plan to the restorer")?;
    Ok((sock, plan.waits_for_files()))
}

/// Restores the saved /tmp and /dev/shm while the restorer rebuilds
/// memory, then waits for its report (and its userfaultfd when pages are
/// left lazy): an error names the step it failed at.
fn await_restorer(
    sock: &std::os::unix::net::UnixStream,
    loaded: &Loaded,
    sb: &Sandbox,
    lazy: bool,
    files_awaited: bool,
) -> Result<Rebuilt, RestoreError> {
    let files_at = Instant::now();
    crate::files::restore(sb.pid(), &loaded.state.files, &loaded.image, sb.uid())
        .context("restoring the sandbox's /tmp and /dev/shm")?;
    if files_awaited {
        // the restorer reopens files of /tmp only once they are there
        (&*sock)
            .write_all(&[r::FILES_BYTE])
            .context("telling the restorer its files are ready")?;
    }
    let files_ms = ms(files_at);
    let (uffd, first) = if lazy { recv_uffd(sock)? } else { (None, None) };
    let mut raw = [0u8; r::STATUS_BYTES];
    let start = match first {
        Some(b) => {
            raw[0] = b;
            1
        }
        None => 0,
    };
    (&*sock).read_exact(&mut raw[start..]).map_err(|e| {
        if matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ) {
            HostError::Failed(format!(
                "restorer did not report within {} s: {}",
                RESTORER_REPORT_DEADLINE.as_secs(),
                sb.log_tail(300)
            ))
        } else {
            HostError::Failed(format!(
                "restorer died before reporting ({e}): {}",
                sb.log_tail(300)
            ))
        }
    })?;
    let status = r::RestorerStatus::decode(&raw)
        .map_err(|e| Context::new("decoding the restorer's status", e))?;
    if !status.ok {
        return Err(RestoreError::Restorer {
            step: status.step,
            step_name: status.step_name(),
            detail: status.detail,
            errno: status.err,
        });
    }
    if lazy && uffd.is_none() {
        return Err(HostError::Failed("restorer did not send its userfaultfd".into()).into());
    }
    Ok(Rebuilt {
        status,
        uffd,
        files_ms,
    })
}

/// The page server of the sandbox's lazily restored memory, from `source`;
/// a fatal error of it kills the sandbox.
fn start_pager(
    sb: &Sandbox,
    uffd: OwnedFd,
    loaded: &Loaded,
    source: Arc<dyn PageSource>,
    record: bool,
) -> Result<PageServer, RestoreError> {
    let pid = sb.pid();
    let on_fatal = Box::new(move |why: &thaw_memory::ServeError| {
        tracing::error!("page server for pid {pid} failed: {why}; killing the sandbox");
        // SAFETY: signalling our own child; reaped by Sandbox::kill.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    });
    Ok(PageServer::spawn(
        uffd,
        loaded.layout.clone(),
        source,
        record,
        on_fatal,
    )?)
}

/// The go-ahead: the restorer unmaps itself and returns into the runtime,
/// which is then greeted with a fresh random seed.
fn resume(
    sb: &mut Sandbox,
    sock: &std::os::unix::net::UnixStream,
    threads: usize,
) -> Result<(), RestoreError> {
    (&*sock)
        .write_all(&[r::RESUME_BYTE])
        .context("resuming the runtime")?;
    let mut seed = [0u8; 32];
    rand::Rng::fill(&mut rand::thread_rng(), &mut seed[..]);
    // The main thread resumes without waiting for the others to leave the
    // trampoline: with threads it stays mapped, and a checkpoint leaves it
    // out of the snapshot once none is there.
    let trampoline = (r::TRAMP_ADDR, r::TRAMP_SIZE);
    sb.call(
        &thaw_sandbox::agent::Request::Restored {
            seed: hex::encode(seed),
            unmap: (threads == 1).then_some(trampoline),
        },
        Duration::from_secs(30),
    )
    .map_err(RestoreError::Resume)?;
    Ok(())
}

/// Has the page cache of the files the snapshot maps from the runtime root
/// hold their pieces mapped 2 MiB-aligned in 2 MiB folios and the rest in
/// large ones (`thaw_memory::huge_cache`): the runtime then faults each
/// 2 MiB piece in with one fault instead of one per 64 KiB window
/// (Node.js's `libnode.so`, ICU data), and the rest in batches. Each file
/// once per process: the files not done yet go to a thread, joined before
/// the runtime resumes (the first check of a file in small folios reads it
/// again). Best effort: a file that cannot be opened or read (not from the
/// root) is left as it is.
fn huge_code(
    root: &Path,
    vmas: &[thaw_snapshot_format::Vma],
) -> Option<std::thread::JoinHandle<()>> {
    type Spans = Vec<std::ops::Range<u64>>;
    static DONE: std::sync::Mutex<Vec<(std::path::PathBuf, String)>> =
        std::sync::Mutex::new(Vec::new());
    let mut files: Vec<(String, Spans)> = Vec::new();
    {
        let mut done = DONE.lock().unwrap_or_else(|e| e.into_inner());
        for v in vmas {
            let Some(path) = v.path.as_deref() else {
                continue;
            };
            // readable, and never above the root (the restorer opens it
            // inside the sandbox)
            if v.prot & libc::PROT_READ as u32 == 0 || path.split('/').any(|c| c == "..") {
                continue;
            }
            let id = (root.to_path_buf(), path.to_owned());
            let i = match files.iter().position(|(p, _)| p == path) {
                Some(i) => i,
                None if done.contains(&id) => continue,
                None => {
                    done.push(id);
                    files.push((path.to_owned(), Vec::new()));
                    files.len() - 1
                }
            };
            files[i].1.extend(thaw_memory::huge_cache::pmd_spans(
                v.start, v.end, v.file_off,
            ));
        }
    }
    if files.is_empty() {
        return None;
    }
    let root = root.to_path_buf();
    Some(std::thread::spawn(move || {
        let t = Instant::now();
        let n = files.len();
        let root_fd = match File::open(&root) {
            Ok(f) => OwnedFd::from(f),
            Err(e) => return tracing::debug!("huge code pages: opening {}: {e}", root.display()),
        };
        for (path, spans) in files {
            let tf = Instant::now();
            // never blocks (a FIFO of that name in the root), and ensure
            // leaves anything but a regular file alone
            let flags = libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY;
            let res = crate::fds::open_in_root(&root_fd, &path, flags)
                .map_err(thaw_memory::MemoryError::from)
                .and_then(|fd| thaw_memory::huge_cache::ensure(&File::from(fd), &spans));
            match res {
                Ok(o) => tracing::debug!("huge code pages: {path}: {o:?} in {:.3} ms", ms(tf)),
                Err(e) => tracing::debug!("huge code pages: {path}: {}", thaw_error::chain(&e)),
            }
        }
        tracing::debug!("huge code pages: {n} files checked in {:.2} ms", ms(t));
    }))
}

/// Identifies a snapshot's exact contents, for files derived from it.
pub fn snapshot_key(snap: &Snapshot) -> String {
    format!("{}:{}", snap.manifest.id, snap.manifest.memory.sha256)
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// Snapshots whose decoded state a process keeps at most (past it, all are
/// forgotten: each is read again at its next restore).
const STATE_CACHE_MAX: usize = 256;

/// `snap`'s process state, read, checked against the manifest and decoded
/// once per process and state (its directory and the manifest's checksum
/// of it), as the DRAM tier's images are: not at every restore (0.08 ms of
/// a Python restore, 0.16 of a Node.js one). A snapshot is immutable once
/// published; a changed state file comes with another checksum.
pub fn snapshot_state(snap: &Snapshot) -> Result<Arc<ProcessState>, RestoreError> {
    type States = HashMap<(std::path::PathBuf, String), Arc<ProcessState>>;
    static STATES: OnceLock<std::sync::Mutex<States>> = OnceLock::new();
    let states = STATES.get_or_init(Default::default);
    let key = (snap.dir.clone(), snap.manifest.state.sha256.clone());
    if let Some(s) = states.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return Ok(s.clone());
    }
    let state =
        ProcessState::decode(&snap.load_state()?).map_err(|source| RestoreError::State {
            dir: snap.dir.clone(),
            source,
        })?;
    let state = Arc::new(state);
    let mut held = states.lock().unwrap_or_else(|p| p.into_inner());
    if held.len() >= STATE_CACHE_MAX {
        held.clear();
    }
    held.insert(key, state.clone());
    Ok(state)
}

/// Whether a published snapshot's process state is of another format
/// version than this thaw's: one to take again, as the daemon and the
/// worker do (a corrupt state is not this: its restore fails naming it).
/// Decoded once per process and state, as [`snapshot_state`] keeps it.
pub fn of_another_version(snap: &Snapshot) -> bool {
    matches!(
        snapshot_state(snap),
        Err(RestoreError::State {
            source: thaw_snapshot_format::StateError::Version { .. },
            ..
        })
    )
}

/// The restorer `pread`s the runs it copies one after another, each a
/// synchronous trip to the device on a block tier. Asked for here, all at
/// once, they are read while the sandbox is being built and with the
/// device's whole queue depth; the restorer's reads then find them cached.
/// A hint only: if the kernel drops it, the restorer reads as before.
fn request_copies(image: &File, runs: &[r::PlanRun]) {
    let copies = runs
        .iter()
        .filter(|run| run.fill == r::FILL_COPY && run.img_fd == thaw_restore::IMAGE_FD);
    thaw_store::will_need_spans(image, copies.map(|run| (run.img_off, run.len)));
}

/// The restorer's plan: the strategy's memory plan inside the mappings,
/// plus the process state every restore carries.
fn build_plan(
    state: &ProcessState,
    memory: &mut MemoryPlan,
    uid: u32,
    network: bool,
) -> Result<r::Plan> {
    if memory.regions.len() != state.vmas.len() {
        fail!(
            HostError::Failed,
            "the memory plan has {} regions for {} mappings",
            memory.regions.len(),
            state.vmas.len()
        );
    }
    let mut plan = r::Plan {
        runs: std::mem::take(&mut memory.runs),
        ..r::Plan::default()
    };
    let mut paths: HashMap<&str, i32> = HashMap::new();
    for ((v, region), mp) in state
        .vmas
        .iter()
        .zip(&state.memory.regions)
        .zip(&memory.regions)
    {
        let mut flags = mp.flags;
        if region.anonymous {
            flags |= r::VMA_ANON;
        }
        if v.growsdown {
            flags |= r::VMA_GROWSDOWN;
        }
        let (path, shared) = match &v.shared {
            None => (v.path.as_deref(), 0),
            Some(b) => {
                // mapped from its backing, nothing else
                flags = r::VMA_SHARED;
                match b {
                    SharedBacking::File(p) => (Some(p.as_str()), 0),
                    SharedBacking::Object(i) => (None, *i),
                }
            }
        };
        let path_off = match path {
            Some(p) => *paths.entry(p).or_insert_with(|| plan.add_string(p)),
            None => -1,
        };
        plan.vmas.push(r::PlanVma {
            start: v.start,
            end: v.end,
            file_off: v.file_off,
            prot: v.prot,
            flags,
            path_off,
            first_run: u32::try_from(mp.first_run).context("a run index")?,
            n_runs: u32::try_from(mp.n_runs).context("a run count")?,
            shared,
        });
    }
    for o in &state.shared {
        let name_off = plan.add_string(&o.name);
        plan.shared.push(r::PlanShared {
            size: o.size,
            img_off: o.content.image_off,
            img_len: o.content.len,
            name_off,
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
        flags: if memory.lazy() { r::PLAN_LAZY } else { 0 },
        itimers: state.signals.itimers.map(|t| [t.interval_us, t.value_us]),
    };
    signal_plan(&state.signals, &mut plan);
    plan.auxv = state.auxv.clone();
    plan.filter = seccomp::filter_for(network);
    for t in &state.threads {
        let frame_off = plan.frame.len() as u64;
        let frame = sigframe::build(t, r::TRAMP_FRAME + frame_off)
            .with_context(|| format!("thread {}", t.name))?;
        plan.frame.extend_from_slice(&frame);
        let k = &t.kernel;
        plan.threads.push(r::PlanThread {
            frame_off,
            fs_base: t.regs[sigframe::FS_BASE],
            gs_base: t.regs[sigframe::GS_BASE],
            clear_tid: k.clear_tid,
            robust_head: k.robust_list.0,
            robust_len: k.robust_list.1,
            rseq_addr: k.rseq.0,
            rseq_len: k.rseq.1,
            rseq_sig: k.rseq.2,
            comm: r::PlanThread::comm_of(&t.name),
        });
    }
    Ok(plan)
}

/// The dispositions to set and the signals to queue again.
fn signal_plan(s: &thaw_snapshot_format::SignalState, plan: &mut r::Plan) {
    plan.sigactions = s
        .actions
        .iter()
        .map(|a| r::PlanSigaction {
            handler: a.handler,
            flags: a.flags,
            restorer: a.restorer,
            mask: a.mask,
            sig: a.sig,
            reserved: 0,
        })
        .collect();
    let queued = |to_main: u32, q: &[thaw_snapshot_format::QueuedSignal]| {
        q.iter()
            .map(|info| {
                let mut p = r::PlanSiginfo {
                    to_main,
                    ..r::PlanSiginfo::default()
                };
                // validated: every record is SIGINFO_BYTES long
                p.info.copy_from_slice(info);
                p
            })
            .collect::<Vec<_>>()
    };
    plan.siginfos = queued(0, &s.process_pending);
    plan.siginfos.extend(queued(1, &s.main_pending));
}

/// Receives the restorer's userfaultfd. If the restorer failed before sending
/// it, the byte read is the first of its status record and is handed back.
fn recv_uffd(sock: &std::os::unix::net::UnixStream) -> Result<(Option<OwnedFd>, Option<u8>)> {
    let (byte, got) = thaw_sandbox::cmsg::recv_one_byte(sock)?;
    if got.read != 1 {
        fail!(
            HostError::Failed,
            "restorer closed its socket before handing over userfaultfd"
        );
    }
    let mut fds = got.fds.into_iter();
    let fd = fds.next();
    if fds.next().is_some() {
        fail!(HostError::Failed, "restorer sent more than one descriptor");
    }
    match (byte, fd) {
        (b'U', Some(fd)) => Ok((Some(fd), None)),
        (b, None) => Ok((None, Some(b))),
        (_, Some(_)) => fail!(
            HostError::Failed,
            "restorer sent a descriptor with an unexpected tag"
        ),
    }
}
