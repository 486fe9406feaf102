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
}

/// A named restore strategy. Strategies decide per region; regions a strategy
/// cannot serve lazily (file-backed ones: userfaultfd missing mode only covers
/// anonymous memory) fall back to `Copy` for their few private pages.
pub trait RestoreStrategy: Send + Sync {
    fn name(&self) -> &'static str;
    fn fill(&self, region: &Region) -> Fill;
}

struct Eager;
struct Mmap;
struct Uffd;

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

/// The strategies this build provides, by the names the CLI and reports use.
pub const STRATEGY_NAMES: &[&str] = &["eager", "mmap", "uffd"];

pub fn strategy_by_name(name: &str) -> Result<Box<dyn RestoreStrategy>> {
    Ok(match name {
        "eager" => Box::new(Eager),
        "mmap" => Box::new(Mmap),
        "uffd" => Box::new(Uffd),
        _ => bail!("unknown restore strategy {name:?} (known: {})", STRATEGY_NAMES.join(", ")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_file_regions_never_lazy() {
        let file = Region { start: 0, end: 4096, anonymous: false, runs: vec![] };
        let anon = Region { start: 0, end: 4096, anonymous: true, runs: vec![] };
        for n in STRATEGY_NAMES {
            let s = strategy_by_name(n).unwrap();
            assert_eq!(s.name(), *n);
            assert_ne!(s.fill(&file), Fill::Lazy);
        }
        assert_eq!(strategy_by_name("uffd").unwrap().fill(&anon), Fill::Lazy);
        assert!(strategy_by_name("bogus").is_err());
    }
}
