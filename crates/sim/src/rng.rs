//! A small seeded generator and the distributions the generators need.
//!
//! Own code rather than `rand` so that a seed gives the same trace whatever version
//! of a dependency is resolved: determinism is part of the simulator's contract.

/// xoshiro256** seeded through splitmix64.
#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
}

fn splitmix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Mixes a string into a seed (FNV-1a then splitmix), for per-name streams.
pub fn hash_str(seed: u64, s: &str) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ seed;
    for b in s.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    splitmix(&mut h)
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        let mut x = seed;
        Rng {
            s: [
                splitmix(&mut x),
                splitmix(&mut x),
                splitmix(&mut x),
                splitmix(&mut x),
            ],
        }
    }

    pub fn next_u64(&mut self) -> u64 {
        let r = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        r
    }

    /// Uniform in [0, 1).
    pub fn f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in (0, 1]: safe under `ln`.
    pub fn open01(&mut self) -> f64 {
        1.0 - self.f64()
    }

    pub fn normal(&mut self) -> f64 {
        // Box-Muller; the second value is dropped to keep the stream simple.
        let (u, v) = (self.open01(), self.f64());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }

    pub fn exp(&mut self) -> f64 {
        -self.open01().ln()
    }

    pub fn lognormal(&mut self, mu: f64, sigma: f64) -> f64 {
        (mu + sigma * self.normal()).exp()
    }

    /// Gamma(shape, 1) by Marsaglia-Tsang (with the shape < 1 boost).
    pub fn gamma(&mut self, shape: f64) -> f64 {
        if shape < 1.0 {
            let u = self.open01();
            return self.gamma(shape + 1.0) * u.powf(1.0 / shape);
        }
        let d = shape - 1.0 / 3.0;
        let c = 1.0 / (9.0 * d).sqrt();
        loop {
            let x = self.normal();
            let v = (1.0 + c * x).powi(3);
            if v <= 0.0 {
                continue;
            }
            let u = self.open01();
            if u.ln() < 0.5 * x * x + d - d * v + d * v.ln() {
                return d * v;
            }
        }
    }

    /// Burr XII(c, k, lambda) by inversion.
    pub fn burr(&mut self, c: f64, k: f64, lambda: f64) -> f64 {
        let u = self.open01();
        lambda * (u.powf(-1.0 / k) - 1.0).powf(1.0 / c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream_and_sane_moments() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        let n = 200_000;
        let mut r = Rng::new(1);
        let mean = |f: &mut dyn FnMut() -> f64| (0..n).map(|_| f()).sum::<f64>() / n as f64;
        assert!((mean(&mut || r.f64()) - 0.5).abs() < 0.01);
        let mut r = Rng::new(2);
        assert!((mean(&mut || r.exp()) - 1.0).abs() < 0.02);
        let mut r = Rng::new(3);
        assert!((mean(&mut || r.gamma(0.25)) - 0.25).abs() < 0.01);
        let mut r = Rng::new(4);
        assert!((mean(&mut || r.gamma(3.0)) - 3.0).abs() < 0.05);
        let mut r = Rng::new(5);
        assert!(mean(&mut || r.normal()).abs() < 0.01);
    }
}
