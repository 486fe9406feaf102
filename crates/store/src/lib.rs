//! The snapshot store: the on-disk snapshot format, atomic writes, integrity
//! checks, and the storage tiers snapshots live on.
//!
//! A snapshot is one directory:
//! - `manifest.json`: format and version, function, runtime-root hash, creation
//!   time, and for every other file its length and SHA-256;
//! - `state.json`: the process state (opaque to this crate);
//! - `memory.img`: the saved pages, page aligned, sparse (only saved pages).
//!
//! It is written under a temporary name, fsynced and renamed into place, so a
//! crash never leaves a half snapshot that looks whole. Deployed snapshots are
//! versions published atomically (`versions.rs`); everything is private to the
//! worker (`secure.rs`), and a verified image cannot change under a restore
//! ([`Snapshot::open_image`]).

pub mod machine;
pub mod secure;
mod snapshot;
mod tier;
mod versions;

pub use machine::MachineRecord;
pub use secure::PathError;
pub use snapshot::{
    block_device_dir, drop_file_cache, make_immutable, sha256_hex, shmem_thp_mode, will_need,
    will_need_spans, FileEntry, Manifest, Snapshot, SnapshotWriter, StoreError, FORMAT_NAME,
    FORMAT_VERSION,
};
pub use tier::{Tier, TierError, EMULATED_MARKER, TIER_NAMES};
pub use versions::{gc_tier, is_version_id, DeployLock};
