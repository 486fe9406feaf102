//! What a function may reach: its allowed destinations ([`Rule`]s, as
//! `CIDR[:PORTS]`) and resolver ([`Policy`]), and the destinations no rule
//! can open.
use crate::Result;
use crate::{MAX_RULES, RANGE6_BASE, RANGE6_PREFIX, RANGE_BASE, RANGE_PREFIX};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// One allowed destination: an IPv4 or IPv6 network and an optional port
/// range (TCP and UDP); without ports, every protocol and port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub addr: IpAddr,
    pub prefix: u8,
    pub ports: Option<(u16, u16)>,
}

impl Rule {
    /// Parses `CIDR[:PORTS]`: `10.0.0.0/8`, `192.0.2.7:443`,
    /// `198.51.100.0/24:8000-8100`; IPv6 as `2001:db8::/32`,
    /// `2001:db8::/32:443` (ports after a prefix length), or in brackets
    /// `[2001:db8::7]:443`, `[2001:db8::/32]:80-90`. A bare address is a
    /// /32 (/128).
    pub fn parse(s: &str) -> Result<Rule, String> {
        let (net, ports) = split_rule(s)?;
        let (addr, prefix) = match net.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (net, None),
        };
        // (brackets hold IPv6 only)
        let addr: IpAddr = if net.contains(':') || s.starts_with('[') {
            IpAddr::V6(
                addr.parse()
                    .map_err(|_| format!("{s:?}: {addr:?} is not an IPv6 address"))?,
            )
        } else {
            IpAddr::V4(
                addr.parse()
                    .map_err(|_| format!("{s:?}: {addr:?} is not an IPv4 address"))?,
            )
        };
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => match p.parse::<u8>() {
                Ok(n) if n <= max && p.bytes().all(|b| b.is_ascii_digit()) => n,
                _ => return Err(format!("{s:?}: prefix length {p:?} is not in 0..={max}")),
            },
        };
        let network = masked(addr, prefix);
        if network != addr {
            return Err(format!(
                "{s:?}: host bits are set (the network is {network}/{prefix})"
            ));
        }
        let ports = ports.map(|p| parse_ports(s, p)).transpose()?;
        Ok(Rule {
            addr,
            prefix,
            ports,
        })
    }

    pub(crate) fn nft(&self) -> String {
        let family = if self.addr.is_ipv4() { "ip" } else { "ip6" };
        let dst = format!("{family} daddr {}/{}", self.addr, self.prefix);
        match self.ports {
            None => dst,
            Some((lo, hi)) if lo == hi => {
                format!("{dst} meta l4proto {{ tcp, udp }} th dport {lo}")
            }
            Some((lo, hi)) => format!("{dst} meta l4proto {{ tcp, udp }} th dport {lo}-{hi}"),
        }
    }
}

/// Splits a rule into its network and its ports: `[NET]:PORTS` or `[NET]`
/// (IPv6 in brackets), `V6NET/LEN:PORTS`, `V6ADDR` (no ports), `V4NET:PORTS`.
fn split_rule(s: &str) -> Result<(&str, Option<&str>), String> {
    if let Some(rest) = s.strip_prefix('[') {
        let (net, after) = rest
            .split_once(']')
            .ok_or_else(|| format!("{s:?}: no closing bracket"))?;
        return match after {
            "" => Ok((net, None)),
            _ => match after.strip_prefix(':') {
                Some(p) => Ok((net, Some(p))),
                None => Err(format!("{s:?}: expected \":PORTS\" after the bracket")),
            },
        };
    }
    if s.matches(':').count() > 1 {
        // IPv6: ports only after a prefix length (which has no colon)
        return Ok(match s.split_once('/') {
            Some((a, rest)) => match rest.split_once(':') {
                Some((len, p)) => (&s[..a.len() + 1 + len.len()], Some(p)),
                None => (s, None),
            },
            None => (s, None),
        });
    }
    Ok(match s.split_once(':') {
        Some((n, p)) => (n, Some(p)),
        None => (s, None),
    })
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.addr, self.ports) {
            (IpAddr::V6(a), Some(_)) => write!(f, "[{a}/{}]", self.prefix)?,
            (a, _) => write!(f, "{a}/{}", self.prefix)?,
        }
        match self.ports {
            Some((lo, hi)) if lo == hi => write!(f, ":{lo}"),
            Some((lo, hi)) => write!(f, ":{lo}-{hi}"),
            None => Ok(()),
        }
    }
}

fn parse_ports(s: &str, p: &str) -> Result<(u16, u16), String> {
    let port = |x: &str| -> Result<u16, String> {
        match x.parse::<u16>() {
            Ok(n) if x.bytes().all(|b| b.is_ascii_digit()) && n >= 1 => Ok(n),
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

pub(crate) fn mask(prefix: u8) -> u32 {
    u32::MAX.checked_shl(32 - prefix as u32).unwrap_or(0)
}

pub(crate) fn mask6(prefix: u8) -> u128 {
    u128::MAX.checked_shl(128 - prefix as u32).unwrap_or(0)
}

/// `addr` with the bits after `prefix` cleared.
fn masked(addr: IpAddr, prefix: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(u32::from(a) & mask(prefix))),
        IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(u128::from(a) & mask6(prefix))),
    }
}

/// What a function may reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub rules: Vec<Rule>,
    /// The resolver written into the sandbox's `/etc/resolv.conf`; port 53
    /// anywhere else is refused.
    pub dns: Option<IpAddr>,
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
                d.parse::<IpAddr>()
                    .map_err(|_| format!("dns {d:?} is not an IPv4 or IPv6 address"))
            })
            .transpose()?;
        if rules.is_empty() && dns.is_none() {
            return Err("network needs at least one egress rule or a dns resolver".into());
        }
        if let Some(d) = dns {
            if is_refused(d) {
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

    /// Whether its sandboxes need IPv6: an IPv6 destination or resolver.
    pub fn wants_ipv6(&self) -> bool {
        self.rules.iter().any(|r| r.addr.is_ipv6()) || self.dns.is_some_and(|d| d.is_ipv6())
    }
}

/// Whether no rule can open `a` (see [`refused_nets`], [`refused_nets6`]).
pub(crate) fn is_refused(a: IpAddr) -> bool {
    match a {
        IpAddr::V4(a) => refused_nets()
            .iter()
            .any(|(n, p)| u32::from(a) & mask(*p) == *n),
        IpAddr::V6(a) => refused_nets6()
            .iter()
            .any(|(n, p)| u128::from(a) & mask6(*p) == *n),
    }
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

/// The same for IPv6: every sandbox subnet, the unspecified address,
/// loopback, IPv4-mapped addresses, link-local, site-local and multicast.
fn refused_nets6() -> [(u128, u8); 7] {
    [
        (RANGE6_BASE, RANGE6_PREFIX),
        (0, 128),
        (1, 128),
        (0xffff_u128 << 32, 96),
        (0xfe80_u128 << 112, 10),
        (0xfec0_u128 << 112, 10),
        (0xff00_u128 << 112, 8),
    ]
}

/// The sets as nftables elements.
pub(crate) fn refused_elements() -> (String, String) {
    let v4 = refused_nets()
        .iter()
        .map(|(a, p)| format!("{}/{p}", Ipv4Addr::from(*a)))
        .collect::<Vec<_>>()
        .join(", ");
    let v6 = refused_nets6()
        .iter()
        .map(|(a, p)| format!("{}/{p}", Ipv6Addr::from(*a)))
        .collect::<Vec<_>>()
        .join(", ");
    (v4, v6)
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
            ("10.0.0.0/8:", "port"),
            ("fd00::/129", "not in 0..=128"),
            ("fd00::/200", "not in 0..=128"),
            ("fd00::1/64", "host bits"),
            ("fd00:::1", "not an IPv6"),
            ("fd00::g", "not an IPv6"),
            ("[fd00::1", "bracket"),
            ("[fd00::1]443", "after the bracket"),
            ("[fd00::1]:0", "port"),
            ("[10.0.0.1]:80", "not an IPv6"),
            ("fd00::/64:90-80", "empty"),
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
            .contains("not an IPv4 or IPv6"));
        for refused in [
            "fe80::1",
            "::1",
            "fd74:6861:7700:100::1",
            "ff02::1",
            "::ffff:10.0.0.1",
        ] {
            assert!(
                Policy::parse(&[], Some(refused), None, None).is_err(),
                "{refused}"
            );
        }
        assert!(Policy::parse(&[], None, None, None).is_err());
        assert!(Policy::parse(&[], Some("169.254.169.254"), None, None).is_err());
        let p = Policy::parse(&["10.0.0.0/8".into()], Some("10.9.9.9"), Some(4), None).unwrap();
        assert_eq!(p.dns, Some(IpAddr::V4(Ipv4Addr::new(10, 9, 9, 9))));
        assert!(!p.wants_ipv6());
        let p = Policy::parse(&[], Some("fd00::53"), None, None).unwrap();
        assert!(p.wants_ipv6());
    }

    #[test]
    fn ipv6_rules_parse_in_every_form() {
        for (s, addr, prefix, ports, shown) in [
            ("fd00::/8", "fd00::", 8, None, "fd00::/8"),
            ("fd00:1::7", "fd00:1::7", 128, None, "fd00:1::7/128"),
            (
                "fd00::/64:443",
                "fd00::",
                64,
                Some((443, 443)),
                "[fd00::/64]:443",
            ),
            (
                "[fd00::7]:80-90",
                "fd00::7",
                128,
                Some((80, 90)),
                "[fd00::7/128]:80-90",
            ),
            ("[fd00::/16]", "fd00::", 16, None, "fd00::/16"),
            ("::/0", "::", 0, None, "::/0"),
        ] {
            let r = Rule::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"));
            assert_eq!(r.addr, addr.parse::<IpAddr>().unwrap(), "{s}");
            assert_eq!((r.prefix, r.ports), (prefix, ports), "{s}");
            assert_eq!(r.to_string(), shown, "{s}");
            // what is shown parses back to the same rule
            assert_eq!(Rule::parse(&r.to_string()).unwrap(), r, "{s}");
        }
        assert_eq!(
            Rule::parse("[fd00::/64]:443").unwrap().nft(),
            "ip6 daddr fd00::/64 meta l4proto { tcp, udp } th dport 443"
        );
        assert_eq!(
            Rule::parse("10.0.0.0/8").unwrap().nft(),
            "ip daddr 10.0.0.0/8"
        );
    }

    #[test]
    fn mask_edges() {
        assert_eq!(mask(0), 0);
        assert_eq!(mask(32), u32::MAX);
        assert_eq!(mask(20), 0xffff_f000);
    }
}
