//! The model clients as the world runs them (the model itself:
//! `crate::client`): a request reaches a node, the node proposes it or
//! refuses, the answer or a timeout decides the client's next request.

use raft::StateRole;

use super::{Event, World};
use crate::client::{self, Answer};
use crate::invariants::{self, Violation};
use crate::time::US_PER_MS;

impl World {
    pub(super) fn client_send(&mut self, client: u64) {
        let c = &mut self.clients[(client - 1) as usize];
        c.attempt += 1;
        let attempt = c.attempt;
        let node = c.target;
        let value = c.value();
        let delay = self
            .rng
            .between(client::CLIENT_DELAY_MIN_US, client::CLIENT_DELAY_MAX_US);
        self.note(
            0,
            format!("c{client} sends {} to n{node}", invariants::show(&value)),
        );
        self.sched.after_us(
            delay,
            Event::Request {
                client,
                node,
                attempt,
            },
        );
        self.sched.after_us(
            client::CLIENT_TIMEOUT_MS * US_PER_MS,
            Event::Timeout { client, attempt },
        );
    }

    pub(super) fn request(
        &mut self,
        client: u64,
        node: u64,
        attempt: u64,
    ) -> Result<(), Violation> {
        let c = &self.clients[(client - 1) as usize];
        if c.attempt != attempt || !self.members[(node - 1) as usize].is_up() {
            return Ok(());
        }
        let value = c.value.clone().expect("a request has a value");
        let answer = if self.member(node).role == StateRole::Leader {
            let proposed = self.with_raft(node, |r| r.propose(value.clone()))?;
            match proposed {
                Some(Ok(())) => {
                    self.note(node, format!("propose {}", invariants::show(&value)));
                    self.member(node).pending.insert(value, (client, attempt));
                    self.schedule_drive(node);
                    None
                }
                _ => Some(Answer::Refused { leader: 0 }),
            }
        } else {
            Some(Answer::Refused {
                leader: self.member(node).leader,
            })
        };
        if let Some(answer) = answer {
            self.note(node, format!("refuse c{client}: {answer:?}"));
            let delay = self
                .rng
                .between(client::CLIENT_DELAY_MIN_US, client::CLIENT_DELAY_MAX_US);
            self.sched.after_us(
                delay,
                Event::Answer {
                    client,
                    attempt,
                    answer,
                },
            );
        }
        Ok(())
    }

    pub(super) fn client_answer(&mut self, client: u64, attempt: u64, answer: Answer) {
        let nodes = self.voters.len();
        let c = &mut self.clients[(client - 1) as usize];
        if c.attempt != attempt {
            return;
        }
        c.attempt += 1;
        let wait_ms = match answer {
            Answer::Ok { .. } => {
                c.value = None;
                c.acked += 1;
                self.rng.between(0, client::THINK_MAX_MS)
            }
            Answer::Refused { leader } => {
                c.target = if leader != 0 {
                    leader
                } else {
                    1 + self.rng.below(nodes) as u64
                };
                self.rng
                    .between(client::BACKOFF_MIN_MS, client::BACKOFF_MAX_MS)
            }
        };
        self.note(0, format!("c{client} hears {answer:?}"));
        self.sched
            .after_us(wait_ms * US_PER_MS, Event::Send { client });
    }

    pub(super) fn client_timeout(&mut self, client: u64, attempt: u64) {
        let nodes = self.voters.len();
        let target = 1 + self.rng.below(nodes) as u64;
        let c = &mut self.clients[(client - 1) as usize];
        if c.attempt != attempt {
            return;
        }
        // Its fate is unknown: given up, a new value next.
        let lost = c.value.take();
        c.attempt += 1;
        c.target = target;
        let text = lost.map(|v| invariants::show(&v)).unwrap_or_default();
        self.note(0, format!("c{client} gives up on {text}"));
        self.sched.after_us(0, Event::Send { client });
    }
}
