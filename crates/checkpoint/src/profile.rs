//! TOSS-style access profiling of a restored runtime.
//!
//! This kernel has DAMON only in physical-address mode and no idle-page
//! tracking, so thaw counts accesses with userfaultfd: the runtime is restored
//! with every anonymous region served lazily, and between invocations the
//! worker freezes it, saves the current contents of its resident pages, and
//! makes it drop them (an injected `madvise(MADV_DONTNEED)` per region). The
//! next invocation faults each page it touches back in through the page
//! server, which logs it. A page's count is the number of invocations
//! (epochs) that touched it: access frequency over time, not first touches.
use crate::error::{ProfileError, Result};
use crate::ptrace::{self, REG_ORIG_RAX, REG_RIP};
use crate::restore::{restore_with, Hooks};
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use thaw_error::{fail, ResultExt};
use thaw_memory::pagemap;
use thaw_memory::tiering::{AccessProfile, ProfileClass};
use thaw_memory::{ImageSource, PageSource, Region, PAGE_LEN, PAGE_SIZE};
use thaw_restore::StrategyKind;
use thaw_sandbox::HostError;
use thaw_sandbox::{Sandbox, SandboxConfig};
use thaw_snapshot_format::ProcessState;
use thaw_store::Snapshot;

/// Runs `requests` (one epoch each, with the name of its class, e.g. the
/// input size) against a lazily restored clone of `snap` and returns per-page
/// access counts, in total and per class.
pub fn profile(
    snap: &Snapshot,
    root: &Path,
    root_hash: &str,
    cfg: &SandboxConfig,
    requests: &[(String, thaw_sandbox::agent::Request)],
    timeout: Duration,
) -> Result<AccessProfile, ProfileError> {
    // Every mapping, file-backed ones included, is restored as lazily served
    // anonymous memory, so accesses to the privately modified pages of file
    // mappings are counted too; pages the image lacks come from the file.
    let mut state = ProcessState::decode(&snap.load_state()?)?;
    let mut files = HashMap::new();
    for (v, r) in state.vmas.iter_mut().zip(state.memory.regions.iter_mut()) {
        if let Some(path) = v.path.take() {
            let host = root.join(path.trim_start_matches('/'));
            let f = File::open(&host).with_context(|| format!("opening {}", host.display()))?;
            files.insert(v.start, (f, v.file_off));
            r.anonymous = true;
        }
    }
    let overlay = Arc::new(ProfileSource {
        image: ImageSource(snap.open_image()?),
        files,
        pages: Default::default(),
    });
    let hooks = Hooks {
        pager_source: Some(overlay.clone()),
        record: true,
        state: Some(state),
        ..Hooks::default()
    };
    let (mut sb, _) = restore_with(snap, root, root_hash, StrategyKind::Uffd, cfg, hooks)?;
    // pages the restore handshake touches are touched by every cold start
    let handshake = take_pages(&sb);
    let mut prof = AccessProfile {
        epochs: u32::try_from(requests.len()).context("the number of requests")?,
        ..Default::default()
    };
    for (i, (class, req)) in requests.iter().enumerate() {
        if i > 0 {
            drop_resident(&sb, &overlay).with_context(|| format!("resetting for epoch {i}"))?;
        }
        sb.call(req, timeout)
            .map_err(|source| ProfileError::Sandbox {
                what: format!("profiling invocation {req}"),
                source,
            })?;
        let ci = match prof.classes.iter().position(|c| &c.name == class) {
            Some(ci) => ci,
            None => {
                prof.classes.push(ProfileClass {
                    name: class.clone(),
                    ..Default::default()
                });
                prof.classes.len() - 1
            }
        };
        let c = &mut prof.classes[ci];
        c.epochs += 1;
        for p in take_pages(&sb) {
            *prof.counts.entry(p).or_insert(0) += 1;
            *c.counts.entry(p).or_insert(0) += 1;
        }
    }
    for p in handshake {
        prof.counts.insert(p, prof.epochs);
        for c in &mut prof.classes {
            c.counts.insert(p, c.epochs);
        }
    }
    Ok(prof)
}

/// Pages for the profiling clone: the newest contents saved between epochs,
/// else the snapshot image, else the mapped file (zero past its end).
struct ProfileSource {
    image: ImageSource,
    /// region start -> (backing file, its offset) for former file mappings
    files: HashMap<u64, (File, u64)>,
    pages: Mutex<HashMap<u64, Box<[u8]>>>,
}

impl PageSource for ProfileSource {
    fn read_page(
        &self,
        region: &Region,
        addr: u64,
        buf: &mut [u8],
    ) -> Result<bool, thaw_memory::BoxError> {
        if let Some(p) = self
            .pages
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&addr)
        {
            buf.copy_from_slice(p);
            return Ok(true);
        }
        if self.image.read_page(region, addr, buf)? {
            return Ok(true);
        }
        let Some((f, off)) = self.files.get(&region.start) else {
            return Ok(false);
        };
        buf.fill(0);
        let mut got = 0;
        while got < buf.len() {
            let n = f.read_at(&mut buf[got..], off + (addr - region.start) + got as u64)?;
            if n == 0 {
                break;
            }
            got += n;
        }
        Ok(true)
    }
}

fn take_pages(sb: &Sandbox) -> Vec<u64> {
    let mut v = sb.pager().map(|p| p.take_recorded()).unwrap_or_default();
    v.sort_unstable();
    v.dedup();
    v
}

/// The runtime's mappings still registered with the page server's
/// userfaultfd ("um" in smaps). The runtime may have unmapped or replaced
/// parts of its snapshot regions since the restore; only these are safe to
/// drop, because only these fault back through the page server.
fn lazily_served(pid: i32) -> Result<Vec<std::ops::Range<u64>>> {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps"))?;
    let mut out = Vec::new();
    let mut cur = None;
    for line in smaps.lines() {
        if let Some(flags) = line.strip_prefix("VmFlags:") {
            if let Some(r) = cur.take() {
                if flags.split_whitespace().any(|f| f == "um") {
                    out.push(r);
                }
            }
        } else if let Some((range, _)) = line.split_once(' ') {
            if let Some((a, b)) = range.split_once('-') {
                if let (Ok(a), Ok(b)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) {
                    cur = Some(a..b);
                }
            }
        }
    }
    Ok(out)
}

/// Freezes the runtime, saves its resident lazily served pages into
/// `overlay` and has it drop them, so the next touches fault again. Every
/// thread is frozen: one left running (a JVM's compiler or collector) could
/// write a page between its save and its drop, and the write would be lost.
fn drop_resident(sb: &Sandbox, overlay: &ProfileSource) -> Result<()> {
    let pid = sb.pid();
    crate::freeze::wait_blocked_on_socket(pid)?;
    let mut frozen = Vec::new();
    let froze = crate::freeze::freeze_all(pid, &mut frozen)
        .map_err(|e| HostError::Failed(format!("freezing the runtime: {e}")));
    let res = froze.and_then(|()| -> Result<()> {
        let anon = lazily_served(pid)?;
        let saved = ptrace::get_regs(pid)?;
        let mem = File::open(format!("/proc/{pid}/mem"))?;
        // stopped in its blocking read: the instruction before rip is `syscall`
        let insn = saved[REG_RIP].wrapping_sub(2);
        let mut code = [0u8; 2];
        mem.read_exact_at(&mut code, insn)?;
        if saved[REG_ORIG_RAX].cast_signed() < 0 || code != [0x0f, 0x05] {
            fail!(
                HostError::Failed,
                "runtime is not stopped in a system call; cannot inject"
            );
        }
        let pm = pagemap::open(pid).context("opening the runtime's pagemap")?;
        let mut pages: HashMap<u64, Box<[u8]>> = HashMap::new();
        let mut entries = Vec::new();
        for m in &anon {
            pagemap::read(&pm, m.start, m.end, &mut entries)
                .with_context(|| format!("reading the pagemap at {:#x}", m.start))?;
            for (i, e) in entries.iter().enumerate() {
                if e & pagemap::PRESENT != 0 {
                    let a = m.start + i as u64 * PAGE_SIZE;
                    let mut buf = vec![0u8; PAGE_LEN].into_boxed_slice();
                    mem.read_exact_at(&mut buf, a)?;
                    pages.insert(a, buf);
                }
            }
        }
        overlay
            .pages
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(pages);
        let injector = ptrace::Injector {
            tid: pid,
            gadget: insn,
            mem: &mem,
            regs: saved,
        };
        for m in &anon {
            let args = [m.start, m.end - m.start, libc::MADV_DONTNEED as u64];
            let ret = injector.call(libc::SYS_madvise, args)?;
            if ret != 0 {
                fail!(
                    HostError::Failed,
                    "injected madvise on {:#x} failed: {ret}",
                    m.start
                );
            }
        }
        let mut back = saved;
        ptrace::prepare_for_resume(&mut back);
        ptrace::set_regs(pid, &back)
    });
    let mut detached = Ok(());
    for tid in frozen {
        let d = ptrace::detach(tid);
        if detached.is_ok() {
            detached = d;
        }
    }
    res.and(detached)
}
