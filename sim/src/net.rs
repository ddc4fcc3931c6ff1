//! The simulated network between nodes: each message is dropped,
//! delivered once or twice (duplicated), after a delay drawn per message
//! (so messages overtake each other) or in order per link. Links are
//! directed: a partition of any shape is a set of cut (from, to) pairs,
//! and a one-way cut is one of them. What is cut drops what is sent on it
//! and what reaches it; a heal restores every link.
//!
//! The network decides; the world schedules the deliveries.

use std::collections::{BTreeMap, BTreeSet};

use crate::rng::SimRng;
use crate::time::SimTime;

/// How the network treats messages, fixed for a run.
#[derive(Debug, Clone)]
pub struct NetConfig {
    pub delay_min_us: u64,
    pub delay_max_us: u64,
    /// Per million messages.
    pub drop_ppm: u32,
    pub duplicate_ppm: u32,
    /// Messages on one link may overtake each other; otherwise a link
    /// delivers in the order sent, as one TCP connection does.
    pub reorder: bool,
}

impl Default for NetConfig {
    fn default() -> Self {
        Self {
            delay_min_us: 200,
            delay_max_us: 2_000,
            drop_ppm: 0,
            duplicate_ppm: 0,
            reorder: false,
        }
    }
}

/// What became of one message sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fate {
    Cut,
    Dropped,
    /// Delivered at each of these times (two: duplicated).
    Deliver(Vec<SimTime>),
}

pub struct Network {
    pub cfg: NetConfig,
    cut: BTreeSet<(u64, u64)>,
    /// The latest delivery scheduled on each link, for in-order links.
    last_delivery: BTreeMap<(u64, u64), SimTime>,
}

impl Network {
    pub fn new(cfg: NetConfig) -> Self {
        Self {
            cfg,
            cut: BTreeSet::new(),
            last_delivery: BTreeMap::new(),
        }
    }

    pub fn is_cut(&self, from: u64, to: u64) -> bool {
        self.cut.contains(&(from, to))
    }

    /// Cuts `from -> to` (one way).
    pub fn cut(&mut self, from: u64, to: u64) {
        self.cut.insert((from, to));
    }

    pub fn heal(&mut self) {
        self.cut.clear();
    }

    /// The cut links, for the trace.
    pub fn cuts(&self) -> Vec<(u64, u64)> {
        self.cut.iter().copied().collect()
    }

    pub fn send(&mut self, rng: &mut SimRng, now: SimTime, from: u64, to: u64) -> Fate {
        if self.is_cut(from, to) {
            return Fate::Cut;
        }
        if rng.chance_ppm(self.cfg.drop_ppm) {
            return Fate::Dropped;
        }
        let copies = if rng.chance_ppm(self.cfg.duplicate_ppm) {
            2
        } else {
            1
        };
        let mut times = Vec::with_capacity(copies);
        for _ in 0..copies {
            let mut at = now.plus_us(rng.between(self.cfg.delay_min_us, self.cfg.delay_max_us));
            if !self.cfg.reorder {
                let last = self.last_delivery.entry((from, to)).or_default();
                at = at.max(*last);
                *last = at;
            }
            times.push(at);
        }
        Fate::Deliver(times)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_in_order_link_never_delivers_out_of_order() {
        let mut net = Network::new(NetConfig::default());
        let mut rng = SimRng::new(1);
        let mut last = SimTime(0);
        for i in 0..200 {
            let Fate::Deliver(times) = net.send(&mut rng, SimTime(i * 10), 1, 2) else {
                panic!("nothing drops by default");
            };
            assert!(times[0] >= last);
            last = times[0];
        }
    }

    #[test]
    fn a_one_way_cut_drops_one_direction_only_until_healed() {
        let mut net = Network::new(NetConfig {
            reorder: true,
            ..NetConfig::default()
        });
        let mut rng = SimRng::new(2);
        net.cut(1, 2);
        assert_eq!(net.send(&mut rng, SimTime(0), 1, 2), Fate::Cut);
        assert!(matches!(
            net.send(&mut rng, SimTime(0), 2, 1),
            Fate::Deliver(_)
        ));
        net.heal();
        assert!(matches!(
            net.send(&mut rng, SimTime(0), 1, 2),
            Fate::Deliver(_)
        ));
    }

    #[test]
    fn drops_and_duplicates_come_at_their_rates() {
        let mut net = Network::new(NetConfig {
            drop_ppm: 100_000,
            duplicate_ppm: 100_000,
            reorder: true,
            ..NetConfig::default()
        });
        let mut rng = SimRng::new(3);
        let (mut dropped, mut doubled) = (0, 0);
        for _ in 0..10_000 {
            match net.send(&mut rng, SimTime(0), 1, 2) {
                Fate::Dropped => dropped += 1,
                Fate::Deliver(t) if t.len() == 2 => doubled += 1,
                _ => {}
            }
        }
        assert!((800..1200).contains(&dropped), "{dropped}");
        assert!((700..1100).contains(&doubled), "{doubled}");
    }
}
