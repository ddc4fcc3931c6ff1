//! [`FencedResource`]: the resource side of fencing.
//!
//! A lock alone cannot stop a holder that paused (a GC pause, a stopped VM)
//! past its session timeout: the lock passed to someone else meanwhile,
//! but the paused process still believes it holds it and, when it wakes,
//! writes. The fix is on the resource's side: every write carries the
//! writer's fencing token ([`MutexGuard::fencing_token`](crate::MutexGuard::fencing_token)),
//! and the resource refuses a token older than the newest it has accepted.
//! Tokens strictly increase across grants, so the zombie's write is the
//! one refused.
//!
//! A token equal to the newest is accepted: one grant may write many times.
//!
//! Check and write must be one step. If a writer checked, then wrote
//! later, a newer holder could check and write in between and be
//! overwritten by the older one. [`FencedResource::write_with`] runs the
//! write under the same lock as the check; [`FencedResource::check_and_record`]
//! is for resources whose write is itself ordered after the record.
//!
//! The table lives in memory; a resource that must survive restarts has to
//! persist the highest token with its data, as the `warden-fenced` store
//! and its SQL recipe do (`docs/fencing.md`).

use std::collections::HashMap;

/// A write refused because its token is older than one already accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Stale: {resource}: fencing token {got} is older than {seen}, already accepted")]
pub struct Stale {
    pub resource: String,
    /// The highest token accepted so far.
    pub seen: u64,
    /// The token that was refused.
    pub got: u64,
}

/// The highest fencing token accepted per resource name. Thread-safe.
#[derive(Debug, Default)]
pub struct FencedResource {
    highest: std::sync::Mutex<HashMap<String, u64>>,
}

impl FencedResource {
    pub fn new() -> Self {
        Self::default()
    }

    /// Accepts `token` for `resource` if it is at least the highest seen,
    /// and records it.
    pub fn check_and_record(&self, resource: &str, token: u64) -> Result<(), Stale> {
        self.write_with(resource, token, || ())
    }

    /// Like [`check_and_record`](Self::check_and_record), and runs `write`
    /// (only if accepted) before any other writer can be checked.
    pub fn write_with<T>(
        &self,
        resource: &str,
        token: u64,
        write: impl FnOnce() -> T,
    ) -> Result<T, Stale> {
        let mut highest = self.highest.lock().unwrap_or_else(|e| e.into_inner());
        let seen = highest.get(resource).copied().unwrap_or(0);
        if token < seen {
            return Err(Stale {
                resource: resource.to_string(),
                seen,
                got: token,
            });
        }
        highest.insert(resource.to_string(), token);
        Ok(write())
    }

    /// The highest token accepted for `resource`, if any.
    pub fn highest(&self, resource: &str) -> Option<u64> {
        let highest = self.highest.lock().unwrap_or_else(|e| e.into_inner());
        highest.get(resource).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn older_tokens_are_refused_equal_ones_accepted() {
        let r = FencedResource::new();
        assert_eq!(r.highest("a"), None);
        assert_eq!(r.check_and_record("a", 5), Ok(()));
        assert_eq!(r.check_and_record("a", 5), Ok(()));
        assert_eq!(r.check_and_record("a", 7), Ok(()));
        assert_eq!(
            r.check_and_record("a", 6),
            Err(Stale {
                resource: "a".into(),
                seen: 7,
                got: 6
            })
        );
        // Resources are independent.
        assert_eq!(r.check_and_record("b", 1), Ok(()));
        assert_eq!(r.highest("a"), Some(7));
    }

    #[test]
    fn a_refused_write_does_not_run() {
        let r = FencedResource::new();
        let mut data = Vec::new();
        r.write_with("x", 3, || data.push(3)).unwrap();
        assert!(r.write_with("x", 2, || data.push(2)).is_err());
        assert_eq!(data, vec![3]);
    }
}
