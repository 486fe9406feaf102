//! Opt-in network egress for a function's sandboxes.
//!
//! A daemon that runs such functions owns one [`Network`]: a Linux bridge
//! with a /20 of `10.208.0.0/12` (leased machine-wide through a lock file, so
//! concurrent daemons never share names or addresses), NAT to the host's
//! uplink, and one nftables table (inet family) holding every rule. A
//! function ([`FunctionNet`]) gets a /26 block of that subnet and its own
//! chain: its allowed destinations, then a refusal. Each sandbox gets an
//! address of its function's block on a veth whose bridge port is isolated,
//! with a /32 address and the bridge as its only route, so every packet it
//! sends is routed through the host's forward hook, where the source block
//! selects the function's chain. The function runs without capabilities,
//! so it can neither change its address nor send raw frames.
//!
//! Always refused, before any allowed destination: the host's own addresses
//! (the input hook: the daemon's API port included), every thaw sandbox
//! subnet, loopback, link-local, multicast, IPv6, and port 53 anywhere but
//! the function's resolver.
use crate::error::{HostError, Result};

use std::collections::VecDeque;
use std::fmt;
use std::io::Write;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use thaw_error::{fail, ResultExt};
use thaw_store::secure::{self, FileLock};

/// Why a function's network could not be set up, read or given to a
/// sandbox.
#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    /// every subnet of the range, address block of the daemon or address
    /// of the function is in use
    #[error("{0}")]
    Exhausted(String),
    /// a host step failed (a lease file, `ip`, `nft` or `tc` refused or
    /// missing)
    #[error(transparent)]
    Other(#[from] HostError),
}

/// Most destination rules a function may list.
pub const MAX_RULES: usize = 64;
/// Where daemons lease their subnets (machine-wide, like the sandbox uids).
const LEASE_DIR: &str = "/run/thaw/egress";
/// All sandbox subnets of every daemon: 256 daemons of a /20 each.
const RANGE_BASE: u32 = u32::from_be_bytes([10, 208, 0, 0]);
const RANGE_PREFIX: u8 = 12;
const SUBNETS: u32 = 256;
const SUBNET_PREFIX: u8 = 20;
/// A function's block of addresses: a /26 (64 sandboxes at once); block 0
/// holds the bridge's own address.
const BLOCK_PREFIX: u8 = 26;
const BLOCKS: u32 = 1 << (BLOCK_PREFIX - SUBNET_PREFIX);
const BLOCK_SIZE: u32 = 1 << (32 - BLOCK_PREFIX);
/// The sandbox side of each veth.
pub const SANDBOX_IF: &str = "eth0";

/// One allowed destination: an IPv4 network and an optional port range
/// (TCP and UDP); without ports, every protocol and port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub addr: Ipv4Addr,
    pub prefix: u8,
    pub ports: Option<(u16, u16)>,
}

impl Rule {
    /// Parses `CIDR[:PORTS]`: `10.0.0.0/8`, `192.0.2.7:443`,
    /// `198.51.100.0/24:8000-8100`. A bare address is a /32.
    pub fn parse(s: &str) -> Result<Rule, String> {
        let (net, ports) = match s.split_once(':') {
            Some((n, p)) => (n, Some(p)),
            None => (s, None),
        };
        let (addr, prefix) = match net.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (net, None),
        };
        if addr.contains("::") || s.matches(':').count() > 1 {
            return Err(format!("{s:?}: IPv6 destinations are not supported"));
        }
        let addr: Ipv4Addr = addr
            .parse()
            .map_err(|_| format!("{s:?}: {addr:?} is not an IPv4 address"))?;
        let prefix = match prefix {
            None => 32,
            Some(p) => match p.parse::<u8>() {
                Ok(n) if n <= 32 && p.bytes().all(|b| b.is_ascii_digit()) => n,
                _ => return Err(format!("{s:?}: prefix length {p:?} is not in 0..=32")),
            },
        };
        if u32::from(addr) & !mask(prefix) != 0 {
            return Err(format!(
                "{s:?}: host bits are set (the network is {}/{prefix})",
                Ipv4Addr::from(u32::from(addr) & mask(prefix))
            ));
        }
        let ports = ports.map(|p| parse_ports(s, p)).transpose()?;
        Ok(Rule {
            addr,
            prefix,
            ports,
        })
    }

    fn nft(&self) -> String {
        let dst = format!("ip daddr {}/{}", self.addr, self.prefix);
        match self.ports {
            None => dst,
            Some((lo, hi)) if lo == hi => {
                format!("{dst} meta l4proto {{ tcp, udp }} th dport {lo}")
            }
            Some((lo, hi)) => format!("{dst} meta l4proto {{ tcp, udp }} th dport {lo}-{hi}"),
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)?;
        match self.ports {
            Some((lo, hi)) if lo == hi => write!(f, ":{lo}"),
            Some((lo, hi)) => write!(f, ":{lo}-{hi}"),
            None => Ok(()),
        }
    }
}

fn parse_ports(s: &str, p: &str) -> Result<(u16, u16), String> {
    let port = |x: &str| -> Result<u16, String> {
        match x.parse::<u32>() {
            Ok(n) if x.bytes().all(|b| b.is_ascii_digit()) && (1..=65535).contains(&n) => {
                Ok(n as u16)
            }
            _ => Err(format!("{s:?}: port {x:?} is not in 1..=65535")),
        }
    };
    let (lo, hi) = match p.split_once('-') {
        Some((a, b)) => (port(a)?, port(b)?),
        None => (port(p)?, port(p)?),
    };
    if lo > hi {
        return Err(format!("{s:?}: port range {lo}-{hi} is empty"));
    }
    Ok((lo, hi))
}

fn mask(prefix: u8) -> u32 {
    u32::MAX.checked_shl(32 - prefix as u32).unwrap_or(0)
}

/// What a function may reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub rules: Vec<Rule>,
    /// The resolver written into the sandbox's `/etc/resolv.conf`; port 53
    /// anywhere else is refused.
    pub dns: Option<Ipv4Addr>,
    /// Connections one instance may have open at once.
    pub max_connections: Option<u32>,
    /// Each direction of each instance, in Mbit/s (tc token buckets).
    pub bandwidth_mbit: Option<u32>,
}

impl Policy {
    /// Parses and checks what a deploy asked for; the error says why not.
    pub fn parse(
        egress: &[String],
        dns: Option<&str>,
        max_connections: Option<u32>,
        bandwidth_mbit: Option<u32>,
    ) -> Result<Policy, String> {
        if egress.len() > MAX_RULES {
            return Err(format!(
                "{} egress rules: at most {MAX_RULES}",
                egress.len()
            ));
        }
        let rules = egress
            .iter()
            .map(|r| Rule::parse(r))
            .collect::<Result<Vec<_>, _>>()?;
        let dns = dns
            .map(|d| {
                d.parse::<Ipv4Addr>()
                    .map_err(|_| format!("dns {d:?} is not an IPv4 address"))
            })
            .transpose()?;
        if rules.is_empty() && dns.is_none() {
            return Err("network needs at least one egress rule or a dns resolver".into());
        }
        if let Some(d) = dns {
            if refused_nets().iter().any(|(a, p)| contains(*a, *p, d)) {
                return Err(format!(
                    "dns {d} is in an address range sandboxes never reach"
                ));
            }
        }
        if max_connections == Some(0) || max_connections.is_some_and(|c| c > 65536) {
            return Err("max_connections must be in 1..=65536".into());
        }
        if bandwidth_mbit == Some(0) || bandwidth_mbit.is_some_and(|b| b > 100_000) {
            return Err("bandwidth_mbit must be in 1..=100000".into());
        }
        Ok(Policy {
            rules,
            dns,
            max_connections,
            bandwidth_mbit,
        })
    }
}

fn contains(net: u32, prefix: u8, a: Ipv4Addr) -> bool {
    u32::from(a) & mask(prefix) == net
}

/// Destinations no rule can open: this range, loopback, "this network",
/// link-local, multicast and reserved.
fn refused_nets() -> [(u32, u8); 5] {
    [
        (RANGE_BASE, RANGE_PREFIX),
        (u32::from_be_bytes([0, 0, 0, 0]), 8),
        (u32::from_be_bytes([127, 0, 0, 0]), 8),
        (u32::from_be_bytes([169, 254, 0, 0]), 16),
        (u32::from_be_bytes([224, 0, 0, 0]), 3),
    ]
}

fn bridge_name(index: u32) -> String {
    format!("thaw-br{index}")
}

fn table_name(index: u32) -> String {
    format!("thaw_egress_{index}")
}

fn subnet_base(index: u32) -> u32 {
    RANGE_BASE + (index << (32 - SUBNET_PREFIX))
}

/// Runs a host tool with `input` on stdin; its stderr is the error.
fn run(program: &str, args: &[&str], input: &str) -> Result<()> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("running {program} (is it installed? see scripts/setup.sh)"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(input.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        fail!(
            HostError::Failed,
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

fn output(program: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {program} (is it installed? see scripts/setup.sh)"))?;
    if !out.status.success() {
        fail!(
            HostError::Failed,
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn try_lock(index: u32) -> Result<Option<FileLock>> {
    let dir = Path::new(LEASE_DIR);
    secure::ensure_private_dir(dir)
        .with_context(|| format!("the egress lease directory {}", dir.display()))?;
    Ok(
        secure::flock(&dir.join(format!("{index}.lock")), true, true)
            .with_context(|| format!("leasing egress subnet {index}"))?,
    )
}

/// Removes what a daemon that held subnet `index` left (bridge, table).
fn remove_leftovers(index: u32) -> bool {
    let br = run("ip", &["link", "del", &bridge_name(index)], "").is_ok();
    let table = run("nft", &["delete", "table", "inet", &table_name(index)], "").is_ok();
    br || table
}

/// Removes the bridges and tables of subnets no live daemon holds (after a
/// daemon was killed). Returns what it removed.
pub fn gc() -> Vec<String> {
    let mut removed = Vec::new();
    let Ok(links) = output("ip", &["-o", "link", "show", "type", "bridge"]) else {
        return removed;
    };
    let tables = output("nft", &["list", "tables", "inet"]).unwrap_or_default();
    for index in 0..SUBNETS {
        let br = format!(": {}:", bridge_name(index));
        let table = format!("table inet {}\n", table_name(index));
        if !links.contains(&br) && !format!("{tables}\n").contains(&table) {
            continue;
        }
        // held by us while we remove: no daemon takes the subnet meanwhile
        if let Ok(Some(_held)) = try_lock(index) {
            if remove_leftovers(index) {
                removed.push(format!(
                    "{} and table inet {}",
                    bridge_name(index),
                    table_name(index)
                ));
            }
        }
    }
    removed
}

/// Routes on the host that overlap `base/prefix` (another network using it).
fn overlaps_a_route(base: u32, prefix: u8) -> bool {
    let routes = std::fs::read_to_string("/proc/net/route").unwrap_or_default();
    // /proc/net/route prints each address as a native-endian word in hex
    let hex = |s: &str| {
        u32::from_str_radix(s, 16)
            .ok()
            .map(|v| u32::from_be_bytes(v.to_ne_bytes()))
    };
    routes.lines().skip(1).any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let (Some(dst), Some(m)) = (f.get(1).and_then(|s| hex(s)), f.get(7).and_then(|s| hex(s)))
        else {
            return false;
        };
        let m = m & mask(prefix);
        m != 0 && dst & m == base & m
    })
}

/// A daemon's bridge, subnet and rule table. Dropping it removes them.
pub struct Network {
    index: u32,
    _lease: FileLock,
    bridge: String,
    table: String,
    blocks: Mutex<Vec<bool>>,
    next_if: AtomicU64,
}

impl fmt::Debug for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Network({})", self.bridge)
    }
}

impl Network {
    /// Leases a free subnet and sets up its bridge, NAT and rule table.
    /// Nothing is left behind when a step fails.
    pub fn open() -> Result<Arc<Network>, EgressError> {
        for index in 0..SUBNETS {
            let Some(lease) = try_lock(index)? else {
                continue;
            };
            remove_leftovers(index);
            if overlaps_a_route(subnet_base(index), SUBNET_PREFIX) {
                continue;
            }
            let net = Network {
                index,
                _lease: lease,
                bridge: bridge_name(index),
                table: table_name(index),
                blocks: Mutex::new(vec![false; BLOCKS as usize]),
                next_if: AtomicU64::new(0),
            };
            // on failure, Drop removes whatever part was made
            net.set_up()?;
            return Ok(Arc::new(net));
        }
        fail!(
            EgressError::Exhausted,
            "no free egress subnet in 10.208.0.0/12 (256 daemons hold one each)"
        )
    }

    fn gateway(&self) -> Ipv4Addr {
        Ipv4Addr::from(subnet_base(self.index) + 1)
    }

    fn set_up(&self) -> Result<()> {
        std::fs::write("/proc/sys/net/ipv4/ip_forward", "1")
            .context("enabling IPv4 forwarding (/proc/sys/net/ipv4/ip_forward)")?;
        let br = &self.bridge;
        run(
            "ip",
            &["-batch", "-"],
            &format!(
                "link add {br} type bridge\n\
                 link set {br} address 02:74:68:61:77:{:02x}\n\
                 addr add {}/{SUBNET_PREFIX} dev {br}\n\
                 link set {br} alias thaw-egress:{owner}\n\
                 link set {br} up\n",
                self.index,
                self.gateway(),
                owner = secure::owner_tag(),
            ),
        )
        .context("creating the egress bridge")?;
        // (its address is set, not taken from its lowest port's: a port
        // joining must not change the gateway's MAC under the sandboxes'
        // neighbour caches)
        // no IPv6 on the bridge: sandboxes have none either
        let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{br}/disable_ipv6"), "1");
        let refused = refused_nets()
            .iter()
            .map(|(a, p)| format!("{}/{p}", Ipv4Addr::from(*a)))
            .collect::<Vec<_>>()
            .join(", ");
        let reject = "counter reject with icmpx type admin-prohibited";
        let rules = format!(
            "table inet {t} {{
  set refused {{ type ipv4_addr; flags interval; elements = {{ {refused} }} }}
  map forward_by_source {{ type ipv4_addr : verdict; flags interval; }}
  map host_by_source {{ type ipv4_addr : verdict; flags interval; }}
  chain input {{ type filter hook input priority filter; policy accept;
    iifname \"{br}\" ip saddr vmap @host_by_source
    iifname \"{br}\" {reject}
  }}
  chain forward {{ type filter hook forward priority filter; policy accept;
    iifname \"{br}\" ct state established,related accept
    iifname \"{br}\" ip saddr vmap @forward_by_source
    iifname \"{br}\" {reject}
    oifname \"{br}\" ct state established,related accept
    oifname \"{br}\" counter drop
  }}
  chain postrouting {{ type nat hook postrouting priority srcnat; policy accept;
    ip saddr {}/{SUBNET_PREFIX} oifname != \"{br}\" masquerade
  }}
}}
",
            Ipv4Addr::from(subnet_base(self.index)),
            t = self.table,
        );
        Ok(run("nft", &["-f", "-"], &rules).context("loading the egress rules")?)
    }

    /// Sets up a function's block of addresses and its chains.
    pub fn attach(
        self: &Arc<Self>,
        policy: &Policy,
        resolv_conf: Option<PathBuf>,
    ) -> Result<Egress, EgressError> {
        let block = {
            let mut blocks = self.blocks.lock().unwrap_or_else(|p| p.into_inner());
            // block 0 holds the bridge's address
            let b = (1..BLOCKS as usize).find(|&b| !blocks[b]).ok_or_else(|| {
                EgressError::Exhausted(format!(
                    "all {} egress address blocks of this daemon are in use",
                    BLOCKS - 1
                ))
            })?;
            blocks[b] = true;
            b as u32
        };
        let first = subnet_base(self.index) + block * BLOCK_SIZE;
        let mut fnet = FunctionNet {
            net: self.clone(),
            block,
            first,
            policy: policy.clone(),
            resolv_conf,
            free: Mutex::new((0..BLOCK_SIZE).map(|i| first + i).collect()),
            loaded: false,
        };
        // one transaction: on failure nothing was loaded (and drop only
        // gives the block back)
        run("nft", &["-f", "-"], &fnet.rules()).context("loading the function's egress rules")?;
        fnet.loaded = true;
        Ok(Egress(Arc::new(fnet)))
    }

    fn release_block(&self, block: u32) {
        self.blocks.lock().unwrap_or_else(|p| p.into_inner())[block as usize] = false;
    }

    /// Packets refused per function block: (block, count), from the table's
    /// counters.
    fn refused_by_block(&self) -> Result<Vec<(u32, u64)>> {
        let json = output("nft", &["-j", "list", "table", "inet", &self.table])?;
        let v: serde_json::Value = serde_json::from_str(&json).context("nft -j output")?;
        let mut by = std::collections::BTreeMap::new();
        for item in v["nftables"].as_array().into_iter().flatten() {
            let Some(rule) = item.get("rule") else {
                continue;
            };
            let chain = rule["chain"].as_str().unwrap_or("");
            let Some(block) = chain
                .strip_prefix("fn_")
                .or_else(|| chain.strip_prefix("host_"))
                .and_then(|b| b.parse::<u32>().ok())
            else {
                continue;
            };
            for e in rule["expr"].as_array().into_iter().flatten() {
                if let Some(p) = e["counter"]["packets"].as_u64() {
                    *by.entry(block).or_insert(0) += p;
                }
            }
        }
        Ok(by.into_iter().collect())
    }

    /// The bridge's name (tests and docs).
    pub fn bridge(&self) -> &str {
        &self.bridge
    }

    /// The nftables table's name (inet family).
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The address the sandboxes route through (the bridge's).
    pub fn gateway_addr(&self) -> Ipv4Addr {
        self.gateway()
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        remove_leftovers(self.index);
    }
}

/// A function's egress: its address block and chains. Sandboxes of the
/// function lease addresses from it; dropping the last holder removes the
/// chains. Compared by identity (one per deployed version).
#[derive(Clone)]
pub struct Egress(Arc<FunctionNet>);

impl PartialEq for Egress {
    fn eq(&self, other: &Egress) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl fmt::Debug for Egress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Egress({}/{})",
            Ipv4Addr::from(self.0.first),
            BLOCK_PREFIX
        )
    }
}

pub struct FunctionNet {
    net: Arc<Network>,
    block: u32,
    first: u32,
    policy: Policy,
    resolv_conf: Option<PathBuf>,
    /// addresses not in use, least recently freed first (a dying sandbox's
    /// namespace goes away asynchronously)
    free: Mutex<VecDeque<u32>>,
    /// its rules are in the table
    loaded: bool,
}

impl FunctionNet {
    fn rules(&self) -> String {
        let t = &self.net.table;
        let b = self.block;
        let src = format!("{}/{BLOCK_PREFIX}", Ipv4Addr::from(self.first));
        let reject = "counter reject with icmpx type admin-prohibited";
        let mut r = format!(
            "add chain inet {t} fn_{b}\n\
             add chain inet {t} host_{b}\n\
             add rule inet {t} host_{b} {reject}\n\
             add rule inet {t} fn_{b} ip daddr @refused {reject}\n"
        );
        if let Some(d) = self.policy.dns {
            r += &format!("add rule inet {t} fn_{b} ip daddr {d} meta l4proto {{ tcp, udp }} th dport 53 accept\n");
        }
        r +=
            &format!("add rule inet {t} fn_{b} meta l4proto {{ tcp, udp }} th dport 53 {reject}\n");
        if let Some(c) = self.policy.max_connections {
            // counted per function: every instance's address shares its
            // block's network address as the key
            let m = Ipv4Addr::from(mask(BLOCK_PREFIX));
            r += &format!(
                "add set inet {t} conns_{b} {{ type ipv4_addr; flags dynamic; }}\n\
                 add rule inet {t} fn_{b} ct state new add @conns_{b} {{ ip saddr & {m} ct count over {c} }} {reject}\n"
            );
        }
        for rule in &self.policy.rules {
            r += &format!("add rule inet {t} fn_{b} {} accept\n", rule.nft());
        }
        r += &format!(
            "add rule inet {t} fn_{b} {reject}\n\
             add element inet {t} forward_by_source {{ {src} : jump fn_{b} }}\n\
             add element inet {t} host_by_source {{ {src} : jump host_{b} }}\n"
        );
        r
    }
}

impl Drop for FunctionNet {
    fn drop(&mut self) {
        let t = &self.net.table;
        let b = self.block;
        if !self.loaded {
            self.net.release_block(b);
            return;
        }
        let src = format!("{}/{BLOCK_PREFIX}", Ipv4Addr::from(self.first));
        let mut r = format!(
            "delete element inet {t} forward_by_source {{ {src} }}\n\
             delete element inet {t} host_by_source {{ {src} }}\n\
             delete chain inet {t} fn_{b}\n\
             delete chain inet {t} host_{b}\n"
        );
        if self.policy.max_connections.is_some() {
            r += &format!("delete set inet {t} conns_{b}\n");
        }
        match run("nft", &["-f", "-"], &r) {
            Ok(()) => self.net.release_block(b),
            // the block stays taken: its rules may still be loaded
            Err(e) => tracing::warn!("removing a function's egress rules: {e:#}"),
        }
    }
}

impl Egress {
    pub fn policy(&self) -> &Policy {
        &self.0.policy
    }

    /// The file bind-mounted at `/etc/resolv.conf` in the sandboxes.
    pub fn resolv_conf(&self) -> Option<&Path> {
        self.0.resolv_conf.as_deref()
    }

    /// Packets refused to this function's sandboxes so far.
    pub fn refused(&self) -> Result<u64, EgressError> {
        Ok(self
            .0
            .net
            .refused_by_block()?
            .into_iter()
            .find(|(b, _)| *b == self.0.block)
            .map_or(0, |(_, n)| n))
    }

    /// An address for one sandbox (returned when the lease drops).
    pub(crate) fn lease(&self) -> Result<SandboxNet, EgressError> {
        let addr = self
            .0
            .free
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop_front()
            .ok_or_else(|| {
                EgressError::Exhausted(format!(
                    "all {BLOCK_SIZE} egress addresses of the function are in use"
                ))
            })?;
        let n = self.0.net.next_if.fetch_add(1, Ordering::Relaxed) % 10_000_000;
        Ok(SandboxNet {
            fnet: self.0.clone(),
            addr,
            host_if: format!("thaw{}v{n}", self.0.net.index),
        })
    }
}

/// One sandbox's address and veth. The veth goes with the sandbox's
/// network namespace; the address goes back to the function's block.
pub struct SandboxNet {
    fnet: Arc<FunctionNet>,
    addr: u32,
    host_if: String,
}

impl SandboxNet {
    /// Creates the veth into `pid`'s network namespace, on the bridge, with
    /// the function's bandwidth caps; the child configures its end.
    pub(crate) fn plug(&self, pid: i32) -> Result<()> {
        let (h, br) = (&self.host_if, &self.fnet.net.bridge);
        run(
            "ip",
            &["-batch", "-"],
            &format!(
                "link add {h} type veth peer name {SANDBOX_IF} netns {pid}\n\
                 link set {h} master {br}\n\
                 link set {h} type bridge_slave isolated on\n\
                 link set {h} up\n"
            ),
        )
        .context("creating the sandbox's veth")?;
        if let Some(mbit) = self.fnet.policy.bandwidth_mbit {
            // toward the sandbox on the host's end, from it on the sandbox's
            // end (which the function, without capabilities, cannot change)
            let tbf = |dev: &str| -> Vec<String> {
                let burst = (mbit as u64 * 1_000_000 / 8 / 100).max(16 << 10);
                ["qdisc", "add", "dev", dev, "root", "tbf", "rate"]
                    .iter()
                    .map(|s| s.to_string())
                    .chain([
                        format!("{mbit}mbit"),
                        "burst".into(),
                        burst.to_string(),
                        "latency".into(),
                        "50ms".into(),
                    ])
                    .collect()
            };
            let host: Vec<String> = tbf(h);
            run(
                "tc",
                &host.iter().map(String::as_str).collect::<Vec<_>>(),
                "",
            )
            .context("capping the sandbox's bandwidth")?;
            let ns = format!("--net=/proc/{pid}/ns/net");
            let mut inside = vec![ns, "tc".into()];
            inside.extend(tbf(SANDBOX_IF));
            run(
                "nsenter",
                &inside.iter().map(String::as_str).collect::<Vec<_>>(),
                "",
            )
            .context("capping the sandbox's bandwidth")?;
        }
        Ok(())
    }

    /// (address, gateway) for the child's own configuration.
    pub(crate) fn child_config(&self) -> (Ipv4Addr, Ipv4Addr) {
        (Ipv4Addr::from(self.addr), self.fnet.net.gateway())
    }

    /// Bytes (received by the sandbox, sent by it) so far.
    pub fn bytes(&self) -> (u64, u64) {
        let read = |what: &str| {
            std::fs::read_to_string(format!("/sys/class/net/{}/statistics/{what}", self.host_if))
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(0)
        };
        // the host's end transmits what the sandbox receives
        (read("tx_bytes"), read("rx_bytes"))
    }

    pub fn address(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.addr)
    }
}

impl Drop for SandboxNet {
    fn drop(&mut self) {
        self.fnet
            .free
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back(self.addr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_parse_and_refuse_with_reasons() {
        let r = Rule::parse("10.1.0.0/16:80-90").unwrap();
        assert_eq!(r.to_string(), "10.1.0.0/16:80-90");
        assert_eq!(Rule::parse("192.0.2.7:443").unwrap().prefix, 32);
        assert_eq!(Rule::parse("0.0.0.0/0").unwrap().ports, None);
        for (bad, why) in [
            ("10.0.0.0/33", "prefix"),
            ("10.0.0.1/8", "host bits"),
            ("10.0.0.0/8:0", "port"),
            ("10.0.0.0/8:70000", "port"),
            ("10.0.0.0/8:90-80", "empty"),
            ("10.0.0.0/+8", "prefix"),
            ("example.com", "not an IPv4"),
            ("fd00::/8", "IPv6"),
            ("10.0.0.0/8:", "port"),
        ] {
            let e = Rule::parse(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
        let many: Vec<String> = (0..65).map(|i| format!("10.0.{i}.0/24")).collect();
        assert!(Policy::parse(&many, None, None, None)
            .unwrap_err()
            .contains("at most 64"));
        assert!(Policy::parse(&[], Some("dns.example"), None, None)
            .unwrap_err()
            .contains("not an IPv4"));
        assert!(Policy::parse(&[], None, None, None).is_err());
        assert!(Policy::parse(&[], Some("169.254.169.254"), None, None).is_err());
        let p = Policy::parse(&["10.0.0.0/8".into()], Some("10.9.9.9"), Some(4), None).unwrap();
        assert_eq!(p.dns, Some(Ipv4Addr::new(10, 9, 9, 9)));
    }

    #[test]
    fn mask_edges() {
        assert_eq!(mask(0), 0);
        assert_eq!(mask(32), u32::MAX);
        assert_eq!(mask(20), 0xffff_f000);
    }
}
