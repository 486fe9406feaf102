//! Placement's estimates recalibrated from a function's own cold starts.
//! Pure: the caller measures each cold start and keeps the window.
//!
//! The placement model ([`crate::placement`]) splits a cold start into a
//! fixed cost (sandbox, resume, the after-restore step: the same on every
//! tier), a memory part (the medium) and the warm execution. The fixed cost
//! measured once at deploy is the least certain part (first use of the
//! image, a sandbox built on the spot where the running daemon takes one
//! built ahead), so each measured cold start refits it: the fixed cost
//! becomes what the measured median leaves after the model's memory part
//! and the execution. The memory part stays the model's, so one tier's
//! restores recalibrate every tier's estimate.
use crate::placement::{memory_estimate, FunctionProfile, TierOption};
use std::collections::VecDeque;

/// Cold starts a window keeps: enough for a stable median, few enough to
/// follow a change (a snapshot moved, the machine loaded).
pub const WINDOW: usize = 16;

/// The most recent measured cold starts of one function on one tier.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Window {
    samples: VecDeque<f64>,
}

impl Window {
    /// Adds one measured cold start (ms); non-finite or negative ones are
    /// not measurements and are left out.
    pub fn push(&mut self, cold_ms: f64) {
        if !cold_ms.is_finite() || cold_ms < 0.0 {
            return;
        }
        if self.samples.len() == WINDOW {
            self.samples.pop_front();
        }
        self.samples.push_back(cold_ms);
    }

    pub fn len(&self) -> usize {
        self.samples.len()
    }

    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// The median of the window (None when empty).
    pub fn median(&self) -> Option<f64> {
        let mut v: Vec<f64> = self.samples.iter().copied().collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        Some(if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        })
    }
}

/// `f` with its fixed cost refitted so that the model's cold start on
/// `measured_on` equals `measured_ms`. The fixed cost cannot go below zero:
/// a function faster than the model's memory part and execution alone
/// keeps an estimate above what it measures, and says so in its ratio.
pub fn recalibrate(
    f: &FunctionProfile,
    measured_on: &TierOption,
    measured_ms: f64,
) -> FunctionProfile {
    let (_, memory_ms) = memory_estimate(f, measured_on);
    FunctionProfile {
        fixed_ms: (measured_ms - memory_ms - f.exec_ms).max(0.0),
        ..f.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::place;

    fn tier(name: &str, byte: bool, mbps: f64, us: f64) -> TierOption {
        TierOption {
            name: name.into(),
            byte_addressable: byte,
            remote: false,
            emulated: false,
            price_per_gb_month: 1.0,
            read_mbps: mbps,
            access_us: us,
            free_mib: 4096.0,
            max_concurrent_restores: 8,
        }
    }

    /// A hello world as a deploy measured it: a fixed cost four times what
    /// its restores take.
    fn hello() -> FunctionProfile {
        FunctionProfile {
            name: "hello".into(),
            image_mib: 6.0,
            ws_mib: 1.5,
            exec_ms: 0.2,
            fixed_ms: 17.3,
            cold_starts_per_hour: 60.0,
        }
    }

    #[test]
    fn recalibration_moves_the_estimate_to_the_measured_cold_start() {
        let tiers = [
            tier("tmpfs", true, 20000.0, 0.1),
            tier("disk", false, 1000.0, 61.0),
        ];
        let f = hello();
        let before = place(&f, &tiers, 1.3);
        let est = |p: &crate::placement::Placement, t: &str| {
            p.estimates.iter().find(|e| e.tier == t).unwrap().cold_ms
        };
        let measured = 4.4;
        assert!(est(&before, "tmpfs") > 3.0 * measured);
        let g = recalibrate(&f, &tiers[0], measured);
        let after = place(&g, &tiers, 1.3);
        // on the tier it was measured on: the measured figure
        assert!((est(&after, "tmpfs") - measured).abs() < 1e-9);
        // on the other tier: the same fixed cost, that tier's memory part
        let disk_memory = memory_estimate(&f, &tiers[1]).1;
        assert!((est(&after, "disk") - (g.fixed_ms + disk_memory + f.exec_ms)).abs() < 1e-9);
        assert!(est(&after, "disk") < est(&before, "disk"));
        // and a slower measurement moves it up again
        let h = recalibrate(&g, &tiers[0], 30.0);
        assert!(est(&place(&h, &tiers, 1.3), "tmpfs") > est(&after, "tmpfs"));
    }

    #[test]
    fn a_cold_start_faster_than_the_memory_part_leaves_no_negative_cost() {
        let disk = tier("disk", false, 1000.0, 61.0);
        let g = recalibrate(&hello(), &disk, 0.01);
        assert_eq!(g.fixed_ms, 0.0);
    }

    #[test]
    fn the_window_keeps_the_latest_and_takes_their_median() {
        let mut w = Window::default();
        assert_eq!(w.median(), None);
        for x in [f64::NAN, -1.0, f64::INFINITY] {
            w.push(x);
        }
        assert!(w.is_empty());
        w.push(100.0);
        for _ in 0..WINDOW {
            w.push(4.0);
        }
        // the early outlier has left the window
        assert_eq!(w.len(), WINDOW);
        assert_eq!(w.median(), Some(4.0));
        w.push(6.0);
        w.push(6.0);
        assert_eq!(w.median(), Some(4.0));
        let mut two = Window::default();
        two.push(1.0);
        two.push(2.0);
        assert_eq!(two.median(), Some(1.5));
    }
}
