//! How a benchmark starts an instance: a baseline start type, or a restore
//! with one of the strategies. The lowercase names are the CLI's and the
//! JSON records' (unchanged).
use clap::builder::PossibleValue;
use serde::{Deserialize, Serialize};
use std::sync::OnceLock;
use thaw_worker::StrategyKind;

/// Starts that are not restores, measured beside the strategies.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum StartType {
    /// exec the runtime, import and init the function (no snapshot)
    Fresh,
    /// fork a live, initialised template into new namespaces (the floor of
    /// a local start)
    Zygote,
}

impl StartType {
    pub fn name(self) -> &'static str {
        match self {
            StartType::Fresh => "fresh",
            StartType::Zygote => "zygote",
        }
    }
}

/// A start type or a restore strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Start {
    Baseline(StartType),
    Restore(StrategyKind),
}

impl Start {
    pub const FRESH: Start = Start::Baseline(StartType::Fresh);
    pub const ZYGOTE: Start = Start::Baseline(StartType::Zygote);

    pub fn name(self) -> &'static str {
        match self {
            Start::Baseline(t) => t.name(),
            Start::Restore(s) => s.name(),
        }
    }

    /// The restore strategy, unless this is a baseline.
    pub fn strategy(self) -> Option<StrategyKind> {
        match self {
            Start::Restore(s) => Some(s),
            Start::Baseline(_) => None,
        }
    }
}

impl std::fmt::Display for Start {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl clap::ValueEnum for Start {
    fn value_variants<'a>() -> &'a [Self] {
        static ALL: OnceLock<Vec<Start>> = OnceLock::new();
        ALL.get_or_init(|| {
            let baselines = StartType::value_variants()
                .iter()
                .map(|t| Start::Baseline(*t));
            baselines
                .chain(StrategyKind::ALL.into_iter().map(Start::Restore))
                .collect()
        })
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        match self {
            Start::Baseline(t) => t.to_possible_value(),
            Start::Restore(s) => s.to_possible_value(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum;

    #[test]
    fn names_are_the_wire_strings_both_ways() {
        for s in Start::value_variants() {
            let json = serde_json::to_string(s).unwrap();
            assert_eq!(json, format!("\"{}\"", s.name()));
            assert_eq!(serde_json::from_str::<Start>(&json).unwrap(), *s);
            assert_eq!(Start::from_str(s.name(), false).unwrap(), *s);
        }
        assert_eq!(Start::value_variants().len(), 2 + StrategyKind::ALL.len());
        assert!(Start::from_str("bogus", false).is_err());
    }
}
