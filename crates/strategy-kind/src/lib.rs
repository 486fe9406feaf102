//! The names of thaw's restore strategies ([`StrategyKind`]) and of how a
//! function's new instances start ([`StartStrategy`]: booted, or restored
//! with a strategy).
//!
//! Plain data for the crates that choose, store or accept a strategy
//! without running one: the policy's placement (which `crates/memory`, and
//! so `crates/restore`, builds on), the daemon's registry and API. The
//! strategies themselves, and what each can do, are `crates/restore`'s:
//! adding one is its variant here and its object there
//! (`thaw_restore::strategy`, the registration).
//!
//! The lowercase names are the CLI's, the API's, the registry files' and
//! the reports' (serde and `FromStr` use them).
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The restore strategies this build provides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum StrategyKind {
    /// copy every saved page before resume
    Eager,
    /// map the image file privately; the kernel faults pages in (but for
    /// the pages an earlier clone's first response wrote, copied before resume)
    Mmap,
    /// anonymous memory served on fault by a userfaultfd page server
    Uffd,
    /// uffd, plus a recorded working set prefetched in one read (REAP)
    Reap,
    /// map the image in place with page tables built, copy the pages earlier
    /// clones wrote (byte-addressable tiers only)
    Dax,
    /// pages mapped from a fast and a slow tier file by access count (TOSS)
    Tiered,
}

impl StrategyKind {
    pub const ALL: [StrategyKind; 6] = [
        StrategyKind::Eager,
        StrategyKind::Mmap,
        StrategyKind::Uffd,
        StrategyKind::Reap,
        StrategyKind::Dax,
        StrategyKind::Tiered,
    ];

    pub fn name(self) -> &'static str {
        match self {
            StrategyKind::Eager => "eager",
            StrategyKind::Mmap => "mmap",
            StrategyKind::Uffd => "uffd",
            StrategyKind::Reap => "reap",
            StrategyKind::Dax => "dax",
            StrategyKind::Tiered => "tiered",
        }
    }

    /// The names, comma-separated, for messages.
    pub fn names() -> String {
        join(Self::ALL.iter().map(|s| s.name()))
    }
}

impl std::fmt::Display for StrategyKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.name())
    }
}

/// A strategy name that is not one of the known ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownStrategy {
    pub name: String,
    /// the known names, comma-separated
    pub known: String,
}

impl std::fmt::Display for UnknownStrategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "unknown restore strategy {:?} (known: {})",
            self.name, self.known
        )
    }
}

impl std::error::Error for UnknownStrategy {}

impl std::str::FromStr for StrategyKind {
    type Err = UnknownStrategy;
    fn from_str(s: &str) -> Result<Self, UnknownStrategy> {
        Self::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| UnknownStrategy {
                name: s.into(),
                known: Self::names(),
            })
    }
}

/// How a function's new instances start: booted fresh (import and init,
/// no snapshot: for code that cannot be checkpointed), or restored from its
/// snapshot with a strategy. On the wire, the strategy's name or `boot`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StartStrategy {
    Boot,
    Restore(StrategyKind),
}

impl StartStrategy {
    pub fn name(self) -> &'static str {
        match self {
            StartStrategy::Boot => "boot",
            StartStrategy::Restore(k) => k.name(),
        }
    }

    /// The restore strategy, unless this is a boot.
    pub fn restore(self) -> Option<StrategyKind> {
        match self {
            StartStrategy::Boot => None,
            StartStrategy::Restore(k) => Some(k),
        }
    }

    /// Every name, comma-separated, for messages.
    pub fn names() -> String {
        join(
            StrategyKind::ALL
                .iter()
                .map(|k| k.name())
                .chain([StartStrategy::Boot.name()]),
        )
    }
}

impl From<StrategyKind> for StartStrategy {
    fn from(k: StrategyKind) -> Self {
        StartStrategy::Restore(k)
    }
}

impl std::fmt::Display for StartStrategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.name())
    }
}

impl std::str::FromStr for StartStrategy {
    type Err = UnknownStrategy;
    fn from_str(s: &str) -> Result<Self, UnknownStrategy> {
        if s == StartStrategy::Boot.name() {
            return Ok(StartStrategy::Boot);
        }
        s.parse()
            .map(StartStrategy::Restore)
            .map_err(|_| UnknownStrategy {
                name: s.into(),
                known: Self::names(),
            })
    }
}

impl Serialize for StartStrategy {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for StartStrategy {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = std::borrow::Cow::<'de, str>::deserialize(d)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

fn join<'a>(names: impl Iterator<Item = &'a str>) -> String {
    names.collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_through_serde_and_from_str() {
        for k in StrategyKind::ALL {
            let json = serde_json::to_string(&k).unwrap();
            assert_eq!(json, format!("\"{}\"", k.name()));
            assert_eq!(serde_json::from_str::<StrategyKind>(&json).unwrap(), k);
            assert_eq!(k.name().parse::<StrategyKind>().unwrap(), k);
            let s = StartStrategy::Restore(k);
            assert_eq!(serde_json::to_string(&s).unwrap(), json);
            assert_eq!(serde_json::from_str::<StartStrategy>(&json).unwrap(), s);
        }
        let boot = serde_json::to_string(&StartStrategy::Boot).unwrap();
        assert_eq!(boot, "\"boot\"");
        assert_eq!(
            serde_json::from_str::<StartStrategy>(&boot).unwrap(),
            StartStrategy::Boot
        );
        // boot is a start, not a restore strategy
        assert!("boot".parse::<StrategyKind>().is_err());
    }

    #[test]
    fn an_unknown_name_is_refused_naming_the_known_ones() {
        let e = "teleport".parse::<StartStrategy>().unwrap_err();
        assert_eq!(e.name, "teleport");
        assert_eq!(e.known, "eager, mmap, uffd, reap, dax, tiered, boot");
        let e = serde_json::from_str::<StartStrategy>("\"teleport\"").unwrap_err();
        assert!(
            e.to_string()
                .contains("eager, mmap, uffd, reap, dax, tiered, boot"),
            "{e}"
        );
        // not a string at all
        assert!(serde_json::from_str::<StartStrategy>("3").is_err());
        let e = "MMAP".parse::<StrategyKind>().unwrap_err();
        assert_eq!(e.known, "eager, mmap, uffd, reap, dax, tiered");
    }
}
