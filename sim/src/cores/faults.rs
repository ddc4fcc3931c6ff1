//! The faults as the core subject applies them (the kinds and the mix:
//! `crate::faults`). As the raft subject's, but a clock jump moves a
//! server's wall clock only: the core keeps its deadlines and its ticks by
//! the monotonic clock, which drifts but never jumps.

use super::World;
use crate::faults::{self, Kind};

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
            Kind::Drop | Kind::Duplicate | Kind::Reorder | Kind::Disk => {}
        }
    }
}
