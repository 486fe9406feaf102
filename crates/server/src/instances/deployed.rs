//! One deployed version as the pool runs it, and where its snapshot is.
use std::sync::{Arc, OnceLock, RwLock};
use std::time::{Duration, Instant};
use thaw_worker::UserFunction;

use crate::logs::Ring;
use crate::registry::Record;
use crate::stored::Stored;

/// One deployed version, as the pool runs it.
pub struct FnVersion {
    pub rec: Record,
    pub func: UserFunction,
    /// The trusted (verified) snapshot and the tier it is on now, if the
    /// version has one. The policy's moves replace it; a restore holds the
    /// read lock while it opens the snapshot, so a move removes the old
    /// copy only once no restore is reading it.
    pub placed: RwLock<Option<Placed>>,
    pub ring: Arc<Ring>,
    /// Sandboxes built ahead for this version's restores (`limits.sandbox_pool`;
    /// none for boot-only versions). Dropped with the version.
    pub sandboxes: SandboxesAhead,
}

/// A version's pool of sandboxes built ahead of its restores, started once
/// its first restore has answered: a version that is never restored (always
/// warm, or never called) holds no waiting sandbox, and the pool's first
/// build does not compete with that first restore for the CPU.
pub struct SandboxesAhead {
    /// sandboxes to keep waiting; 0: none
    size: usize,
    pool: OnceLock<Option<thaw_sandbox::SandboxPool>>,
}

impl SandboxesAhead {
    pub fn new(size: usize) -> SandboxesAhead {
        SandboxesAhead {
            size,
            pool: OnceLock::new(),
        }
    }

    /// The pool, once started.
    pub fn get(&self) -> Option<&thaw_sandbox::SandboxPool> {
        self.pool.get().and_then(Option::as_ref)
    }

    /// Starts the pool with `start` unless it was started (or failed to
    /// start: a pool that cannot start only costs the speed-up, and is not
    /// tried again for this version).
    pub fn start_once(&self, start: impl FnOnce(usize) -> Option<thaw_sandbox::SandboxPool>) {
        if self.size > 0 {
            self.pool.get_or_init(|| start(self.size));
        }
    }
}

#[derive(Clone)]
pub struct Placed {
    pub tier: String,
    pub stored: Stored,
}

impl FnVersion {
    pub fn placed(&self) -> Option<Placed> {
        self.placed
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn has_snapshot(&self) -> bool {
        self.placed
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }

    /// Makes `new` the version's snapshot once no restore is opening the
    /// current one, waiting at most `wait`; returns the one replaced, or
    /// the time waited (`new` is dropped) if restores held on to it past
    /// `wait`. It polls
    /// rather than queue on the lock: std's `RwLock` holds off every new
    /// reader behind a queued writer, so a switch waiting for one long
    /// restore (a slot wait, a stream from the remote tier) would stall
    /// lookups, the pool's policy updates and the other restores with it.
    pub fn switch_placed(&self, new: Placed, wait: Duration) -> Result<Option<Placed>, Duration> {
        let t0 = Instant::now();
        loop {
            match self.placed.try_write() {
                Ok(mut placed) => return Ok(placed.replace(new)),
                Err(std::sync::TryLockError::Poisoned(p)) => {
                    return Ok(p.into_inner().replace(new))
                }
                Err(std::sync::TryLockError::WouldBlock) if t0.elapsed() >= wait => {
                    return Err(t0.elapsed())
                }
                Err(std::sync::TryLockError::WouldBlock) => {
                    std::thread::sleep(Duration::from_millis(5))
                }
            }
        }
    }
}
