//! Checkpoint: freeze a runtime with ptrace, every thread of it, and write a
//! snapshot of its mappings, saved pages and each thread's CPU and
//! kernel-side state.
use crate::ptrace::{self, REG_ORIG_RAX, REG_RIP};
use crate::sigframe;
use crate::state::{
    MmLayout, ProcessState, ThreadKernel, ThreadState, VdsoBlock, Vma, STATE_VERSION,
};
use crate::{stat_fields, Sandbox};
use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};
use thaw_memory::pagemap;
use thaw_memory::{MemoryLayout, Region, Run, PAGE_SIZE};
use thaw_store::{Snapshot, SnapshotWriter};

#[derive(Debug, Clone, Serialize)]
pub struct CheckpointReport {
    pub snapshot_id: String,
    pub regions: usize,
    pub saved_pages: u64,
    pub image_bytes: u64,
    pub zero_pages_skipped: u64,
    pub freeze_ms: f64,
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
                .ok_or_else(|| anyhow!("bad maps line {l:?}"))?;
            let hexp =
                |s: &str| u64::from_str_radix(s, 16).map_err(|_| anyhow!("bad maps line {l:?}"));
            let (major, minor) = dev
                .split_once(':')
                .ok_or_else(|| anyhow!("bad maps line {l:?}"))?;
            Ok(MapsLine {
                start: hexp(a)?,
                end: hexp(b)?,
                perms,
                offset: hexp(offset)?,
                dev: (hexp(major)? as u32, hexp(minor)? as u32),
                inode: inode.parse().map_err(|_| anyhow!("bad maps line {l:?}"))?,
                name,
            })
        })
        .collect()
}

/// Waits until the agent is blocked reading its socket (fd 3), so the frozen
/// registers sit at a clean, restartable point.
pub(crate) fn wait_blocked_on_socket(pid: i32) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let sc = std::fs::read_to_string(format!("/proc/{pid}/syscall")).unwrap_or_default();
        let mut f = sc.split_whitespace();
        let nr = f.next().unwrap_or("");
        let fd = f.next().unwrap_or("");
        // read(0), recvfrom(45), recvmsg(47) on fd 3
        if matches!(nr, "0" | "45" | "47") && fd == "0x3" {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "runtime never went back to waiting on its socket (syscall: {})",
                sc.trim()
            );
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Refuses runtimes holding anything but stdio and the control socket, or
/// with child processes.
fn check_cooperative(pid: i32) -> Result<()> {
    for e in std::fs::read_dir(format!("/proc/{pid}/fd"))? {
        let e = e?;
        let name = e.file_name().to_string_lossy().to_string();
        let fd: i32 = name.parse().unwrap_or(-1);
        if !(0..=3).contains(&fd) {
            let target = std::fs::read_link(e.path())
                .map(|p| p.display().to_string())
                .unwrap_or_default();
            bail!("runtime holds descriptor {name} ({target}); only 0-2 and the control socket 3 may be open at checkpoint");
        }
    }
    for tid in task_ids(pid)? {
        let kids =
            std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/children")).unwrap_or_default();
        if let Some(child) = kids.split_whitespace().next() {
            let comm = std::fs::read_to_string(format!("/proc/{child}/comm")).unwrap_or_default();
            bail!(
                "runtime has a child process {child} ({}); child processes are not captured in a snapshot",
                comm.trim()
            );
        }
    }
    Ok(())
}

/// The process's thread ids, the main thread first.
fn task_ids(pid: i32) -> Result<Vec<i32>> {
    let mut tids: Vec<i32> = std::fs::read_dir(format!("/proc/{pid}/task"))?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_by_key(|&t| (t != pid, t));
    Ok(tids)
}

/// A thread's name (`comm`), for refusals.
fn thread_name(pid: i32, tid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into())
}

/// How long a thread may take to stop before the checkpoint is refused.
const STOP_DEADLINE: Duration = Duration::from_secs(2);

/// Seizes and stops every thread of `pid` into `frozen` (main first),
/// listing /proc/PID/task again until no thread is left running (one may
/// be cloning another while we list).
fn freeze_all(pid: i32, frozen: &mut Vec<i32>) -> Result<()> {
    loop {
        let mut new = Vec::new();
        for tid in task_ids(pid)? {
            if frozen.contains(&tid) {
                continue;
            }
            match ptrace::seize(tid) {
                Ok(()) => {}
                // gone between the listing and the seize
                Err(_) if !Path::new(&format!("/proc/{pid}/task/{tid}")).exists() => continue,
                Err(e) => return Err(e),
            }
            frozen.push(tid);
            ptrace::interrupt(tid)?;
            new.push(tid);
        }
        if new.is_empty() {
            return Ok(());
        }
        let deadline = Instant::now() + STOP_DEADLINE;
        for tid in new {
            let stop = ptrace::wait_stop_until(tid, deadline)?;
            if stop == ptrace::Stop::Exited {
                frozen.retain(|&t| t != tid);
            }
            if stop == ptrace::Stop::Running {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat"))
                    .unwrap_or_default();
                let state = stat
                    .rsplit(')')
                    .next()
                    .unwrap_or("")
                    .split_whitespace()
                    .next();
                bail!(
                    "thread {} (tid {tid}) did not stop within {} s (state {}): it is inside a call that cannot be interrupted",
                    thread_name(pid, tid),
                    STOP_DEADLINE.as_secs(),
                    state.unwrap_or("?")
                );
            }
        }
    }
}

/// System calls a restored thread cannot re-issue: they act on child
/// processes or on the process's own life. (One that completed is fine: its
/// result is in the registers.)
const NOT_RESTARTABLE: &[(u64, &str)] = &[
    (56, "clone"),
    (57, "fork"),
    (58, "vfork"),
    (59, "execve"),
    (60, "exit"),
    (61, "wait4"),
    (231, "exit_group"),
    (247, "waitid"),
    (322, "execveat"),
    (435, "clone3"),
];

/// One stopped thread's state. Runs two calls inside it (its
/// `clear_child_tid`, its alternate signal stack) and leaves it with the
/// registers a restore resumes it with, so the original goes on exactly as
/// a restored copy does.
fn capture_thread(pid: i32, tid: i32, gadget: u64, mem: &File) -> Result<ThreadState> {
    let name = thread_name(pid, tid);
    let regs = ptrace::get_regs(tid)?;
    let (lo, hi) = (
        thaw_restorer::RESTORER_BASE,
        thaw_restorer::RESTORER_BASE + thaw_restorer::RESTORER_SPAN,
    );
    if (lo..hi).contains(&regs[REG_RIP]) {
        bail!("thread {name} (tid {tid}) is still in the restorer's trampoline");
    }
    let nr = regs[REG_ORIG_RAX];
    let call = NOT_RESTARTABLE.iter().find(|(n, _)| *n == nr);
    if let (Some((_, call)), true) = (call, ptrace::reissues(&regs)) {
        bail!("thread {name} (tid {tid}) is inside {call}, which a restore cannot re-issue");
    }
    let mut resume = regs;
    ptrace::prepare_for_resume(&mut resume);
    let xstate = ptrace::get_xstate(tid)?;
    let sigmask = ptrace::get_sigmask(tid)?;
    let rseq = ptrace::get_rseq(tid)?;
    let robust_list = ptrace::get_robust_list(tid)?;
    let injector = ptrace::Injector {
        tid,
        gadget,
        mem,
        regs,
    };
    let injected = injector.tid_address_and_altstack();
    ptrace::set_regs(tid, &resume)?;
    let (clear_tid, altstack) = injected.with_context(|| format!("thread {name} (tid {tid})"))?;
    Ok(ThreadState {
        name,
        regs: resume.to_vec(),
        xstate,
        sigmask,
        kernel: ThreadKernel {
            altstack,
            robust_list,
            clear_tid,
            rseq,
        },
    })
}

/// The address of a `syscall` instruction (0f 05) in the runtime's vDSO,
/// for calls run inside its threads.
fn syscall_gadget(maps: &[MapsLine], mem: &File) -> Result<u64> {
    let vdso = maps
        .iter()
        .find(|m| m.name == "[vdso]")
        .ok_or_else(|| anyhow!("runtime has no [vdso]"))?;
    let mut code = vec![0u8; (vdso.end - vdso.start) as usize];
    mem.read_exact_at(&mut code, vdso.start)
        .context("reading the runtime's vDSO")?;
    let at = code
        .windows(2)
        .position(|w| w == [0x0f, 0x05])
        .ok_or_else(|| anyhow!("the vDSO holds no syscall instruction"))?;
    Ok(vdso.start + at as u64)
}

/// Every thread's state, main first; refuses what a restore cannot resume.
fn capture_threads(pid: i32, tids: &[i32], maps: &[MapsLine]) -> Result<Vec<ThreadState>> {
    if tids.len() > thaw_restorer::MAX_THREADS {
        bail!(
            "runtime has {} threads; a snapshot holds at most {}",
            tids.len(),
            thaw_restorer::MAX_THREADS
        );
    }
    let mem = File::options()
        .read(true)
        .write(true)
        .open(format!("/proc/{pid}/mem"))?;
    let gadget = syscall_gadget(maps, &mem)?;
    let threads = tids
        .iter()
        .map(|&tid| capture_thread(pid, tid, gadget, &mem))
        .collect::<Result<Vec<_>>>()?;
    // what a restore will build: each frame valid, all of them in the trampoline
    let mut frames = 0u64;
    for t in &threads {
        frames += sigframe::build(t, thaw_restorer::TRAMP_FRAME)
            .with_context(|| format!("thread {}", t.name))?
            .len() as u64;
    }
    if frames > thaw_restorer::MAX_FRAME_BYTES {
        bail!(
            "{} threads need {frames} bytes of resume frames; a restore has room for {}",
            threads.len(),
            thaw_restorer::MAX_FRAME_BYTES
        );
    }
    Ok(threads)
}

/// A file mapping must be backed by that very file of the read-only runtime
/// root (same device and inode): a restore reopens it by path there. A file
/// on the sandbox's private /tmp, or one replaced since, could never restore.
fn check_in_root(m: &MapsLine, root: &Path, inside: &str) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let host = root.join(inside.trim_start_matches('/'));
    let same = std::fs::metadata(&host).is_ok_and(|st| {
        let (maj, min) = (libc::major(st.dev()), libc::minor(st.dev()));
        st.ino() == m.inode && (maj, min) == m.dev
    });
    if !same {
        bail!(
            "runtime maps {} at {:#x}-{:#x} (device {:x}:{:x}, inode {}), which is not that file of its read-only runtime root              (a file on the sandbox's private /tmp, or a replaced one); a restore could not reopen it, so the snapshot is refused",
            m.name,
            m.start,
            m.end,
            m.dev.0,
            m.dev.1,
            m.inode
        );
    }
    Ok(())
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
) -> Result<(Snapshot, CheckpointReport)> {
    let t0 = Instant::now();
    sb.call(
        &crate::agent::Request::PrepareCheckpoint,
        Duration::from_secs(30),
    )
    .context("agent refused to prepare for checkpoint")?;
    let pid = sb.pid();
    wait_blocked_on_socket(pid)?;
    check_cooperative(pid)?;
    let mut frozen = Vec::new();
    let res = freeze_all(pid, &mut frozen)
        .context("freezing the runtime")
        .and_then(|()| {
            let freeze_ms = t0.elapsed().as_secs_f64() * 1e3;
            dump(pid, &frozen, sb.root(), dir, function, root_hash).map(|(s, mut r)| {
                r.freeze_ms = freeze_ms;
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
    root: &Path,
    dir: &Path,
    function: &str,
    root_hash: &str,
) -> Result<(Snapshot, CheckpointReport)> {
    let t = Instant::now();
    // the frozen runtime must still hold only our descriptors
    check_cooperative(pid)?;
    let maps = parse_maps(&std::fs::read_to_string(format!("/proc/{pid}/maps"))?)?;
    let threads = capture_threads(pid, tids, &maps)?;
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

    let root = root.canonicalize()?;
    let root_s = root.to_string_lossy().to_string();
    let mut vmas = Vec::new();
    let mut vdso_lines = Vec::new();
    for m in &maps {
        match m.name.as_str() {
            "[vvar]" | "[vvar_vclock]" | "[vdso]" => {
                vdso_lines.push(m.clone());
                continue;
            }
            "[vsyscall]" => continue,
            _ => {}
        }
        // Read-only shared file mappings (glibc's gconv cache, say) come back
        // as private ones: same bytes, and the root is read-only anyway.
        let shared = m.perms.as_bytes().get(3) == Some(&b's');
        if shared && (m.inode == 0 || m.perms.as_bytes().get(1) == Some(&b'w')) {
            bail!(
                "runtime has a writable or anonymous shared mapping at {:#x} ({}); only private mappings can be snapshotted",
                m.start,
                m.name
            );
        }
        let file = m.inode != 0;
        let path = if file {
            if m.name.ends_with(" (deleted)") {
                bail!("runtime maps a deleted file {}", m.name);
            }
            let inside = if root_s != "/" {
                m.name.strip_prefix(&root_s).unwrap_or(&m.name)
            } else {
                &m.name
            };
            if !inside.starts_with('/') {
                bail!(
                    "runtime maps {} which is not a file of its runtime root",
                    m.name
                );
            }
            check_in_root(m, &root, inside)?;
            Some(inside.to_string())
        } else {
            None
        };
        vmas.push(Vma {
            start: m.start,
            end: m.end,
            prot: prot_of(&m.perms),
            path,
            file_off: m.offset,
            growsdown: m.name == "[stack]",
            name: m.name.clone(),
        });
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
    let pagemap = pagemap::open(pid)?;
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
    let state = ProcessState {
        version: STATE_VERSION,
        threads,
        mm,
        auxv,
        vdso,
        vmas,
        memory,
        argv,
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
        image_bytes: state.memory.image_len,
        zero_pages_skipped: zero_skipped,
        freeze_ms: 0.0,
        dump_ms: t.elapsed().as_secs_f64() * 1e3,
        total_ms: 0.0,
    };
    let snap = w.finish(&id, function, root_hash, &encoded)?;
    Ok((snap, report))
}

/// Saves one mapping's pages; returns its runs in the image.
fn dump_vma(
    v: &Vma,
    pagemap: &File,
    mem: &File,
    w: &mut SnapshotWriter,
    pm: &mut Vec<u64>,
    buf: &mut Vec<u8>,
    zero_skipped: &mut u64,
) -> Result<Vec<Run>> {
    let anon = v.path.is_none();
    let npages = ((v.end - v.start) / PAGE_SIZE) as usize;
    pagemap::read(pagemap, v.start, v.end, pm)?;
    let saved = |i: usize| {
        let e = pm[i];
        if anon {
            e & (pagemap::PRESENT | pagemap::SWAPPED) != 0
        } else {
            e & pagemap::SWAPPED != 0 || (e & pagemap::PRESENT != 0 && e & pagemap::FILE == 0)
        }
    };
    let mut runs: Vec<Run> = Vec::new();
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
        buf.resize((j - i) * PAGE_SIZE as usize, 0);
        mem.read_exact_at(buf, addr)
            .with_context(|| format!("reading runtime memory at {addr:#x} ({})", v.name))?;
        for (k, page) in buf.chunks_exact(PAGE_SIZE as usize).enumerate() {
            let a = addr + k as u64 * PAGE_SIZE;
            if anon && page.iter().all(|&b| b == 0) {
                *zero_skipped += 1; // comes back as a zero page
                continue;
            }
            let off = w.append_memory(page)?;
            match runs.last_mut() {
                Some(r) if r.addr + r.len == a && r.file_off + r.len == off => r.len += PAGE_SIZE,
                _ => runs.push(Run {
                    addr: a,
                    len: PAGE_SIZE,
                    file_off: off,
                }),
            }
        }
        i = j;
    }
    Ok(runs)
}

fn vdso_block(lines: &[MapsLine]) -> Result<VdsoBlock> {
    let vdso = lines
        .iter()
        .find(|m| m.name == "[vdso]")
        .ok_or_else(|| anyhow!("runtime has no [vdso]"))?;
    let start = lines.iter().map(|m| m.start).min().unwrap_or(vdso.start);
    let mut pieces = Vec::new();
    let mut expect = start;
    for m in lines {
        if m.start != expect {
            bail!("[vvar]/[vdso] mappings are not contiguous");
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
