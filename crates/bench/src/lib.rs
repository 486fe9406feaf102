//! thaw-bench: experiment runners. `restore` measures cold starts from
//! snapshots per strategy and tier against a fresh start, in one process;
//! `store` what sealing a verified DRAM image costs;
//! `concurrency` measures N simultaneous cold starts; `hierarchy` cold and
//! warm starts per storage tier (the study of "FaaS in the Age of (sub-)µs
//! I/O").

pub mod concurrency;
mod error;
pub mod hierarchy;
pub mod remote;
pub mod report;
pub mod restore;
pub mod start;
pub mod state_decode;
pub mod stats;
pub mod store;

pub use error::{BenchError, Result, SinkResult};
