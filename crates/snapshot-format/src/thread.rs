//! A thread's record: its registers, XSAVE area, signal mask and the
//! kernel-side state no register set carries.
use crate::{StateError, TASK_SIZE};
use serde::{Deserialize, Serialize};
use thaw_error::fail;

/// Words of `struct user_regs_struct` on x86_64.
pub const NREGS: usize = 27;
/// `sigaltstack`'s `ss_flags` when a thread has no alternate signal stack.
pub const SS_DISABLE: u32 = 2;
/// `sigaltstack`'s `SS_AUTODISARM` (a flag on top of an enabled stack).
pub const SS_AUTODISARM: u32 = 1 << 31;
/// `struct robust_list_head`: the only length the kernel accepts.
pub const ROBUST_LIST_LEN: u64 = 24;

/// A thread's kernel-side state that no register set carries (each 0 where
/// the thread had none).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadKernel {
    /// alternate signal stack: sp, flags, size
    pub altstack: (u64, u32, u64),
    /// robust futex list: head, length
    pub robust_list: (u64, u64),
    /// where the kernel clears the thread id at exit (glibc's copy of it)
    pub clear_tid: u64,
    /// rseq registration: area, length, signature
    pub rseq: (u64, u32, u32),
}

/// One thread: its CPU state and kernel-side state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadState {
    /// its name (`comm`), for reports; a restore gives it back
    pub name: String,
    /// `struct user_regs_struct`, prepared to re-issue an interrupted syscall
    pub regs: Vec<u64>,
    /// XSAVE area (one length and a copy in the state file, not a
    /// sequence of bytes one by one)
    #[serde(with = "serde_bytes")]
    pub xstate: Vec<u8>,
    pub sigmask: u64,
    pub kernel: ThreadKernel,
}

impl ThreadState {
    pub fn regs_array(&self) -> [u64; NREGS] {
        let mut r = [0u64; NREGS];
        r.copy_from_slice(&self.regs[..NREGS]);
        r
    }

    /// What a restore would trust: lengths, flags and addresses in range.
    pub(crate) fn validate(&self) -> Result<(), StateError> {
        if self.regs.len() != NREGS {
            fail!(
                StateError::Corrupt,
                "{} registers, want {NREGS}",
                self.regs.len()
            );
        }
        let x = &self.xstate;
        if x.len() < 576 || x.len() > 16384 || !x.len().is_multiple_of(64) {
            fail!(
                StateError::Corrupt,
                "XSAVE area of {} bytes is implausible",
                x.len()
            );
        }
        let k = &self.kernel;
        let (sp, flags, size) = k.altstack;
        if flags != SS_DISABLE && flags & !SS_AUTODISARM != 0 {
            fail!(
                StateError::Corrupt,
                "alternate signal stack flags {flags:#x}"
            );
        }
        if flags != SS_DISABLE && (sp.saturating_add(size) > TASK_SIZE || size == 0) {
            fail!(
                StateError::Corrupt,
                "alternate signal stack {sp:#x}+{size:#x} outside user space"
            );
        }
        let (head, len) = k.robust_list;
        if (head != 0 && len != ROBUST_LIST_LEN) || head >= TASK_SIZE {
            fail!(
                StateError::Corrupt,
                "robust futex list {head:#x} of {len} bytes"
            );
        }
        if k.clear_tid >= TASK_SIZE || !k.clear_tid.is_multiple_of(4) {
            fail!(StateError::Corrupt, "thread id address {:#x}", k.clear_tid);
        }
        let (addr, rlen, _) = k.rseq;
        if addr != 0
            && (!addr.is_multiple_of(32) || !(32..=4096).contains(&rlen) || addr >= TASK_SIZE)
        {
            fail!(StateError::Corrupt, "rseq area {addr:#x} of {rlen} bytes");
        }
        Ok(())
    }
}
