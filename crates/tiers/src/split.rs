//! What the TOSS split (`thaw split`, the `tiered` strategy) takes from the
//! tier configuration: which pairs of tiers make sense, the price ratio of
//! the two, and what first touching a page costs on each, from the tiers'
//! probed profiles (`thaw tier probe`), or their declared ones when a tier
//! was never probed.
use crate::error::{Result, TiersError};
use crate::probe::{self, ReaderResult};
use crate::{Kind, TierConfig, TiersConfig};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;
use thaw_error::fail;

/// The model's inputs for one fast/slow pair of tiers.
#[derive(Debug, Clone, Serialize)]
pub struct SplitCosts {
    pub fast: String,
    pub slow: String,
    /// "pmem (pmem, emulated)", "disk (block)"
    pub slow_label: String,
    /// slow pages are mapped in place (pmem); else they fault through a block device
    pub slow_byte_addressable: bool,
    pub slow_emulated: bool,
    /// fast-tier price per GB-month over the slow tier's
    pub price_ratio: f64,
    /// first touch of a page mapped from each tier (µs)
    pub fast_fault_us: f64,
    pub slow_fault_us: f64,
    /// one more mapping in a restore's memory setup (µs)
    pub map_us: f64,
    /// where each fault cost came from, e.g. "pmem: probed (faults, mean of 256 reads)"
    pub fault_source: Vec<String>,
}

/// Checks that `fast` and `slow` make a TOSS pair and gathers the model's
/// inputs: the snapshot and its hot pages stay on byte-addressable memory,
/// the cold ones go to a cheaper local tier (pmem, mapped in place, or a
/// block device).
pub fn costs(home: &Path, cfg: &TiersConfig, fast: &str, slow: &str) -> Result<SplitCosts> {
    let (f, s) = (cfg.get(fast)?, cfg.get(slow)?);
    if fast == slow {
        fail!(
            TiersError::Config,
            "the fast and the slow tier are both {fast}: name two different tiers"
        );
    }
    if !matches!(f.kind, Kind::Dram | Kind::Pmem) {
        fail!(TiersError::Config,
            "fast tier {} is a {} tier: the snapshot and its hot pages are mapped from memory, so the fast tier must be byte-addressable (dram or pmem)",
            f.name,
            f.kind.name()
        );
    }
    match s.kind {
        Kind::Pmem | Kind::Block => {}
        Kind::Dram => fail!(TiersError::Config,
            "slow tier {} is DRAM: the slow tier is the cheaper one, pmem (mapped in place) or a block device",
            s.name
        ),
        Kind::Remote => fail!(TiersError::Config,
            "slow tier {} is remote: the slow file is mapped into the restored process, so it must be a local tier (pmem or block)",
            s.name
        ),
    }
    if s.price_per_gb_month <= 0.0 || s.price_per_gb_month >= f.price_per_gb_month {
        fail!(TiersError::Config,
            "slow tier {} costs {} per GB-month and fast tier {} {}: the slow tier must be cheaper (and not free) for a cost ratio",
            s.name,
            s.price_per_gb_month,
            f.name,
            f.price_per_gb_month
        );
    }
    let probes = probe::load(home);
    let mut fault_source = Vec::new();
    let mut fault = |t: &TierConfig| {
        let (us, from) = fault_us(t, probes.get(&t.name));
        fault_source.push(format!("{}: {from}", t.name));
        us
    };
    let fast_fault_us = fault(f);
    let slow_fault_us = fault(s);
    let (map_us, from) = map_us(s, probes.get(&s.name));
    fault_source.push(format!("mapping: {from}"));
    Ok(SplitCosts {
        fast: f.name.clone(),
        slow: s.name.clone(),
        slow_label: s.label(),
        slow_byte_addressable: s.kind == Kind::Pmem,
        slow_emulated: s.emulated,
        price_ratio: f.price_per_gb_month / s.price_per_gb_month,
        fast_fault_us,
        slow_fault_us,
        map_us,
        fault_source,
    })
}

/// The reader of `thaw tier probe` that reads a tier the way a tiered
/// restore does: page faults on a mapping, with readahead off on a block
/// device (its slow pages are sparse, mapped with `MADV_RANDOM`).
pub fn restore_reader(kind: Kind) -> &'static str {
    if kind == Kind::Block {
        "faults-random"
    } else {
        "faults"
    }
}

/// First touch of a page mapped from `t`, µs: the mean 4 KiB random read of
/// its restore reader from a sandbox-like cgroup if the tier was probed,
/// else its declared profile; and where the figure came from.
pub fn fault_us(t: &TierConfig, probed: Option<&Vec<ReaderResult>>) -> (f64, String) {
    let kind = restore_reader(t.kind);
    let prefix = format!("sandbox-cgroup {kind} (");
    match probed.and_then(|v| v.iter().find(|r| r.reader.starts_with(&prefix))) {
        Some(r) => (
            r.rand_read_4k_us_mean,
            format!(
                "probed ({kind}, mean of {} reads: {:.2} us)",
                r.rand_reads, r.rand_read_4k_us_mean
            ),
        ),
        None => (
            t.profile.rand_read_4k_us,
            format!(
                "declared ({:.2} us; not probed: `thaw tier probe --tiers {}`)",
                t.profile.rand_read_4k_us, t.name
            ),
        ),
    }
}

/// One more mapping of a run from `t`, µs: what its restore reader's probe
/// measured, else the model's declared figure; and where it came from.
pub fn map_us(t: &TierConfig, probed: Option<&Vec<ReaderResult>>) -> (f64, String) {
    let prefix = format!("sandbox-cgroup {} (", restore_reader(t.kind));
    let probe = probed.and_then(|v| v.iter().find(|r| r.reader.starts_with(&prefix)));
    match probe.and_then(|r| r.map_us) {
        Some(us) => (us, format!("probed on {} ({us:.2} us)", t.name)),
        None => (
            thaw_memory::tiering::DECLARED_MAP_US,
            format!(
                "declared ({:.2} us; not probed: `thaw tier probe --tiers {}`)",
                thaw_memory::tiering::DECLARED_MAP_US,
                t.name
            ),
        ),
    }
}

/// Fault costs of every probed tier (for `thaw tier list`).
pub fn probed_faults(
    cfg: &TiersConfig,
    probes: &BTreeMap<String, Vec<ReaderResult>>,
) -> BTreeMap<String, f64> {
    cfg.tiers
        .iter()
        .filter_map(|t| {
            let v = probes.get(&t.name)?;
            let prefix = format!("sandbox-cgroup {} (", restore_reader(t.kind));
            let r = v.iter().find(|r| r.reader.starts_with(&prefix))?;
            Some((t.name.clone(), r.rand_read_4k_us_mean))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn home(tag: &str) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("thaw-split-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        p
    }

    fn reader(name: &str, us: f64) -> ReaderResult {
        ReaderResult {
            reader: name.into(),
            blkio_cgroup: "/".into(),
            direct: false,
            seq_read_mbps: 1000.0,
            rand_reads: 64,
            rand_read_4k_us_mean: us,
            rand_read_4k_us_median: us,
            rand_read_4k_us_p99: us,
            device_kib_per_read: None,
            map_us: None,
        }
    }

    #[test]
    fn fault_costs_come_from_the_probed_profile_else_the_declared_one() {
        let h = home("probed");
        let cfg = TiersConfig::defaults(&h);
        // never probed: the declared profiles
        let c = costs(&h, &cfg, "tmpfs", "pmem").unwrap();
        assert_eq!(
            c.slow_fault_us,
            cfg.get("pmem").unwrap().profile.rand_read_4k_us
        );
        assert!(c.fault_source[1].contains("declared"), "{c:?}");
        assert!(c.slow_byte_addressable && c.slow_emulated);
        let prices = |n: &str| cfg.get(n).unwrap().price_per_gb_month;
        assert_eq!(c.price_ratio, prices("tmpfs") / prices("pmem"));
        // probed: the reader that reads the tier as a tiered restore does
        let probes: BTreeMap<String, Vec<ReaderResult>> = [
            (
                "pmem".to_string(),
                vec![
                    reader("worker direct", 9.0),
                    reader("sandbox-cgroup faults (memory /x)", 1.25),
                    reader("sandbox-cgroup faults-random (memory /x)", 7.0),
                ],
            ),
            (
                "disk".to_string(),
                vec![
                    reader("sandbox-cgroup faults (memory /x)", 3.0),
                    reader("sandbox-cgroup faults-random (memory /x)", 77.0),
                ],
            ),
        ]
        .into();
        std::fs::write(
            h.join(probe::PROBE_FILE),
            serde_json::to_vec(&probes).unwrap(),
        )
        .unwrap();
        let c = costs(&h, &cfg, "tmpfs", "pmem").unwrap();
        assert_eq!(c.slow_fault_us, 1.25);
        assert!(c.fault_source[1].contains("probed"), "{c:?}");
        let c = costs(&h, &cfg, "tmpfs", "disk").unwrap();
        assert_eq!(c.slow_fault_us, 77.0);
        assert!(!c.slow_byte_addressable);
        let _ = std::fs::remove_dir_all(&h);
    }

    #[test]
    fn pairs_that_make_no_split_are_refused_clearly() {
        let h = home("pairs");
        let mut cfg = TiersConfig::defaults(&h);
        for (fast, slow, needle) in [
            ("tmpfs", "nope", "unknown tier"),
            ("tmpfs", "tmpfs", "two different tiers"),
            ("disk", "hdd", "must be byte-addressable"),
            ("pmem", "tmpfs", "is DRAM"),
            ("tmpfs", "remote", "must be a local tier"),
        ] {
            let e = costs(&h, &cfg, fast, slow).unwrap_err();
            assert!(
                matches!(&e, TiersError::Config(why) if why.contains(needle)),
                "{fast}/{slow}: {e:?}"
            );
        }
        cfg.tiers
            .iter_mut()
            .find(|t| t.name == "pmem")
            .unwrap()
            .price_per_gb_month = 9.0;
        let e = costs(&h, &cfg, "tmpfs", "pmem").unwrap_err();
        assert!(
            matches!(&e, TiersError::Config(why) if why.contains("must be cheaper")),
            "{e:?}"
        );
        let _ = std::fs::remove_dir_all(&h);
    }
}
