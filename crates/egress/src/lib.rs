//! thaw-egress: opt-in network egress for a function's sandboxes (the
//! sandbox crate plugs a sandbox into it; the daemon owns the network).
//!
//! A daemon that runs such functions owns one [`Network`]: a Linux bridge
//! with a /20 of `10.208.0.0/12` and, when the host has IPv6, the /56 of
//! `fd74:6861:7700::/48` with the same index (leased machine-wide through a
//! lock file, so concurrent daemons never share names or addresses), NAT
//! (and NAT66) to the host's uplink, and one nftables table (inet family)
//! holding every rule. A function ([`FunctionNet`]) gets a /26 block of that
//! subnet (and the /64 of the same number) and its own chains: its allowed
//! destinations, then a refusal. Each sandbox gets an address of its
//! function's block on a veth whose bridge port is isolated, with a /32
//! (/128) address and the bridge as its only route, so every packet it sends
//! is routed through the host's forward hook, where the source block selects
//! the function's chain. The function runs without capabilities, so it can
//! neither change its address nor send raw frames.
//!
//! Always refused, before any allowed destination: the host's own addresses
//! (the input hook: the daemon's API port included), every thaw sandbox
//! subnet, loopback, link-local, multicast, and port 53 anywhere but the
//! function's resolver. A function reaches IPv6 only when it lists an IPv6
//! destination (or resolver); its sandboxes have no IPv6 address otherwise.
//!
//! * [`policy`]: the destinations a function may reach, parsed and checked;
//! * [`network`]: the daemon's bridge, subnet lease and nftables table;
//! * [`function`]: a function's block and chains, and each sandbox's veth;
//! * `nethost` (the `testing` feature, for tests and benchmarks only): a
//!   test host in a namespace of its own with the servers a test starts.
pub mod function;
#[cfg(feature = "testing")]
pub mod nethost;
pub mod network;
pub mod policy;

pub use function::{Egress, FunctionNet, SandboxNet};
pub use network::{gc, Network};
pub use policy::{Policy, Rule};

use thaw_error::Context;

/// Why a function's network could not be set up, read or given to a
/// sandbox.
#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    /// every subnet of the range, address block of the daemon or address
    /// of the function is in use
    #[error("{0}")]
    Exhausted(String),
    /// a host step that failed without an underlying error to carry
    /// (`ip`, `nft` or `tc` refused, a route table it cannot read)
    #[error("{0}")]
    Failed(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// the step that failed, with its cause (a lease file, a tool missing)
    #[error(transparent)]
    Other(#[from] Context),
}

type Result<T, E = EgressError> = std::result::Result<T, E>;

/// Most destination rules a function may list.
pub const MAX_RULES: usize = 64;
/// Where daemons lease their subnets (machine-wide, like the sandbox uids).
pub(crate) const LEASE_DIR: &str = "/run/thaw/egress";
/// All sandbox subnets of every daemon: 256 daemons of a /20 each.
pub(crate) const RANGE_BASE: u32 = u32::from_be_bytes([10, 208, 0, 0]);
pub(crate) const RANGE_PREFIX: u8 = 12;
pub(crate) const SUBNETS: u32 = 256;
pub(crate) const SUBNET_PREFIX: u8 = 20;
/// A function's block of addresses: a /26 (64 sandboxes at once); block 0
/// holds the bridge's own address.
pub(crate) const BLOCK_PREFIX: u8 = 26;
pub(crate) const BLOCKS: u32 = 1 << (BLOCK_PREFIX - SUBNET_PREFIX);
pub(crate) const BLOCK_SIZE: u32 = 1 << (32 - BLOCK_PREFIX);
/// The sandbox side of each veth.
pub const SANDBOX_IF: &str = "eth0";
/// All IPv6 sandbox subnets: a unique local /48 (RFC 4193; its global ID
/// spells "thaw"), a /56 per daemon index, a /64 per function block, so a
/// sandbox's IPv6 address mirrors its IPv4 one.
pub(crate) const RANGE6_BASE: u128 = 0xfd74_6861_7700_u128 << 80;
pub(crate) const RANGE6_PREFIX: u8 = 48;
pub(crate) const SUBNET6_PREFIX: u8 = 56;
pub(crate) const BLOCK6_PREFIX: u8 = 64;
/// Where IPv6 is switched on for the whole host.
pub(crate) const IPV6_ALL: &str = "/proc/sys/net/ipv6/conf/all";

/// Whether this host has IPv6 (`net.ipv6.conf.all.disable_ipv6` is 0),
/// or why not.
pub fn ipv6_unavailable() -> Option<String> {
    match std::fs::read_to_string(format!("{IPV6_ALL}/disable_ipv6")) {
        Ok(v) if v.trim() == "0" => None,
        Ok(v) => Some(format!(
            "this host has IPv6 disabled (net.ipv6.conf.all.disable_ipv6 = {})",
            v.trim()
        )),
        Err(e) => Some(format!(
            "this host has no IPv6 (reading {IPV6_ALL}/disable_ipv6: {e})"
        )),
    }
}
