//! thaw-load: an open-loop HTTP load generator for `POST /v1/functions/{name}/invoke`
//! (`thaw load`, docs/LOAD.md).
//!
//! [`schedule`] builds every request's intended send time up front (synthetic
//! arrival processes, or an Azure trace through the simulator's parsers); [`run`]
//! sends them on time over [`client`] and measures latency from the intended time;
//! [`record`] writes per-request records and the HDR-histogram summary; [`plot`]
//! draws the SVGs.

pub mod cli;
pub mod client;
pub mod error;
pub mod plot;
pub mod record;
pub mod run;
pub mod schedule;

pub use error::LoadError;
