//! Thin ptrace wrappers for checkpoints: seize, interrupt, register sets,
//! signal mask, rseq and robust-list queries, and system calls run inside a
//! stopped thread for state only the thread itself can ask the kernel for.
//! (Restores do not trace: see `sigframe`.)
use crate::error::Result;
use std::fs::File;
use std::io::Error;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};
use thaw_error::{fail, ResultExt};
use thaw_sandbox::HostError;
use thaw_snapshot_format::MAX_QUEUED_SIGNALS;

pub const NT_PRSTATUS: usize = 1;
pub const NT_X86_XSTATE: usize = 0x202;
pub use thaw_snapshot_format::NREGS;
pub const REG_R10: usize = 7;
pub const REG_RAX: usize = 10;
pub const REG_RDX: usize = 12;
pub const REG_RSI: usize = 13;
pub const REG_RDI: usize = 14;
pub const REG_ORIG_RAX: usize = 15;
pub const REG_RIP: usize = 16;
pub const REG_RSP: usize = 19;

const PTRACE_GETREGSET: libc::c_uint = 0x4204;
const PTRACE_SETREGSET: libc::c_uint = 0x4205;
const PTRACE_SEIZE: libc::c_uint = 0x4206;
const PTRACE_INTERRUPT: libc::c_uint = 0x4207;
const PTRACE_GETSIGMASK: libc::c_uint = 0x420a;
const PTRACE_PEEKSIGINFO: libc::c_uint = 0x4209;
const PTRACE_SETSIGMASK: libc::c_uint = 0x420b;
const PTRACE_GET_RSEQ_CONFIGURATION: libc::c_uint = 0x420f;
const PTRACE_O_TRACESYSGOOD: usize = 1;
const PTRACE_O_EXITKILL: usize = 0x10_0000;

fn pt(req: libc::c_uint, pid: i32, addr: usize, data: usize) -> Result<libc::c_long> {
    // SAFETY: callers pass addresses of live buffers sized for the request.
    let r = unsafe { libc::ptrace(req, pid, addr, data) };
    if r < 0 {
        fail!(
            HostError::Failed,
            "ptrace({req:#x}) on pid {pid}: {}",
            Error::last_os_error()
        );
    }
    Ok(r)
}

/// Seizes one thread (it keeps running); the tracee dies with us.
pub fn seize(tid: i32) -> Result<()> {
    pt(
        PTRACE_SEIZE,
        tid,
        0,
        PTRACE_O_TRACESYSGOOD | PTRACE_O_EXITKILL,
    )
    .map(|_| ())
}

/// Asks a seized thread to stop (see [`wait_stop_until`]).
pub fn interrupt(tid: i32) -> Result<()> {
    pt(PTRACE_INTERRUPT, tid, 0, 0).map(|_| ())
}

/// Waits until the tracee is in a ptrace stop; returns the wait status.
pub fn wait_stop(pid: i32) -> Result<i32> {
    loop {
        let mut status = 0;
        // SAFETY: status is a valid out pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::__WALL) };
        if r < 0 {
            let e = Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            fail!(HostError::Failed, "waitpid({pid}): {e}");
        }
        if libc::WIFSTOPPED(status) {
            return Ok(status);
        }
        if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
            fail!(
                HostError::Failed,
                "process {pid} died while being frozen (status {status:#x})"
            );
        }
    }
}

/// How a thread answered [`interrupt`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    Stopped,
    /// it exited instead (a thread on its way out when seized)
    Exited,
    /// not stopped by the deadline: inside a call that does not let it
    /// (state D)
    Running,
}

/// [`wait_stop`] with a deadline.
pub fn wait_stop_until(tid: i32, deadline: Instant) -> Result<Stop> {
    loop {
        let mut status = 0;
        // SAFETY: status is a valid out pointer.
        let r = unsafe { libc::waitpid(tid, &mut status, libc::__WALL | libc::WNOHANG) };
        if r < 0 {
            let e = Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            fail!(HostError::Failed, "waitpid({tid}): {e}");
        }
        if r == tid {
            return Ok(if libc::WIFSTOPPED(status) {
                Stop::Stopped
            } else {
                Stop::Exited
            });
        }
        if Instant::now() > deadline {
            return Ok(Stop::Running);
        }
        std::thread::sleep(Duration::from_micros(100));
    }
}

pub fn get_regs(pid: i32) -> Result<[u64; NREGS]> {
    let mut regs = [0u64; NREGS];
    let mut iov = libc::iovec {
        iov_base: regs.as_mut_ptr().cast(),
        iov_len: NREGS * 8,
    };
    pt(
        PTRACE_GETREGSET,
        pid,
        NT_PRSTATUS,
        &mut iov as *mut _ as usize,
    )?;
    if iov.iov_len != NREGS * 8 {
        fail!(
            HostError::Failed,
            "unexpected register set size {}",
            iov.iov_len
        );
    }
    Ok(regs)
}

pub fn set_regs(pid: i32, regs: &[u64; NREGS]) -> Result<()> {
    let mut iov = libc::iovec {
        iov_base: regs.as_ptr() as *mut _,
        iov_len: NREGS * 8,
    };
    pt(
        PTRACE_SETREGSET,
        pid,
        NT_PRSTATUS,
        &mut iov as *mut _ as usize,
    )?;
    Ok(())
}

/// The XSAVE area (FPU, SSE, AVX... state) as the kernel lays it out.
pub fn get_xstate(pid: i32) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; 16384];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    pt(
        PTRACE_GETREGSET,
        pid,
        NT_X86_XSTATE,
        &mut iov as *mut _ as usize,
    )?;
    buf.truncate(iov.iov_len);
    Ok(buf)
}

pub fn get_sigmask(pid: i32) -> Result<u64> {
    let mut mask = 0u64;
    pt(PTRACE_GETSIGMASK, pid, 8, &mut mask as *mut u64 as usize)?;
    Ok(mask)
}

pub fn set_sigmask(pid: i32, mask: u64) -> Result<()> {
    pt(PTRACE_SETSIGMASK, pid, 8, &mask as *const u64 as usize)?;
    Ok(())
}

/// The thread's rseq registration: (area, length, signature), or zeros.
pub fn get_rseq(tid: i32) -> Result<(u64, u32, u32)> {
    #[repr(C)]
    #[derive(Default)]
    struct RseqConfiguration {
        rseq_abi_pointer: u64,
        rseq_abi_size: u32,
        signature: u32,
        flags: u32,
        pad: u32,
    }
    let mut c = RseqConfiguration::default();
    pt(
        PTRACE_GET_RSEQ_CONFIGURATION,
        tid,
        std::mem::size_of::<RseqConfiguration>(),
        &mut c as *mut RseqConfiguration as usize,
    )?;
    Ok((c.rseq_abi_pointer, c.rseq_abi_size, c.signature))
}

/// The thread's robust futex list: (head, length), or zeros.
pub fn get_robust_list(tid: i32) -> Result<(u64, u64)> {
    let (mut head, mut len) = (0u64, 0usize);
    // SAFETY: both out pointers are valid for the kernel to write.
    let r = unsafe {
        libc::syscall(
            libc::SYS_get_robust_list,
            tid,
            &mut head as *mut u64,
            &mut len as *mut usize,
        )
    };
    if r < 0 {
        fail!(
            HostError::Failed,
            "get_robust_list({tid}): {}",
            Error::last_os_error()
        );
    }
    Ok((head, len as u64))
}

/// Resumes to the next syscall entry or exit stop.
pub fn syscall_step(pid: i32) -> Result<()> {
    pt(libc::PTRACE_SYSCALL, pid, 0, 0)?;
    let status = wait_stop(pid)?;
    if libc::WSTOPSIG(status) != libc::SIGTRAP | 0x80 {
        fail!(
            HostError::Failed,
            "thread {pid} stopped for signal {} while the checkpoint ran a call in it",
            libc::WSTOPSIG(status)
        );
    }
    Ok(())
}

/// Runs system calls inside a ptrace-stopped thread, for state the kernel
/// only tells the thread itself (its `clear_child_tid`, its alternate
/// signal stack). Calls execute the `syscall` instruction at `gadget`;
/// their results land in scratch memory below the thread's red zone, whose
/// bytes are put back afterwards.
pub struct Injector<'a> {
    pub tid: i32,
    pub gadget: u64,
    /// the process's /proc/PID/mem (for the calls' results)
    pub mem: &'a File,
    /// the thread's registers as stopped
    pub regs: [u64; NREGS],
}

/// Bytes of stack the injected calls may write to.
const SCRATCH: usize = 64;
/// x86_64's red zone: the thread may keep data this far below its stack pointer.
const RED_ZONE: u64 = 128;

impl Injector<'_> {
    fn scratch(&self) -> u64 {
        (self.regs[REG_RSP] - RED_ZONE - SCRATCH as u64) & !15
    }

    /// One call with up to four arguments; returns the kernel's result.
    /// The thread is left at the call's exit: set its registers before
    /// letting it go.
    pub fn call<const N: usize>(&self, nr: i64, args: [u64; N]) -> Result<i64> {
        const { assert!(N <= 4) };
        let mut r = self.regs;
        r[REG_RIP] = self.gadget;
        r[REG_RAX] = nr.cast_unsigned();
        for (reg, a) in [REG_RDI, REG_RSI, REG_RDX, REG_R10].into_iter().zip(args) {
            r[reg] = a;
        }
        r[REG_ORIG_RAX] = u64::MAX; // nothing to restart on the way out
        set_regs(self.tid, &r)?;
        syscall_step(self.tid)?; // entry
        syscall_step(self.tid)?; // exit
        Ok(get_regs(self.tid)?[REG_RAX].cast_signed())
    }

    /// Runs `calls` with the scratch memory below the thread's red zone at
    /// its disposal (its address is the argument), then puts those bytes
    /// back. Every signal is blocked meanwhile (the thread's mask is put
    /// back too): a signal that arrived during a call would stop the thread
    /// for its delivery, in the middle of our calls.
    pub fn with_scratch<T>(&self, calls: impl FnOnce(u64) -> Result<T>) -> Result<T> {
        let mask = get_sigmask(self.tid)?;
        set_sigmask(self.tid, !0)?;
        let out = self.with_scratch_blocked(calls);
        let unblocked = set_sigmask(self.tid, mask);
        let out = out?;
        unblocked?;
        Ok(out)
    }

    fn with_scratch_blocked<T>(&self, calls: impl FnOnce(u64) -> Result<T>) -> Result<T> {
        let at = self.scratch();
        let mut saved = [0u8; SCRATCH];
        // below the stack pointer may be unmapped (a stack that has yet
        // to grow): the kernel grows it for the call, and zeros go back
        let had = self.mem.read_exact_at(&mut saved, at).is_ok();
        let out = calls(at);
        if !had {
            saved = [0; SCRATCH];
        }
        let put_back = self.mem.write_all_at(&saved, at);
        let out = out?;
        put_back.context("restoring the thread's stack after the injected calls")?;
        Ok(out)
    }

    /// A call that must succeed; `what` names it in the error.
    fn call_ok<const N: usize>(&self, nr: i64, args: [u64; N], what: &str) -> Result<()> {
        let r = self.call(nr, args)?;
        if r < 0 {
            fail!(
                HostError::Failed,
                "{what} in thread {}: errno {}",
                self.tid,
                -r
            );
        }
        Ok(())
    }

    /// `n` bytes of scratch memory at `at`, as the calls left them.
    fn read_scratch<const N: usize>(&self, at: u64) -> Result<[u8; N]> {
        const { assert!(N <= SCRATCH) };
        let mut b = [0u8; N];
        self.mem
            .read_exact_at(&mut b, at)
            .context("reading the injected calls' results")?;
        Ok(b)
    }

    /// (clear_child_tid, (ss_sp, ss_flags, ss_size)) of the thread.
    pub fn tid_address_and_altstack(&self) -> Result<(u64, (u64, u32, u64))> {
        self.with_scratch(|at| {
            self.call_ok(
                libc::SYS_prctl,
                [libc::PR_GET_TID_ADDRESS as u64, at, 0],
                "prctl(PR_GET_TID_ADDRESS)",
            )?;
            self.call_ok(libc::SYS_sigaltstack, [0, at + 16, 0], "sigaltstack")?;
            let b = self.read_scratch::<40>(at)?;
            let flags = u32::from_le_bytes(b[24..28].try_into().expect("4 bytes"));
            Ok((word(&b, 0), (word(&b, 16), flags, word(&b, 32))))
        })
    }

    /// The process's signal dispositions, as `rt_sigaction` tells them
    /// (`struct k_sigaction`: handler, flags, restorer, mask), for every
    /// signal but SIGKILL and SIGSTOP, and its three interval timers
    /// (`getitimer`: interval and value, each seconds and microseconds).
    pub fn dispositions_and_itimers(&self) -> Result<(Vec<RawSigaction>, [RawItimer; 3])> {
        self.with_scratch(|at| {
            let mut actions = Vec::with_capacity(64);
            for sig in 1..=64u32 {
                if sig == libc::SIGKILL as u32 || sig == libc::SIGSTOP as u32 {
                    continue;
                }
                self.call_ok(
                    libc::SYS_rt_sigaction,
                    [u64::from(sig), 0, at, 8], // sigsetsize
                    &format!("rt_sigaction({sig})"),
                )?;
                let b = self.read_scratch::<32>(at)?;
                actions.push((sig, [word(&b, 0), word(&b, 8), word(&b, 16), word(&b, 24)]));
            }
            let mut timers = [[0u64; 4]; 3];
            for (which, t) in timers.iter_mut().enumerate() {
                self.call_ok(
                    libc::SYS_getitimer,
                    [which as u64, at, 0],
                    &format!("getitimer({which})"),
                )?;
                let b = self.read_scratch::<32>(at)?;
                *t = [word(&b, 0), word(&b, 8), word(&b, 16), word(&b, 24)];
            }
            Ok((actions, timers))
        })
    }
}

/// A signal and its `struct k_sigaction` (handler, flags, restorer, mask).
pub type RawSigaction = (u32, [u64; 4]);
/// A `struct itimerval`: interval (seconds, microseconds), then value.
pub type RawItimer = [u64; 4];

/// The little-endian u64 at `o` of `b`.
fn word(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"))
}

/// `sizeof(siginfo_t)`.
pub const SIGINFO_BYTES: usize = 128;

/// The signals queued for a stopped thread (`shared`: for its whole
/// process), oldest first, each its `siginfo_t`; they stay queued.
pub fn queued_signals(tid: i32, shared: bool) -> Result<Vec<[u8; SIGINFO_BYTES]>> {
    /// `struct ptrace_peeksiginfo_args`
    #[repr(C)]
    struct PeekArgs {
        off: u64,
        flags: u32,
        nr: i32,
    }
    const BATCH: usize = 32;
    #[allow(clippy::cast_possible_truncation, clippy::cast_possible_wrap)] // 32
    const BATCH_NR: i32 = BATCH as i32;
    let mut out = Vec::new();
    loop {
        let args = PeekArgs {
            off: out.len() as u64,
            flags: u32::from(shared), // PTRACE_PEEKSIGINFO_SHARED
            nr: BATCH_NR,
        };
        let mut buf = [[0u8; SIGINFO_BYTES]; BATCH];
        let n = pt(
            PTRACE_PEEKSIGINFO,
            tid,
            &args as *const PeekArgs as usize,
            buf.as_mut_ptr() as usize,
        )?;
        let n = usize::try_from(n).context("PTRACE_PEEKSIGINFO's count")?;
        out.extend_from_slice(&buf[..n.min(BATCH)]);
        if n < BATCH || out.len() > MAX_QUEUED_SIGNALS {
            return Ok(out);
        }
    }
}

pub fn detach(pid: i32) -> Result<()> {
    pt(libc::PTRACE_DETACH, pid, 0, 0)?;
    Ok(())
}

/// Rewrites registers captured inside an interrupted syscall so that the
/// process simply re-issues it when resumed (in a new process the kernel's
/// own restart bookkeeping is gone). Calls that cannot restart return EINTR.
pub fn prepare_for_resume(regs: &mut [u64; NREGS]) {
    const ERESTARTSYS: i64 = 512;
    const ERESTARTNOINTR: i64 = 513;
    const ERESTARTNOHAND: i64 = 514;
    const ERESTART_RESTARTBLOCK: i64 = 516;
    if regs[REG_ORIG_RAX].cast_signed() >= 0 {
        match -regs[REG_RAX].cast_signed() {
            ERESTARTSYS | ERESTARTNOINTR | ERESTARTNOHAND => {
                regs[REG_RAX] = regs[REG_ORIG_RAX];
                regs[REG_RIP] -= 2;
            }
            ERESTART_RESTARTBLOCK => regs[REG_RAX] = (-i64::from(libc::EINTR)).cast_unsigned(),
            _ => {}
        }
    }
    regs[REG_ORIG_RAX] = u64::MAX;
}

/// Whether a thread stopped with `regs` would re-issue the call it is in
/// (see [`prepare_for_resume`]).
pub fn reissues(regs: &[u64; NREGS]) -> bool {
    let mut r = *regs;
    prepare_for_resume(&mut r);
    r[REG_RIP] != regs[REG_RIP]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interrupted_read_is_reissued() {
        let mut r = [0u64; NREGS];
        r[REG_ORIG_RAX] = 0; // read
        r[REG_RAX] = (-512i64).cast_unsigned();
        r[REG_RIP] = 0x1002;
        prepare_for_resume(&mut r);
        assert_eq!(
            (r[REG_RAX], r[REG_RIP], r[REG_ORIG_RAX]),
            (0, 0x1000, u64::MAX)
        );
        let mut r = [0u64; NREGS];
        r[REG_ORIG_RAX] = 35; // nanosleep
        r[REG_RAX] = (-516i64).cast_unsigned();
        prepare_for_resume(&mut r);
        assert_eq!(r[REG_RAX].cast_signed(), -4);
        let mut r = [0u64; NREGS];
        r[REG_ORIG_RAX] = u64::MAX; // user mode
        r[REG_RAX] = 7;
        prepare_for_resume(&mut r);
        assert_eq!(r[REG_RAX], 7);
    }
}
