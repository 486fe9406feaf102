//! The daemon's one [`Network`]: its leased subnet, bridge, NAT and the
//! nftables table holding every function's chains; the host tools it runs
//! and [`gc`] of what a dead daemon left.
use crate::function::{Egress, FunctionNet};
use crate::policy::{mask, mask6, refused_elements, Policy};
use crate::{
    ipv6_unavailable, BLOCK6_PREFIX, BLOCKS, BLOCK_SIZE, IPV6_ALL, LEASE_DIR, RANGE6_BASE,
    RANGE_BASE, SUBNET6_PREFIX, SUBNETS, SUBNET_PREFIX,
};
use crate::{EgressError, Result};
use std::fmt;
use std::io::Write;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use thaw_error::{fail, ResultExt};
use thaw_store::secure::{self, FileLock};

fn bridge_name(index: u32) -> String {
    format!("thaw-br{index}")
}

/// The bridge's alias: this, then the owning daemon's tag
/// ([`secure::owner_tag`]), so a cleanup can tell a dead daemon's bridge.
const OWNER_ALIAS: &str = "thaw-egress:";

/// The egress bridges on this machine, one `ip -o link` line each.
fn bridges() -> Result<String> {
    output("ip", &["-o", "link", "show", "type", "bridge"])
}

/// Subnet `index`'s bridge's line in `bridges`, if it has one.
fn bridge_line(bridges: &str, index: u32) -> Option<&str> {
    let name = format!(": {}:", bridge_name(index));
    bridges.lines().find(|l| l.contains(&name))
}

/// What each sandbox's host-side veth name starts with (then a counter).
pub(crate) fn veth_prefix(index: u32) -> String {
    format!("thaw{index}v")
}

fn table_name(index: u32) -> String {
    format!("thaw_egress_{index}")
}

fn subnet_base(index: u32) -> u32 {
    RANGE_BASE + (index << (32 - SUBNET_PREFIX))
}

fn subnet6_base(index: u32) -> u128 {
    RANGE6_BASE | (index as u128) << (128 - SUBNET6_PREFIX)
}

/// The IPv6 address mirroring IPv4 address `a` of subnet `index`: the same
/// block (as the /64) and the same offset in it.
pub(crate) fn mirror6(index: u32, a: u32) -> Ipv6Addr {
    let off = a - subnet_base(index);
    let (block, host) = (off / BLOCK_SIZE, off % BLOCK_SIZE);
    Ipv6Addr::from(subnet6_base(index) | (block as u128) << (128 - BLOCK6_PREFIX) | host as u128)
}

/// Runs a host tool with `input` on stdin; its stderr is the error.
pub(crate) fn run(program: &str, args: &[&str], input: &str) -> Result<()> {
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
            EgressError::Failed,
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
            EgressError::Failed,
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

/// Removes what a daemon that held subnet `index` left (bridge, table,
/// sandbox veths).
fn remove_leftovers(index: u32) -> bool {
    let br = run("ip", &["link", "del", &bridge_name(index)], "").is_ok();
    let table = run("nft", &["delete", "table", "inet", &table_name(index)], "").is_ok();
    remove_veths(index);
    br || table
}

/// Deletes the host ends of subnet `index`'s sandbox veths. A veth goes
/// with its sandbox's network namespace, but the kernel tears a namespace
/// down in the background after its last process dies: without this, a
/// stopped daemon's veths outlive it for a while.
fn remove_veths(index: u32) {
    let Ok(links) = output("ip", &["-o", "link", "show"]) else {
        return;
    };
    let prefix = veth_prefix(index);
    let batch: String = links
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .map(|name| name.split('@').next().unwrap_or(name))
        .filter(|name| {
            name.strip_prefix(&prefix)
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(|name| format!("link del {name}\n"))
        .collect();
    if !batch.is_empty() {
        // -force: one already gone with its namespace does not stop the rest
        let _ = run("ip", &["-force", "-batch", "-"], &batch);
    }
}

/// Removes the bridges and tables of subnets no live daemon holds (after a
/// daemon was killed). Returns what it removed.
pub fn gc() -> Vec<String> {
    let mut removed = Vec::new();
    let Ok(links) = bridges() else {
        return removed;
    };
    let tables = output("nft", &["list", "tables", "inet"]).unwrap_or_default();
    for index in 0..SUBNETS {
        let table = format!("table inet {}\n", table_name(index));
        if bridge_line(&links, index).is_none() && !format!("{tables}\n").contains(&table) {
            continue;
        }
        // held by us while we remove: no daemon takes the subnet meanwhile
        if let Some(_held) = lease_of_dead_owner(index, &links) {
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

/// The lease of subnet `index`, when no live daemon holds it. A killed
/// daemon's sandbox children hold its lease (they share its descriptors)
/// until they have died of their parent-death signal, which a busy CPU can
/// delay: when the bridge names a dead owner, its lease is waited for, for
/// a few seconds.
fn lease_of_dead_owner(index: u32, bridges: &str) -> Option<FileLock> {
    let dead_owner = bridge_line(bridges, index)
        .and_then(|l| l.split_once(&format!(" alias {OWNER_ALIAS}")))
        .is_some_and(|(_, tag)| secure::owned_by_dead(tag.trim()));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        match try_lock(index) {
            Ok(Some(lease)) => return Some(lease),
            Ok(None) if dead_owner && std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            _ => return None,
        }
    }
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

/// IPv6 routes on the host (but a default route) that overlap `base/prefix`.
fn overlaps_a_route6(base: u128, prefix: u8) -> bool {
    let routes = std::fs::read_to_string("/proc/net/ipv6_route").unwrap_or_default();
    routes.lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let (Some(dst), Some(len)) = (
            f.first().and_then(|s| u128::from_str_radix(s, 16).ok()),
            f.get(1).and_then(|s| u8::from_str_radix(s, 16).ok()),
        ) else {
            return false;
        };
        let m = mask6(len.min(prefix));
        len != 0 && dst & m == base & m
    })
}

/// Switches IPv6 forwarding on. A router ignores router advertisements on
/// interfaces whose `accept_ra` is 1, so those get 2 first: the host keeps
/// learning its routes as it did.
fn enable_ipv6_forwarding() -> Result<()> {
    let all = format!("{IPV6_ALL}/forwarding");
    if std::fs::read_to_string(&all).is_ok_and(|v| v.trim() == "1") {
        return Ok(());
    }
    for e in std::fs::read_dir("/proc/sys/net/ipv6/conf")?.flatten() {
        let ra = e.path().join("accept_ra");
        if std::fs::read_to_string(&ra).is_ok_and(|v| v.trim() == "1") {
            let _ = std::fs::write(&ra, "2");
        }
    }
    Ok(std::fs::write(&all, "1").with_context(|| format!("enabling IPv6 forwarding ({all})"))?)
}

/// A daemon's bridge, subnet and rule table. Dropping it removes them.
pub struct Network {
    pub(crate) index: u32,
    pub(crate) _lease: FileLock,
    pub(crate) bridge: String,
    pub(crate) table: String,
    /// the host has IPv6: the bridge has the /56 and the rules cover it
    pub(crate) ipv6: bool,
    pub(crate) blocks: Mutex<Vec<bool>>,
    pub(crate) next_if: AtomicU64,
}

impl fmt::Debug for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Network({})", self.bridge)
    }
}

impl Network {
    /// Leases a free subnet and sets up its bridge, NAT and rule table
    /// (IPv6 too when the host has it). Nothing is left behind when a step
    /// fails.
    pub fn open() -> Result<Arc<Network>, EgressError> {
        let ipv6 = ipv6_unavailable().is_none();
        let mut listed = None;
        for index in 0..SUBNETS {
            let lease = match try_lock(index)? {
                Some(lease) => lease,
                None => {
                    // a killed daemon's subnet is taken over once its
                    // children let the lease go, not left to the next one
                    let b = listed.get_or_insert_with(|| bridges().unwrap_or_default());
                    match lease_of_dead_owner(index, b) {
                        Some(lease) => lease,
                        None => continue,
                    }
                }
            };
            remove_leftovers(index);
            if overlaps_a_route(subnet_base(index), SUBNET_PREFIX)
                || (ipv6 && overlaps_a_route6(subnet6_base(index), SUBNET6_PREFIX))
            {
                continue;
            }
            let net = Network {
                index,
                _lease: lease,
                bridge: bridge_name(index),
                table: table_name(index),
                ipv6,
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

    pub(crate) fn gateway(&self) -> Ipv4Addr {
        Ipv4Addr::from(subnet_base(self.index) + 1)
    }

    pub(crate) fn gateway6(&self) -> Ipv6Addr {
        mirror6(self.index, u32::from(self.gateway()))
    }

    fn set_up(&self) -> Result<()> {
        std::fs::write("/proc/sys/net/ipv4/ip_forward", "1")
            .context("enabling IPv4 forwarding (/proc/sys/net/ipv4/ip_forward)")?;
        if self.ipv6 {
            enable_ipv6_forwarding()?;
        }
        let br = &self.bridge;
        // (no link-local address on the bridge: what a sandbox sends to
        // fe80::/10 is refused, and neighbour discovery uses the /56's)
        let v6 = if self.ipv6 {
            format!(
                "link set {br} type bridge mcast_snooping 0\n\
                 link set {br} addrgenmode none\n\
                 addr add {}/{SUBNET6_PREFIX} dev {br} nodad\n",
                self.gateway6()
            )
        } else {
            String::new()
        };
        run(
            "ip",
            &["-batch", "-"],
            &format!(
                "link add {br} type bridge\n\
                 link set {br} address 02:74:68:61:77:{:02x}\n\
                 addr add {}/{SUBNET_PREFIX} dev {br}\n\
                 {v6}\
                 link set {br} alias {OWNER_ALIAS}{owner}\n\
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
        if !self.ipv6 {
            let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{br}/disable_ipv6"), "1");
        }
        Ok(run("nft", &["-f", "-"], &self.base_rules()).context("loading the egress rules")?)
    }

    /// The table: refusals, the per-source verdict maps, NAT.
    fn base_rules(&self) -> String {
        let (br, t) = (&self.bridge, &self.table);
        let (refused, refused6) = refused_elements();
        let sub = format!(
            "{}/{SUBNET_PREFIX}",
            Ipv4Addr::from(subnet_base(self.index))
        );
        let sub6 = format!(
            "{}/{SUBNET6_PREFIX}",
            Ipv6Addr::from(subnet6_base(self.index))
        );
        // (IPv6 parts only when the host has IPv6; neighbour discovery is
        // what the bridge's link needs, the rest of ICMPv6 to the host is
        // refused as any other packet)
        let nd = format!(
            "iifname \"{br}\" icmpv6 type {{ nd-neighbor-solicit, nd-neighbor-advert }} ip6 hoplimit 255 accept"
        );
        let (sets6, pre6, input6, forward6, nat6) = if self.ipv6 {
            (
                format!(
                    "  set refused6 {{ type ipv6_addr; flags interval; elements = {{ {refused6} }} }}
  map forward_by_source6 {{ type ipv6_addr : verdict; flags interval; }}
  map host_by_source6 {{ type ipv6_addr : verdict; flags interval; }}
"
                ),
                // link-local and loopback destinations are never forwarded:
                // refused (and counted) before routing drops them silently
                format!(
                    "  chain prerouting {{ type filter hook prerouting priority filter; policy accept;
    {nd}
    iifname \"{br}\" ip6 daddr {{ ::1, fe80::/10 }} ip6 saddr vmap @host_by_source6
    iifname \"{br}\" ip6 daddr {{ ::1, fe80::/10 }} goto refuse
  }}
"
                ),
                format!(
                    "    {nd}
    iifname \"{br}\" ip6 daddr ff00::/8 drop
    iifname \"{br}\" ip6 saddr vmap @host_by_source6
"
                ),
                format!("    iifname \"{br}\" ip6 saddr vmap @forward_by_source6\n"),
                format!("    ip6 saddr {sub6} oifname != \"{br}\" masquerade\n"),
            )
        } else {
            Default::default()
        };
        format!(
            "table inet {t} {{
  set refused {{ type ipv4_addr; flags interval; elements = {{ {refused} }} }}
  map forward_by_source {{ type ipv4_addr : verdict; flags interval; }}
  map host_by_source {{ type ipv4_addr : verdict; flags interval; }}
{sets6}  chain refuse {{
{REFUSE}  }}
{pre6}  chain input {{ type filter hook input priority filter; policy accept;
{input6}    iifname \"{br}\" ip saddr vmap @host_by_source
    iifname \"{br}\" goto refuse
  }}
  chain forward {{ type filter hook forward priority filter; policy accept;
    iifname \"{br}\" ct state established,related accept
    iifname \"{br}\" ip saddr vmap @forward_by_source
{forward6}    iifname \"{br}\" goto refuse
    oifname \"{br}\" ct state established,related accept
    oifname \"{br}\" counter drop
  }}
  chain postrouting {{ type nat hook postrouting priority srcnat; policy accept;
    ip saddr {sub} oifname != \"{br}\" masquerade
{nat6}  }}
}}
"
        )
    }

    /// Sets up a function's block of addresses and its chains.
    pub fn attach(
        self: &Arc<Self>,
        policy: &Policy,
        resolv_conf: Option<PathBuf>,
    ) -> Result<Egress, EgressError> {
        if policy.wants_ipv6() {
            if let Some(why) = ipv6_unavailable() {
                fail!(
                    EgressError::Failed,
                    "the function lists IPv6 destinations, but {why}"
                );
            }
            if !self.ipv6 {
                fail!(
                    EgressError::Failed,
                    "the function lists IPv6 destinations, but this daemon's network was set up before the host had IPv6: restart the daemon"
                );
            }
        }
        let block = {
            let mut blocks = self.blocks.lock().unwrap_or_else(|p| p.into_inner());
            // block 0 holds the bridge's address
            let b = (1..BLOCKS).find(|&b| !blocks[b as usize]).ok_or_else(|| {
                EgressError::Exhausted(format!(
                    "all {} egress address blocks of this daemon are in use",
                    BLOCKS - 1
                ))
            })?;
            blocks[b as usize] = true;
            b
        };
        let first = subnet_base(self.index) + block * BLOCK_SIZE;
        let mut fnet = FunctionNet {
            net: self.clone(),
            block,
            first,
            ipv6: policy.wants_ipv6(),
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

    pub(crate) fn release_block(&self, block: u32) {
        self.blocks.lock().unwrap_or_else(|p| p.into_inner())[block as usize] = false;
    }

    /// Packets refused per function block: (block, count), from the
    /// counters of the functions' refusal chains.
    pub(crate) fn refused_by_block(&self) -> Result<Vec<(u32, u64)>> {
        let json = output("nft", &["-j", "list", "table", "inet", &self.table])?;
        let v: serde_json::Value = serde_json::from_str(&json).context("nft -j output")?;
        let mut by = std::collections::BTreeMap::new();
        for item in v["nftables"].as_array().into_iter().flatten() {
            let Some(rule) = item.get("rule") else {
                continue;
            };
            let chain = rule["chain"].as_str().unwrap_or("");
            let Some(block) = chain
                .strip_prefix("refuse_")
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

/// A refusal: the caller fails at once. IPv4 and UDP get an ICMP
/// administratively-prohibited answer; an IPv6 TCP connect gets a reset,
/// since Linux drops an ICMPv6 error that arrives while the connecting
/// socket is still held by its own `connect` (the veth delivers it that
/// fast), and the connect would only fail at the SYN's retransmission, a
/// second later.
pub(crate) const REFUSE: &str =
    "    meta nfproto ipv6 meta l4proto tcp counter reject with tcp reset
    counter reject with icmpx type admin-prohibited
";

impl Drop for Network {
    fn drop(&mut self) {
        remove_leftovers(self.index);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::is_refused;
    use std::net::IpAddr;

    #[test]
    fn ipv6_addresses_mirror_the_ipv4_ones() {
        // daemon 3, block 5, sandbox 9
        let a = subnet_base(3) + 5 * BLOCK_SIZE + 9;
        assert_eq!(
            mirror6(3, a),
            "fd74:6861:7700:305::9".parse::<Ipv6Addr>().unwrap()
        );
        assert_eq!(
            mirror6(3, subnet_base(3) + 1),
            "fd74:6861:7700:300::1".parse::<Ipv6Addr>().unwrap()
        );
        assert!(is_refused(IpAddr::V6(mirror6(3, a))));
        assert!(!is_refused("fd74:6861:7701::2".parse().unwrap()));
        assert_eq!(mask6(0), 0);
        assert_eq!(mask6(128), u128::MAX);
    }
}
