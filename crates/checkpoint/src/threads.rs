//! The frozen threads' state: registers (prepared to re-issue an
//! interrupted call), XSAVE area, signal mask and the kernel-side state no
//! register set carries, and the process's signal state.
use crate::checkpoint::{MapsLine, NotCheckpointable};
use crate::error::{CheckpointError, Result};
use crate::freeze::thread_name;
use crate::ptrace::{self, REG_ORIG_RAX, REG_RIP};
use crate::sigframe;
use std::fs::File;
use std::os::unix::fs::FileExt;
use thaw_error::{fail, ResultExt};
use thaw_memory::usize_of;
use thaw_sandbox::HostError;
use thaw_snapshot_format::{SignalState, ThreadKernel, ThreadState};

/// System calls a restored thread cannot re-issue: they act on child
/// processes or on the process's own life. (One that completed is fine: its
/// result is in the registers.)
pub(crate) const NOT_RESTARTABLE: &[(u64, &str)] = &[
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
fn capture_thread(
    pid: i32,
    tid: i32,
    gadget: u64,
    mem: &File,
) -> Result<ThreadState, CheckpointError> {
    let name = thread_name(pid, tid);
    let regs = ptrace::get_regs(tid)?;
    let (lo, hi) = (
        thaw_restorer::RESTORER_BASE,
        thaw_restorer::RESTORER_BASE + thaw_restorer::RESTORER_SPAN,
    );
    if (lo..hi).contains(&regs[REG_RIP]) {
        fail!(
            CheckpointError::Unresumable,
            "thread {name} (tid {tid}) is still in the restorer's trampoline"
        );
    }
    let nr = regs[REG_ORIG_RAX];
    let call = NOT_RESTARTABLE.iter().find(|(n, _)| *n == nr);
    if let (Some((_, call)), true) = (call, ptrace::reissues(&regs)) {
        fail!(
            CheckpointError::Unresumable,
            "thread {name} (tid {tid}) is inside {call}, which a restore cannot re-issue"
        );
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
        .ok_or_else(|| HostError::Failed("runtime has no [vdso]".into()))?;
    let mut code = vec![0u8; usize_of(vdso.end - vdso.start)];
    mem.read_exact_at(&mut code, vdso.start)
        .context("reading the runtime's vDSO")?;
    let at = code
        .windows(2)
        .position(|w| w == [0x0f, 0x05])
        .ok_or_else(|| HostError::Failed("the vDSO holds no syscall instruction".into()))?;
    Ok(vdso.start + at as u64)
}

/// The process's signal state, read through its stopped main thread
/// (`tids[0]`), which is left with the registers it had.
fn capture_signals(
    pid: i32,
    tids: &[i32],
    gadget: u64,
    mem: &File,
) -> Result<SignalState, CheckpointError> {
    let regs = ptrace::get_regs(tids[0])?;
    let injector = ptrace::Injector {
        tid: tids[0],
        gadget,
        mem,
        regs,
    };
    let out = crate::signals::capture(pid, tids, &injector);
    ptrace::set_regs(tids[0], &regs)?;
    match out.context("reading the runtime's signal state")? {
        Ok(s) => Ok(s),
        Err(reasons) => Err(NotCheckpointable { reasons }.into()),
    }
}

/// Every thread's state, main first, and the process's signal state;
/// refuses what a restore cannot resume.
pub(crate) fn capture_threads(
    pid: i32,
    tids: &[i32],
    maps: &[MapsLine],
) -> Result<(Vec<ThreadState>, SignalState), CheckpointError> {
    if tids.len() > thaw_restorer::MAX_THREADS {
        fail!(
            CheckpointError::Unresumable,
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
        .collect::<Result<Vec<_>, _>>()?;
    let signals = capture_signals(pid, tids, gadget, &mem)?;
    // what a restore will build: each frame valid, all of them in the trampoline
    let mut frames = 0u64;
    for t in &threads {
        frames += sigframe::build(t, thaw_restorer::TRAMP_FRAME)
            .with_context(|| format!("thread {}", t.name))?
            .len() as u64;
    }
    if frames > thaw_restorer::MAX_FRAME_BYTES {
        fail!(
            CheckpointError::Unresumable,
            "{} threads need {frames} bytes of resume frames; a restore has room for {}",
            threads.len(),
            thaw_restorer::MAX_FRAME_BYTES
        );
    }
    Ok((threads, signals))
}
