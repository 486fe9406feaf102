//! Start-latency histogram: exact below 2048 us, then 1024 sub-buckets per power
//! of two (relative width < 0.1%). Each bucket keeps the sum of its values, so a
//! percentile is reported as the mean of its bucket: exact whenever the bucket
//! holds one distinct value (warm 0, a fixed cold start), within 0.1% otherwise.
//! Memory is fixed (< 1 MiB) whatever the trace length.

#[derive(Clone, Debug, Default)]
pub struct Histogram {
    count: Vec<u64>,
    sum: Vec<u64>,
    n: u64,
}

// v < 2048 here and v >> e < 2048 below
#[allow(clippy::cast_possible_truncation)]
fn index(v: u64) -> usize {
    if v < 2048 {
        return v as usize;
    }
    let e = 64 - v.leading_zeros() as usize - 11;
    let m = (v >> e) as usize;
    2048 + (e - 1) * 1024 + (m - 1024)
}

impl Histogram {
    pub fn record(&mut self, v: u64) {
        let i = index(v);
        if i >= self.count.len() {
            self.count.resize(i + 1, 0);
            self.sum.resize(i + 1, 0);
        }
        self.count[i] += 1;
        self.sum[i] = self.sum[i].saturating_add(v);
        self.n += 1;
    }

    pub fn len(&self) -> u64 {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    fn buckets(&self) -> impl Iterator<Item = (f64, u64)> + '_ {
        self.count
            .iter()
            .zip(&self.sum)
            .filter(|(c, _)| **c > 0)
            .map(|(c, s)| (*s as f64 / *c as f64, *c))
    }

    /// The value at quantile `q` (0..=1), in the recorded unit; 0 when empty.
    // float casts saturate (NaN, negatives to 0): the clamp wanted
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    pub fn quantile(&self, q: f64) -> f64 {
        if self.n == 0 {
            return 0.0;
        }
        let rank = ((q * self.n as f64).ceil() as u64).clamp(1, self.n);
        let mut cum = 0;
        for (v, c) in self.buckets() {
            cum += c;
            if cum >= rank {
                return v;
            }
        }
        0.0
    }

    pub fn max(&self) -> f64 {
        self.buckets().last().map_or(0.0, |b| b.0)
    }

    /// (value, fraction <= value) points, at most about `max_points` of them.
    pub fn cdf(&self, max_points: usize) -> Vec<(f64, f64)> {
        let nb = self.buckets().count().max(1);
        let step = nb.div_ceil(max_points.max(1));
        let mut out = Vec::new();
        let mut cum = 0;
        for (i, (v, c)) in self.buckets().enumerate() {
            cum += c;
            if i % step == step - 1 || i == nb - 1 {
                out.push((v, cum as f64 / self.n as f64));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_for_single_values_and_close_otherwise() {
        let mut h = Histogram::default();
        for _ in 0..50 {
            h.record(0);
        }
        for _ in 0..49 {
            h.record(250_000);
        }
        h.record(1_234_567);
        assert_eq!(h.quantile(0.5), 0.0);
        assert_eq!(h.quantile(0.51), 250_000.0);
        assert_eq!(h.quantile(0.99), 250_000.0);
        assert_eq!(h.quantile(1.0), 1_234_567.0);
        let mut g = Histogram::default();
        for v in (1..100_000u64).map(|i| i * 37) {
            g.record(v);
        }
        let p50 = g.quantile(0.5);
        assert!((p50 - 50_000.0 * 37.0).abs() / p50 < 0.001, "{p50}");
        let cdf = g.cdf(100);
        assert!(cdf.len() <= 101);
        assert_eq!(cdf.last().map(|p| p.1), Some(1.0));
        assert!(cdf.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1));
    }

    #[test]
    fn index_is_monotonic() {
        let mut last = 0;
        for v in (2..40).flat_map(|e| [1u64 << e, (1u64 << e) + 1, (3u64 << e) / 2]) {
            let i = index(v);
            assert!(i >= last);
            last = i;
        }
    }
}
