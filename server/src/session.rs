//! Session liveness, decided by the leader.
//!
//! The session table itself (id, password, timeout) is replicated state in
//! the tree. What is *not* replicated is when each session was last heard
//! from: only the leader tracks that, here, from its own monotonic clock,
//! and when a deadline passes it proposes a `CloseSession` — it never
//! deletes anything itself. A new leader re-arms every session with a full
//! timeout from its own clock, so a leader change can only extend a
//! session's life, never shorten it.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

#[derive(Debug, Default)]
pub struct SessionTracker {
    deadlines: HashMap<u64, Deadline>,
    /// Sessions whose CloseSession has been proposed but not yet applied.
    closing: HashSet<u64>,
}

#[derive(Debug, Clone, Copy)]
struct Deadline {
    at: Instant,
    timeout: Duration,
}

impl SessionTracker {
    /// Starts tracking a session (created, or found on becoming leader).
    pub fn arm(&mut self, id: u64, timeout: Duration, now: Instant) {
        self.deadlines.insert(
            id,
            Deadline {
                at: now + timeout,
                timeout,
            },
        );
    }

    /// The session was heard from: push its deadline out.
    pub fn touch(&mut self, id: u64, now: Instant) {
        if let Some(d) = self.deadlines.get_mut(&id) {
            d.at = now + d.timeout;
        }
    }

    /// The session is gone (its CloseSession applied).
    pub fn remove(&mut self, id: u64) {
        self.deadlines.remove(&id);
        self.closing.remove(&id);
    }

    /// Becoming leader: every known session gets a full timeout from now.
    pub fn rearm_all(&mut self, sessions: impl IntoIterator<Item = (u64, Duration)>, now: Instant) {
        self.deadlines.clear();
        self.closing.clear();
        for (id, timeout) in sessions {
            self.arm(id, timeout, now);
        }
    }

    /// Losing leadership: stop deciding.
    pub fn clear(&mut self) {
        self.deadlines.clear();
        self.closing.clear();
    }

    /// Sessions past their deadline that are not already being closed,
    /// sorted; they are marked as closing.
    pub fn take_expired(&mut self, now: Instant) -> Vec<u64> {
        let mut out: Vec<u64> = self
            .deadlines
            .iter()
            .filter(|(id, d)| d.at <= now && !self.closing.contains(id))
            .map(|(id, _)| *id)
            .collect();
        out.sort_unstable();
        self.closing.extend(out.iter().copied());
        out
    }

    /// A proposed CloseSession could not be proposed or was lost: let the
    /// next check try again.
    pub fn unmark_closing(&mut self, id: u64) {
        self.closing.remove(&id);
    }

    pub fn is_tracked(&self, id: u64) -> bool {
        self.deadlines.contains_key(&id)
    }
}

/// Clamps a requested timeout into the server's bounds.
pub fn negotiate_timeout(requested_ms: u32, min_ms: u32, max_ms: u32) -> u32 {
    requested_ms.clamp(min_ms, max_ms)
}

/// A new session id: this server's id in the top byte (so ids proposed by
/// different servers never collide), random below.
pub fn new_session_id(node_id: u64) -> u64 {
    loop {
        let low: u64 = rand::random::<u64>() & 0x00ff_ffff_ffff_ffff;
        let id = ((node_id & 0xff) << 56) | low;
        if id != 0 {
            return id;
        }
    }
}

/// A new session password (16 random bytes).
pub fn new_password() -> Vec<u8> {
    rand::random::<[u8; 16]>().to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_touch_and_closing() {
        let t0 = Instant::now();
        let mut s = SessionTracker::default();
        s.arm(1, Duration::from_secs(1), t0);
        s.arm(2, Duration::from_secs(3), t0);
        assert!(s.take_expired(t0).is_empty());
        s.touch(1, t0 + Duration::from_millis(900));
        assert!(s.take_expired(t0 + Duration::from_millis(1500)).is_empty());
        assert_eq!(s.take_expired(t0 + Duration::from_millis(1900)), vec![1]);
        // Marked closing: not proposed twice.
        assert!(s.take_expired(t0 + Duration::from_millis(2000)).is_empty());
        assert_eq!(s.take_expired(t0 + Duration::from_secs(3)), vec![2]);
        s.unmark_closing(2);
        assert_eq!(s.take_expired(t0 + Duration::from_secs(3)), vec![2]);
        s.remove(1);
        assert!(!s.is_tracked(1));
    }

    #[test]
    fn rearm_only_extends() {
        let t0 = Instant::now();
        let mut s = SessionTracker::default();
        s.arm(1, Duration::from_secs(1), t0);
        s.rearm_all([(1, Duration::from_secs(1))], t0 + Duration::from_secs(5));
        assert!(s.take_expired(t0 + Duration::from_millis(5500)).is_empty());
        assert_eq!(s.take_expired(t0 + Duration::from_secs(6)), vec![1]);
    }

    #[test]
    fn ids_and_timeouts() {
        assert_eq!(negotiate_timeout(10, 1000, 60_000), 1000);
        assert_eq!(negotiate_timeout(100_000, 1000, 60_000), 60_000);
        assert_eq!(negotiate_timeout(5000, 1000, 60_000), 5000);
        let id = new_session_id(3);
        assert_eq!(id >> 56, 3);
        assert_ne!(new_session_id(3), id);
        assert_eq!(new_password().len(), 16);
    }
}
