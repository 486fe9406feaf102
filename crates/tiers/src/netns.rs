//! Network namespaces joined by a veth pair: the emulated remote tier's
//! link (host <-> the store's namespace) and the two XDT workers' link
//! (one namespace each). Traffic on such a link never leaves the machine.
use crate::device::run;
use crate::error::{Result, TiersError};
use std::path::Path;
use thaw_error::fail;

pub fn netns_exists(name: &str) -> bool {
    Path::new("/run/netns").join(name).exists()
}

pub fn link_exists(name: &str) -> bool {
    Path::new("/sys/class/net").join(name).exists()
}

fn ipv4(s: &str) -> Option<u32> {
    s.parse::<std::net::Ipv4Addr>().ok().map(u32::from)
}

/// The host interface (if any) with an address in `addr`/`prefix`: two
/// links on one subnet would route one user's traffic to another's peer.
pub fn interface_with_address_in(addr: &str, prefix: u8) -> Result<Option<String>> {
    let Some(ours) = ipv4(addr) else {
        fail!(TiersError::Config, "{addr:?} is not an IPv4 address");
    };
    let out = run("ip", &["-4", "-o", "addr", "show"])?;
    for line in out.lines() {
        // "3: eth0    inet 192.0.2.2/24 brd ..."
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some(at) = words.iter().position(|w| *w == "inet") else {
            continue;
        };
        let Some((ip, len)) = words.get(at + 1).and_then(|a| a.split_once('/')) else {
            continue;
        };
        let (Some(have), Ok(len)) = (ipv4(ip), len.parse::<u32>()) else {
            continue;
        };
        // two subnets overlap when they agree on the shorter prefix
        let shorter = len.clamp(1, prefix as u32);
        if have >> (32 - shorter) == ours >> (32 - shorter) {
            return Ok(Some(words.get(1).unwrap_or(&"?").to_string()));
        }
    }
    Ok(None)
}

/// One end of a veth pair: its interface name, the namespace it lives in
/// (`None`: the host's) and its address.
pub struct End<'a> {
    pub link: &'a str,
    pub netns: Option<&'a str>,
    pub addr: &'a str,
}

/// `ip` inside `netns` (or on the host).
fn ip_in(netns: Option<&str>, args: &[&str]) -> Result<String> {
    let mut a = Vec::new();
    if let Some(ns) = netns {
        a.extend_from_slice(&["-n", ns]);
    }
    a.extend_from_slice(args);
    run("ip", &a)
}

/// Makes the namespaces `a` and `b` name (those that do not exist yet)
/// and a veth pair between them, with addresses `/prefix`, both ends and
/// each namespace's loopback up.
pub fn link_pair(a: &End, b: &End, prefix: u8) -> Result<()> {
    for ns in [a.netns, b.netns].into_iter().flatten() {
        if !netns_exists(ns) {
            run("ip", &["netns", "add", ns])?;
        }
    }
    run(
        "ip",
        &[
            "link", "add", a.link, "type", "veth", "peer", "name", b.link,
        ],
    )?;
    for end in [a, b] {
        if let Some(ns) = end.netns {
            run("ip", &["link", "set", end.link, "netns", ns])?;
        }
        let cidr = format!("{}/{prefix}", end.addr);
        ip_in(end.netns, &["addr", "add", &cidr, "dev", end.link])?;
        ip_in(end.netns, &["link", "set", end.link, "up"])?;
        if end.netns.is_some() {
            ip_in(end.netns, &["link", "set", "lo", "up"])?;
        }
    }
    Ok(())
}

/// Sets the MTU of `link` in `netns`.
pub fn set_mtu(netns: &str, link: &str, mtu: u32) -> Result<()> {
    ip_in(
        Some(netns),
        &["link", "set", "dev", link, "mtu", &mtu.to_string()],
    )?;
    Ok(())
}

/// Refuses names or a subnet already in use on this machine.
pub fn check_free(netns: &[&str], links: &[&str], addr: &str, prefix: u8) -> Result<()> {
    if let Some(ns) = netns.iter().find(|n| netns_exists(n)) {
        fail!(TiersError::Busy, "network namespace {ns} already exists (a run still going, or left behind: `ip netns del {ns}`)");
    }
    if let Some(l) = links.iter().find(|l| link_exists(l)) {
        fail!(
            TiersError::Busy,
            "network interface {l} already exists (`ip link del {l}`)"
        );
    }
    if let Some(dev) = interface_with_address_in(addr, prefix)? {
        fail!(
            TiersError::Busy,
            "the subnet {addr}/{prefix} is already in use on interface {dev}"
        );
    }
    Ok(())
}

/// Deletes the namespaces (which deletes the veth ends inside them, their
/// peers and qdiscs) and whatever host-side links are left.
pub fn remove(netns: &[&str], links: &[&str]) -> Result<()> {
    for ns in netns.iter().filter(|n| netns_exists(n)) {
        run("ip", &["netns", "del", ns])?;
    }
    // a host end goes with its namespace's end, perhaps a moment later
    for l in links.iter().filter(|l| link_exists(l)) {
        if let Err(e) = run("ip", &["link", "del", l]) {
            if link_exists(l) {
                return Err(e);
            }
        }
    }
    Ok(())
}
