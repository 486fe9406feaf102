//! Thin ptrace wrappers for checkpoints: seize, interrupt, register sets,
//! signal mask. (Restores do not trace: see `sigframe`.)
use anyhow::{bail, Result};
use std::io::Error;

pub const NT_PRSTATUS: usize = 1;
pub const NT_X86_XSTATE: usize = 0x202;
/// x86_64 `struct user_regs_struct` has 27 words.
pub const NREGS: usize = 27;
pub const REG_RAX: usize = 10;
pub const REG_RDX: usize = 12;
pub const REG_RSI: usize = 13;
pub const REG_RDI: usize = 14;
pub const REG_ORIG_RAX: usize = 15;
pub const REG_RIP: usize = 16;

const PTRACE_GETREGSET: libc::c_uint = 0x4204;
const PTRACE_SETREGSET: libc::c_uint = 0x4205;
const PTRACE_SEIZE: libc::c_uint = 0x4206;
const PTRACE_INTERRUPT: libc::c_uint = 0x4207;
const PTRACE_GETSIGMASK: libc::c_uint = 0x420a;
const PTRACE_O_TRACESYSGOOD: libc::c_ulong = 1;
const PTRACE_O_EXITKILL: libc::c_ulong = 0x10_0000;

fn pt(req: libc::c_uint, pid: i32, addr: usize, data: usize) -> Result<libc::c_long> {
    // SAFETY: callers pass addresses of live buffers sized for the request.
    let r = unsafe { libc::ptrace(req, pid, addr, data) };
    if r < 0 {
        bail!("ptrace({req:#x}) on pid {pid}: {}", Error::last_os_error());
    }
    Ok(r)
}

/// Seizes `pid` (killing it if we die while it is stopped) and stops it.
pub fn seize_and_stop(pid: i32) -> Result<()> {
    pt(
        PTRACE_SEIZE,
        pid,
        0,
        (PTRACE_O_TRACESYSGOOD | PTRACE_O_EXITKILL) as usize,
    )?;
    pt(PTRACE_INTERRUPT, pid, 0, 0)?;
    wait_stop(pid)
}

/// Waits until the tracee is in a ptrace stop.
pub fn wait_stop(pid: i32) -> Result<()> {
    loop {
        let mut status = 0;
        // SAFETY: status is a valid out pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::__WALL) };
        if r < 0 {
            let e = Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            bail!("waitpid({pid}): {e}");
        }
        if libc::WIFSTOPPED(status) {
            return Ok(());
        }
        if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
            bail!("process {pid} died while being frozen (status {status:#x})");
        }
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
        bail!("unexpected register set size {}", iov.iov_len);
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

/// Resumes to the next syscall entry or exit stop.
pub fn syscall_step(pid: i32) -> Result<()> {
    pt(libc::PTRACE_SYSCALL, pid, 0, 0)?;
    wait_stop(pid)
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
    if (regs[REG_ORIG_RAX] as i64) >= 0 {
        match -(regs[REG_RAX] as i64) {
            ERESTARTSYS | ERESTARTNOINTR | ERESTARTNOHAND => {
                regs[REG_RAX] = regs[REG_ORIG_RAX];
                regs[REG_RIP] -= 2;
            }
            ERESTART_RESTARTBLOCK => regs[REG_RAX] = (-(libc::EINTR as i64)) as u64,
            _ => {}
        }
    }
    regs[REG_ORIG_RAX] = u64::MAX;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interrupted_read_is_reissued() {
        let mut r = [0u64; NREGS];
        r[REG_ORIG_RAX] = 0; // read
        r[REG_RAX] = (-512i64) as u64;
        r[REG_RIP] = 0x1002;
        prepare_for_resume(&mut r);
        assert_eq!(
            (r[REG_RAX], r[REG_RIP], r[REG_ORIG_RAX]),
            (0, 0x1000, u64::MAX)
        );
        let mut r = [0u64; NREGS];
        r[REG_ORIG_RAX] = 35; // nanosleep
        r[REG_RAX] = (-516i64) as u64;
        prepare_for_resume(&mut r);
        assert_eq!(r[REG_RAX] as i64, -4);
        let mut r = [0u64; NREGS];
        r[REG_ORIG_RAX] = u64::MAX; // user mode
        r[REG_RAX] = 7;
        prepare_for_resume(&mut r);
        assert_eq!(r[REG_RAX], 7);
    }
}
