//! CPU weight in cgroup v2 units, and cgroup v1 CPU shares (what an OCI
//! spec and this host's cpu controller take) converted to and from it.
/// cgroup v2's `cpu.weight` range (its default is 100).
pub const CPU_WEIGHT_MIN: u64 = 1;
pub const CPU_WEIGHT_MAX: u64 = 10_000;
/// cgroup v1's `cpu.shares` range, as the OCI spec and runc take it.
const SHARES_MIN: u64 = 2;
const SHARES_MAX: u64 = 262_144;

/// The cgroup v2 `cpu.weight` of cgroup v1 `cpu.shares` (an OCI spec's
/// `linux.resources.cpu.shares`, the kubelet's CPU request), as runc and
/// containerd convert it: `1 + ((shares - 2) * 9999) / 262142`, with
/// shares clamped to 2..=262144 first.
pub fn cpu_weight_of_shares(shares: u64) -> u64 {
    let s = shares.clamp(SHARES_MIN, SHARES_MAX);
    1 + ((s - SHARES_MIN) * (CPU_WEIGHT_MAX - 1)) / (SHARES_MAX - SHARES_MIN)
}

/// The cgroup v1 `cpu.shares` a sandbox with `cpu.weight` `weight` gets
/// (this host's cpu controller is v1): the inverse of
/// [`cpu_weight_of_shares`], rounded up so that converting back gives
/// `weight` again.
pub fn shares_of_cpu_weight(weight: u64) -> u64 {
    let w = weight.clamp(CPU_WEIGHT_MIN, CPU_WEIGHT_MAX);
    SHARES_MIN + ((w - 1) * (SHARES_MAX - SHARES_MIN)).div_ceil(CPU_WEIGHT_MAX - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_and_weights_convert_as_runc_does_and_back() {
        // runc's figures: the kubelet's 2 shares (no request), 1024 (one
        // CPU), 262144 (the most)
        assert_eq!(cpu_weight_of_shares(2), 1);
        assert_eq!(cpu_weight_of_shares(1024), 39);
        assert_eq!(cpu_weight_of_shares(512), 20);
        assert_eq!(cpu_weight_of_shares(262_144), 10_000);
        // out of range: clamped
        assert_eq!(cpu_weight_of_shares(0), 1);
        assert_eq!(cpu_weight_of_shares(1 << 30), 10_000);
        for w in CPU_WEIGHT_MIN..=CPU_WEIGHT_MAX {
            let s = shares_of_cpu_weight(w);
            assert!((SHARES_MIN..=SHARES_MAX).contains(&s), "{w}: {s}");
            assert_eq!(cpu_weight_of_shares(s), w, "{w} -> {s} shares");
        }
    }
}
