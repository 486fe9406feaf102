//! Restore strategies: how each region's saved pages come back.
use crate::layout::Region;
use anyhow::{bail, Result};

/// How one region is filled at restore time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fill {
    /// Read the saved pages into fresh memory before the runtime resumes.
    Copy,
    /// Map the image file privately; the kernel faults pages in from the page cache.
    Map,
    /// Leave the region empty and serve its faults from a userfaultfd page server.
    Lazy,
    /// Map the image file and build the page tables before resume (zero copy,
    /// no run-time faults for pages only read; writes copy-on-write).
    MapPopulate,
}

/// A named restore strategy. Strategies decide per region; regions a strategy
/// cannot serve lazily (file-backed ones: userfaultfd missing mode only covers
/// anonymous memory) fall back to `Copy` for their few private pages.
pub trait RestoreStrategy: Send + Sync {
    fn name(&self) -> &'static str;
    fn fill(&self, region: &Region) -> Fill;
    /// REAP: record the first invocation's faults into a working set and
    /// prefetch it on later restores.
    fn uses_working_set(&self) -> bool {
        false
    }
    /// TOSS: map each page from the tier file its profile placed it in.
    fn uses_tiers(&self) -> bool {
        false
    }
    /// dax: record the pages the first invocation writes and copy them
    /// before resume on later restores.
    fn uses_write_set(&self) -> bool {
        false
    }
}

struct Eager;
struct Mmap;
struct Uffd;
struct Reap;
struct Dax;
struct Tiered;

impl RestoreStrategy for Eager {
    fn name(&self) -> &'static str {
        "eager"
    }
    fn fill(&self, _: &Region) -> Fill {
        Fill::Copy
    }
}

impl RestoreStrategy for Mmap {
    fn name(&self) -> &'static str {
        "mmap"
    }
    fn fill(&self, _: &Region) -> Fill {
        Fill::Map
    }
}

impl RestoreStrategy for Uffd {
    fn name(&self) -> &'static str {
        "uffd"
    }
    fn fill(&self, r: &Region) -> Fill {
        if r.anonymous {
            Fill::Lazy
        } else {
            Fill::Copy
        }
    }
}

impl RestoreStrategy for Reap {
    fn name(&self) -> &'static str {
        "reap"
    }
    fn fill(&self, r: &Region) -> Fill {
        Uffd.fill(r)
    }
    fn uses_working_set(&self) -> bool {
        true
    }
}

impl RestoreStrategy for Dax {
    fn name(&self) -> &'static str {
        "dax"
    }
    fn fill(&self, _: &Region) -> Fill {
        Fill::MapPopulate
    }
    fn uses_write_set(&self) -> bool {
        true
    }
}

impl RestoreStrategy for Tiered {
    fn name(&self) -> &'static str {
        "tiered"
    }
    fn fill(&self, _: &Region) -> Fill {
        Fill::Map
    }
    fn uses_tiers(&self) -> bool {
        true
    }
}

/// The strategies this build provides, by the names the CLI and reports use.
pub const STRATEGY_NAMES: &[&str] = &["eager", "mmap", "uffd", "reap", "dax", "tiered"];

pub fn strategy_by_name(name: &str) -> Result<Box<dyn RestoreStrategy>> {
    Ok(match name {
        "eager" => Box::new(Eager),
        "mmap" => Box::new(Mmap),
        "uffd" => Box::new(Uffd),
        "reap" => Box::new(Reap),
        "dax" => Box::new(Dax),
        "tiered" => Box::new(Tiered),
        _ => bail!(
            "unknown restore strategy {name:?} (known: {})",
            STRATEGY_NAMES.join(", ")
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_file_regions_never_lazy() {
        let file = Region {
            start: 0,
            end: 4096,
            anonymous: false,
            runs: vec![],
        };
        let anon = Region {
            start: 0,
            end: 4096,
            anonymous: true,
            runs: vec![],
        };
        for n in STRATEGY_NAMES {
            let s = strategy_by_name(n).unwrap();
            assert_eq!(s.name(), *n);
            assert_ne!(s.fill(&file), Fill::Lazy);
        }
        assert_eq!(strategy_by_name("uffd").unwrap().fill(&anon), Fill::Lazy);
        assert!(strategy_by_name("reap").unwrap().uses_working_set());
        assert_eq!(
            strategy_by_name("dax").unwrap().fill(&anon),
            Fill::MapPopulate
        );
        assert!(strategy_by_name("bogus").is_err());
    }
}
