//! Where a version's snapshot is held: on a local tier, or committed on
//! the remote one (what the pool restores from and the mover moves).
use std::path::{Path, PathBuf};
use std::sync::Arc;
use thaw_store::Snapshot;
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
