//! The faults as the core subject applies them (the kinds and the mix:
//! `crate::faults`). As the raft subject's, but a clock jump moves a
//! server's wall clock only: the core keeps its deadlines and its ticks by
//! the monotonic clock, which drifts but never jumps.

use raft::StateRole;

use super::{Event, World};
use crate::faults::{self, Kind};
use crate::time::US_PER_MS;

impl World {
    fn random_node(&mut self) -> u64 {
        1 + self.rng.below(self.voters.len()) as u64
    }

    pub(super) fn fault(&mut self) {
        let kinds = self.cfg.faults.weighted_events();
        let kind = kinds[self.rng.below(kinds.len())];
        self.stats.faults += 1;
        match kind {
            Kind::Crash => {
                let node = self.random_node();
                let power_loss = self.rng.coin();
                if self.host(node).is_up() {
                    let what = if power_loss { "power loss of" } else { "kill" };
                    self.note(0, format!("fault: {what} n{node}"));
                    self.crash(node, power_loss);
                    self.schedule_restart(node);
                }
            }
            Kind::PowerLoss => {
                self.note(0, "fault: power loss, every node");
                for node in self.voters.clone() {
                    if self.host(node).is_up() {
                        self.crash(node, true);
                        self.schedule_restart(node);
                    }
                }
            }
            Kind::Partition => {
                let side = faults::draw_sides(&mut self.rng, self.voters.len());
                for (a, b) in faults::cuts_between(&side) {
                    self.net.cut(a, b);
                }
                self.note(
                    0,
                    format!("fault: partition {:?}", faults::side_names(&side)),
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
                self.host(node).clock.jump(now, by);
                self.note(node, format!("fault: wall clock jumps {by}us"));
            }
            Kind::Pause => {
                let node = self.random_node();
                let ms = self.rng.between(10, 2_000);
                let until = self.sched.now().plus_ms(ms);
                self.host(node).paused_until = until;
                self.note(node, format!("fault: stalls {ms}ms"));
            }
            Kind::Flap => {
                let leaders = self
                    .rng
                    .between(faults::FLAP_LEADERS.0, faults::FLAP_LEADERS.1);
                self.flap(leaders);
            }
            Kind::Drop | Kind::Duplicate | Kind::Reorder | Kind::Disk => {}
        }
    }

    /// Every cut healed, and the leader (the running one of the highest
    /// term) cut off from every other server; the next of the `left`
    /// leaders after a while. Not in the calm end.
    pub(super) fn flap(&mut self, left: u64) {
        if self.calm || left == 0 {
            return;
        }
        self.net.heal();
        let leader = self
            .voters
            .iter()
            .filter(|&&n| self.hosts[(n - 1) as usize].is_up())
            .filter_map(|&n| match self.roles.get(&n) {
                Some(&(StateRole::Leader, term)) => Some((term, n)),
                _ => None,
            })
            .max();
        match leader {
            Some((term, node)) => {
                for (a, b) in faults::isolate(node, &self.voters) {
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
                .between(faults::FLAP_WAIT_MS.0, faults::FLAP_WAIT_MS.1);
            self.sched
                .after_us(wait * US_PER_MS, Event::Flap { left: left - 1 });
        }
    }
}
