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
use crate::ptrace;
use thaw_snapshot_format::{
    signo, ITimer, QueuedSignal, SigAction, SignalState, MAX_QUEUED_SIGNALS,
};

fn timer_us(sec: u64, usec: u64) -> u64 {
    sec.saturating_mul(1_000_000).saturating_add(usec)
}

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
                    crate::freeze::thread_name(pid, tid),
                ),
            ));
        }
    }
    for q in [&process_pending, &main_pending] {
        if q.len() > MAX_QUEUED_SIGNALS {
            refusals.push(Refusal::new(
                "signal",
                format!("more than {} queued signals", MAX_QUEUED_SIGNALS),
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
