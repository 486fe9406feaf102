//! The x86_64 `rt_sigreturn` frame a restore resumes a thread with: the
//! saved registers, signal mask, alternate signal stack and XSAVE area laid
//! out as the kernel reads a signal frame back (struct rt_sigframe: return
//! address, ucontext, siginfo; the ucontext's sigcontext points at the XSAVE
//! area). The restorer copies every thread's frame behind
//! `thaw_restorer::TRAMP_FRAME` and each thread calls rt_sigreturn on its
//! own, so no tracer has to load the CPU state.
use crate::error::Result;
use crate::ptrace::NREGS;
use thaw_error::fail;
use thaw_sandbox::HostError;
use thaw_snapshot_format::ThreadState;

/// ucontext.uc_flags: the frame carries an XSAVE area and a valid ss.
const UC_FP_XSTATE: u64 = 1;
const UC_SIGCONTEXT_SS: u64 = 2;
const FP_XSTATE_MAGIC1: u32 = 0x4650_5853;
const FP_XSTATE_MAGIC2: u32 = 0x4650_5845;

/// Offsets in the frame: the ucontext follows the 8-byte return address, its
/// sigcontext follows uc_flags, uc_link and the 24-byte stack_t.
const UC: usize = 8;
const SIGCONTEXT: usize = UC + 40;
const SIGMASK: usize = SIGCONTEXT + 256;
/// The XSAVE area: 64-byte aligned, past the ucontext and the siginfo the
/// kernel expects behind it.
const FPSTATE: usize = 448;
// XRSTOR needs 64-byte alignment; the 128-byte siginfo follows the ucontext
const _: () = assert!(FPSTATE.is_multiple_of(64) && FPSTATE >= SIGMASK + 8 + 128);
/// In the XSAVE area's legacy part: the software-reserved bytes the kernel
/// checks before an XRSTOR from a signal frame.
const SW_BYTES: usize = 464;
/// Legacy area plus XSAVE header: the least an XSAVE image holds.
const MIN_XSTATE: usize = 576;

/// `struct user_regs_struct` indices.
const R15: usize = 0;
const R14: usize = 1;
const R13: usize = 2;
const R12: usize = 3;
const RBP: usize = 4;
const RBX: usize = 5;
const R11: usize = 6;
const R10: usize = 7;
const R9: usize = 8;
const R8: usize = 9;
const RAX: usize = 10;
const RCX: usize = 11;
const RDX: usize = 12;
const RSI: usize = 13;
const RDI: usize = 14;
const RIP: usize = 16;
const CS: usize = 17;
const EFLAGS: usize = 18;
const RSP: usize = 19;
const SS: usize = 20;
pub const FS_BASE: usize = 21;
pub const GS_BASE: usize = 22;
/// ds, es, fs, gs selectors: a 64-bit runtime leaves them 0, and sigreturn
/// does not restore them.
const SELECTORS: [usize; 4] = [23, 24, 25, 26];

/// The frame for `state`, to be placed at `at` (the XSAVE pointer in it is
/// absolute).
pub fn build(state: &ThreadState, at: u64) -> Result<Vec<u8>> {
    if state.regs.len() != NREGS {
        fail!(
            HostError::Failed,
            "process state has {} registers, want {NREGS}",
            state.regs.len()
        );
    }
    let r = state.regs_array();
    if let Some(&i) = SELECTORS.iter().find(|&&i| r[i] != 0) {
        fail!(
            HostError::Failed,
            "the runtime has a segment selector set ({:#x}); resuming it needs ds, es, fs and gs at 0",
            r[i]
        );
    }
    let xs = &state.xstate;
    if xs.len() < MIN_XSTATE || !xs.len().is_multiple_of(64) {
        fail!(
            HostError::Failed,
            "process state: XSAVE area of {} bytes",
            xs.len()
        );
    }
    // whole multiples of 64 bytes: frames are laid one after another, and
    // each one's XSAVE area must stay 64-byte aligned
    let len = (FPSTATE + xs.len() + 4).next_multiple_of(64);
    let mut f = vec![0u8; len];
    let put = |f: &mut [u8], off: usize, v: u64| f[off..off + 8].copy_from_slice(&v.to_le_bytes());
    put(&mut f, UC, UC_FP_XSTATE | UC_SIGCONTEXT_SS);
    // uc_stack: rt_sigreturn sets the thread's alternate signal stack from it
    let (ss_sp, ss_flags, ss_size) = state.kernel.altstack;
    put(&mut f, UC + 16, ss_sp);
    f[UC + 24..UC + 28].copy_from_slice(&ss_flags.to_le_bytes());
    put(&mut f, UC + 32, ss_size);
    let gprs = [
        R8, R9, R10, R11, R12, R13, R14, R15, RDI, RSI, RBP, RBX, RDX, RAX, RCX, RSP, RIP, EFLAGS,
    ];
    for (k, &i) in gprs.iter().enumerate() {
        put(&mut f, SIGCONTEXT + 8 * k, r[i]);
    }
    // cs, gs, fs, ss as u16s: the kernel takes cs and ss from here
    let seg = SIGCONTEXT + 8 * gprs.len();
    let selector = |reg: u64| {
        u16::try_from(reg).map_err(|_| HostError::Failed(format!("a segment selector of {reg:#x}")))
    };
    f[seg..seg + 2].copy_from_slice(&selector(r[CS])?.to_le_bytes());
    f[seg + 6..seg + 8].copy_from_slice(&selector(r[SS])?.to_le_bytes());
    // then err, trapno, oldmask, cr2 (0), and the XSAVE pointer
    put(&mut f, seg + 8 + 32, at + FPSTATE as u64);
    put(&mut f, SIGMASK, state.sigmask);

    let fp = &mut f[FPSTATE..];
    fp[..xs.len()].copy_from_slice(xs);
    let le32 = |b: &[u8], o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
    let le64 = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
    // the features to restore: as the kernel described them when it saved
    // the area, else what the XSAVE header says is present (plus x87/SSE)
    let xfeatures = if le32(xs, SW_BYTES) == FP_XSTATE_MAGIC1 {
        le64(xs, SW_BYTES + 8)
    } else {
        le64(xs, 512) | 3
    };
    check_host_xsave(xs.len(), xfeatures, host_xsave())?;
    let xs_len = u32::try_from(xs.len())
        .map_err(|_| HostError::Failed(format!("an XSAVE area of {} bytes", xs.len())))?;
    fp[SW_BYTES..SW_BYTES + 4].copy_from_slice(&FP_XSTATE_MAGIC1.to_le_bytes());
    fp[SW_BYTES + 4..SW_BYTES + 8].copy_from_slice(&(xs_len + 4).to_le_bytes());
    fp[SW_BYTES + 8..SW_BYTES + 16].copy_from_slice(&xfeatures.to_le_bytes());
    fp[SW_BYTES + 16..SW_BYTES + 20].copy_from_slice(&xs_len.to_le_bytes());
    fp[xs.len()..xs.len() + 4].copy_from_slice(&FP_XSTATE_MAGIC2.to_le_bytes());
    Ok(f)
}

/// This CPU's XSAVE: (state components it supports, bytes of the area for
/// the components the kernel enabled), from CPUID leaf 0xD. Asked once: in
/// a VM every CPUID traps to the hypervisor, and each thread's frame needs it.
fn host_xsave() -> (u64, usize) {
    static HOST: std::sync::OnceLock<(u64, usize)> = std::sync::OnceLock::new();
    *HOST.get_or_init(|| {
        // leaf 0xD exists on every CPU with XSAVE, which the kernel's signal
        // frames (and so this resume) need
        let leaf = std::arch::x86_64::__cpuid_count(0xd, 0);
        (
            u64::from(leaf.eax) | u64::from(leaf.edx) << 32,
            leaf.ebx as usize,
        )
    })
}

/// A snapshot taken on a CPU with more XSAVE state than this one cannot be
/// resumed faithfully: the kernel would quietly fall back to restoring only
/// x87/SSE (losing AVX registers mid-computation), so refuse it instead.
fn check_host_xsave(
    len: usize,
    features: u64,
    (host_features, host_len): (u64, usize),
) -> Result<()> {
    let missing = features & !host_features;
    if missing != 0 {
        fail!(
            HostError::Failed,
            "the snapshot's CPU state uses XSAVE components {missing:#x} that this CPU lacks \
             (snapshot {features:#x}, this CPU {host_features:#x}): restore it on the kind of machine that took it"
        );
    }
    if len > host_len {
        fail!(
            HostError::Failed,
            "the snapshot's XSAVE area is {len} bytes, larger than this CPU's {host_len}: \
             restore it on the kind of machine that took it"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(regs: Vec<u64>, xstate: usize) -> ThreadState {
        ThreadState {
            name: "main".into(),
            regs,
            xstate: vec![0u8; xstate],
            sigmask: 0,
            kernel: thaw_snapshot_format::ThreadKernel {
                altstack: (0, thaw_snapshot_format::SS_DISABLE, 0),
                ..Default::default()
            },
        }
    }

    #[test]
    fn registers_land_where_the_kernel_reads_them() {
        let mut regs: Vec<u64> = (0..NREGS as u64).map(|i| 0x100 + i).collect();
        for i in SELECTORS {
            regs[i] = 0;
        }
        let mut s = ThreadState {
            sigmask: 0xdead,
            ..state(regs, 832)
        };
        s.kernel.altstack = (0x7000_0000, 0, 0x4000);
        let f = build(&s, 0x1000).unwrap();
        let at = |o: usize| u64::from_le_bytes(f[o..o + 8].try_into().unwrap());
        // sigcontext: r8 first, rip 17th, rsp 16th
        assert_eq!(at(SIGCONTEXT), 0x100 + R8 as u64);
        assert_eq!(at(SIGCONTEXT + 8 * 15), 0x100 + RSP as u64);
        assert_eq!(at(SIGCONTEXT + 8 * 16), 0x100 + RIP as u64);
        assert_eq!(at(SIGCONTEXT + 8 * 17), 0x100 + EFLAGS as u64);
        assert_eq!(at(SIGCONTEXT + 8 * 23), 0x1000 + FPSTATE as u64);
        assert_eq!(at(SIGMASK), 0xdead);
        assert_eq!(
            (at(UC + 16), at(UC + 24), at(UC + 32)),
            (0x7000_0000, 0, 0x4000)
        );
        let magic2 = &f[FPSTATE + 832..FPSTATE + 836];
        assert_eq!(magic2, FP_XSTATE_MAGIC2.to_le_bytes());
        assert_eq!(f.len() % 64, 0, "frames stack up aligned");
    }

    #[test]
    fn refuses_cpu_state_this_cpu_cannot_hold() {
        let host = (0x7, 832);
        assert!(check_host_xsave(832, 0x7, host).is_ok());
        assert!(
            check_host_xsave(576, 0x3, host).is_ok(),
            "a smaller area restores"
        );
        let e = check_host_xsave(832, 0xe7, host).unwrap_err().to_string();
        assert!(e.contains("0xe0"), "names the missing components: {e}");
        assert!(check_host_xsave(2696, 0x7, host).is_err(), "a larger area");
        // this machine's own state always passes
        let (f, len) = host_xsave();
        assert!(len >= MIN_XSTATE && f & 3 == 3, "cpuid 0xd: {f:#x} {len}");
        assert!(check_host_xsave(len, f, (f, len)).is_ok());
    }

    #[test]
    fn refuses_what_sigreturn_cannot_restore() {
        let mut regs = vec![0u64; NREGS];
        assert!(
            build(&state(regs.clone(), 100), 0).is_err(),
            "short XSAVE area"
        );
        regs[SELECTORS[2]] = 0x63;
        assert!(build(&state(regs, 832), 0).is_err(), "fs selector set");
    }
}
