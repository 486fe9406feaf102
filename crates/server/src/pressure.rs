//! Memory pressure the budget does not see. The budget counts what the
//! daemon's instances are charged; the machine may run short for reasons it
//! cannot count (other processes, page cache the instances' snapshots need,
//! a budget set too high). The kernel's pressure stall information tells:
//! each second the monitor reads the cumulative time tasks stalled on memory
//! (`some ... total=` in `/proc/pressure/memory`, microseconds) and, when
//! that grew by `memory_pressure_stall_pct` of the second or more, gives up
//! a quarter of the RAM idle instances hold, in the policy's order, before
//! any request has to fail for it.
use crate::app::App;
use std::path::Path;
use std::sync::Weak;
use std::time::{Duration, Instant};

/// How often the pressure file is read.
const EVERY: Duration = Duration::from_secs(1);

/// The cumulative `some` stall of a PSI file, in microseconds.
pub fn some_total_us(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("some "))?
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("total="))?
        .parse()
        .ok()
}

fn read_total(file: &Path) -> Option<u64> {
    some_total_us(&std::fs::read_to_string(file).ok()?)
}

/// Stall as a percent of the time between two readings.
fn stall_pct(before: u64, after: u64, elapsed: Duration) -> f64 {
    let us = elapsed.as_micros().max(1) as f64;
    after.saturating_sub(before) as f64 / us * 100.0
}

/// Starts the monitor unless it is turned off; a machine without PSI gets a
/// warning and no monitor.
pub fn spawn_monitor(app: Weak<App>, pct: f64, file: &Path) -> std::io::Result<()> {
    if pct <= 0.0 {
        return Ok(());
    }
    let Some(mut last) = read_total(file) else {
        tracing::warn!(
            file = %file.display(),
            "no pressure stall information: idle instances are given up only for the memory budget"
        );
        return Ok(());
    };
    let file = file.to_path_buf();
    std::thread::Builder::new()
        .name("thaw-pressure".into())
        .spawn(move || {
            let mut at = Instant::now();
            loop {
                std::thread::sleep(EVERY);
                let Some(app) = app.upgrade() else { return };
                let Some(total) = read_total(&file) else {
                    continue;
                };
                let stalled = stall_pct(last, total, at.elapsed());
                (last, at) = (total, Instant::now());
                if stalled < pct {
                    continue;
                }
                let (n, mb) = app.instances.shed_idle_share(4);
                if n > 0 {
                    tracing::warn!(
                        stalled_pct = format!("{stalled:.1}"),
                        instances = n,
                        mb,
                        "memory pressure: idle instances given up"
                    );
                    app.metrics
                        .shed
                        .get_or_create(&crate::metrics::ReasonLabel {
                            reason: "psi".into(),
                        })
                        .inc_by(n as u64);
                }
            }
        })
        .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_kernels_format() {
        let t = "some avg10=0.00 avg60=0.00 avg300=0.00 total=2748358\n\
                 full avg10=0.00 avg60=0.00 avg300=0.00 total=1737673\n";
        assert_eq!(some_total_us(t), Some(2_748_358));
        assert_eq!(some_total_us("full avg10=0.00 total=5\n"), None);
        assert_eq!(some_total_us("some avg10=0.00 total=x\n"), None);
        assert_eq!(some_total_us(""), None);
        // this machine's own file, if it has one, reads
        if let Ok(t) = std::fs::read_to_string("/proc/pressure/memory") {
            assert!(some_total_us(&t).is_some(), "{t}");
        }
    }

    #[test]
    fn stall_is_a_share_of_the_time_between_readings() {
        let s = Duration::from_secs(1);
        assert_eq!(stall_pct(1_000, 251_000, s), 25.0);
        assert_eq!(stall_pct(5, 5, s), 0.0);
        // a counter that went back (a restarted file) is no stall
        assert_eq!(stall_pct(10, 5, s), 0.0);
    }
}
