//! A process's signal state, as a snapshot carries it: every signal's
//! disposition, the interval timers, and the signals queued for the process
//! and for its main thread. The kernel keeps all of it outside the process's
//! memory, so a restore that brought back only memory would leave a function
//! with default dispositions (its handlers silently gone, SIGPIPE fatal
//! again) and its alarms unarmed.
//!
//! Captured in the frozen runtime (dispositions and timers by calls run
//! inside its main thread, queued signals with `PTRACE_PEEKSIGINFO`) and
//! set again by the restorer before any thread runs (`restore_signals` in
//! `crates/restorer/src/restorer.c`). What cannot be carried is refused by
//! name: POSIX timers (`timer_create`) and signals queued for a thread
//! other than the main one.
use crate::checkpoint::Refusal;
use crate::error::Result;
use crate::ptrace::{self, SIGINFO_BYTES};
use crate::state::{put32, put64, put_count, Reader, StateError};
use serde::{Deserialize, Serialize};
use thaw_error::fail;

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
const TASK_SIZE: u64 = 0x7fff_ffff_f000;
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

fn timer_us(sec: u64, usec: u64) -> u64 {
    sec.saturating_mul(1_000_000).saturating_add(usec)
}

impl SignalState {
    /// Reads the frozen process's signal state through its stopped main
    /// thread (`injector`); returns it, or what keeps it from a snapshot.
    pub(crate) fn capture(
        pid: i32,
        tids: &[i32],
        injector: &ptrace::Injector,
    ) -> Result<std::result::Result<SignalState, Vec<Refusal>>> {
        let (raw, timers) = injector.dispositions_and_itimers()?;
        let actions = raw
            .into_iter()
            .filter(|&(_, a)| a != [0; 4])
            .map(|(sig, [handler, flags, restorer, mask])| SigAction {
                sig,
                handler,
                flags,
                restorer,
                mask,
            })
            .collect();
        let itimers = timers.map(|[isec, iusec, vsec, vusec]| ITimer {
            interval_us: timer_us(isec, iusec),
            value_us: timer_us(vsec, vusec),
        });
        let mut refusals = posix_timers(pid)?;
        let process_pending = queued(tids[0], true)?;
        let main_pending = queued(tids[0], false)?;
        for &tid in &tids[1..] {
            for info in ptrace::queued_signals(tid, false)? {
                refusals.push(Refusal::new(
                    "signal",
                    format!(
                        "signal {} queued for thread {} (tid {tid}): only the main thread's and the process's queued signals are carried",
                        signo(&info),
                        crate::checkpoint::thread_name(pid, tid),
                    ),
                ));
            }
        }
        for q in [&process_pending, &main_pending] {
            if q.len() > ptrace::MAX_QUEUED_SIGNALS {
                refusals.push(Refusal::new(
                    "signal",
                    format!("more than {} queued signals", ptrace::MAX_QUEUED_SIGNALS),
                ));
            }
        }
        if !refusals.is_empty() {
            return Ok(Err(refusals));
        }
        Ok(Ok(SignalState {
            actions,
            itimers,
            process_pending,
            main_pending,
        }))
    }

    /// What a restore would trust.
    pub(crate) fn validate(&self) -> std::result::Result<(), StateError> {
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
            if q.len() > ptrace::MAX_QUEUED_SIGNALS {
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

    pub(crate) fn encode(&self, w: &mut Vec<u8>) {
        put_count(w, self.actions.len());
        for a in &self.actions {
            put32(w, a.sig);
            for v in [a.handler, a.flags, a.restorer, a.mask] {
                put64(w, v);
            }
        }
        for t in &self.itimers {
            put64(w, t.interval_us);
            put64(w, t.value_us);
        }
        for q in [&self.process_pending, &self.main_pending] {
            put_count(w, q.len());
            for info in q {
                w.extend_from_slice(info);
            }
        }
    }

    pub(crate) fn decode(r: &mut Reader) -> std::result::Result<SignalState, StateError> {
        let n = r.count(4 + 32)?;
        let mut actions = Vec::with_capacity(n);
        for _ in 0..n {
            actions.push(SigAction {
                sig: r.u32()?,
                handler: r.u64()?,
                flags: r.u64()?,
                restorer: r.u64()?,
                mask: r.u64()?,
            });
        }
        let mut itimers = [ITimer::default(); 3];
        for t in &mut itimers {
            t.interval_us = r.u64()?;
            t.value_us = r.u64()?;
        }
        let mut queue = || -> std::result::Result<Vec<QueuedSignal>, StateError> {
            let n = r.count(SIGINFO_BYTES)?;
            (0..n)
                .map(|_| Ok(r.take(SIGINFO_BYTES)?.to_vec()))
                .collect()
        };
        let process_pending = queue()?;
        let main_pending = queue()?;
        Ok(SignalState {
            actions,
            itimers,
            process_pending,
            main_pending,
        })
    }
}

fn queued(tid: i32, shared: bool) -> Result<Vec<QueuedSignal>> {
    Ok(ptrace::queued_signals(tid, shared)?
        .into_iter()
        .map(|i| i.to_vec())
        .collect())
}

/// The process's POSIX timers (`/proc/PID/timers`), each a refusal: a
/// restore cannot make a timer with the same id.
fn posix_timers(pid: i32) -> Result<Vec<Refusal>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/timers"))?;
    let mut out = Vec::new();
    let mut id = String::new();
    let mut signal = String::new();
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("ID: ") {
            id = v.trim().into();
        } else if let Some(v) = line.strip_prefix("signal: ") {
            // "14/0000000000000000": the signal, then sigev_value
            signal = v.split('/').next().unwrap_or_default().trim().into();
        } else if let Some(v) = line.strip_prefix("ClockID: ") {
            out.push(Refusal::new(
                "timer",
                format!(
                    "POSIX timer {id} (timer_create: signal {signal}, clock {}): a snapshot cannot carry it",
                    v.trim()
                ),
            ));
        }
    }
    Ok(out)
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
        let mut w = Vec::new();
        s.encode(&mut w);
        let mut r = Reader(&w);
        assert_eq!(SignalState::decode(&mut r).unwrap(), s);
        assert!(r.0.is_empty());
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
        let mut w = Vec::new();
        sample().encode(&mut w);
        for cut in [0, 3, 40, w.len() - 1] {
            assert!(
                SignalState::decode(&mut Reader(&w[..cut])).is_err(),
                "cut at {cut}"
            );
        }
    }
}
