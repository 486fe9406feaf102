//! thaw-bench: experiment runners. `restore` measures cold starts from
//! snapshots per strategy and tier against a fresh start, in one process.

pub mod hierarchy;
pub mod restore;
pub mod stats;
