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
//! crash never leaves a half snapshot that looks whole.

mod snapshot;
mod tier;

pub use snapshot::{
    drop_file_cache, sha256_hex, FileEntry, Manifest, Snapshot, SnapshotWriter, FORMAT_NAME,
    FORMAT_VERSION,
};
pub use tier::{Tier, EMULATED_MARKER, TIER_NAMES};
