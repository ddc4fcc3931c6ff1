//! The world: the members, the network, the clients and the faults, driven
//! by one scheduler from one seed, with the invariants checked after every
//! event. [`run`] is a whole run: same seed and config, same trace, byte
//! for byte.
//!
//! Nodes handle what reaches them the way the server's core does: a
//! message, a tick or a client request is stepped into raft at once, and
//! the Ready loop runs a moment later (at once or after a drawn delay, so
//! that several steps batch into one Ready as they do under load). As in
//! the server, a node whose link to its leader closes (the leader's
//! process died) drops its lease, and the lowest-numbered other voter
//! campaigns at once.

mod clients;
mod faults;

use std::panic::{catch_unwind, AssertUnwindSafe};

use raft::eraftpb::Message;
use raft::{StateRole, Storage as _};
use warden_server::raft::node::RaftTiming;

use crate::client::{self, Answer, Client};
use crate::clock::NodeClock;
use crate::disk::SimDisk;
use crate::faults::{FaultMix, Kind};
use crate::invariants::{self, Applied, Invariants, Violation};
use crate::member::{describe, Member, Outbox};
use crate::net::{Fate, NetConfig, Network};
use crate::rng::SimRng;
use crate::scheduler::Scheduler;
use crate::time::{SimTime, US_PER_MS};
use crate::trace::Trace;

/// The storage's known-bad switches, to show the checks catch them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BadModes {
    /// `sync` makes nothing durable: a crash loses what it "synced".
    pub skip_fsync: bool,
    /// The vote is not persisted: a restarted node may vote again in a
    /// term it already voted in (the raft subject only).
    pub vote_not_persisted: bool,
    /// The storage opens without the synced watermark's checks: a log
    /// that lost synced entries, or its term and vote, to a damaged
    /// journal opens as if whole (the issue-27 defect of a vote lost to a
    /// damaged journal tail; the raft subject only).
    pub unchecked_open: bool,
    /// Linearizable reads are served without ReadIndex (the server's
    /// `--unsafe-skip-read-index`; the core subject only).
    pub skip_read_index: bool,
    /// ZooKeeper-door writes deduplicated by the session's last answers
    /// only (the server's `--unsafe-bounded-dedup`; the core subject
    /// only).
    pub bounded_dedup: bool,
    /// Removals in flight kept across a role change (the server's
    /// `--unsafe-keep-removals-across-roles`): one lost with a leadership
    /// is never proposed again by that server (the core subject only).
    pub keep_removals: bool,
}

/// What a run simulates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Subject {
    /// raft itself ([`warden_server::raft::RaftNode`] over the real
    /// storage), with model clients proposing values.
    #[default]
    Raft,
    /// The whole server's core, with register clients on its native door
    /// (`crate::cores`).
    Cores,
}

#[derive(Debug, Clone)]
pub struct SimConfig {
    pub subject: Subject,
    /// 3 to 5; `None`: drawn from the seed.
    pub nodes: Option<usize>,
    /// Simulated time the run lasts.
    pub duration_ms: u64,
    pub clients: usize,
    /// Pipelined writers on the ZooKeeper door (the core subject only).
    pub pipelines: usize,
    pub faults: FaultMix,
    /// Mean time between faults.
    pub fault_mean_ms: u64,
    pub bad: BadModes,
    /// The server's defaults (`--tick-ms`, `--election-ticks`,
    /// `--heartbeat-ticks`).
    pub tick_ms: u64,
    pub election_ticks: usize,
    pub heartbeat_ticks: usize,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            subject: Subject::default(),
            nodes: None,
            duration_ms: 20_000,
            clients: 3,
            pipelines: 1,
            faults: FaultMix::all(),
            fault_mean_ms: 700,
            bad: BadModes::default(),
            tick_ms: 100,
            election_ticks: 5,
            heartbeat_ticks: 1,
        }
    }
}

/// What a run did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Stats {
    pub nodes: usize,
    pub events: u64,
    pub acked: u64,
    pub crashes: u64,
    pub faults: u64,
    pub highest_term: u64,
}

pub struct Outcome {
    pub seed: u64,
    pub trace: Trace,
    pub violation: Option<Violation>,
    pub stats: Stats,
}

enum Event {
    Tick {
        node: u64,
        gen: u64,
    },
    Drive {
        node: u64,
        incarnation: u64,
    },
    Deliver {
        to: u64,
        msg: Box<Message>,
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
    Request {
        client: u64,
        node: u64,
        attempt: u64,
    },
    Answer {
        client: u64,
        attempt: u64,
        answer: Answer,
    },
    Send {
        client: u64,
    },
    Timeout {
        client: u64,
        attempt: u64,
    },
}

impl Event {
    /// The node a stalled process must not handle this for yet.
    fn node(&self) -> Option<u64> {
        match self {
            Event::Tick { node, .. }
            | Event::Drive { node, .. }
            | Event::LinkClosed { node, .. }
            | Event::Request { node, .. } => Some(*node),
            Event::Deliver { to, .. } => Some(*to),
            _ => None,
        }
    }
}

struct World {
    cfg: SimConfig,
    rng: SimRng,
    sched: Scheduler<Event>,
    net: Network,
    members: Vec<Member>,
    voters: Vec<u64>,
    clients: Vec<Client>,
    trace: Trace,
    inv: Invariants,
    stats: Stats,
    /// A crash fault waits for the next node to grant a vote, and kills
    /// it right after (see `World::fault`).
    kill_after_vote: bool,
}

/// Runs one seed to its end or its first violation.
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

impl World {
    fn new(seed: u64, cfg: SimConfig) -> Result<Self, String> {
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
        trace.push(
            SimTime::default(),
            0,
            format!(
                "seed {seed}: {nodes} nodes, faults {}, network delay {}-{}us drop {}ppm duplicate {}ppm reorder {}, bad {:?}",
                cfg.faults,
                net_cfg.delay_min_us,
                net_cfg.delay_max_us,
                net_cfg.drop_ppm,
                net_cfg.duplicate_ppm,
                net_cfg.reorder,
                cfg.bad
            ),
        );
        let voters: Vec<u64> = (1..=nodes as u64).collect();
        let mut members = Vec::with_capacity(nodes);
        for &id in &voters {
            let drift = if cfg.faults.has(Kind::Clock) {
                rng.signed(50_000)
            } else {
                0
            };
            let mut disk = SimDisk::new(rng.fork());
            if cfg.faults.has(Kind::Disk) {
                let faults = crate::faults::draw_disk_faults(&mut rng);
                trace.push(SimTime::default(), id, format!("disk faults {faults:?}"));
                disk.set_faults(faults);
            }
            members.push(Member::new(id, disk, NodeClock::new(drift)));
            if drift != 0 {
                trace.push(SimTime::default(), id, format!("clock drift {drift}ppm"));
            }
        }
        let clients = (1..=cfg.clients as u64)
            .map(|id| Client::new(id, 1 + rng.below(nodes) as u64))
            .collect();
        Ok(Self {
            cfg,
            rng,
            sched: Scheduler::default(),
            net: Network::new(net_cfg),
            members,
            voters,
            clients,
            trace,
            inv: Invariants::default(),
            stats: Stats {
                nodes,
                ..Stats::default()
            },
            kill_after_vote: false,
        })
    }

    fn timing(&self) -> RaftTiming {
        RaftTiming {
            election_ticks: self.cfg.election_ticks,
            heartbeat_ticks: self.cfg.heartbeat_ticks,
        }
    }

    fn member(&mut self, id: u64) -> &mut Member {
        &mut self.members[(id - 1) as usize]
    }

    fn note(&mut self, node: u64, text: impl AsRef<str>) {
        let now = self.sched.now();
        self.trace.push(now, node, text);
    }

    fn run(&mut self) -> Result<(), Violation> {
        for id in self.voters.clone() {
            self.start(id)?;
        }
        for c in 0..self.clients.len() {
            let id = self.clients[c].id;
            let wait = self.rng.between(0, 500) * US_PER_MS;
            self.sched.after_us(wait, Event::Send { client: id });
        }
        if !self.cfg.faults.events().is_empty() {
            let wait = self.rng.exponential(self.cfg.fault_mean_ms * US_PER_MS);
            self.sched.after_us(wait, Event::Fault);
        }
        let end = SimTime(self.cfg.duration_ms * US_PER_MS);
        while let Some((now, event)) = self.sched.next(end) {
            self.stats.events += 1;
            if let Some(node) = event.node() {
                let paused = self.member(node).paused_until;
                if paused > now {
                    self.sched.at(paused, event);
                    continue;
                }
            }
            self.handle(event)?;
        }
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
            Event::Drive { node, incarnation } => {
                let m = self.member(node);
                if m.incarnation != incarnation || !m.is_up() {
                    return Ok(());
                }
                m.drive_pending = false;
                self.drive(node)
            }
            Event::Deliver { to, msg } => self.deliver(to, *msg),
            Event::LinkClosed { node, peer } => self.link_closed(node, peer),
            Event::Restart { node } => {
                if self.member(node).is_up() {
                    return Ok(());
                }
                self.start(node)
            }
            Event::Fault => {
                self.fault()?;
                let wait = self.rng.exponential(self.cfg.fault_mean_ms * US_PER_MS);
                self.sched.after_us(wait, Event::Fault);
                Ok(())
            }
            Event::Flap { left } => {
                self.flap(left);
                Ok(())
            }
            Event::Send { client } => {
                self.client_send(client);
                Ok(())
            }
            Event::Request {
                client,
                node,
                attempt,
            } => self.request(client, node, attempt),
            Event::Answer {
                client,
                attempt,
                answer,
            } => {
                self.client_answer(client, attempt, answer);
                Ok(())
            }
            Event::Timeout { client, attempt } => {
                self.client_timeout(client, attempt);
                Ok(())
            }
        }
    }

    /// Calls into a member's raft node, turning a panic of raft's into a
    /// violation (raft-rs asserts on logs it finds lost).
    fn with_raft<T>(
        &mut self,
        node: u64,
        f: impl FnOnce(&mut warden_server::raft::RaftNode) -> T,
    ) -> Result<Option<T>, Violation> {
        let Some(raft) = self.member(node).raft.as_mut() else {
            return Ok(None);
        };
        match catch_unwind(AssertUnwindSafe(|| f(raft))) {
            Ok(t) => Ok(Some(t)),
            Err(panic) => {
                let text = panic_text(panic);
                self.note(node, format!("raft panicked: {text}"));
                Err(Violation {
                    invariant: invariants::RAFT_ASSERTION,
                    detail: format!("n{node}: {text}"),
                })
            }
        }
    }

    fn start(&mut self, node: u64) -> Result<(), Violation> {
        let voters = self.voters.clone();
        let timing = self.timing();
        let bad = self.cfg.bad.clone();
        let jitter = self.rng.fork();
        let now = self.sched.now();
        let started = catch_unwind(AssertUnwindSafe(|| {
            self.member(node).start(&voters, &timing, &bad, jitter)
        }));
        match started {
            Ok(Ok(())) => self.member(node).failed_starts = 0,
            Ok(Err(e)) => {
                // The server refuses to start (safe, if not live); its
                // supervisor tries again later, as for a node that stopped.
                self.note(node, format!("start failed: {e}"));
                let m = self.member(node);
                m.failed_starts += 1;
                let failed = m.failed_starts;
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
                self.note(node, format!("raft panicked at start: {text}"));
                return Err(Violation {
                    invariant: invariants::RAFT_ASSERTION,
                    detail: format!("n{node} at start: {text}"),
                });
            }
        }
        let (term, commit, last) = {
            let raft = self.member(node).raft.as_ref().expect("just started");
            let s = raft.storage();
            (
                raft.term(),
                s.hard_state().commit,
                s.last_index().unwrap_or(0),
            )
        };
        self.note(
            node,
            format!("start: term {term}, commit {commit}, last index {last}"),
        );
        let m = self.member(node);
        m.next_tick_local = m.clock.local(now);
        self.schedule_tick(node);
        self.schedule_drive(node);
        Ok(())
    }

    fn schedule_tick(&mut self, node: u64) {
        let tick_us = (self.cfg.tick_ms * US_PER_MS) as i64;
        let now = self.sched.now();
        let m = self.member(node);
        m.next_tick_local += tick_us;
        m.tick_gen += 1;
        let at = m.clock.sim_at(now, m.next_tick_local);
        let gen = m.tick_gen;
        self.sched.at(at, Event::Tick { node, gen });
    }

    fn tick(&mut self, node: u64, gen: u64) -> Result<(), Violation> {
        let now = self.sched.now();
        let tick_us = (self.cfg.tick_ms * US_PER_MS) as i64;
        let m = self.member(node);
        if m.tick_gen != gen || !m.is_up() {
            return Ok(());
        }
        // The server's ticker skips missed ticks (tokio's `Delay`): after
        // a stall or a jump ahead, one tick, then a period from it.
        let local = m.clock.local(now);
        if local >= m.next_tick_local + tick_us {
            m.next_tick_local = local;
        }
        self.with_raft(node, |r| r.tick())?;
        let timeout = self
            .member(node)
            .raft
            .as_ref()
            .map_or(0, |r| r.election_timeout_ticks());
        self.note(node, format!("tick (election timeout {timeout})"));
        self.schedule_tick(node);
        self.schedule_drive(node);
        Ok(())
    }

    /// The Ready loop runs soon: at once, or after a short drawn delay in
    /// which more steps may batch into it.
    fn schedule_drive(&mut self, node: u64) {
        if self.member(node).drive_pending {
            return;
        }
        let delay = if self.rng.coin() {
            0
        } else {
            self.rng.between(1, 500)
        };
        let m = self.member(node);
        m.drive_pending = true;
        let incarnation = m.incarnation;
        self.sched
            .after_us(delay, Event::Drive { node, incarnation });
    }

    fn drive(&mut self, node: u64) -> Result<(), Violation> {
        loop {
            let has_ready = self
                .member(node)
                .raft
                .as_ref()
                .is_some_and(|r| r.has_ready());
            if !has_ready {
                return Ok(());
            }
            let mut out = Outbox::default();
            let done = self.with_raft(node, |r| r.on_ready(&mut out))?;
            if let Some(Err(e)) = done {
                // The node stops, as the server's core does on an error.
                self.note(node, format!("stopped: {e}"));
                self.crash(node, false);
                self.schedule_restart(node);
                return Ok(());
            }
            self.after_ready(node, out)?;
        }
    }

    fn after_ready(&mut self, node: u64, out: Outbox) -> Result<(), Violation> {
        let now = self.sched.now();
        for note in out.notes {
            self.note(node, note);
        }
        for (role, leader) in out.roles {
            let term = self.member(node).raft.as_ref().map_or(0, |r| r.term());
            self.stats.highest_term = self.stats.highest_term.max(term);
            let m = self.member(node);
            m.role = role;
            m.leader = leader;
            self.note(
                node,
                format!("role {role:?}, term {term}, leader n{leader}"),
            );
            if role == StateRole::Leader {
                self.inv.became_leader(node, term)?;
                // Checked once the Ready is done: then the whole log the
                // node leads with is in its storage.
                let raft = self.members[(node - 1) as usize].raft.as_ref().expect("up");
                let storage = raft.storage();
                let log = |index: u64| {
                    let term = storage.term(index).ok()?;
                    let e = storage
                        .entries(
                            index,
                            index + 1,
                            None,
                            raft::GetEntriesContext::empty(false),
                        )
                        .ok()?;
                    Some((term, e.first()?.data.to_vec()))
                };
                self.inv.leader_holds_acked(node, term, log)?;
            }
        }
        // The vote as persisted, a candidate's for itself included.
        let (term, vote) = {
            let raft = self.member(node).raft.as_ref().expect("up");
            let hs = raft.storage().hard_state();
            (hs.term, hs.vote)
        };
        if vote != 0 {
            self.inv.voted(node, term, vote)?;
        }
        let granted = out.messages.iter().any(|m| {
            m.get_msg_type() == raft::eraftpb::MessageType::MsgRequestVoteResponse && !m.reject
        });
        for e in out.applied {
            self.apply(node, e)?;
        }
        let (applied, commit) = {
            let m = self.member(node);
            (
                m.applied_index(),
                m.raft.as_ref().map_or(0, |r| r.commit_index()),
            )
        };
        Invariants::within_commit(node, applied, commit)?;
        for msg in out.messages {
            let to = msg.to;
            let text = describe(&msg);
            if msg.get_msg_type() == raft::eraftpb::MessageType::MsgRequestVoteResponse
                && !msg.reject
            {
                self.inv.voted(node, msg.term, to)?;
            }
            match self.net.send(&mut self.rng, now, node, to) {
                Fate::Cut => self.note(node, format!("send {text} to n{to}: cut")),
                Fate::Dropped => self.note(node, format!("send {text} to n{to}: dropped")),
                Fate::Deliver(times) => {
                    let copies = times.len();
                    for (i, at) in times.into_iter().enumerate() {
                        self.sched.at(
                            at,
                            Event::Deliver {
                                to,
                                msg: Box::new(msg.clone()),
                            },
                        );
                        let dup = if copies > 1 && i > 0 {
                            " (duplicate)"
                        } else {
                            ""
                        };
                        self.note(
                            node,
                            format!("send {text} to n{to}, arrives {}{dup}", at.ms()),
                        );
                    }
                }
            }
        }
        if granted && self.kill_after_vote {
            self.kill_after_vote = false;
            self.note(0, format!("fault: kill n{node}, right after its vote"));
            self.crash(node, false);
            self.schedule_restart(node);
        }
        Ok(())
    }

    fn apply(&mut self, node: u64, e: Applied) -> Result<(), Violation> {
        let expected = self.member(node).applied_index() + 1;
        if e.index != expected {
            return Err(Violation {
                invariant: invariants::SAME_ENTRY_AT_AN_INDEX,
                detail: format!("n{node} applied index {} after {}", e.index, expected - 1),
            });
        }
        self.inv.applied(node, &e)?;
        self.note(
            node,
            format!("apply {} {}", e.index, invariants::show(&e.data)),
        );
        let waiting = self.member(node).pending.remove(&e.data);
        if let Some((client, attempt)) = waiting {
            self.stats.acked += 1;
            self.note(
                node,
                format!("ack {} to c{client}", invariants::show(&e.data)),
            );
            self.inv.acked(e.clone());
            let delay = self
                .rng
                .between(client::CLIENT_DELAY_MIN_US, client::CLIENT_DELAY_MAX_US);
            self.sched.after_us(
                delay,
                Event::Answer {
                    client,
                    attempt,
                    answer: Answer::Ok { index: e.index },
                },
            );
        }
        self.member(node).applied.push(e);
        Ok(())
    }

    fn deliver(&mut self, to: u64, msg: Message) -> Result<(), Violation> {
        let from = msg.from;
        let text = describe(&msg);
        if self.net.is_cut(from, to) {
            self.note(to, format!("recv {text} from n{from}: cut on the way"));
            return Ok(());
        }
        if !self.member(to).is_up() {
            return Ok(());
        }
        self.note(to, format!("recv {text} from n{from}"));
        if let Some(Err(e)) = self.with_raft(to, |r| r.step(msg))? {
            self.note(to, format!("step refused: {e}"));
        }
        self.schedule_drive(to);
        Ok(())
    }

    /// What the server's core does when a peer's link closes: see the
    /// module's comment.
    fn link_closed(&mut self, node: u64, peer: u64) -> Result<(), Violation> {
        let m = self.member(node);
        if !m.is_up() || m.leader != peer || m.role == StateRole::Leader {
            return Ok(());
        }
        let voters = self
            .with_raft(node, |r| r.conf_state().voters)?
            .unwrap_or_default();
        let first = voters.iter().copied().filter(|&v| v != peer).min();
        let campaign = first == Some(node);
        self.note(
            node,
            format!("the leader n{peer}'s link closed (campaign: {campaign})"),
        );
        self.with_raft(node, |r| r.leader_lost(campaign))?;
        self.schedule_drive(node);
        Ok(())
    }
}
