//! Freezing a runtime: every thread stopped under ptrace at a point a
//! restore can resume from (the agent waiting on its socket, no thread
//! inside the restorer's trampoline or an uninterruptible wait).
use crate::checkpoint::MapsLine;
use crate::error::{CheckpointError, Result};
use crate::ptrace::{self, REG_RIP};
use crate::threads::NOT_RESTARTABLE;
use std::path::Path;
use std::time::{Duration, Instant};
use thaw_error::fail;
use thaw_sandbox::HostError;

/// Waits until the agent is blocked reading its socket (fd 3), so the frozen
/// registers sit at a clean, restartable point. The agent's thread is the
/// main thread, except in a JVM, whose launcher runs Java's main thread
/// beside the process's first one; any thread blocked reading fd 3 will do.
pub(crate) fn wait_blocked_on_socket(pid: i32) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let tids = task_ids(pid).unwrap_or_default();
        let mut main = String::new();
        for (i, tid) in tids.iter().enumerate() {
            let sc = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall"))
                .unwrap_or_default();
            let mut f = sc.split_whitespace();
            let nr = f.next().unwrap_or("");
            let fd = f.next().unwrap_or("");
            // read(0), recvfrom(45), recvmsg(47) on fd 3
            if matches!(nr, "0" | "45" | "47") && fd == "0x3" {
                return Ok(());
            }
            if i == 0 {
                main = sc;
            }
        }
        if Instant::now() > deadline {
            fail!(
                HostError::Failed,
                "runtime never went back to waiting on its socket (main thread's syscall: {})",
                main.trim()
            );
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// The process's thread ids, the main thread first.
pub(crate) fn task_ids(pid: i32) -> Result<Vec<i32>> {
    let mut tids: Vec<i32> = std::fs::read_dir(format!("/proc/{pid}/task"))?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_by_key(|&t| (t != pid, t));
    Ok(tids)
}

/// A thread's name (`comm`, as it is: a restore gives it back), for
/// refusals and the snapshot.
pub(crate) fn thread_name(pid: i32, tid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/task/{tid}/comm"))
        .map(|s| String::from_utf8_lossy(s.strip_suffix(b"\n").unwrap_or(&s)).into_owned())
        .unwrap_or_else(|_| "?".into())
}

/// How long a thread may take to stop before the checkpoint is refused.
const STOP_DEADLINE: Duration = Duration::from_secs(2);

/// What /proc/PID/task/TID/status says of a thread's scheduling: its state
/// letter and its tracer (0: none).
fn sched_of(status: &str) -> (char, i32) {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
            .unwrap_or("")
    };
    let state = field("State:").chars().next().unwrap_or('?');
    let tracer = field("TracerPid:").parse().unwrap_or(0);
    (state, tracer)
}

/// The system call a thread is in (/proc/PID/task/TID/syscall), by name
/// where a refusal may need it.
fn call_of(pid: i32, tid: i32) -> String {
    let text =
        std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).unwrap_or_default();
    let nr = text.split_whitespace().next().unwrap_or("?");
    match nr
        .parse::<u64>()
        .ok()
        .and_then(|n| NOT_RESTARTABLE.iter().find(|(c, _)| *c == n))
    {
        Some((_, name)) => (*name).to_string(),
        None => format!("system call {nr}"),
    }
}

/// Refuses, before it is seized, a thread no freeze could stop: one traced
/// by another process (a debugger), or one that stays in an uninterruptible
/// wait (state D, e.g. a `vfork` whose child never execs) for
/// [`STOP_DEADLINE`]. Seized, such a thread could not be let go again
/// (a detach needs it stopped): it would stop, still traced, whenever it
/// left that wait, and die with the checkpointing thread.
fn refuse_unstoppable(pid: i32, tid: i32) -> Result<(), CheckpointError> {
    let deadline = Instant::now() + STOP_DEADLINE;
    loop {
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")) else {
            return Ok(()); // gone: the seize says so
        };
        let (state, tracer) = sched_of(&status);
        if tracer != 0 {
            fail!(
                CheckpointError::Unresumable,
                "thread {} (tid {tid}) is traced by process {tracer} (a debugger): a snapshot cannot freeze it",
                thread_name(pid, tid)
            );
        }
        if state != 'D' {
            return Ok(());
        }
        if Instant::now() > deadline {
            fail!(
                CheckpointError::Unresumable,
                "thread {} (tid {tid}) stayed in an uninterruptible wait (state D, in {}) for {} s: it cannot be stopped there",
                thread_name(pid, tid),
                call_of(pid, tid),
                STOP_DEADLINE.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Seizes and stops every thread of `pid` into `frozen` (main first),
/// listing /proc/PID/task again until no thread is left running (one may
/// be cloning another while we list).
pub(crate) fn freeze_all(pid: i32, frozen: &mut Vec<i32>) -> Result<(), CheckpointError> {
    loop {
        let tids: Vec<i32> = task_ids(pid)?
            .into_iter()
            .filter(|t| !frozen.contains(t))
            .collect();
        for &tid in &tids {
            refuse_unstoppable(pid, tid)?;
        }
        let mut new = Vec::new();
        for tid in tids {
            match ptrace::seize(tid) {
                Ok(()) => {}
                // gone between the listing and the seize
                Err(_) if !Path::new(&format!("/proc/{pid}/task/{tid}")).exists() => continue,
                Err(e) => return Err(e.into()),
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
                fail!(
                    CheckpointError::Unresumable,
                    "thread {} (tid {tid}) did not stop within {} s (state {}): it is inside a call that cannot be interrupted",
                    thread_name(pid, tid),
                    STOP_DEADLINE.as_secs(),
                    state.unwrap_or("?")
                );
            }
        }
    }
}

/// How long a restored thread may take to leave the restorer's trampoline
/// before a checkpoint gives up.
const TRAMPOLINE_DEADLINE: Duration = Duration::from_secs(2);

/// [`freeze_all`], and again while some thread is still on its first
/// instructions in the restorer's trampoline (a restore's main thread does
/// not wait for the others to run them): every thread is let go for a
/// moment first. Frozen outside it, no thread runs there again. Returns
/// how many times it let the runtime go on.
pub(crate) fn freeze_outside_trampoline(
    pid: i32,
    frozen: &mut Vec<i32>,
) -> Result<u32, CheckpointError> {
    let deadline = Instant::now() + TRAMPOLINE_DEADLINE;
    let span =
        thaw_restorer::RESTORER_BASE..thaw_restorer::RESTORER_BASE + thaw_restorer::RESTORER_SPAN;
    let mut waits = 0;
    loop {
        freeze_all(pid, frozen)?;
        let mut inside = None;
        for &tid in frozen.iter() {
            if span.contains(&ptrace::get_regs(tid)?[REG_RIP]) {
                inside = Some(tid);
                break;
            }
        }
        let Some(tid) = inside else {
            return Ok(waits);
        };
        if Instant::now() > deadline {
            fail!(
                CheckpointError::Unresumable,
                "thread {} (tid {tid}) is still in the restorer's trampoline after {} s",
                thread_name(pid, tid),
                TRAMPOLINE_DEADLINE.as_secs()
            );
        }
        for tid in frozen.drain(..) {
            ptrace::detach(tid)?;
        }
        waits += 1;
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The restorer's trampoline, left mapped by a restore with several threads
/// (anonymous memory at its fixed place): not the runtime's, and no thread
/// is in it once frozen ([`freeze_outside_trampoline`]), so a snapshot
/// leaves it out.
pub(crate) fn trampoline_leftover(m: &MapsLine) -> bool {
    let lo = thaw_restorer::TRAMP_ADDR;
    m.inode == 0 && m.name.is_empty() && m.start >= lo && m.end <= lo + thaw_restorer::TRAMP_SIZE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_status_gives_state_and_tracer() {
        let status = "Name:\tpython3\nUmask:\t0022\nState:\tD (disk sleep)\nTgid:\t7\nTracerPid:\t4242\nUid:\t0\n";
        assert_eq!(sched_of(status), ('D', 4242));
        assert_eq!(sched_of("State:\tS (sleeping)\nTracerPid:\t0\n"), ('S', 0));
        // a file cut short reads as "not traced, state unknown"
        assert_eq!(sched_of("Name:\tx\n"), ('?', 0));
    }
}
