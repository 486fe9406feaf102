//! The storage hierarchy snapshots live on: tiers as configuration (DRAM,
//! PMEM, block devices, a remote object store), the emulated devices that
//! stand in for the ones this machine lacks (set up and torn down without
//! leaving anything behind), and the probe that measures each tier's device
//! profile from different kinds of reader.
//!
//! Every tier that is stood in for by another kernel mechanism carries
//! `emulated: true`, and every report prints it.

pub mod config;
pub mod device;
pub mod error;
pub mod latency;
pub mod moves;
pub mod netns;
pub mod objects;
pub mod probe;
pub mod relay;
pub mod remote;
pub mod seal;
pub mod slots;
pub mod split;
pub mod stream;

pub use config::{DeviceProfile, Kind, TierConfig, TiersConfig, CONFIG_FILE};
pub use error::TiersError;
