//! Order statistics over repeated runs.

/// min / median / p99 / mean of a sample.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Summary {
    pub n: usize,
    pub min: f64,
    pub median: f64,
    pub p99: f64,
    pub mean: f64,
}

/// Summarises `xs` (nearest-rank percentiles); None when empty.
// float casts saturate (NaN, negatives to 0): the clamp wanted
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
pub fn summarize(xs: &[f64]) -> Option<Summary> {
    if xs.is_empty() {
        return None;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = |p: f64| v[((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    Some(Summary {
        n: v.len(),
        min: v[0],
        median: if v.len() % 2 == 1 {
            v[v.len() / 2]
        } else {
            (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
        },
        p99: rank(0.99),
        mean: v.iter().sum::<f64>() / v.len() as f64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_statistics() {
        assert!(summarize(&[]).is_none());
        let s = summarize(&[3.0, 1.0, 2.0, 10.0]).unwrap();
        assert_eq!((s.min, s.median, s.p99, s.mean), (1.0, 2.5, 10.0, 4.0));
        let xs: Vec<f64> = (1..=100).map(f64::from).collect();
        let s = summarize(&xs).unwrap();
        assert_eq!((s.median, s.p99), (50.5, 99.0));
    }
}
