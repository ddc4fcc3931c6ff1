//! The whole server's core under simulation: 3 to 5 real
//! [`warden_server::core::Core`]s — sessions, the tree, proposals and
//! their duplicate checks, ReadIndex reads, the leader's duties, the
//! storage and recovery code — on simulated time, network and disks, with
//! register clients on the native door (`clients`), from one seed.
//!
//! Each core is driven the way the server's driver
//! (`warden_server::core::driver`) drives it: a message, a peer's frame
//! or a tick is handed in, and the turn ends ([`Core::end_turn`]: the
//! Ready loop, snapshots, the frames queued for peers leave) at once or a
//! drawn moment later, so that several calls batch into one turn as they
//! do under load. The invariants are checked after every turn (one
//! leader per term; every replica's state equal at an equal applied
//! index), and the clients' histories by the jepsen suite's
//! linearizability checker at the end.
//!
//! [`Core::end_turn`]: warden_server::core::Core::end_turn

mod checks;
mod clients;
mod faults;
mod host;
mod links;
mod queue;
mod registers;

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};

use raft::StateRole;
use warden_protocol::pb;
use warden_server::core::CoreMsg;
use warden_server::proto::{peer_frame, PeerFrame};
use warden_server::raft::files::Faults;
use warden_server::raft::transport::PeerEvent;
use warden_server::watch::ConnId;

use crate::faults::Kind;
use crate::invariants::{self, Invariants, Violation};
use crate::net::{Fate, NetConfig, Network};
use crate::rng::SimRng;
use crate::scheduler::Scheduler;
use crate::time::{SimTime, US_PER_MS};
use crate::trace::Trace;
use crate::world::{Outcome, SimConfig, Stats};
use checks::STATE_CHECK_EVERY;
use clients::RegClient;
use host::{Host, HostFlags};
use queue::QueueClient;

/// Replicas that applied the same index hold different states.
pub const REPLICAS_EQUAL: &str = "every replica's state equal at an equal applied index";
/// The clients' reads and writes of a register have no linearization.
pub const LINEARIZABLE: &str = "the registers are linearizable";
/// A TTL node long expired, in a calm cluster, still there.
pub const TTL_REMOVED: &str = "every expired TTL node removed";
/// A pipelined create applied twice, or an acknowledged one lost.
pub const EXACTLY_ONCE: &str =
    "every acknowledged write applied exactly once, any other at most once";

/// The share of a run, at its end, without new faults (at most
/// [`CALM_MAX_MS`]): every link healed, every server started, so what
/// must happen eventually (a TTL node's removal) has happened by the end.
const CALM_SHARE_PCT: u64 = 40;
const CALM_MAX_MS: u64 = 5_000;

enum Event {
    Tick {
        node: u64,
        gen: u64,
    },
    Turn {
        node: u64,
        incarnation: u64,
    },
    Deliver {
        to: u64,
        frame: Box<PeerFrame>,
    },
    LinkClosed {
        node: u64,
        peer: u64,
    },
    Restart {
        node: u64,
    },
    Fault,
    /// A flap's next leader is cut off (see `World::flap`).
    Flap {
        left: u64,
    },
    /// A client starts its next operation (or session) if it is idle.
    ClientSend {
        client: u64,
    },
    ToHost {
        node: u64,
        incarnation: u64,
        msg: Box<CoreMsg>,
    },
    ToClient {
        client: u64,
        conn: ConnId,
        frame: Box<pb::ServerFrame>,
    },
    /// The server closed the connection, or its process went.
    ConnLost {
        client: u64,
        conn: ConnId,
    },
    ClientTimeout {
        client: u64,
        attempt: u64,
    },
    /// The pipelined writer sends what its window allows (or connects).
    QueueSend {
        q: usize,
    },
    QueueFrame {
        q: usize,
        conn: ConnId,
        frame: Box<pb::ServerFrame>,
    },
    QueueLost {
        q: usize,
        conn: ConnId,
    },
    QueueTimeout {
        q: usize,
        progress: u64,
    },
    /// The run's calm end begins (see [`World::calm`]).
    Calm,
}

impl Event {
    /// The node a stalled process must not handle this for yet.
    fn node(&self) -> Option<u64> {
        match self {
            Event::Tick { node, .. }
            | Event::Turn { node, .. }
            | Event::LinkClosed { node, .. }
            | Event::ToHost { node, .. } => Some(*node),
            Event::Deliver { to, .. } => Some(*to),
            _ => None,
        }
    }
}

struct World {
    cfg: SimConfig,
    flags: HostFlags,
    rng: SimRng,
    sched: Scheduler<Event>,
    net: Network,
    hosts: Vec<Host>,
    voters: Vec<u64>,
    clients: Vec<RegClient>,
    /// Pipelined writers on the ZooKeeper door.
    queues: Vec<QueueClient>,
    /// When the last message on each direction of each client connection
    /// arrives ((connection, to the server)): a connection delivers in
    /// order.
    links: BTreeMap<(ConnId, bool), SimTime>,
    trace: Trace,
    inv: Invariants,
    stats: Stats,
    /// Each host's role and term as last seen.
    roles: BTreeMap<u64, (StateRole, u64)>,
    /// A digest of the state some replica held at each applied index,
    /// and which replica.
    states: BTreeMap<u64, (u64, u64)>,
    /// When the calm end begins.
    calm_at: SimTime,
    calm: bool,
}

/// Runs one seed of the core subject to its end or its first violation.
pub fn run(seed: u64, cfg: &SimConfig) -> Outcome {
    let mut world = match World::new(seed, cfg.clone()) {
        Ok(w) => w,
        Err(e) => {
            let mut trace = Trace::default();
            trace.push(SimTime::default(), 0, format!("cannot start: {e}"));
            return Outcome {
                seed,
                trace,
                violation: Some(Violation {
                    invariant: "the simulation starts",
                    detail: e,
                }),
                stats: Stats::default(),
            };
        }
    };
    let violation = world.run().err();
    Outcome {
        seed,
        trace: world.trace,
        violation,
        stats: world.stats,
    }
}

fn panic_text(panic: Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic without a message".into())
}

/// A peer frame, for the trace.
fn describe(frame: &PeerFrame) -> String {
    match &frame.kind {
        Some(peer_frame::Kind::Raft(bytes)) => {
            match <raft::eraftpb::Message as protobuf::Message>::parse_from_bytes(bytes) {
                Ok(m) => crate::member::describe(&m),
                Err(_) => "raft (undecodable)".into(),
            }
        }
        Some(peer_frame::Kind::Touch(t)) => format!("touch {} sessions", t.session_ids.len()),
        Some(peer_frame::Kind::Status(_)) => "status".into(),
        Some(other) => format!("{other:?}").chars().take(40).collect(),
        None => "empty frame".into(),
    }
}

impl World {
    fn new(seed: u64, cfg: SimConfig) -> Result<Self, String> {
        if cfg.bad.vote_not_persisted {
            return Err("--vote-not-persisted is a storage switch of the raft subject only".into());
        }
        let mut rng = SimRng::new(seed);
        let nodes = match cfg.nodes {
            Some(n) => n,
            None => 3 + rng.below(3),
        };
        let mut trace = Trace::default();
        let mut net_cfg = NetConfig::default();
        if cfg.faults.has(Kind::Drop) {
            net_cfg.drop_ppm = rng.between(0, 50_000) as u32;
        }
        if cfg.faults.has(Kind::Duplicate) {
            net_cfg.duplicate_ppm = rng.between(0, 50_000) as u32;
        }
        if cfg.faults.has(Kind::Reorder) {
            net_cfg.reorder = rng.coin();
        }
        let mut extra = Vec::new();
        if cfg.bad.skip_fsync {
            extra.push("--unsafe-skip-fsync".to_string());
        }
        if cfg.bad.skip_read_index {
            extra.push("--unsafe-skip-read-index".to_string());
        }
        if cfg.bad.bounded_dedup {
            extra.push("--unsafe-bounded-dedup".to_string());
        }
        if cfg.bad.keep_removals {
            extra.push("--unsafe-keep-removals-across-roles".to_string());
        }
        let flags = HostFlags {
            tick_ms: cfg.tick_ms,
            election_ticks: cfg.election_ticks,
            heartbeat_ticks: cfg.heartbeat_ticks,
            extra,
        };
        trace.push(
            SimTime::default(),
            0,
            format!(
                "seed {seed}: {nodes} cores, faults {}, network delay {}-{}us drop {}ppm duplicate {}ppm reorder {}, bad {:?}",
                cfg.faults,
                net_cfg.delay_min_us,
                net_cfg.delay_max_us,
                net_cfg.drop_ppm,
                net_cfg.duplicate_ppm,
                net_cfg.reorder,
                cfg.bad
            ),
        );
        let calm_ms = (cfg.duration_ms * CALM_SHARE_PCT / 100).min(CALM_MAX_MS);
        let calm_at = SimTime((cfg.duration_ms - calm_ms) * US_PER_MS);
        let voters: Vec<u64> = (1..=nodes as u64).collect();
        // Checked once before the run: a flag the server refuses is the
        // run's mistake, not a node that cannot start.
        host::config(1, &voters, &flags)?;
        let mut hosts = Vec::with_capacity(nodes);
        for &id in &voters {
            let drift = if cfg.faults.has(Kind::Clock) {
                rng.signed(50_000)
            } else {
                0
            };
            let mut disk = crate::disk::SimDisk::new(rng.fork());
            if cfg.faults.has(Kind::Disk) {
                let faults = crate::faults::draw_disk_faults(&mut rng);
                trace.push(SimTime::default(), id, format!("disk faults {faults:?}"));
                disk.set_faults(faults);
            }
            hosts.push(Host::new(id, disk, drift));
            if drift != 0 {
                trace.push(SimTime::default(), id, format!("clock drift {drift}ppm"));
            }
        }
        let clients = (1..=cfg.clients as u64)
            .map(|id| RegClient::new(id, 1 + rng.below(nodes) as u64))
            .collect();
        let queues = (0..cfg.pipelines as u64)
            .map(|i| {
                let id = cfg.clients as u64 + 1 + i;
                let window = 1 + rng.below(queue::WINDOW_MAX);
                QueueClient::new(id, 1 + rng.below(nodes) as u64, window)
            })
            .collect();
        Ok(Self {
            cfg,
            flags,
            rng,
            sched: Scheduler::default(),
            net: Network::new(net_cfg),
            hosts,
            voters,
            clients,
            queues,
            links: BTreeMap::new(),
            trace,
            inv: Invariants::default(),
            stats: Stats {
                nodes,
                ..Stats::default()
            },
            roles: BTreeMap::new(),
            states: BTreeMap::new(),
            calm_at,
            calm: false,
        })
    }

    fn host(&mut self, id: u64) -> &mut Host {
        &mut self.hosts[(id - 1) as usize]
    }

    fn note(&mut self, node: u64, text: impl AsRef<str>) {
        let now = self.sched.now();
        self.trace.push(now, node, text);
    }

    fn run(&mut self) -> Result<(), Violation> {
        for id in self.voters.clone() {
            self.start(id)?;
        }
        for c in 1..=self.clients.len() as u64 {
            let wait = self.rng.between(0, 500) * US_PER_MS;
            self.sched.after_us(wait, Event::ClientSend { client: c });
        }
        for q in 0..self.queues.len() {
            let wait = self.rng.between(0, 500) * US_PER_MS;
            self.sched.after_us(wait, Event::QueueSend { q });
        }
        if !self.cfg.faults.events().is_empty() {
            let wait = self.rng.exponential(self.cfg.fault_mean_ms * US_PER_MS);
            self.sched.after_us(wait, Event::Fault);
        }
        self.sched.at(self.calm_at, Event::Calm);
        let end = SimTime(self.cfg.duration_ms * US_PER_MS);
        while let Some((now, event)) = self.sched.next(end) {
            self.stats.events += 1;
            if let Some(node) = event.node() {
                let paused = self.host(node).paused_until;
                if paused > now {
                    self.sched.at(paused, event);
                    continue;
                }
            }
            self.handle(event)?;
        }
        self.stats.acked = self.clients.iter().map(|c| c.acked).sum::<u64>()
            + self
                .queues
                .iter()
                .map(|q| q.acked.len() as u64)
                .sum::<u64>();
        for node in self.voters.clone() {
            if let Some(applied) = self.host(node).core.as_ref().map(|c| c.applied_index()) {
                self.replica_state(node, applied)?;
            }
        }
        self.check_histories()?;
        self.check_queue()?;
        self.check_ttl()?;
        self.note(
            0,
            format!(
                "end: {} events, {} writes acknowledged, {} crashes, {} faults, highest term {}",
                self.stats.events,
                self.stats.acked,
                self.stats.crashes,
                self.stats.faults,
                self.stats.highest_term
            ),
        );
        Ok(())
    }

    fn handle(&mut self, event: Event) -> Result<(), Violation> {
        match event {
            Event::Tick { node, gen } => self.tick(node, gen),
            Event::Turn { node, incarnation } => {
                let h = self.host(node);
                if h.incarnation != incarnation || !h.is_up() {
                    return Ok(());
                }
                h.turn_pending = false;
                self.turn(node)
            }
            Event::Deliver { to, frame } => self.deliver(to, *frame),
            Event::LinkClosed { node, peer } => {
                self.call(node, |core| core.on_peer(PeerEvent::Closed { from: peer }))?;
                self.schedule_turn(node);
                Ok(())
            }
            Event::Restart { node } => {
                if self.host(node).is_up() {
                    return Ok(());
                }
                self.start(node)
            }
            Event::Fault => {
                if self.calm {
                    return Ok(());
                }
                self.fault();
                let wait = self.rng.exponential(self.cfg.fault_mean_ms * US_PER_MS);
                self.sched.after_us(wait, Event::Fault);
                Ok(())
            }
            Event::Flap { left } => {
                self.flap(left);
                Ok(())
            }
            Event::ClientSend { client } => {
                self.client_send(client);
                Ok(())
            }
            Event::ToHost {
                node,
                incarnation,
                msg,
            } => {
                if self.host(node).incarnation != incarnation {
                    return Ok(());
                }
                self.call(node, |core| core.handle(*msg))?;
                self.schedule_turn(node);
                Ok(())
            }
            Event::ToClient {
                client,
                conn,
                frame,
            } => {
                self.client_frame(client, conn, *frame);
                Ok(())
            }
            Event::ConnLost { client, conn } => {
                self.conn_lost(client, conn, "connection closed");
                Ok(())
            }
            Event::ClientTimeout { client, attempt } => {
                if self.client(client).attempt == attempt {
                    self.conn_lost_after_timeout(client);
                }
                Ok(())
            }
            Event::Calm => self.calm(),
            Event::QueueSend { q } => {
                self.queue_send(q);
                Ok(())
            }
            Event::QueueFrame { q, conn, frame } => {
                self.queue_frame(q, conn, *frame);
                Ok(())
            }
            Event::QueueLost { q, conn } => {
                if self.queues[q].conn.as_ref().map(|k| k.id) == Some(conn) {
                    self.queue_lost(q, "connection closed");
                }
                Ok(())
            }
            Event::QueueTimeout { q, progress } => {
                if self.queues[q].progress == progress && self.queues[q].conn.is_some() {
                    self.queue_close(q);
                    self.queue_lost(q, "timed out");
                }
                Ok(())
            }
        }
    }

    /// Calls into a host's core at the host's local time, turning a panic
    /// into a violation; then hands the clients what the core answered.
    fn call(
        &mut self,
        node: u64,
        f: impl FnOnce(&mut warden_server::core::Core),
    ) -> Result<(), Violation> {
        let now = self.sched.now();
        let h = self.host(node);
        if !h.is_up() {
            return Ok(());
        }
        h.set_clock(now);
        let core = h.core.as_mut().expect("up");
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| f(core))) {
            let text = panic_text(panic);
            self.note(node, format!("core panicked: {text}"));
            return Err(Violation {
                invariant: invariants::RAFT_ASSERTION,
                detail: format!("n{node}: {text}"),
            });
        }
        self.answer_clients(node);
        Ok(())
    }

    fn start(&mut self, node: u64) -> Result<(), Violation> {
        let cfg = host::config(node, &self.voters, &self.flags).map_err(|e| Violation {
            invariant: "the simulation starts",
            detail: e,
        })?;
        let seed = self.rng.fork();
        let now = self.sched.now();
        let started = catch_unwind(AssertUnwindSafe(|| self.host(node).start(cfg, seed, now)));
        match started {
            Ok(Ok(())) => self.host(node).failed_starts = 0,
            Ok(Err(e)) => {
                self.note(node, format!("start failed: {e}"));
                let h = self.host(node);
                h.failed_starts += 1;
                let failed = h.failed_starts;
                if !self.cfg.faults.has(Kind::Disk) || failed >= invariants::FAILED_STARTS_MAX {
                    return Err(Violation {
                        invariant: invariants::CRASH_RECOVERABLE,
                        detail: format!("n{node} refused to start {failed} times in a row: {e}"),
                    });
                }
                self.schedule_restart(node);
                return Ok(());
            }
            Err(panic) => {
                let text = panic_text(panic);
                self.note(node, format!("core panicked at start: {text}"));
                return Err(Violation {
                    invariant: invariants::RAFT_ASSERTION,
                    detail: format!("n{node} at start: {text}"),
                });
            }
        }
        let applied = self.host(node).applied;
        self.note(node, format!("start: applied {applied}"));
        self.roles.remove(&node);
        let h = self.host(node);
        h.next_tick_local = h.mono.local(now);
        self.schedule_tick(node);
        self.schedule_turn(node);
        Ok(())
    }

    fn schedule_tick(&mut self, node: u64) {
        let tick_us = (self.cfg.tick_ms * US_PER_MS) as i64;
        let now = self.sched.now();
        let h = self.host(node);
        h.next_tick_local += tick_us;
        h.tick_gen += 1;
        let at = h.mono.sim_at(now, h.next_tick_local);
        let gen = h.tick_gen;
        self.sched.at(at, Event::Tick { node, gen });
    }

    fn tick(&mut self, node: u64, gen: u64) -> Result<(), Violation> {
        let now = self.sched.now();
        let tick_us = (self.cfg.tick_ms * US_PER_MS) as i64;
        let h = self.host(node);
        if h.tick_gen != gen || !h.is_up() {
            return Ok(());
        }
        // The driver's ticker skips missed ticks (tokio's `Delay`).
        let local = h.mono.local(now);
        if local >= h.next_tick_local + tick_us {
            h.next_tick_local = local;
        }
        self.call(node, |core| core.on_tick())?;
        self.schedule_tick(node);
        // The driver ends its turn right after a tick.
        self.turn(node)
    }

    /// The turn ends soon: at once, or after a short drawn delay in which
    /// more calls may batch into it.
    fn schedule_turn(&mut self, node: u64) {
        if self.host(node).turn_pending || !self.host(node).is_up() {
            return;
        }
        let delay = if self.rng.coin() {
            0
        } else {
            self.rng.between(1, 500)
        };
        let h = self.host(node);
        h.turn_pending = true;
        let incarnation = h.incarnation;
        self.sched
            .after_us(delay, Event::Turn { node, incarnation });
    }

    fn turn(&mut self, node: u64) -> Result<(), Violation> {
        let mut ended = Ok(());
        self.call(node, |core| ended = core.end_turn())?;
        if let Err(e) = ended {
            // The core stops, as the server does on an error.
            self.note(node, format!("stopped: {e}"));
            self.crash(node, false);
            self.schedule_restart(node);
            return Ok(());
        }
        self.after_turn(node)
    }

    /// What a turn sent and changed: frames onto the network, and the
    /// invariants.
    fn after_turn(&mut self, node: u64) -> Result<(), Violation> {
        let now = self.sched.now();
        let frames = self.host(node).out.take();
        for (to, frame) in frames {
            let text = describe(&frame);
            match self.net.send(&mut self.rng, now, node, to) {
                Fate::Cut => self.note(node, format!("send {text} to n{to}: cut")),
                Fate::Dropped => self.note(node, format!("send {text} to n{to}: dropped")),
                Fate::Deliver(times) => {
                    let copies = times.len();
                    for (i, at) in times.into_iter().enumerate() {
                        let dup = if copies > 1 && i > 0 {
                            " (duplicate)"
                        } else {
                            ""
                        };
                        self.note(
                            node,
                            format!("send {text} to n{to}, arrives {}{dup}", at.ms()),
                        );
                        self.sched.at(
                            at,
                            Event::Deliver {
                                to,
                                frame: Box::new(frame.clone()),
                            },
                        );
                    }
                }
            }
        }
        let Some(core) = self.host(node).core.as_ref() else {
            return Ok(());
        };
        let (role, term) = core.role_and_term();
        let applied = core.applied_index();
        let leader = core.leader_id();
        self.stats.highest_term = self.stats.highest_term.max(term);
        if self.roles.get(&node) != Some(&(role, term)) {
            self.roles.insert(node, (role, term));
            self.note(
                node,
                format!("role {role:?}, term {term}, leader n{leader}"),
            );
            if role == StateRole::Leader {
                self.inv.became_leader(node, term)?;
            }
        }
        if applied != self.host(node).applied {
            self.host(node).applied = applied;
            if applied.is_multiple_of(STATE_CHECK_EVERY) {
                self.replica_state(node, applied)?;
            }
        }
        Ok(())
    }

    fn deliver(&mut self, to: u64, frame: PeerFrame) -> Result<(), Violation> {
        let from = frame.from;
        let text = describe(&frame);
        if self.net.is_cut(from, to) {
            self.note(to, format!("recv {text} from n{from}: cut on the way"));
            return Ok(());
        }
        if !self.host(to).is_up() {
            return Ok(());
        }
        self.note(to, format!("recv {text} from n{from}"));
        self.call(to, |core| core.on_peer(PeerEvent::Frame(frame)))?;
        self.schedule_turn(to);
        Ok(())
    }

    fn crash(&mut self, node: u64, power_loss: bool) {
        if !self.host(node).is_up() {
            return;
        }
        self.stats.crashes += 1;
        match self.host(node).crash(power_loss) {
            Some(kept) => self.note(node, format!("crash, power lost: {kept}")),
            None => self.note(node, "crash"),
        }
        self.roles.remove(&node);
        // Its clients' connections and its peers' links close at once: the
        // OS answers for a killed process.
        for c in 0..self.clients.len() {
            let lost = match &self.clients[c].conn {
                Some(conn) if conn.host == node => Some(conn.id),
                _ => None,
            };
            if let Some(conn) = lost {
                let delay = self.rng.between(100, 2_000);
                let client = self.clients[c].id;
                self.sched.after_us(delay, Event::ConnLost { client, conn });
            }
        }
        for q in 0..self.queues.len() {
            let lost = match &self.queues[q].conn {
                Some(conn) if conn.host == node => Some(conn.id),
                _ => None,
            };
            if let Some(conn) = lost {
                let delay = self.rng.between(100, 2_000);
                self.sched.after_us(delay, Event::QueueLost { q, conn });
            }
        }
        for peer in self.voters.clone() {
            if peer != node && self.host(peer).is_up() {
                let delay = self.rng.between(100, 2_000);
                self.sched.after_us(
                    delay,
                    Event::LinkClosed {
                        node: peer,
                        peer: node,
                    },
                );
            }
        }
    }

    fn schedule_restart(&mut self, node: u64) {
        let down = self.rng.between(50, 3_000) * US_PER_MS;
        self.sched.after_us(down, Event::Restart { node });
    }

    /// The calm end of the run: no new faults, every link healed, every
    /// server not running started, disks without faults, stalls over.
    /// What a healthy cluster must do eventually it does by the end.
    fn calm(&mut self) -> Result<(), Violation> {
        self.calm = true;
        self.net.heal();
        self.note(
            0,
            "calm: no more faults; every link healed, every server up",
        );
        let now = self.sched.now();
        for node in self.voters.clone() {
            let h = self.host(node);
            h.disk.set_faults(Faults::default());
            h.paused_until = h.paused_until.min(now);
            if !h.is_up() {
                self.start(node)?;
            }
        }
        Ok(())
    }
}
