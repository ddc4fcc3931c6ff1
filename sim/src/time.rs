//! Simulated time: microseconds since the run began. No OS clock is read
//! anywhere in the simulator; time moves only when the scheduler takes the
//! next event.

use std::fmt;

/// A point on the simulation's time line, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct SimTime(pub u64);

pub const US_PER_MS: u64 = 1_000;

impl SimTime {
    pub fn plus_us(self, us: u64) -> Self {
        Self(self.0.saturating_add(us))
    }

    pub fn plus_ms(self, ms: u64) -> Self {
        self.plus_us(ms * US_PER_MS)
    }

    /// Milliseconds with three decimals, unpadded (within a line).
    pub fn ms(self) -> String {
        format!("{}.{:03}ms", self.0 / US_PER_MS, self.0 % US_PER_MS)
    }
}

impl fmt::Display for SimTime {
    /// Milliseconds with three decimals, right-aligned, so that a trace's
    /// times line up.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:>6}.{:03}", self.0 / US_PER_MS, self.0 % US_PER_MS)
    }
}
