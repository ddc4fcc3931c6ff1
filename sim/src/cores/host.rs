//! One simulated server running the real core ([`warden_server::core::Core`]):
//! its disk, its clocks, its network as the core sees it ([`SimNet`]), and
//! the process itself, which a crash drops and a restart opens again over
//! the same disk.
//!
//! The core is given everything it would take from the world: a
//! [`ManualClock`] the host moves to the host's local time before every
//! call, a seed, the simulated disk's files, and a [`SimNet`] whose frames
//! the world takes after every turn and carries over the simulated
//! network. It is configured by the server's own flags
//! ([`warden_server::config::ServeArgs`]), so it runs with the server's
//! defaults but for what a run sets.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser;
use warden_server::clock::ManualClock;
use warden_server::config::{Config, ServeArgs};
use warden_server::core::{Core, CoreError, CoreInputs, Net};
use warden_server::opmetrics::OpMetrics;
use warden_server::proto::PeerFrame;
use warden_server::raft::snapstream::Descriptor;
use warden_server::raft::transport::SnapshotSent;

use crate::clock::NodeClock;
use crate::disk::SimDisk;
use crate::time::SimTime;

/// Where every simulated server keeps its data (its own disk).
const DATA_DIR: &str = "/data";
/// Wall time at the start of every run: 2026-01-01T00:00:00Z.
const WALL_START_MS: i64 = 1_767_225_600_000;

/// The frames a core queued for its peers, taken by the world after each
/// turn. Shared between the host and the [`SimNet`] the core holds.
#[derive(Debug, Clone, Default)]
pub struct Outbox(Arc<Mutex<Vec<(u64, PeerFrame)>>>);

impl Outbox {
    pub fn take(&self) -> Vec<(u64, PeerFrame)> {
        std::mem::take(&mut *self.0.lock().expect("one thread"))
    }
}

/// The core's network in a simulation: frames queue in the [`Outbox`]
/// for the world to carry. Its queues are unbounded (the server's links
/// drop what does not fit: not simulated yet), and snapshots travel
/// inline in raft's messages (the hosts run with `--inline-snapshots`),
/// not streamed on connections of their own.
#[derive(Debug)]
pub struct SimNet {
    me: u64,
    peers: BTreeMap<u64, String>,
    out: Outbox,
}

impl Net for SimNet {
    fn add_peer(&mut self, id: u64, addr: &str) {
        if id != self.me {
            self.peers.insert(id, addr.to_string());
        }
    }

    fn remove_peer(&mut self, id: u64) {
        self.peers.remove(&id);
    }

    fn peer_ids(&self) -> Vec<u64> {
        self.peers.keys().copied().collect()
    }

    fn addr_of(&self, id: u64) -> Option<&str> {
        self.peers.get(&id).map(String::as_str)
    }

    fn try_send(&self, to: u64, frame: PeerFrame) -> Result<(), PeerFrame> {
        if !self.peers.contains_key(&to) {
            return Err(frame);
        }
        self.out.0.lock().expect("one thread").push((to, frame));
        Ok(())
    }

    fn flush(&self) {}

    fn send_snapshot(
        &mut self,
        _to: u64,
        _index: u64,
        _msg: Vec<u8>,
        _path: &Path,
        _descriptor: Descriptor,
    ) -> Result<(), String> {
        Err("streamed snapshots are not simulated (the hosts run with --inline-snapshots)".into())
    }

    fn snapshot_results(&mut self) -> Vec<SnapshotSent> {
        Vec::new()
    }

    fn shutdown(&self) {}
}

/// The address a simulated member is known by (a name only: nothing
/// dials it).
pub fn addr_of(id: u64) -> String {
    format!("10.0.0.{id}:7100")
}

/// The server's flags as a run sets them.
#[derive(Debug, Clone)]
pub struct HostFlags {
    pub tick_ms: u64,
    pub election_ticks: usize,
    pub heartbeat_ticks: usize,
    /// Further flags as given on the command line (`--unsafe-...`).
    pub extra: Vec<String>,
}

#[derive(Parser)]
struct Flags {
    #[command(flatten)]
    serve: ServeArgs,
}

/// The server's configuration for member `id` of `voters`, from the
/// server's own flags.
pub fn config(id: u64, voters: &[u64], flags: &HostFlags) -> Result<Config, String> {
    let peers: Vec<String> = voters
        .iter()
        .map(|v| format!("{v}={}", addr_of(*v)))
        .collect();
    let mut args = vec![
        "warden".to_string(),
        format!("--id={id}"),
        format!("--data-dir={DATA_DIR}"),
        format!("--peers={}", peers.join(",")),
        format!("--peer-listen={}", addr_of(id)),
        format!("--tick-ms={}", flags.tick_ms),
        format!("--election-ticks={}", flags.election_ticks),
        format!("--heartbeat-ticks={}", flags.heartbeat_ticks),
        "--inline-snapshots".into(),
    ];
    args.extend(flags.extra.iter().cloned());
    let parsed = Flags::try_parse_from(&args).map_err(|e| format!("flags {args:?}: {e}"))?;
    parsed
        .serve
        .validate()
        .map_err(|e| format!("flags {args:?}: {e}"))
}

pub struct Host {
    pub id: u64,
    pub disk: SimDisk,
    /// The host's clock: drift, and jumps of its wall time.
    pub clock: NodeClock,
    /// Its monotonic clock: the same drift, never a jump (what the core
    /// keeps deadlines by, and its ticks come by).
    pub mono: NodeClock,
    /// What the core reads; moved to the host's local times before every
    /// call into the core.
    manual: ManualClock,
    /// The monotonic local time `manual` was last moved to (µs).
    manual_at: i64,
    /// The running process; `None` while crashed.
    pub core: Option<Core>,
    pub out: Outbox,
    /// Bumped by every crash and restart: events meant for an earlier
    /// process are ignored.
    pub incarnation: u64,
    /// The monotonic local time of the next tick, and the generation of
    /// the tick event that waits for it.
    pub next_tick_local: i64,
    pub tick_gen: u64,
    /// A turn is scheduled (calls in between batch into it).
    pub turn_pending: bool,
    /// A stalled process handles nothing before this.
    pub paused_until: SimTime,
    pub failed_starts: u32,
    /// What this process last applied (to see it change).
    pub applied: u64,
}

impl Host {
    pub fn new(id: u64, disk: SimDisk, drift_ppm: i64) -> Self {
        Self {
            id,
            disk,
            clock: NodeClock::new(drift_ppm),
            mono: NodeClock::new(drift_ppm),
            manual: ManualClock::new(WALL_START_MS),
            manual_at: 0,
            core: None,
            out: Outbox::default(),
            incarnation: 0,
            next_tick_local: 0,
            tick_gen: 0,
            turn_pending: false,
            paused_until: SimTime::default(),
            failed_starts: 0,
            applied: 0,
        }
    }

    pub fn is_up(&self) -> bool {
        self.core.is_some()
    }

    /// Moves what the core reads to this host's local times at `now`.
    pub fn set_clock(&mut self, now: SimTime) {
        let mono = self.mono.local(now);
        if mono > self.manual_at {
            let by = u64::try_from(mono - self.manual_at).unwrap_or(0);
            self.manual.advance(Duration::from_micros(by));
            self.manual_at = mono;
        }
        self.manual
            .set_wall_ms(WALL_START_MS + self.clock.local(now).div_euclid(1_000));
    }

    /// Starts the process over the disk: the real core, its rng from
    /// `seed`.
    pub fn start(&mut self, cfg: Config, seed: u64, now: SimTime) -> Result<(), CoreError> {
        self.set_clock(now);
        self.out = Outbox::default();
        let net = SimNet {
            me: self.id,
            peers: BTreeMap::new(),
            out: self.out.clone(),
        };
        let inputs = CoreInputs::seeded(Box::new(self.manual.clone()), seed, self.disk.files());
        let client_addr: SocketAddr = format!("10.0.0.{}:7000", self.id)
            .parse()
            .expect("a literal address");
        let core = Core::open(cfg, client_addr, Box::new(net), OpMetrics::new(), inputs)?;
        self.incarnation += 1;
        self.applied = core.applied_index();
        self.core = Some(core);
        self.turn_pending = false;
        Ok(())
    }

    /// The process dies (its memory is gone); with `power_loss` the disk
    /// loses what was not synced. What the disk kept, for the trace.
    pub fn crash(&mut self, power_loss: bool) -> Option<String> {
        self.core = None;
        self.incarnation += 1;
        self.turn_pending = false;
        self.out.take();
        self.disk.crash(power_loss)
    }
}
