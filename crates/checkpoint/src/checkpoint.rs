//! Checkpoint: freeze a runtime with ptrace, every thread of it, and write a
//! snapshot of its mappings, saved pages, each thread's CPU and kernel-side
//! state, and the files of its /tmp and /dev/shm. What a snapshot cannot
//! keep is named, all of it, by [`inspect`].
use crate::error::{CheckpointError, Result};
use crate::files::{self, Scan};
use crate::freeze::{
    freeze_outside_trampoline, task_ids, trampoline_leftover, wait_blocked_on_socket,
};
use crate::ptrace;
use crate::threads::capture_threads;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};
use thaw_error::{fail, Context, ResultExt};
use thaw_memory::pagemap;
use thaw_memory::{MemoryLayout, Region, Run, PAGE_LEN, PAGE_SIZE};
use thaw_sandbox::HostError;
use thaw_sandbox::{stat_fields, Sandbox};
use thaw_snapshot_format::{MmLayout, ProcessState, VdsoBlock, Vma, STATE_VERSION};
use thaw_store::{Snapshot, SnapshotWriter};

#[derive(Debug, Clone, Serialize)]
pub struct CheckpointReport {
    pub snapshot_id: String,
    pub regions: usize,
    pub saved_pages: u64,
    /// the whole image: saved pages and the saved files' contents
    pub image_bytes: u64,
    /// entries of /tmp and /dev/shm kept
    pub saved_files: usize,
    /// open descriptors kept (besides 0-3)
    pub saved_fds: usize,
    pub saved_file_bytes: u64,
    pub zero_pages_skipped: u64,
    pub freeze_ms: f64,
    /// times the freeze let the runtime go on because a thread was still in
    /// the restorer's trampoline (a just-restored instance), and froze it again
    pub trampoline_waits: u32,
    pub dump_ms: f64,
    pub total_ms: f64,
}

/// One line of /proc/PID/maps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapsLine {
    pub start: u64,
    pub end: u64,
    pub perms: String,
    pub offset: u64,
    /// (major, minor) of the device holding a file mapping
    pub dev: (u32, u32),
    pub inode: u64,
    pub name: String,
}

pub fn parse_maps(text: &str) -> Result<Vec<MapsLine>> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let mut it = l.splitn(6, ' ');
            let range = it.next().unwrap_or("");
            let perms = it.next().unwrap_or("").to_string();
            let offset = it.next().unwrap_or("");
            let dev = it.next().unwrap_or("");
            let inode = it.next().unwrap_or("");
            let name = it.next().unwrap_or("").trim_start().to_string();
            let (a, b) = range
                .split_once('-')
                .ok_or_else(|| HostError::Failed(format!("bad maps line {l:?}")))?;
            let hexp = |s: &str| {
                u64::from_str_radix(s, 16)
                    .map_err(|_| HostError::Failed(format!("bad maps line {l:?}")))
            };
            let hexp32 = |s: &str| {
                u32::from_str_radix(s, 16)
                    .map_err(|_| HostError::Failed(format!("bad maps line {l:?}")))
            };
            let (major, minor) = dev
                .split_once(':')
                .ok_or_else(|| HostError::Failed(format!("bad maps line {l:?}")))?;
            Ok(MapsLine {
                start: hexp(a)?,
                end: hexp(b)?,
                perms,
                offset: hexp(offset)?,
                dev: (hexp32(major)?, hexp32(minor)?),
                inode: inode
                    .parse()
                    .map_err(|_| HostError::Failed(format!("bad maps line {l:?}")))?,
                name,
            })
        })
        .collect()
}

/// One thing of an instance that a snapshot cannot keep: `kind` is
/// `thread`, `descriptor`, `mapping` or `files`; `detail` names it (the
/// thread's name, the descriptor's number and kind, the mapping, the file).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    pub kind: String,
    pub detail: String,
}

impl Refusal {
    pub fn new(kind: &str, detail: impl Into<String>) -> Refusal {
        Refusal {
            kind: kind.into(),
            detail: detail.into(),
        }
    }
}

/// A snapshot refused for what the instance holds (not a host failure):
/// every reason [`inspect`] found.
#[derive(Debug, Clone, thiserror::Error)]
pub struct NotCheckpointable {
    pub reasons: Vec<Refusal>,
}

impl std::fmt::Display for NotCheckpointable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the instance cannot be snapshotted: ")?;
        for (i, r) in self.reasons.iter().enumerate() {
            let sep = if i == 0 { "" } else { "; " };
            write!(f, "{sep}{}: {}", r.kind, r.detail)?;
        }
        Ok(())
    }
}

/// A thread the agent knows by its Python name (`native_id`: its id in
/// the sandbox's pid namespace).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct AgentThread {
    pub name: String,
    pub native_id: i64,
}

/// Where a runtime's files come from on the host: its read-only root, and
/// the directories mounted over it (a deployed function's code and
/// packages: (host directory, mount point)).
pub struct Origins<'a> {
    pub root: &'a Path,
    pub mounts: &'a [(std::path::PathBuf, &'static str)],
    /// a custom runtime's Runtime API connection whose call waits: not a
    /// file, but what the snapshot keeps live beside them
    pub runtime_api: Option<thaw_sandbox::runtime_api::PendingConn>,
}

impl Origins<'_> {
    fn of(sb: &Sandbox) -> Origins<'_> {
        Origins {
            root: sb.root(),
            mounts: sb.mounts(),
            runtime_api: sb.pending_runtime_api_conn(),
        }
    }

    /// The host file behind `inside`, a path as the runtime sees it.
    fn host_path(&self, root: &Path, inside: &str) -> std::path::PathBuf {
        for (dir, at) in self.mounts {
            if let Some(rest) = inside.strip_prefix(at).and_then(|r| r.strip_prefix('/')) {
                return dir.join(rest);
            }
        }
        root.join(inside.trim_start_matches('/'))
    }
}

/// Everything of runtime `pid` (with its files from `origins`) that stops a
/// snapshot, in one list: the one place refusals are made. Also returns
/// the scan of its /tmp and /dev/shm (content bytes over `files_cap` are
/// a refusal). Threads are captured, not refused; `_threads` (what the
/// agent told of its threads) stays for callers that name them.
pub fn inspect(
    pid: i32,
    origins: &Origins,
    _threads: &[AgentThread],
    files_cap: u64,
) -> Result<(Vec<Refusal>, Scan)> {
    let mut reasons = child_refusals(pid)?;
    reasons.extend(crate::fds::capture(pid, None, None)?.refusals);
    let maps = parse_maps(&std::fs::read_to_string(format!("/proc/{pid}/maps"))?)?;
    let root = origins.root.canonicalize()?;
    for m in &maps {
        if let Err(why) = mapping_path(m, &root, origins) {
            reasons.push(Refusal::new("mapping", why));
        }
    }
    let scan = files::scan(pid, files_cap)?;
    reasons.extend(scan.refusals.iter().cloned());
    Ok((reasons, scan))
}

/// Child processes: a snapshot holds one process (its threads, all of them).
fn child_refusals(pid: i32) -> Result<Vec<Refusal>> {
    let mut out = Vec::new();
    for tid in task_ids(pid)? {
        let kids =
            std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/children")).unwrap_or_default();
        for child in kids.split_whitespace() {
            let comm = std::fs::read_to_string(format!("/proc/{child}/comm")).unwrap_or_default();
            out.push(Refusal::new(
                "process",
                format!("child process {child} ({})", comm.trim()),
            ));
        }
    }
    Ok(out)
}

/// Where a mapping comes back from: `None` for anonymous memory, the path
/// inside the sandbox for a file; `Err` says why it cannot come back.
/// A file mapping must be that very file (same device and inode) of the
/// read-only runtime root or of a directory mounted over it (`origins`):
/// a restore reopens it by path there. Read-only
/// shared file mappings (glibc's gconv cache, say) come back as private
/// ones: same bytes, and the root is read-only anyway.
fn mapping_path(
    m: &MapsLine,
    root: &Path,
    origins: &Origins,
) -> std::result::Result<Option<String>, String> {
    use std::os::unix::fs::MetadataExt;
    if matches!(
        m.name.as_str(),
        "[vvar]" | "[vvar_vclock]" | "[vdso]" | "[vsyscall]"
    ) {
        return Ok(None);
    }
    if crate::shared_maps::handles(m) {
        // kept with its backing (see shared_maps), or refused there
        return match crate::shared_maps::refusal(m) {
            Some(why) => Err(why),
            None => Ok(None),
        };
    }
    if m.inode == 0 {
        return Ok(None);
    }
    if m.name.ends_with(" (deleted)") {
        return Err(format!("maps a deleted file {}", m.name));
    }
    let root_s = root.to_string_lossy();
    let inside = if root_s != "/" {
        m.name.strip_prefix(root_s.as_ref()).unwrap_or(&m.name)
    } else {
        &m.name
    };
    let host = origins.host_path(root, inside);
    let same = inside.starts_with('/')
        && std::fs::metadata(&host).is_ok_and(|st| {
            let (maj, min) = (libc::major(st.dev()), libc::minor(st.dev()));
            st.ino() == m.inode && (maj, min) == m.dev
        });
    if !same {
        return Err(format!(
            "maps {} at {:#x}-{:#x} (device {:x}:{:x}, inode {}), which is not that file of its read-only runtime root or of the function's code or packages (a file on the sandbox's private /tmp, or a replaced one); a restore could not reopen it",
            m.name, m.start, m.end, m.dev.0, m.dev.1, m.inode
        ));
    }
    Ok(Some(inside.to_string()))
}

fn prot_of(perms: &str) -> u32 {
    let b = perms.as_bytes();
    let mut p = 0;
    if b.first() == Some(&b'r') {
        p |= libc::PROT_READ as u32;
    }
    if b.get(1) == Some(&b'w') {
        p |= libc::PROT_WRITE as u32;
    }
    if b.get(2) == Some(&b'x') {
        p |= libc::PROT_EXEC as u32;
    }
    p
}

/// Freezes the sandbox's runtime and writes a snapshot to `dir`. The runtime
/// keeps running afterwards.
pub fn checkpoint(
    sb: &mut Sandbox,
    dir: &Path,
    function: &str,
    root_hash: &str,
) -> Result<(Snapshot, CheckpointReport), CheckpointError> {
    let t0 = Instant::now();
    let prep = sb
        .call_raw(
            &thaw_sandbox::agent::Request::PrepareCheckpoint,
            Duration::from_secs(30),
        )
        .map_err(CheckpointError::Prepare)?;
    let threads: Vec<AgentThread> = prep
        .get("threads")
        .and_then(|t| serde_json::from_value(t.clone()).ok())
        .unwrap_or_default();
    let split =
        thaw_sandbox::agent::split_ok(prep).map_err(|e| CheckpointError::Prepare(e.into()))?;
    let agent_refused = match split {
        Ok(_) => None,
        Err(e) if e.kind() == thaw_sandbox::agent::ErrorKind::NotCheckpointable => Some(e.message),
        Err(e) => return Err(CheckpointError::Prepare(e.into())),
    };
    let pid = sb.pid();
    // a custom runtime's bootstrap waits on its Runtime API connection
    // (`prepare_checkpoint` made sure), not on fd 3
    if !sb.is_custom_runtime() {
        wait_blocked_on_socket(pid)?;
    }
    let cap = sb.memory_limit();
    let (mut reasons, _) = inspect(pid, &Origins::of(sb), &threads, cap)?;
    if let (Some(message), true) = (agent_refused, reasons.is_empty()) {
        // the agent saw something the host does not: its word stands
        reasons.push(Refusal::new("agent", message));
    }
    if !reasons.is_empty() {
        return Err(NotCheckpointable { reasons }.into());
    }
    let mut frozen = Vec::new();
    let res = freeze_outside_trampoline(pid, &mut frozen)
        .map_err(|e| match e {
            CheckpointError::Other(e) => Context::new("freezing the runtime", e).into(),
            e => e,
        })
        .and_then(|waits| {
            let freeze_ms = t0.elapsed().as_secs_f64() * 1e3;
            dump(
                pid,
                &frozen,
                &Origins::of(sb),
                dir,
                function,
                root_hash,
                cap,
            )
            .map(|(s, mut r)| {
                r.freeze_ms = freeze_ms;
                r.trampoline_waits = waits;
                (s, r)
            })
        });
    let detached: Result<Vec<()>> = frozen.iter().map(|&tid| ptrace::detach(tid)).collect();
    let (snap, mut report) = res?;
    detached?;
    report.total_ms = t0.elapsed().as_secs_f64() * 1e3;
    Ok((snap, report))
}

fn dump(
    pid: i32,
    tids: &[i32],
    origins: &Origins,
    dir: &Path,
    function: &str,
    root_hash: &str,
    files_cap: u64,
) -> Result<(Snapshot, CheckpointReport), CheckpointError> {
    let runtime_api = origins.runtime_api;
    let t = Instant::now();
    // the frozen runtime must still hold nothing a snapshot cannot keep
    let (reasons, scan) = inspect(pid, origins, &[], files_cap)?;
    if !reasons.is_empty() {
        return Err(NotCheckpointable { reasons }.into());
    }
    let maps = parse_maps(&std::fs::read_to_string(format!("/proc/{pid}/maps"))?)?;
    let (threads, signals) = capture_threads(pid, tids, &maps)?;
    // the calls run in the threads may have grown a stack: read the maps again
    let maps = parse_maps(&std::fs::read_to_string(format!("/proc/{pid}/maps"))?)?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let sf = stat_fields(&stat)?;
    let auxv_raw = std::fs::read(format!("/proc/{pid}/auxv"))?;
    let auxv: Vec<u64> = auxv_raw
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))?;
    let argv = cmdline
        .split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into())
        .collect();

    let root = origins.root.canonicalize()?;
    let mut vmas = Vec::new();
    let mut vma_lines = Vec::new();
    let mut vdso_lines = Vec::new();
    for m in &maps {
        match m.name.as_str() {
            "[vvar]" | "[vvar_vclock]" | "[vdso]" => {
                vdso_lines.push(m.clone());
                continue;
            }
            "[vsyscall]" => continue,
            _ if trampoline_leftover(m) => continue,
            _ => {}
        }
        let path = mapping_path(m, &root, origins)
            .map_err(|why| HostError::Failed(format!("runtime {why}")))?;
        vmas.push(Vma {
            start: m.start,
            end: m.end,
            prot: prot_of(&m.perms),
            path,
            file_off: m.offset,
            growsdown: m.name == "[stack]",
            name: m.name.clone(),
            shared: None,
        });
        vma_lines.push(m);
    }
    let vdso = vdso_block(&vdso_lines)?;
    let heap_end = maps.iter().find(|m| m.name == "[heap]").map(|m| m.end);
    let start_brk = sf.field(47)?;
    let mm = MmLayout {
        start_code: sf.field(26)?,
        end_code: sf.field(27)?,
        start_stack: sf.field(28)?,
        start_data: sf.field(45)?,
        end_data: sf.field(46)?,
        start_brk,
        brk: heap_end.unwrap_or(start_brk).max(start_brk),
        arg_start: sf.field(48)?,
        arg_end: sf.field(49)?,
        env_start: sf.field(50)?,
        env_end: sf.field(51)?,
    };

    // pages: anonymous memory that is present, and privately modified pages of
    // file mappings (the rest comes back from the file itself)
    let pagemap = pagemap::open(pid).context("opening the runtime's pagemap")?;
    let mem = File::open(format!("/proc/{pid}/mem"))?;
    let mut w = SnapshotWriter::create(dir)?;
    // Privately modified pages of file mappings go first: every strategy
    // copies them before resume, and one contiguous section reads sequentially.
    let mut regions: Vec<Option<Region>> = vec![None; vmas.len()];
    let mut zero_skipped = 0u64;
    let mut pm = Vec::new();
    let mut buf = Vec::new();
    for pass_anon in [false, true] {
        for (vi, v) in vmas.iter().enumerate() {
            if crate::shared_maps::handles(vma_lines[vi]) {
                // its pages are its backing's: no runs
                regions[vi] = Some(Region {
                    start: v.start,
                    end: v.end,
                    anonymous: false,
                    runs: Vec::new(),
                });
                continue;
            }
            if v.path.is_none() != pass_anon {
                continue;
            }
            let runs = dump_vma(
                v,
                &pagemap,
                &mem,
                &mut w,
                &mut pm,
                &mut buf,
                &mut zero_skipped,
            )?;
            regions[vi] = Some(Region {
                start: v.start,
                end: v.end,
                anonymous: pass_anon,
                runs,
            });
        }
    }
    let regions: Vec<Region> = regions
        .into_iter()
        .map(|r| r.expect("every mapping dumped"))
        .collect();
    let memory = MemoryLayout {
        regions,
        image_len: w.memory_len(),
    };
    // the files' contents follow the pages: same checksum, moves, streams
    let mut saved = scan.entries;
    files::save(pid, &mut saved, &mut |data| w.append_memory(data))?;
    let files_end = w.memory_len();
    // shared mappings: their backing, the objects' contents after the files'
    let shared = match crate::shared_maps::capture(pid, &vma_lines, files_cap, &mut |data| {
        w.append_memory(data)
    })? {
        Ok(c) => c,
        Err(reasons) => return Err(NotCheckpointable { reasons }.into()),
    };
    for (v, b) in vmas.iter_mut().zip(shared.backing) {
        v.shared = b;
    }
    // the descriptors, their contents after the files'; connected network
    // sockets are shut down here, after the before_snapshot hook
    let mut fds = crate::fds::capture(pid, Some(&mut |data| w.append_memory(data)), runtime_api)?;
    if runtime_api.is_some() && !crate::fds::kept_connection(&fds.fds) {
        fds.refusals.push(Refusal::new(
            "descriptor",
            "the bootstrap's waiting Runtime API connection is not among its descriptors",
        ));
    }
    if !fds.refusals.is_empty() {
        return Err(NotCheckpointable {
            reasons: fds.refusals,
        }
        .into());
    }
    let state = ProcessState {
        version: STATE_VERSION,
        threads,
        mm,
        auxv,
        vdso,
        vmas,
        memory,
        argv,
        files: saved,
        fds: fds.fds,
        signals,
        shared: shared.objects,
    };
    // what we write must be what a restore accepts
    let encoded = state.encode();
    ProcessState::decode(&encoded).context("the snapshot just taken does not validate")?;
    let id = dir
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let report = CheckpointReport {
        snapshot_id: id.clone(),
        regions: state.vmas.len(),
        saved_pages: state.memory.saved_bytes() / PAGE_SIZE,
        image_bytes: w.memory_len(),
        saved_files: state.files.len(),
        saved_fds: state.fds.len(),
        saved_file_bytes: files_end - state.memory.image_len,
        zero_pages_skipped: zero_skipped,
        freeze_ms: 0.0,
        trampoline_waits: 0,
        dump_ms: t.elapsed().as_secs_f64() * 1e3,
        total_ms: 0.0,
    };
    let snap = w.finish(&id, function, root_hash, &encoded)?;
    Ok((snap, report))
}

/// Zero pages an anonymous mapping's image may hold to join two runs (or
/// to reach the mapping's ends), so that the mapping comes back with one
/// `mmap` of the image instead of an anonymous mapping with one per run
/// on top (each costs 1.3-2.7 us here, and leaves one more VMA). Bounded:
/// at most this many zero pages per join.
const JOIN_GAP_PAGES: u64 = 8;

/// Saves one mapping's pages; returns its runs in the image. Anonymous
/// pages that are all zero come back as zero pages and are left out,
/// unless a short gap joins two runs (see [`JOIN_GAP_PAGES`]).
fn dump_vma(
    v: &Vma,
    pagemap: &File,
    mem: &File,
    w: &mut SnapshotWriter,
    pm: &mut Vec<u64>,
    buf: &mut Vec<u8>,
    zero_skipped: &mut u64,
) -> Result<Vec<Run>, CheckpointError> {
    let anon = v.path.is_none();
    let npages = ((v.end - v.start) / PAGE_SIZE) as usize;
    pagemap::read(pagemap, v.start, v.end, pm)
        .with_context(|| format!("reading the pagemap of {}", v.name))?;
    let saved = |i: usize| {
        let e = pm[i];
        if anon {
            e & (pagemap::PRESENT | pagemap::SWAPPED) != 0
        } else {
            e & pagemap::SWAPPED != 0 || (e & pagemap::PRESENT != 0 && e & pagemap::FILE == 0)
        }
    };
    // a growing stack keeps its anonymous mapping (MAP_GROWSDOWN): its
    // ends are not joined to the image
    let join_ends = anon && !v.growsdown;
    let mut runs: Vec<Run> = Vec::new();
    // zero pages left out since the last page saved (a join saves them)
    let mut zeros_since = 0u64;
    let mut i = 0;
    while i < npages {
        if !saved(i) {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < npages && saved(j) && j - i < 256 {
            j += 1;
        }
        let addr = v.start + i as u64 * PAGE_SIZE;
        buf.resize((j - i) * PAGE_LEN, 0);
        mem.read_exact_at(buf, addr)
            .with_context(|| format!("reading runtime memory at {addr:#x} ({})", v.name))?;
        for (k, page) in buf.chunks_exact(PAGE_LEN).enumerate() {
            let a = addr + k as u64 * PAGE_SIZE;
            if anon && page.iter().all(|&b| b == 0) {
                *zero_skipped += 1; // comes back as a zero page
                zeros_since += 1;
                continue;
            }
            // where the run this page joins would start: the last run's
            // end, or the mapping's start for a mapping's first run
            let joined_from = match runs.last() {
                Some(r) => r.addr + r.len,
                None if join_ends => v.start,
                None => a,
            };
            let gap = (a - joined_from) / PAGE_SIZE;
            let joins = anon && gap > 0 && gap <= JOIN_GAP_PAGES;
            let from = if joins { joined_from } else { a };
            if joins {
                *zero_skipped -= zeros_since;
                append_zero_pages(w, gap)?;
            }
            zeros_since = 0;
            let off = w.append_memory(page)?;
            let off = off - (a - from);
            match runs.last_mut() {
                Some(r) if r.addr + r.len == from && r.file_off + r.len == off => {
                    r.len += a + PAGE_SIZE - from
                }
                _ => runs.push(Run {
                    addr: from,
                    len: a + PAGE_SIZE - from,
                    file_off: off,
                }),
            }
        }
        i = j;
    }
    if join_ends {
        if let Some(r) = runs.last_mut() {
            let gap = (v.end - (r.addr + r.len)) / PAGE_SIZE;
            if gap > 0 && gap <= JOIN_GAP_PAGES && w.memory_len() == r.file_off + r.len {
                *zero_skipped -= zeros_since;
                append_zero_pages(w, gap)?;
                r.len += gap * PAGE_SIZE;
            }
        }
    }
    Ok(runs)
}

fn append_zero_pages(w: &mut SnapshotWriter, pages: u64) -> Result<(), CheckpointError> {
    const ZERO: [u8; PAGE_LEN] = [0; PAGE_LEN];
    for _ in 0..pages {
        w.append_memory(&ZERO)?;
    }
    Ok(())
}

fn vdso_block(lines: &[MapsLine]) -> Result<VdsoBlock> {
    let vdso = lines
        .iter()
        .find(|m| m.name == "[vdso]")
        .ok_or_else(|| HostError::Failed("runtime has no [vdso]".into()))?;
    let start = lines.iter().map(|m| m.start).min().unwrap_or(vdso.start);
    let mut pieces = Vec::new();
    let mut expect = start;
    for m in lines {
        if m.start != expect {
            fail!(
                HostError::Failed,
                "[vvar]/[vdso] mappings are not contiguous"
            );
        }
        pieces.push((m.start - start, m.end - m.start));
        expect = m.end;
    }
    Ok(VdsoBlock {
        start,
        vdso_offset: vdso.start - start,
        pieces,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use thaw_memory::usize_of;

    #[test]
    fn maps_lines_parse_including_spaces_in_names() {
        let t = "555555554000-555555556000 r--p 00000000 fe:00 123   /usr/bin/my prog\n7ffff7fc2000-7ffff7fc6000 r--p 00000000 00:00 0 [vvar]\n7ffff7fc8000-7ffff7fca000 rw-p 00000000 00:00 0 \n";
        let m = parse_maps(t).unwrap();
        assert_eq!(m.len(), 3);
        assert_eq!(m[0].name, "/usr/bin/my prog");
        assert_eq!(m[0].inode, 123);
        assert_eq!(m[1].name, "[vvar]");
        assert_eq!(m[2].name, "");
        assert!(parse_maps("zz-yy r--p 0 0 0").is_err());
        assert_eq!(prot_of("r-xp"), 5);
    }

    /// An anonymous mapping of this test process with content on pages
    /// `content` (a byte of their index) and zeros written on pages
    /// `zeroed` (present, all zero), dumped as a checkpoint dumps it: its
    /// runs, the image bytes, and the zero pages left out.
    fn dump_own_mapping(
        pages: u64,
        content: &[u64],
        zeroed: &[u64],
        growsdown: bool,
    ) -> (Vec<Run>, Vec<u8>, Vec<u8>, u64) {
        let len = usize_of(pages * PAGE_SIZE);
        // SAFETY: a fresh private anonymous mapping, unmapped below; only
        // this function touches it.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED);
        // SAFETY: `base` maps `len` bytes, readable and writable.
        let mem_slice = unsafe { std::slice::from_raw_parts_mut(base as *mut u8, len) };
        for &p in zeroed {
            let at = usize_of(p * PAGE_SIZE);
            mem_slice[at] = 1; // present...
            mem_slice[at] = 0; // ...and all zero
        }
        for &p in content {
            mem_slice[usize_of(p * PAGE_SIZE) + 7] = u8::try_from(p).unwrap() + 1;
        }
        let start = base as u64;
        let v = Vma {
            start,
            end: start + pages * PAGE_SIZE,
            prot: (libc::PROT_READ | libc::PROT_WRITE) as u32,
            path: None,
            file_off: 0,
            growsdown,
            name: "test mapping".into(),
            shared: None,
        };
        let scratch = std::env::temp_dir().join(format!(
            "thaw-dump-vma-{}-{}-{growsdown}",
            std::process::id(),
            start
        ));
        let mut w = SnapshotWriter::create(&scratch.join("snap")).unwrap();
        let pagemap = pagemap::open(i32::try_from(std::process::id()).unwrap()).unwrap();
        let mem = File::open("/proc/self/mem").unwrap();
        let (mut pm, mut buf, mut zero_skipped) = (Vec::new(), Vec::new(), 0);
        let runs = dump_vma(
            &v,
            &pagemap,
            &mem,
            &mut w,
            &mut pm,
            &mut buf,
            &mut zero_skipped,
        )
        .unwrap();
        let tmp = std::fs::read_dir(&scratch)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.join("memory.img").exists())
            .expect("the writer's scratch directory");
        let image = std::fs::read(tmp.join("memory.img")).unwrap();
        let copy = mem_slice.to_vec();
        drop(w);
        let _ = std::fs::remove_dir_all(&scratch);
        // SAFETY: mapped above, no reference into it is used after this.
        unsafe { libc::munmap(base, len) };
        let runs = runs
            .into_iter()
            .map(|r| Run {
                addr: (r.addr - start) / PAGE_SIZE,
                len: r.len / PAGE_SIZE,
                file_off: r.file_off,
            })
            .collect();
        (runs, image, copy, zero_skipped)
    }

    #[test]
    fn short_zero_gaps_join_an_anonymous_mappings_runs() {
        // content on 2, 3, 6 (gaps of 2 and 2: joined, from the start), on
        // 30 (23 pages after: a run of its own) and 37 (6 after: joined),
        // and the last 2 pages joined to it; page 4 is present but zero
        // (inside a join: saved), page 10 too (left out)
        let (runs, image, mem, zero_skipped) =
            dump_own_mapping(40, &[2, 3, 6, 30, 37], &[4, 10], false);
        let pages: Vec<(u64, u64)> = runs.iter().map(|r| (r.addr, r.len)).collect();
        assert_eq!(pages, vec![(0, 7), (30, 10)]);
        assert_eq!(zero_skipped, 1);
        assert_eq!(image.len() as u64, 17 * PAGE_SIZE);
        for r in &runs {
            let (m, i) = (usize_of(r.addr * PAGE_SIZE), usize_of(r.file_off));
            let n = usize_of(r.len * PAGE_SIZE);
            assert_eq!(&image[i..i + n], &mem[m..m + n], "run at page {}", r.addr);
        }
        // a growing stack keeps its anonymous ends
        let (runs, ..) = dump_own_mapping(40, &[2, 3, 6, 30, 37], &[], true);
        let pages: Vec<(u64, u64)> = runs.iter().map(|r| (r.addr, r.len)).collect();
        assert_eq!(pages, vec![(2, 5), (30, 8)]);
    }

    #[test]
    fn vdso_block_must_be_contiguous() {
        let l = |s: u64, e: u64, n: &str| MapsLine {
            start: s,
            end: e,
            perms: "r--p".into(),
            offset: 0,
            dev: (0, 0),
            inode: 0,
            name: n.into(),
        };
        let b = vdso_block(&[
            l(0x1000, 0x5000, "[vvar]"),
            l(0x5000, 0x7000, "[vvar_vclock]"),
            l(0x7000, 0x9000, "[vdso]"),
        ])
        .unwrap();
        assert_eq!(b.vdso_offset, 0x6000);
        assert_eq!(
            b.pieces,
            vec![(0, 0x4000), (0x4000, 0x2000), (0x6000, 0x2000)]
        );
        assert!(vdso_block(&[l(0x1000, 0x2000, "[vvar]"), l(0x3000, 0x4000, "[vdso]")]).is_err());
    }
}
