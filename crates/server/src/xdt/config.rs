//! XDT's settings in the daemon's configuration (`[xdt]`, `[xdt.peering]`):
//! plain data, read with the rest of `Config`.
use std::path::PathBuf;
use thaw_xdt::{ChainLimits, TableLimits};

/// `[xdt]` in the daemon's configuration.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct XdtConfig {
    pub objects: TableLimits,
    pub chains: ChainLimits,
    /// other workers whose references this one may pull (`[xdt.peering]`)
    pub peering: PeerConfig,
}

/// `[xdt.peering]` in the daemon's configuration.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PeerConfig {
    /// This worker's peer listener, `ADDR:PORT` (how its peers reach it).
    /// None: no peering (other workers' references are unreachable).
    pub listen: Option<String>,
    /// The key every worker shares: hex, at least 32 bytes, mode 0600.
    pub key_file: Option<PathBuf>,
    /// The other workers' peer listeners, `ADDR:PORT`.
    pub peers: Vec<String>,
    /// A pull that receives nothing for this long fails.
    pub stall_ms: u64,
    /// Start pulling an event's references when the invocation arrives
    /// (false: when the function calls `thaw.get`; for measuring the overlap).
    pub prefetch: bool,
}

impl Default for PeerConfig {
    fn default() -> Self {
        PeerConfig {
            listen: None,
            key_file: None,
            peers: Vec::new(),
            stall_ms: 5_000,
            prefetch: true,
        }
    }
}
