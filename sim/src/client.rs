//! Clients, as a model for now: each writes unique values (`c<client>-<n>`)
//! one at a time through the node it thinks leads. A node that does not
//! lead refuses and names the leader it knows; the client tries there, or
//! elsewhere. A write is acknowledged once the node it was proposed on has
//! applied it (committed); a write unanswered in time is given up (its
//! fate unknown) and the client goes on with a new value.
//!
//! The real `warden-client` on a deterministic executor comes later
//! (docs/simulation.md).

/// Client links are not faulted yet: a request or answer takes this long.
pub const CLIENT_DELAY_MIN_US: u64 = 100;
pub const CLIENT_DELAY_MAX_US: u64 = 1_000;
/// A write not answered in this long is given up.
pub const CLIENT_TIMEOUT_MS: u64 = 2_000;
/// Between an answer and the next request.
pub const THINK_MAX_MS: u64 = 30;
/// After a refusal, before trying again.
pub const BACKOFF_MIN_MS: u64 = 5;
pub const BACKOFF_MAX_MS: u64 = 50;

pub struct Client {
    pub id: u64,
    /// The node it sends to next.
    pub target: u64,
    /// Values written so far (the next value's number).
    pub written: u64,
    /// The value in flight, kept across refusals (it was not proposed).
    pub value: Option<Vec<u8>>,
    /// Each request, refusal and timeout starts a new attempt; answers to
    /// an older one are stale.
    pub attempt: u64,
    pub acked: u64,
}

impl Client {
    pub fn new(id: u64, target: u64) -> Self {
        Self {
            id,
            target,
            written: 0,
            value: None,
            attempt: 0,
            acked: 0,
        }
    }

    /// The value to send: the one in flight, or a new one.
    pub fn value(&mut self) -> Vec<u8> {
        if self.value.is_none() {
            self.written += 1;
            self.value = Some(format!("c{}-{}", self.id, self.written).into_bytes());
        }
        self.value.clone().expect("just set")
    }
}

/// A node's answer to a client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Committed and applied on the node it was proposed on.
    Ok { index: u64 },
    /// Not proposed: the node does not lead (it names the leader it knows,
    /// 0 if none) or raft dropped the proposal.
    Refused { leader: u64 },
}
