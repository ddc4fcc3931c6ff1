//! The answers of the lock API: one shape for both body contracts, with
//! the fields each of them names.
//!
//! Two published contracts reach the same operations (see `locks.rs`):
//!
//! - the *path* form, `/api/v1/locks/{name}/acquire|renew|release`,
//!   whose clients read `expires_at` (RFC 3339) and, after a renewal,
//!   `new_expires_at` (RFC 3339);
//! - the *body* form, `/api/v1/locks/acquire|renew|release` with the name
//!   in `lock_key`, whose clients read `lock_key`, `client_id`,
//!   `fencing_token`, `acquired`, `expires_at_epoch_ms` and, after a
//!   renewal, `new_expires_at` (ms since the Unix epoch).
//!
//! Every answer carries the fields of both (additive: a client of either
//! finds what it reads, and Warden's own `expires_at_ms` stays), except
//! `new_expires_at`, which the two contracts type differently: a string on
//! the path form, a number on the body form. A lease's expiry is therefore
//! always written three ways, all the same instant: `expires_at_ms` and
//! `expires_at_epoch_ms` (ms since the Unix epoch, the Raft leader's clock)
//! and `expires_at` (that instant in RFC 3339, UTC, millisecond precision).
//! `openapi.json` describes each field; `tests/seed_contracts.rs` holds
//! every answer against it.

use std::time::{Duration, UNIX_EPOCH};

use serde_json::{json, Map, Value};
use warden_recipes::Lease;

/// Which body contract a request came in by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Contract {
    /// `/api/v1/locks/{name}/...`
    Path,
    /// `/api/v1/locks/acquire` etc., name in `lock_key`.
    Body,
}

/// `ms` since the Unix epoch in RFC 3339 (UTC, milliseconds), e.g.
/// `2026-03-30T01:40:10.234Z`.
pub(crate) fn rfc3339(ms: i64) -> String {
    let at = u64::try_from(ms)
        .ok()
        .and_then(|ms| UNIX_EPOCH.checked_add(Duration::from_millis(ms)))
        .unwrap_or(UNIX_EPOCH);
    humantime::format_rfc3339_millis(at).to_string()
}

/// A lease's identity and expiry: `lock_key`, `client_id`,
/// `fencing_token` and the expiry three ways.
fn lease_fields(name: &str, lease: &Lease) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("lock_key".into(), json!(name));
    m.insert("client_id".into(), json!(lease.client_id));
    m.insert("fencing_token".into(), json!(lease.fencing_token));
    expiry(&mut m, lease.expires_at_ms);
    m
}

fn expiry(m: &mut Map<String, Value>, ms: i64) {
    m.insert("expires_at_ms".into(), json!(ms));
    m.insert("expires_at_epoch_ms".into(), json!(ms));
    m.insert("expires_at".into(), json!(rfc3339(ms)));
}

/// A lease as others see it (a 409's `holder`, a state read, a watch):
/// `lease` as its node stores it, shown by its label, never its
/// `client_id` (see `holder.rs`).
pub(crate) fn holder(lease: &Lease) -> Value {
    let mut m = Map::new();
    m.insert(
        "label".into(),
        json!(super::holder::label(&lease.client_id)),
    );
    m.insert("fencing_token".into(), json!(lease.fencing_token));
    expiry(&mut m, lease.expires_at_ms);
    Value::Object(m)
}

/// A 200 to an acquire (also a holder's re-entry: its grant).
pub(crate) fn granted(name: &str, lease: &Lease) -> Value {
    let mut m = lease_fields(name, lease);
    m.insert("acquired".into(), json!(true));
    Value::Object(m)
}

/// A 409 to an acquire: not granted within `wait`; with `holder` if the
/// lock was still held when read after the wait.
pub(crate) fn not_granted(
    name: &str,
    client_id: &str,
    holder_now: Option<&Lease>,
    wait: Duration,
) -> Value {
    let mut m = Map::new();
    m.insert("acquired".into(), json!(false));
    m.insert("lock_key".into(), json!(name));
    m.insert("client_id".into(), json!(client_id));
    if let Some(h) = holder_now {
        m.insert("holder".into(), holder(h));
    }
    let error = format!("{name} is held; not granted within {} ms", wait.as_millis());
    m.insert("error".into(), json!(error));
    Value::Object(m)
}

/// A 200 to a renewal: the lease with its new expiry, and that expiry as
/// `new_expires_at` in the contract's type.
pub(crate) fn renewed(contract: Contract, name: &str, lease: &Lease) -> Value {
    let mut m = lease_fields(name, lease);
    m.insert("renewed".into(), json!(true));
    let new_expires_at = match contract {
        Contract::Path => json!(rfc3339(lease.expires_at_ms)),
        Contract::Body => json!(lease.expires_at_ms),
    };
    m.insert("new_expires_at".into(), new_expires_at);
    Value::Object(m)
}

/// A 200 to a release.
pub(crate) fn released(name: &str, client_id: &str, token: u64) -> Value {
    json!({
        "released": true,
        "lock_key": name,
        "client_id": client_id,
        "fencing_token": token,
    })
}

/// A 200 to a state read.
pub(crate) fn state(name: &str, holder_now: &Lease, waiters: usize) -> Value {
    json!({
        "lock_key": name,
        "holder": holder(holder_now),
        "waiters": waiters,
    })
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::*;

    fn now_ms() -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    }

    fn lease(expires_at_ms: i64) -> Lease {
        Lease {
            name: "jobs".into(),
            client_id: "worker-7".into(),
            fencing_token: 42,
            expires_at_ms,
        }
    }

    #[test]
    fn rfc3339_is_utc_with_milliseconds() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        // Seed 004's example instant.
        assert_eq!(rfc3339(1_774_834_810_234), "2026-03-30T01:40:10.234Z");
        assert_eq!(rfc3339(-5), "1970-01-01T00:00:00.000Z");
        let now = now_ms();
        let parsed = humantime::parse_rfc3339(&rfc3339(now)).unwrap();
        assert_eq!(
            parsed.duration_since(UNIX_EPOCH).unwrap().as_millis() as i64,
            now
        );
    }

    #[test]
    fn new_expires_at_is_typed_by_contract() {
        let l = lease(1_774_834_815_234);
        let path = renewed(Contract::Path, "jobs", &l);
        let body = renewed(Contract::Body, "jobs", &l);
        assert_eq!(path["new_expires_at"], "2026-03-30T01:40:15.234Z");
        assert_eq!(body["new_expires_at"], 1_774_834_815_234i64);
        for a in [&path, &body] {
            assert_eq!(a["renewed"], true);
            assert_eq!(a["expires_at"], "2026-03-30T01:40:15.234Z");
            assert_eq!(a["expires_at_epoch_ms"], a["expires_at_ms"]);
            assert_eq!(a["client_id"], "worker-7");
            assert_eq!(a["fencing_token"], 42);
        }
    }

    #[test]
    fn a_grant_carries_both_seeds_fields() {
        let a = granted("jobs", &lease(1_000));
        let fields: Vec<&str> = a.as_object().unwrap().keys().map(String::as_str).collect();
        let mut expected = vec![
            "acquired",
            "client_id",
            "expires_at",
            "expires_at_epoch_ms",
            "expires_at_ms",
            "fencing_token",
            "lock_key",
        ];
        expected.sort_unstable();
        let mut fields = fields;
        fields.sort_unstable();
        assert_eq!(fields, expected);
    }
}
