//! Which faults a run may draw, and the faults themselves. A run draws
//! the network's behaviour and the clocks' drift once at its start, then a
//! fault at exponentially spaced times (a Poisson process), each of a kind
//! from the mix, uniformly.
//!
//! To add a fault: a [`Kind`] here (with its name), how it is drawn and
//! applied in `World::fault`, and a line in docs/simulation.md.

use std::fmt;

/// The kinds of fault, by the name `--faults` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// One process killed, or its machine's power lost (the disk loses
    /// what it never made durable); restarted after a while.
    Crash,
    /// Every machine loses power at once; each restarted.
    PowerLoss,
    /// Both directions between two groups of any shape cut.
    Partition,
    /// One direction of some links cut.
    OneWay,
    /// Every cut healed.
    Heal,
    /// One node's clock jumps (either way); every clock drifts from the
    /// start.
    Clock,
    /// One process stalls (a long GC, a VM pause): handles nothing, then
    /// everything queued at once.
    Pause,
    /// Leadership flaps: every cut healed and the leader cut off from
    /// every other node, both ways; then, a few times, after a while
    /// shorter than a TTL or two, the same for whoever leads then.
    Flap,
    /// The network drops a fraction of messages (drawn for the run).
    Drop,
    /// The network duplicates a fraction of messages.
    Duplicate,
    /// Messages on one link overtake each other.
    Reorder,
    /// Each disk flips a bit in some reads and fails some writes and
    /// syncs (rates drawn for the run).
    Disk,
}

pub const ALL: [Kind; 12] = [
    Kind::Crash,
    Kind::PowerLoss,
    Kind::Partition,
    Kind::OneWay,
    Kind::Heal,
    Kind::Clock,
    Kind::Pause,
    Kind::Flap,
    Kind::Drop,
    Kind::Duplicate,
    Kind::Reorder,
    Kind::Disk,
];

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Crash => "crash",
            Kind::PowerLoss => "power-loss",
            Kind::Partition => "partition",
            Kind::OneWay => "one-way",
            Kind::Heal => "heal",
            Kind::Clock => "clock",
            Kind::Pause => "pause",
            Kind::Flap => "flap",
            Kind::Drop => "drop",
            Kind::Duplicate => "duplicate",
            Kind::Reorder => "reorder",
            Kind::Disk => "disk",
        }
    }

    /// How often it is drawn among the mix's events, relative to the
    /// others: a power loss or a clock jump in every fault or two would
    /// leave little time for anything else to happen.
    pub fn weight(self) -> usize {
        match self {
            Kind::Crash | Kind::Heal => 3,
            Kind::Partition | Kind::OneWay => 2,
            Kind::PowerLoss | Kind::Clock | Kind::Pause | Kind::Flap => 1,
            Kind::Drop | Kind::Duplicate | Kind::Reorder | Kind::Disk => 0,
        }
    }

    /// Drawn as events during the run (the others shape the whole run).
    pub fn is_event(self) -> bool {
        !matches!(
            self,
            Kind::Drop | Kind::Duplicate | Kind::Reorder | Kind::Disk
        )
    }
}

/// The faults a run may draw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultMix {
    kinds: Vec<Kind>,
}

impl FaultMix {
    pub fn all() -> Self {
        Self {
            kinds: ALL.to_vec(),
        }
    }

    pub fn none() -> Self {
        Self { kinds: Vec::new() }
    }

    pub fn has(&self, kind: Kind) -> bool {
        self.kinds.contains(&kind)
    }

    /// The kinds drawn as events, in a fixed order.
    pub fn events(&self) -> Vec<Kind> {
        self.kinds
            .iter()
            .copied()
            .filter(|k| k.is_event())
            .collect()
    }

    /// The event kinds, each repeated by its weight: a uniform draw from
    /// this is a weighted draw of a kind.
    pub fn weighted_events(&self) -> Vec<Kind> {
        self.events()
            .into_iter()
            .flat_map(|k| std::iter::repeat_n(k, k.weight()))
            .collect()
    }

    /// `all`, `none`, or names separated by commas (`crash,partition`).
    pub fn parse(s: &str) -> Result<Self, String> {
        match s.trim() {
            "all" => return Ok(Self::all()),
            "none" | "" => return Ok(Self::none()),
            _ => {}
        }
        let mut kinds = Vec::new();
        for name in s.split(',').map(str::trim) {
            let kind = ALL
                .iter()
                .copied()
                .find(|k| k.name() == name)
                .ok_or_else(|| {
                    let names: Vec<_> = ALL.iter().map(|k| k.name()).collect();
                    format!("unknown fault {name:?}; the faults: {}", names.join(", "))
                })?;
            if !kinds.contains(&kind) {
                kinds.push(kind);
            }
        }
        kinds.sort();
        Ok(Self { kinds })
    }
}

impl fmt::Display for FaultMix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<_> = self.kinds.iter().map(|k| k.name()).collect();
        if names.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&names.join(","))
        }
    }
}

/// A partition of `n` nodes of any shape: each node on one side or the
/// other, neither side empty (a node alone is one shape of it). With what
/// is already cut, the cuts add up to more shapes still.
pub fn draw_sides(rng: &mut crate::rng::SimRng, n: usize) -> Vec<bool> {
    let mut side: Vec<bool> = (0..n).map(|_| rng.coin()).collect();
    if side.iter().all(|&s| s == side[0]) {
        let i = rng.below(n);
        side[i] = !side[i];
    }
    side
}

/// The one-way cuts a partition makes (nodes are numbered from 1): every
/// pair on different sides, both ways.
pub fn cuts_between(side: &[bool]) -> Vec<(u64, u64)> {
    let n = side.len();
    let mut cuts = Vec::new();
    for a in 0..n {
        for b in 0..n {
            if side[a] != side[b] {
                cuts.push((a as u64 + 1, b as u64 + 1));
            }
        }
    }
    cuts
}

/// A disk's fault rates for a run with disk faults: rare flipped reads,
/// failed writes and syncs anywhere, and flips in the tail of a whole-file
/// read up to one in ten (what a storage opening its journal meets after
/// a crash: the last sector written read back damaged).
pub fn draw_disk_faults(rng: &mut crate::rng::SimRng) -> warden_server::raft::files::Faults {
    warden_server::raft::files::Faults {
        read_flip_per_million: rng.between(0, 200) as u32,
        write_fail_per_million: rng.between(0, 200) as u32,
        sync_fail_per_million: rng.between(0, 200) as u32,
        tail_flip_per_million: rng.between(0, 100_000) as u32,
    }
}

/// How many leaders in a row a flap cuts off, and the wait before the
/// next (milliseconds).
pub const FLAP_LEADERS: (u64, u64) = (2, 4);
pub const FLAP_WAIT_MS: (u64, u64) = (300, 1_500);

/// The one-way cuts that cut `node` off from every other of `nodes`.
pub fn isolate(node: u64, nodes: &[u64]) -> Vec<(u64, u64)> {
    nodes
        .iter()
        .filter(|&&n| n != node)
        .flat_map(|&n| [(node, n), (n, node)])
        .collect()
}

/// The two sides of a partition, by node name, for the trace.
pub fn side_names(side: &[bool]) -> (Vec<String>, Vec<String>) {
    let mut a = Vec::new();
    let mut b = Vec::new();
    for (i, s) in side.iter().enumerate() {
        let name = format!("n{}", i + 1);
        if *s {
            a.push(name);
        } else {
            b.push(name);
        }
    }
    (a, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mix_parses_from_names_and_says_what_is_unknown() {
        let mix = FaultMix::parse("partition,crash,drop").expect("known names");
        assert_eq!(mix.events(), [Kind::Crash, Kind::Partition]);
        assert!(mix.has(Kind::Drop));
        assert_eq!(mix.to_string(), "crash,partition,drop");
        assert!(FaultMix::parse("crash,fire").is_err());
        assert_eq!(FaultMix::parse("all").expect("all"), FaultMix::all());
    }
}
