//! A node's own clock: simulated time seen through a drift (parts per
//! million faster or slower) and jumps. What a node schedules by its clock
//! (raft's tick) is converted back to simulated time here, so a node whose
//! clock runs fast ticks more often, and one whose clock jumps ahead ticks
//! at once.
//!
//! Local time is signed and in microseconds; it starts at 0 with the run.

use crate::time::SimTime;

const PPM: i128 = 1_000_000;

#[derive(Debug, Clone)]
pub struct NodeClock {
    /// Simulated time and local time at the last change (start, jump).
    anchor_sim: u64,
    anchor_local: i64,
    /// Local microseconds per million simulated ones, minus a million.
    drift_ppm: i64,
}

impl NodeClock {
    /// `drift_ppm` above -1,000,000 (the clock moves forward).
    pub fn new(drift_ppm: i64) -> Self {
        assert!(
            drift_ppm > -1_000_000,
            "a clock that stands still or runs back"
        );
        Self {
            anchor_sim: 0,
            anchor_local: 0,
            drift_ppm,
        }
    }

    pub fn drift_ppm(&self) -> i64 {
        self.drift_ppm
    }

    /// The local time at simulated time `at`.
    pub fn local(&self, at: SimTime) -> i64 {
        let elapsed = i128::from(at.0.saturating_sub(self.anchor_sim));
        let local = elapsed * (PPM + i128::from(self.drift_ppm)) / PPM;
        self.anchor_local + local as i64
    }

    /// The first simulated time at or after `now` when the local clock
    /// reads at least `local`.
    pub fn sim_at(&self, now: SimTime, local: i64) -> SimTime {
        if self.local(now) >= local {
            return now;
        }
        let ahead = i128::from(local - self.anchor_local);
        let rate = PPM + i128::from(self.drift_ppm);
        // Rounded up: at the returned time the clock has reached `local`.
        let sim = (ahead * PPM + rate - 1) / rate;
        SimTime(self.anchor_sim + sim as u64).max(now)
    }

    /// The clock jumps by `by_us` (either way) at `now`.
    pub fn jump(&mut self, now: SimTime, by_us: i64) {
        self.anchor_local = self.local(now) + by_us;
        self.anchor_sim = now.0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fast_clock_reaches_a_local_time_sooner() {
        let fast = NodeClock::new(100_000); // 10% fast
        assert_eq!(fast.local(SimTime(1_000_000)), 1_100_000);
        let at = fast.sim_at(SimTime(0), 1_100_000);
        assert_eq!(at, SimTime(1_000_000));
        assert!(fast.local(at) >= 1_100_000);
        let slow = NodeClock::new(-500_000);
        assert_eq!(slow.sim_at(SimTime(0), 1_000), SimTime(2_000));
    }

    #[test]
    fn a_jump_moves_local_time_and_what_waits_on_it() {
        let mut c = NodeClock::new(0);
        c.jump(SimTime(1_000), 5_000);
        assert_eq!(c.local(SimTime(1_000)), 6_000);
        assert_eq!(c.sim_at(SimTime(1_000), 4_000), SimTime(1_000));
        c.jump(SimTime(2_000), -10_000);
        assert_eq!(c.local(SimTime(2_000)), -3_000);
        assert_eq!(c.sim_at(SimTime(2_000), 0), SimTime(5_000));
    }
}
