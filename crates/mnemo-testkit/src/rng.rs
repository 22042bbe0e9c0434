//! [`SimRng`]: the one seeded generator of the testkit.
//!
//! Every random choice of a run (workload data, sampled crash cuts, network faults) comes
//! from a `SimRng` derived from the run's seed, so a seed printed with a failure replays the
//! run exactly. XorShift128 is not cryptographic; it is small, fast and its output sequence
//! is fixed by its definition, so a seed means the same thing in every version.

use rand_core::{Rng, SeedableRng};
use rand_xorshift::XorShiftRng;

/// A deterministic pseudo-random generator seeded from a `u64`.
#[derive(Debug, Clone)]
pub struct SimRng {
    inner: XorShiftRng,
}

impl SimRng {
    /// A generator whose whole output is determined by `seed`.
    pub fn new(seed: u64) -> SimRng {
        SimRng {
            inner: XorShiftRng::seed_from_u64(seed),
        }
    }

    /// A generator for sub-stream `stream` of `seed` (e.g. one per crash point), independent
    /// of how many numbers other streams drew.
    pub fn derive(seed: u64, stream: u64) -> SimRng {
        SimRng::new(mix64(
            seed ^ mix64(stream.wrapping_add(0x9e37_79b9_7f4a_7c15)),
        ))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.inner.next_u64()
    }

    /// A number in `0..n` (0 when `n` is 0). Multiply-shift: no modulo bias worth noting for
    /// test sampling.
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// A number in `low..=high` (`low` when `high < low`).
    pub fn range(&mut self, low: u64, high: u64) -> u64 {
        if high <= low {
            return low;
        }
        low + self.below(high - low + 1)
    }

    /// True with probability `p` (clamped to 0..=1).
    pub fn chance(&mut self, p: f64) -> bool {
        if p <= 0.0 {
            return false;
        }
        if p >= 1.0 {
            return true;
        }
        // 53 random bits give a uniform float in [0, 1).
        let unit = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        unit < p
    }

    /// Fill `out` with random bytes.
    pub fn fill(&mut self, out: &mut [u8]) {
        self.inner.fill_bytes(out);
    }
}

/// A 64-bit finalizer (SplitMix64's): spreads every input bit over the output. Used for
/// seeds and for the image hash.
pub fn mix64(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream() {
        let mut a = SimRng::new(42);
        let mut b = SimRng::new(42);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        assert_ne!(SimRng::new(1).next_u64(), SimRng::new(2).next_u64());
    }

    #[test]
    fn bounds_hold() {
        let mut r = SimRng::new(7);
        for _ in 0..1000 {
            assert!(r.below(10) < 10);
            let x = r.range(5, 9);
            assert!((5..=9).contains(&x));
        }
        assert_eq!(r.below(0), 0);
        assert!(!r.chance(0.0));
        assert!(r.chance(1.0));
    }
}
