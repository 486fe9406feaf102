//! Restore slots: at most `max_concurrent_restores` restores read from a
//! tier at once, across every thaw process on the machine ("FaaS in the Age of
//! (sub-)µs I/O": a SATA SSD saturates at about four concurrent restores, and more only
//! queue at the device). A slot is an exclusive `flock` on one of the
//! tier's slot files; the kernel releases it when its holder exits, even
//! after `kill -9`, so a crashed worker never leaks a slot.
//!
//! Within one process, restores wait for a tier's slots on a condition
//! variable, and only as many as the tier has slots go on to the slot files
//! (where they meet other processes' restores): a burst of restores polling
//! the files would spend its CPU opening them.
use crate::config::{TierConfig, TIERS_DIR};
use crate::error::{Result, TiersError};
use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};
use thaw_error::ResultExt;

/// A held slot; released on drop.
#[derive(Debug)]
pub struct RestoreSlot {
    // dropped first: the file lock goes before the process's turn
    _file: std::fs::File,
    _turn: Turn,
    pub index: usize,
    pub waited: Duration,
}

/// One tier's slots as this process counts them.
#[derive(Debug, Default)]
struct Gate {
    held: Mutex<u32>,
    freed: Condvar,
}

/// A turn at a tier's slot files, given back on drop.
#[derive(Debug)]
struct Turn(Arc<Gate>);

impl Drop for Turn {
    fn drop(&mut self) {
        *lock(&self.0.held) -= 1;
        self.0.freed.notify_one();
    }
}

fn lock(m: &Mutex<u32>) -> std::sync::MutexGuard<'_, u32> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The gate of the slot files `dir/tier.*`, one per process.
fn gate(dir: &Path, tier: &str) -> Arc<Gate> {
    static GATES: OnceLock<Mutex<HashMap<PathBuf, Arc<Gate>>>> = OnceLock::new();
    let mut g = GATES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    g.entry(dir.join(tier)).or_default().clone()
}

impl Gate {
    /// Waits until fewer than `slots` of this process's restores hold a
    /// turn, until `deadline`.
    fn enter(self: Arc<Self>, slots: u32, deadline: Instant) -> Option<Turn> {
        let mut held = lock(&self.held);
        while *held >= slots {
            let left = deadline.checked_duration_since(Instant::now())?;
            held = self
                .freed
                .wait_timeout(held, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        *held += 1;
        drop(held);
        Some(Turn(self))
    }
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
        let busy = || {
            TiersError::Busy(format!(
                "tier {}: all {} restore slots stayed busy for {:?}",
                t.name, t.max_concurrent_restores, timeout
            ))
        };
        let turn = gate(&dir, &t.name)
            .enter(t.max_concurrent_restores, t0 + timeout)
            .ok_or_else(busy)?;
        // opened once: while it waits, a restore only retries the locks
        let mut files = (0..t.max_concurrent_restores)
            .map(|i| {
                let p = dir.join(format!("{}.{i}", t.name));
                std::fs::OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(&p)
                    .with_context(|| format!("opening {}", p.display()))
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        loop {
            // SAFETY: flock on descriptors we own; no memory is involved.
            let free = files.iter().position(|f| unsafe {
                libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0
            });
            if let Some(i) = free {
                return Ok(RestoreSlot {
                    _file: files.swap_remove(i),
                    _turn: turn,
                    index: i,
                    waited: t0.elapsed(),
                });
            }
            if t0.elapsed() >= timeout {
                return Err(busy());
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

    #[test]
    fn a_waiting_restore_gets_the_slot_given_back() {
        let home = std::env::temp_dir().join(format!("thaw-slots-wait-{}", std::process::id()));
        let mut t = crate::TiersConfig::defaults(&home)
            .get("sata")
            .unwrap()
            .clone();
        t.max_concurrent_restores = 1;
        let held = RestoreSlot::acquire(&home, &t, Duration::ZERO).unwrap();
        std::thread::scope(|s| {
            let waiter = s.spawn(|| RestoreSlot::acquire(&home, &t, Duration::from_secs(30)));
            std::thread::sleep(Duration::from_millis(50));
            assert!(!waiter.is_finished(), "the second restore did not wait");
            drop(held);
            let got = waiter.join().unwrap().unwrap();
            assert_eq!(got.index, 0);
        });
        std::fs::remove_dir_all(&home).unwrap();
    }
}
