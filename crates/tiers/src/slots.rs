//! Restore slots: at most `max_concurrent_restores` restores read from a
//! tier at once, across every thaw process on the machine ("FaaS in the Age of
//! (sub-)µs I/O": a SATA SSD saturates at about four concurrent restores, and more only
//! queue at the device). A slot is an exclusive `flock` on one of the
//! tier's slot files; the kernel releases it when its holder exits, even
//! after `kill -9`, so a crashed worker never leaks a slot.
use crate::config::{TierConfig, TIERS_DIR};
use crate::error::{Result, TiersError};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use thaw_error::fail;
use thaw_error::ResultExt;

/// A held slot; released on drop.
#[derive(Debug)]
pub struct RestoreSlot {
    _file: std::fs::File,
    pub index: u32,
    pub waited: Duration,
}

fn slot_dir(home: &Path) -> PathBuf {
    home.join(TIERS_DIR).join(".slots")
}

impl RestoreSlot {
    /// Takes a free slot of `t`, waiting up to `timeout` for one.
    pub fn acquire(home: &Path, t: &TierConfig, timeout: Duration) -> Result<RestoreSlot> {
        let dir = slot_dir(home);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let t0 = Instant::now();
        loop {
            for i in 0..t.max_concurrent_restores {
                let p = dir.join(format!("{}.{i}", t.name));
                let f = std::fs::OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(&p)
                    .with_context(|| format!("opening {}", p.display()))?;
                // SAFETY: flock on a descriptor we own; no memory is involved.
                if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                    return Ok(RestoreSlot {
                        _file: f,
                        index: i,
                        waited: t0.elapsed(),
                    });
                }
            }
            if t0.elapsed() >= timeout {
                fail!(
                    TiersError::Busy,
                    "tier {}: all {} restore slots stayed busy for {:?}",
                    t.name,
                    t.max_concurrent_restores,
                    timeout
                );
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_bound_concurrency_and_come_back() {
        let home = std::env::temp_dir().join(format!("thaw-slots-{}", std::process::id()));
        let mut t = crate::TiersConfig::defaults(&home)
            .get("sata")
            .unwrap()
            .clone();
        t.max_concurrent_restores = 2;
        let a = RestoreSlot::acquire(&home, &t, Duration::ZERO).unwrap();
        let b = RestoreSlot::acquire(&home, &t, Duration::ZERO).unwrap();
        assert_ne!(a.index, b.index);
        let busy = RestoreSlot::acquire(&home, &t, Duration::from_millis(20)).unwrap_err();
        assert!(matches!(busy, crate::TiersError::Busy(_)), "{busy}");
        drop(a);
        let c = RestoreSlot::acquire(&home, &t, Duration::ZERO).unwrap();
        assert_eq!(c.index, 0);
        drop((b, c));
        std::fs::remove_dir_all(&home).unwrap();
    }
}
