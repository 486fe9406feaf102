//! A timerfd ([`super::FdKind::TimerFd`]): a known clock and times the
//! kernel can arm. Captured and planned in
//! `crates/checkpoint/src/fds/timerfd.rs`.

/// The clocks a timerfd may be on.
pub const CLOCKS: [u32; 3] = [
    libc::CLOCK_REALTIME as u32,
    libc::CLOCK_MONOTONIC as u32,
    libc::CLOCK_BOOTTIME as u32,
];

/// A timer's clock and its remaining time and interval (nanoseconds).
pub(super) fn check(clock: u32, value_ns: u64, interval_ns: u64) -> Result<(), String> {
    if !CLOCKS.contains(&clock) || value_ns >= 1 << 62 || interval_ns >= 1 << 62 {
        return Err(format!("a timer on clock {clock}"));
    }
    Ok(())
}
