//! A deterministic simulator of a Warden cluster (issue 28).
//!
//! Everything runs in one thread, on simulated time, from one seed: a
//! discrete-event [`scheduler`] takes the next event, a [`world`] hands it
//! to its subject, and every decision (a message's delay or loss, a fault,
//! a node's election jitter) is drawn from one seeded [`rng`]. The same
//! seed gives the same history, byte for byte ([`trace`]), so any failure
//! replays from its seed.
//!
//! Two subjects ([`Subject`]). The first is raft as the server runs it: 3 to 5 real
//! `RaftNode`s over the real `DiskStorage` ([`member`], [`disk`]), a
//! network that delays, reorders, drops, duplicates and partitions
//! ([`net`]), per-node clocks that drift and jump ([`clock`]), crashes and
//! restarts ([`faults`]), and model clients ([`client`]). The safety
//! [`invariants`] are checked after every event; the first violation stops
//! the run with the seed and the trace. The second is the whole server's
//! core ([`cores`]): real `Core`s, each opened on its simulated disk,
//! clock and network exactly as the server's driver opens it, with
//! register clients on the native door whose histories the jepsen
//! suite's linearizability checker reads. docs/simulation.md says what is
//! simulated and what is not yet.
//!
//! Nothing here may read the OS's clock or entropy, or iterate a std
//! `HashMap` (ordered maps and vectors only).

pub mod client;
pub mod clock;
pub mod cores;
pub mod disk;
pub mod faults;
pub mod invariants;
pub mod member;
pub mod net;
pub mod proof;
pub mod rng;
pub mod scheduler;
pub mod time;
pub mod trace;
pub mod world;

pub use faults::FaultMix;
pub use world::{BadModes, Outcome, SimConfig, Stats, Subject};

/// Runs one seed of `cfg`'s subject to its end or its first violation.
pub fn run(seed: u64, cfg: &SimConfig) -> Outcome {
    match cfg.subject {
        Subject::Raft => world::run(seed, cfg),
        Subject::Cores => cores::run(seed, cfg),
    }
}
