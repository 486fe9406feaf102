//! Sandbox uids: one per live sandbox across every worker on the machine.
//! A uid is leased by holding a flock on its lock file in a private
//! directory, so two workers never hand out the same uid at once, whatever
//! their pids.
use crate::StartError;
use std::path::Path;
use thaw_error::{fail, ResultExt};
use thaw_store::secure::{self, FileLock};

/// The range sandbox uids (and gids) come from.
pub const UID_BASE: u32 = 200_000;
pub const UID_COUNT: u32 = 100_000;
const LEASE_DIR: &str = "/run/thaw/uids";

/// A uid held for one sandbox; released on drop.
#[derive(Debug)]
pub struct UidLease {
    pub uid: u32,
    _lock: FileLock,
}

impl UidLease {
    /// The lowest uid of the range nobody holds.
    pub fn acquire() -> Result<UidLease, StartError> {
        Self::acquire_in(Path::new(LEASE_DIR))
    }

    fn acquire_in(dir: &Path) -> Result<UidLease, StartError> {
        secure::ensure_private_dir(dir)
            .with_context(|| format!("the uid lease directory {}", dir.display()))?;
        for uid in UID_BASE..UID_BASE + UID_COUNT {
            let lock = secure::flock(&dir.join(format!("{uid}.lock")), true, true)
                .with_context(|| format!("leasing uid {uid}"))?;
            if let Some(lock) = lock {
                return Ok(UidLease { uid, _lock: lock });
            }
        }
        fail!(
            StartError::Exhausted,
            "all {UID_COUNT} sandbox uids from {UID_BASE} are in use"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_never_collide_and_are_reused_after_release() {
        let dir =
            std::path::PathBuf::from(format!("/dev/shm/thaw-uid-test-{}", std::process::id()));
        let a = UidLease::acquire_in(&dir).unwrap();
        let b = UidLease::acquire_in(&dir).unwrap();
        let c = UidLease::acquire_in(&dir).unwrap();
        assert!(a.uid != b.uid && b.uid != c.uid && a.uid != c.uid);
        let freed = b.uid;
        drop(b);
        assert_eq!(UidLease::acquire_in(&dir).unwrap().uid, freed);
        // another process (another open of the lock file) sees a's lease too
        let other = secure::flock(&dir.join(format!("{}.lock", a.uid)), true, true).unwrap();
        assert!(other.is_none());
        drop((a, c));
        secure::remove_tree(&dir).unwrap();
    }
}
