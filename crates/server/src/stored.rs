//! Where a version's snapshot is held: on a local tier, or committed on
//! the remote one (what the pool restores from and the mover moves).
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use thaw_store::Snapshot;
use thaw_tiers::moves::{self, Place};
use thaw_tiers::objects::RemoteStore;
use thaw_tiers::{Kind, TiersConfig};

use crate::config::SnapshotTiers;
use thaw_error::ResultExt;

type Result<T, E = thaw_tiers::TiersError> = std::result::Result<T, E>;

/// Where a version's snapshot is held.
// one per deployed version: its size does not matter
#[allow(clippy::large_enum_variant)]
#[derive(Clone)]
pub enum Stored {
    /// a verified snapshot on a local tier
    Local(Snapshot),
    /// committed on the remote tier; a restore streams it
    Remote(Arc<RemoteCopy>),
}

/// A snapshot on the remote tier and what a stream of it needs.
pub struct RemoteCopy {
    pub store: Arc<RemoteStore>,
    pub home: PathBuf,
    pub name: String,
    /// A copy shared across nodes (`crate::shared`): kept on the fast tier
    /// under the node's own name once a stream of it arrives whole.
    pub keep: Option<KeepLocal>,
}

impl RemoteCopy {
    /// Whether this is the copy shared across nodes (never moved or
    /// deleted by this node).
    pub fn is_shared(&self) -> bool {
        self.keep.is_some()
    }
}

impl Stored {
    /// The local snapshot, if the copy is local.
    pub fn local(&self) -> Option<&Snapshot> {
        match self {
            Stored::Local(s) => Some(s),
            Stored::Remote(_) => None,
        }
    }
}

/// The remote tier's client, when one of the daemon's snapshot tiers is
/// remote: (tier name, client).
pub type RemoteClient = Option<(String, Arc<RemoteStore>)>;

/// Opens the client of the slow tier if it is remote. Opening does not
/// contact the store (a store that is down fails its requests, clearly).
pub fn open_remote(home: &Path, tiers: &SnapshotTiers) -> Result<RemoteClient> {
    let cfg = TiersConfig::load(home)?;
    let t = cfg.get(&tiers.slow)?;
    if t.kind != Kind::Remote {
        return Ok(None);
    }
    let store = RemoteStore::open(home, t)
        .with_context(|| format!("opening the client of the remote tier {}", t.name))?;
    Ok(Some((t.name.clone(), Arc::new(store))))
}

/// Why the shared copy could not be looked up, published or kept.
#[derive(Debug, thiserror::Error)]
pub enum ShareError {
    #[error("the daemon's slow snapshot tier is not remote")]
    NotRemote,
    /// an object of the published copy does not parse
    #[error("the published {what} of {name} is corrupt: {why}")]
    Corrupt {
        name: String,
        what: &'static str,
        why: String,
    },
    #[error("{sname} is not on {tier} after its publish")]
    NotKept { sname: String, tier: String },
    #[error(transparent)]
    Tiers(#[from] thaw_tiers::TiersError),
    #[error(transparent)]
    Store(#[from] thaw_store::StoreError),
}

/// Where a streamed shared copy is kept: the node's own name for the
/// version on its fast tier. Only the first stream that arrives whole keeps it.
pub struct KeepLocal {
    pub tier: String,
    pub sname: String,
    done: AtomicBool,
}

impl KeepLocal {
    pub fn new(tier: &str, sname: &str) -> KeepLocal {
        KeepLocal {
            tier: tier.to_string(),
            sname: sname.to_string(),
            done: AtomicBool::new(false),
        }
    }

    /// Publishes the arrived, verified stream (staged at `staged`) onto the
    /// fast tier; returns the kept snapshot, or `None` if another stream
    /// keeps it.
    pub fn keep(&self, home: &Path, staged: &Path) -> Result<Option<Snapshot>, ShareError> {
        if self.done.swap(true, Ordering::SeqCst) {
            return Ok(None);
        }
        let cfg = thaw_tiers::TiersConfig::load(home)?;
        let store = moves::local_store(home, cfg.get(&self.tier)?)?;
        let place = Place::Local {
            tier: self.tier.clone(),
            store: store.clone(),
        };
        let r = (|| {
            moves::publish_staged(&self.sname, Snapshot::open(staged)?, &place)?;
            Ok::<_, ShareError>(store.open_current(&self.sname)?)
        })();
        match r {
            Ok(Some(s)) => Ok(Some(s)),
            Ok(None) => Err(ShareError::NotKept {
                sname: self.sname.clone(),
                tier: self.tier.clone(),
            }),
            Err(e) => {
                // a later stream may try again
                self.done.store(false, Ordering::SeqCst);
                Err(e)
            }
        }
    }
}
