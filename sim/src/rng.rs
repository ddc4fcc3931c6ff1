//! The simulation's only source of randomness: one ChaCha8 stream from the
//! run's seed. Every decision (a message's delay, which fault, when) is
//! drawn from it in the order the events happen, which is what makes a
//! seed replay byte for byte. Nothing here may read the OS's entropy.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

pub struct SimRng(ChaCha8Rng);

impl SimRng {
    pub fn new(seed: u64) -> Self {
        Self(ChaCha8Rng::seed_from_u64(seed))
    }

    /// A seed for something that draws on its own (a node's election
    /// jitter), so that its draws do not shift the run's stream.
    pub fn fork(&mut self) -> u64 {
        self.0.random()
    }

    /// Uniform in `[lo, hi]`.
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        self.0.random_range(lo..=hi)
    }

    /// An index below `n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        self.0.random_range(0..n)
    }

    /// True with probability `ppm` per million.
    pub fn chance_ppm(&mut self, ppm: u32) -> bool {
        ppm > 0 && self.0.random_range(0..1_000_000) < ppm
    }

    /// True with probability 1/2.
    pub fn coin(&mut self) -> bool {
        self.0.random()
    }

    /// An exponentially distributed wait with the given mean, as a Poisson
    /// process of faults would have; at least 1.
    pub fn exponential(&mut self, mean: u64) -> u64 {
        let u: f64 = self.0.random_range(f64::EPSILON..1.0);
        ((-u.ln()) * mean as f64).max(1.0) as u64
    }

    /// A signed value uniform in `[-max, max]`.
    pub fn signed(&mut self, max: i64) -> i64 {
        self.0.random_range(-max..=max)
    }
}
