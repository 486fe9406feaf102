//! The records of a process's signal state (dispositions, interval timers,
//! queued signals) and their checks; captured and set again by
//! checkpoint and restore.
use crate::{StateError, TASK_SIZE};
use serde::{Deserialize, Serialize};
use thaw_error::fail;
use thaw_restorer::SIGINFO_BYTES;

/// Most queued signals a snapshot keeps, per queue.
pub const MAX_QUEUED_SIGNALS: usize = 256;

/// One signal's disposition (`struct k_sigaction` of x86_64).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SigAction {
    pub sig: u32,
    /// SIG_DFL (0), SIG_IGN (1) or the handler's address
    pub handler: u64,
    pub flags: u64,
    pub restorer: u64,
    /// signals blocked while the handler runs
    pub mask: u64,
}

/// An interval timer (`struct itimerval`), in microseconds. A restore arms
/// `value` again counted from the restore.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ITimer {
    pub interval_us: u64,
    pub value_us: u64,
}

/// A queued signal: its `siginfo_t` as the kernel gave it.
pub type QueuedSignal = Vec<u8>;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignalState {
    /// every signal whose disposition is not the default (SIG_DFL, no
    /// flags, empty mask), ascending
    pub actions: Vec<SigAction>,
    /// ITIMER_REAL, ITIMER_VIRTUAL, ITIMER_PROF
    pub itimers: [ITimer; 3],
    /// queued for the whole process, oldest first
    pub process_pending: Vec<QueuedSignal>,
    /// queued for the main thread, oldest first
    pub main_pending: Vec<QueuedSignal>,
}

/// `sa_flags` bits the kernel accepts from `rt_sigaction` on x86_64.
const KNOWN_FLAGS: u64 = 0x1 // SA_NOCLDSTOP
    | 0x2 // SA_NOCLDWAIT
    | 0x4 // SA_SIGINFO
    | 0x400 // SA_UNSUPPORTED
    | 0x800 // SA_EXPOSE_TAGBITS
    | 0x0400_0000 // SA_RESTORER
    | 0x0800_0000 // SA_ONSTACK
    | 0x1000_0000 // SA_RESTART
    | 0x4000_0000 // SA_NODEFER
    | 0x8000_0000; // SA_RESETHAND
/// An interval timer longer than this (about 31 years) is not one a
/// runtime sets: a corrupt record.
const MAX_TIMER_US: u64 = 1_000_000_000_000_000;

/// A signal a disposition or a queued signal may name (SIGKILL and SIGSTOP
/// have no disposition and are never left queued at a stop).
fn settable(sig: u32) -> bool {
    (1..=64).contains(&sig) && sig != libc::SIGKILL as u32 && sig != libc::SIGSTOP as u32
}

/// The signal number of a queued signal's `siginfo_t`.
pub fn signo(info: &[u8]) -> u32 {
    u32::from_le_bytes(info[..4].try_into().expect("a siginfo has a signo"))
}

impl SignalState {
    /// What a restore would trust.
    pub(crate) fn validate(&self) -> Result<(), StateError> {
        let mut last = 0;
        for a in &self.actions {
            if !settable(a.sig) || a.sig <= last {
                fail!(
                    StateError::Corrupt,
                    "signal disposition for signal {} (out of range or order)",
                    a.sig
                );
            }
            last = a.sig;
            if a.flags & !KNOWN_FLAGS != 0 || a.handler >= TASK_SIZE || a.restorer >= TASK_SIZE {
                fail!(
                    StateError::Corrupt,
                    "signal {}'s disposition (handler {:#x}, flags {:#x}, restorer {:#x})",
                    a.sig,
                    a.handler,
                    a.flags,
                    a.restorer
                );
            }
        }
        for (which, t) in self.itimers.iter().enumerate() {
            if t.interval_us > MAX_TIMER_US || t.value_us > MAX_TIMER_US {
                fail!(StateError::Corrupt, "interval timer {which} of {t:?}");
            }
        }
        for q in [&self.process_pending, &self.main_pending] {
            if q.len() > MAX_QUEUED_SIGNALS {
                fail!(StateError::Corrupt, "{} queued signals", q.len());
            }
            for info in q {
                if info.len() != SIGINFO_BYTES || !settable(signo(info)) {
                    fail!(
                        StateError::Corrupt,
                        "a queued signal record ({} bytes, signal {})",
                        info.len(),
                        if info.len() >= 4 { signo(info) } else { 0 }
                    );
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(sig: u32) -> QueuedSignal {
        let mut b = vec![0u8; SIGINFO_BYTES];
        b[..4].copy_from_slice(&sig.to_le_bytes());
        b
    }

    fn sample() -> SignalState {
        SignalState {
            actions: vec![
                SigAction {
                    sig: 10,
                    handler: 0x7f00_0000_1000,
                    flags: 0x0400_0004,
                    restorer: 0x7f00_0000_2000,
                    mask: 1 << 9,
                },
                SigAction {
                    sig: 13,
                    handler: 1,
                    flags: 0,
                    restorer: 0,
                    mask: 0,
                },
            ],
            itimers: [
                ITimer {
                    interval_us: 0,
                    value_us: 2_500_000,
                },
                ITimer::default(),
                ITimer::default(),
            ],
            process_pending: vec![info(12)],
            main_pending: vec![info(34), info(34)],
        }
    }

    #[test]
    fn a_signal_state_reads_back_as_written() {
        let s = sample();
        s.validate().unwrap();
        let w = postcard::to_allocvec(&s).unwrap();
        assert_eq!(postcard::from_bytes::<SignalState>(&w).unwrap(), s);
    }

    #[test]
    fn bad_signal_records_are_refused_by_name() {
        let bad = |f: &dyn Fn(&mut SignalState)| {
            let mut s = sample();
            f(&mut s);
            s.validate().unwrap_err().to_string()
        };
        assert!(bad(&|s| s.actions[0].sig = 9).contains("signal 9"));
        assert!(bad(&|s| s.actions[1].sig = 10).contains("order"));
        assert!(bad(&|s| s.actions[0].flags |= 1 << 40).contains("flags"));
        assert!(bad(&|s| s.actions[0].handler = 1 << 47).contains("handler"));
        assert!(bad(&|s| s.itimers[2].value_us = u64::MAX).contains("timer 2"));
        assert!(bad(&|s| s.process_pending[0] = info(19)).contains("signal 19"));
        assert!(bad(&|s| s.main_pending[0].truncate(64)).contains("64 bytes"));
    }

    #[test]
    fn a_truncated_signal_state_is_refused() {
        let w = postcard::to_allocvec(&sample()).unwrap();
        for cut in [0, 3, 40, w.len() - 1] {
            assert!(
                postcard::from_bytes::<SignalState>(&w[..cut]).is_err(),
                "cut at {cut}"
            );
        }
    }
}
