//! A function's egress ([`Egress`], [`FunctionNet`]): its address block
//! and chains; and each sandbox's lease of an address on a veth
//! ([`SandboxNet`]).
use crate::network::{mirror6, run, veth_prefix, Network, REFUSE};
use crate::policy::Policy;
use crate::{EgressError, Result};
use crate::{BLOCK6_PREFIX, BLOCK_PREFIX, BLOCK_SIZE, SANDBOX_IF};
use std::collections::VecDeque;
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use thaw_error::ResultExt;

/// A function's egress: its address block and chains. Sandboxes of the
/// function lease addresses from it; dropping the last holder removes the
/// chains. Compared by identity (one per deployed version).
#[derive(Clone)]
pub struct Egress(pub(crate) Arc<FunctionNet>);

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
    pub(crate) net: Arc<Network>,
    pub(crate) block: u32,
    pub(crate) first: u32,
    /// its sandboxes get IPv6 addresses (it lists IPv6 destinations)
    pub(crate) ipv6: bool,
    pub(crate) policy: Policy,
    pub(crate) resolv_conf: Option<PathBuf>,
    /// addresses not in use, least recently freed first (a dying sandbox's
    /// namespace goes away asynchronously)
    pub(crate) free: Mutex<VecDeque<u32>>,
    /// its rules are in the table
    pub(crate) loaded: bool,
}

impl FunctionNet {
    /// Its source blocks: (IPv4 /26, IPv6 /64 when the network has IPv6).
    fn sources(&self) -> (String, Option<String>) {
        let v4 = format!("{}/{BLOCK_PREFIX}", Ipv4Addr::from(self.first));
        let v6 = self
            .net
            .ipv6
            .then(|| format!("{}/{BLOCK6_PREFIX}", mirror6(self.net.index, self.first)));
        (v4, v6)
    }

    pub(crate) fn rules(&self) -> String {
        let t = &self.net.table;
        let b = self.block;
        let (src, src6) = self.sources();
        let refuse = format!("goto refuse_{b}");
        let mut r = format!("add chain inet {t} refuse_{b}\n");
        for l in REFUSE.lines() {
            r += &format!("add rule inet {t} refuse_{b} {}\n", l.trim());
        }
        r += &format!(
            "add chain inet {t} fn_{b}\n\
             add chain inet {t} host_{b}\n\
             add rule inet {t} host_{b} {refuse}\n\
             add rule inet {t} fn_{b} ip daddr @refused {refuse}\n"
        );
        if src6.is_some() {
            r += &format!("add rule inet {t} fn_{b} ip6 daddr @refused6 {refuse}\n");
        }
        if let Some(d) = self.policy.dns {
            let family = if d.is_ipv4() { "ip" } else { "ip6" };
            r += &format!("add rule inet {t} fn_{b} {family} daddr {d} meta l4proto {{ tcp, udp }} th dport 53 accept\n");
        }
        r +=
            &format!("add rule inet {t} fn_{b} meta l4proto {{ tcp, udp }} th dport 53 {refuse}\n");
        if let Some(c) = self.policy.max_connections {
            // counted per function, over both families: every packet here
            // came in on the bridge, so its name is the one key of the set
            r += &format!(
                "add set inet {t} conns_{b} {{ type ifname; flags dynamic; }}\n\
                 add rule inet {t} fn_{b} ct state new add @conns_{b} {{ iifname ct count over {c} }} {refuse}\n"
            );
        }
        for rule in &self.policy.rules {
            r += &format!("add rule inet {t} fn_{b} {} accept\n", rule.nft());
        }
        r += &format!(
            "add rule inet {t} fn_{b} {refuse}\n\
             add element inet {t} forward_by_source {{ {src} : jump fn_{b} }}\n\
             add element inet {t} host_by_source {{ {src} : jump host_{b} }}\n"
        );
        if let Some(src6) = src6 {
            r += &format!(
                "add element inet {t} forward_by_source6 {{ {src6} : jump fn_{b} }}\n\
                 add element inet {t} host_by_source6 {{ {src6} : jump host_{b} }}\n"
            );
        }
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
        let (src, src6) = self.sources();
        let mut r = format!(
            "delete element inet {t} forward_by_source {{ {src} }}\n\
             delete element inet {t} host_by_source {{ {src} }}\n"
        );
        if let Some(src6) = src6 {
            r += &format!(
                "delete element inet {t} forward_by_source6 {{ {src6} }}\n\
                 delete element inet {t} host_by_source6 {{ {src6} }}\n"
            );
        }
        r += &format!(
            "delete chain inet {t} fn_{b}\n\
             delete chain inet {t} host_{b}\n\
             delete chain inet {t} refuse_{b}\n"
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
    pub fn lease(&self) -> Result<SandboxNet, EgressError> {
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
            host_if: format!("{}{n}", veth_prefix(self.0.net.index)),
        })
    }
}

/// One sandbox's address and veth. The veth goes with the sandbox's
/// network namespace; the address goes back to the function's block.
pub struct SandboxNet {
    pub(crate) fnet: Arc<FunctionNet>,
    pub(crate) addr: u32,
    pub(crate) host_if: String,
}

impl SandboxNet {
    /// Creates the veth into `pid`'s network namespace, on the bridge, with
    /// the function's bandwidth caps; the child configures its end.
    pub fn plug(&self, pid: i32) -> Result<()> {
        let (h, br) = (&self.host_if, &self.fnet.net.bridge);
        run(
            "ip",
            &["-batch", "-"],
            &format!(
                "link add {h} type veth peer name {SANDBOX_IF} netns {pid}\n\
                 link set {h} master {br}\n\
                 link set {h} type bridge_slave isolated on\n\
                 {v6}\
                 link set {h} up\n",
                // a bridge port needs no address of its own
                v6 = if self.fnet.net.ipv6 {
                    format!("link set {h} addrgenmode none\n")
                } else {
                    String::new()
                },
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
    pub fn child_config(&self) -> (Ipv4Addr, Ipv4Addr) {
        (Ipv4Addr::from(self.addr), self.fnet.net.gateway())
    }

    /// (address, gateway) in IPv6, for a function that lists IPv6
    /// destinations.
    pub fn child_config6(&self) -> Option<(Ipv6Addr, Ipv6Addr)> {
        let net = &self.fnet.net;
        (self.fnet.ipv6 && net.ipv6).then(|| (mirror6(net.index, self.addr), net.gateway6()))
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

    /// Its IPv6 address, for a function that lists IPv6 destinations.
    pub fn address6(&self) -> Option<Ipv6Addr> {
        self.child_config6().map(|(a, _)| a)
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
