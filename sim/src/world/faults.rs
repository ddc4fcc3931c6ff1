//! The faults as the world applies them: which node, which shape, what
//! the trace says (the kinds and the mix: `crate::faults`).

use super::{Event, World};
use crate::faults::Kind;
use crate::invariants::Violation;
use crate::time::US_PER_MS;
use raft::StateRole;

impl World {
    /// The node's process dies; with `power_loss`, its machine loses power
    /// (and what its disk never made durable) too.
    pub(super) fn crash(&mut self, node: u64, power_loss: bool) {
        if !self.member(node).is_up() {
            return;
        }
        self.stats.crashes += 1;
        let kept = self.member(node).crash(power_loss);
        match kept {
            Some(kept) => self.note(node, format!("crash, power lost: {kept}")),
            None => self.note(node, "crash"),
        }
        // Its peers' connections to it close (a killed process's sockets
        // close at once), across any partition: the OS answers.
        for peer in self.voters.clone() {
            if peer != node && self.member(peer).is_up() {
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

    pub(super) fn schedule_restart(&mut self, node: u64) {
        let down = self.rng.between(50, 3_000) * US_PER_MS;
        self.sched.after_us(down, Event::Restart { node });
    }

    fn random_node(&mut self) -> u64 {
        1 + self.rng.below(self.voters.len()) as u64
    }

    pub(super) fn fault(&mut self) -> Result<(), Violation> {
        let kinds = self.cfg.faults.weighted_events();
        let kind = kinds[self.rng.below(kinds.len())];
        self.stats.faults += 1;
        match kind {
            Kind::Crash if self.rng.below(4) == 0 => {
                // A crash point: the next node to grant a vote is killed
                // right after it sent the grant (`World::after_ready`), the
                // moment a journal's last record is that vote.
                self.kill_after_vote = true;
                self.note(
                    0,
                    "fault: the next node to grant a vote is killed right after",
                );
            }
            Kind::Crash => {
                // The process killed, or its machine's power lost.
                let node = self.random_node();
                let power_loss = self.rng.coin();
                if self.member(node).is_up() {
                    let what = if power_loss { "power loss of" } else { "kill" };
                    self.note(0, format!("fault: {what} n{node}"));
                    self.crash(node, power_loss);
                    self.schedule_restart(node);
                }
            }
            Kind::PowerLoss => {
                self.note(0, "fault: power loss, every node");
                for node in self.voters.clone() {
                    if self.member(node).is_up() {
                        self.crash(node, true);
                        self.schedule_restart(node);
                    }
                }
            }
            Kind::Partition => {
                let n = self.voters.len();
                let side = crate::faults::draw_sides(&mut self.rng, n);
                for (a, b) in crate::faults::cuts_between(&side) {
                    self.net.cut(a, b);
                }
                self.note(
                    0,
                    format!("fault: partition {:?}", crate::faults::side_names(&side)),
                );
            }
            Kind::OneWay => {
                let from = self.random_node();
                let to = self.random_node();
                if from != to {
                    self.net.cut(from, to);
                    self.note(0, format!("fault: cut n{from} -> n{to} (one way)"));
                }
            }
            Kind::Heal => {
                self.net.heal();
                self.note(0, "fault: heal every link");
            }
            Kind::Clock => {
                let node = self.random_node();
                let by = self.rng.signed(2_000_000);
                let now = self.sched.now();
                self.member(node).clock.jump(now, by);
                self.note(node, format!("fault: clock jumps {by}us"));
                if self.member(node).is_up() {
                    // Its tick waits on its clock: wait again.
                    let tick_us = (self.cfg.tick_ms * US_PER_MS) as i64;
                    self.member(node).next_tick_local -= tick_us;
                    self.schedule_tick(node);
                }
            }
            Kind::Pause => {
                let node = self.random_node();
                let ms = self.rng.between(10, 2_000);
                let until = self.sched.now().plus_ms(ms);
                self.member(node).paused_until = until;
                self.note(node, format!("fault: stalls {ms}ms"));
            }
            Kind::Flap => {
                let leaders = self
                    .rng
                    .between(crate::faults::FLAP_LEADERS.0, crate::faults::FLAP_LEADERS.1);
                self.flap(leaders);
            }
            Kind::Drop | Kind::Duplicate | Kind::Reorder | Kind::Disk => {}
        }
        Ok(())
    }

    /// Every cut healed, and the leader (the running one of the highest
    /// term) cut off from every other node; the next of the `left`
    /// leaders after a while.
    pub(super) fn flap(&mut self, left: u64) {
        if left == 0 {
            return;
        }
        self.net.heal();
        let leader = self
            .voters
            .iter()
            .filter_map(|&n| {
                let m = &self.members[(n - 1) as usize];
                let raft = m.raft.as_ref()?;
                (m.role == StateRole::Leader).then(|| (raft.term(), n))
            })
            .max();
        match leader {
            Some((term, node)) => {
                for (a, b) in crate::faults::isolate(node, &self.voters) {
                    self.net.cut(a, b);
                }
                self.note(
                    0,
                    format!("fault: flap: every link healed, leader n{node} (term {term}) cut off"),
                );
            }
            None => self.note(0, "fault: flap: every link healed, no leader to cut off"),
        }
        if left > 1 {
            let wait = self
                .rng
                .between(crate::faults::FLAP_WAIT_MS.0, crate::faults::FLAP_WAIT_MS.1);
            self.sched
                .after_us(wait * US_PER_MS, Event::Flap { left: left - 1 });
        }
    }
}
