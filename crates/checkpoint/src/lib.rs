//! Checkpoint and restore of sandboxes (`thaw-sandbox`): [`checkpoint()`]
//! freezes a sandbox's runtime with ptrace and writes a snapshot (its
//! memory, every thread, its descriptors, signal state and /tmp and
//! /dev/shm, recorded in `thaw-snapshot-format`); [`restore()`] rebuilds
//! one from a snapshot in a new sandbox, the restorer (`thaw-restorer`)
//! recreating its memory as a strategy of `thaw-restore` says. The sandbox
//! crate below knows nothing of snapshots.

pub mod checkpoint;
mod error;
pub mod fds;
pub mod files;
mod freeze;
pub mod profile;
mod ptrace;
pub mod restore;
pub mod shared_maps;
mod sigframe;
pub mod signals;
mod threads;

pub use checkpoint::{checkpoint, CheckpointReport, NotCheckpointable, Refusal};
pub use error::{CheckpointError, ProfileError, RestoreError};
pub use restore::{restore, RestoreArgs, RestoreReport};
