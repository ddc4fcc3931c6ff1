//! `ephemeral` histories with planted anomalies, for the selftest and the
//! tests.

use serde_json::json;

use crate::history::{Event, Kind};
use crate::workloads::support::Planted;

use super::LINGER_SLACK;

const MS: u64 = 1_000_000;
const PP: &str = "/jepsen/eph/planted";

/// A planted history: holder 1 is killed at 1 s and its node seen gone at
/// 5 s; holder 2 closes at 2 s and is seen gone at 2.1 s (with
/// `lingering`, the reads that see them gone are left out). `plant` adds
/// to it.
fn planted_history(lingering: bool, plant: impl Fn(&Planted)) -> Vec<Event> {
    let h = Planted::new();
    let (a, b) = (format!("{PP}/h-0000"), format!("{PP}/h-0001"));
    for (p, path) in [(1, &a), (2, &b)] {
        h.op(
            p,
            "create",
            json!({ "path": path }),
            0,
            Kind::Ok,
            json!({ "path": path, "session": p }),
            10 * MS,
        );
        h.op(
            p,
            "confirm",
            json!({ "path": path }),
            500 * MS,
            Kind::Ok,
            json!({ "path": path, "present": true }),
            510 * MS,
        );
    }
    h.op(
        9,
        "kill-client",
        json!({ "path": a, "holder": 1 }),
        1_000 * MS,
        Kind::Ok,
        json!({ "path": a, "holder": 1 }),
        1_010 * MS,
    );
    h.op(
        2,
        "close",
        json!({ "path": b }),
        2_000 * MS,
        Kind::Ok,
        json!({ "path": b }),
        2_010 * MS,
    );
    let read = |at: u64, present: &[&String]| {
        h.op(
            0,
            "read",
            json!({ "parent": PP }),
            at,
            Kind::Ok,
            json!({ "parent": PP, "present": present }),
            at + 5 * MS,
        );
    };
    read(20 * MS, &[&a, &b]);
    read(1_500 * MS, &[&a, &b]);
    if !lingering {
        read(2_100 * MS, &[&a]);
        read(5_000 * MS, &[]);
    }
    plant(&h);
    h.events()
}

/// A clean history.
pub fn clean_history() -> Vec<Event> {
    planted_history(false, |_| {})
}

/// Histories of this workload each with one planted anomaly, named; the
/// selftest checks that `check` calls every one invalid.
pub fn planted_anomalies() -> Vec<(&'static str, Vec<Event>)> {
    let a = format!("{PP}/h-0000");
    let b = format!("{PP}/h-0001");
    vec![
        (
            "ephemeral vanished while its session lived",
            planted_history(false, |h| {
                // Seen gone by the read at 5 s, yet holder 1 confirmed its
                // session at 5.1 s (as if the kill had not landed).
                h.op(
                    1,
                    "confirm",
                    json!({ "path": a }),
                    5_100 * MS,
                    Kind::Ok,
                    json!({ "path": a, "present": true }),
                    5_110 * MS,
                );
            }),
        ),
        (
            "ephemeral lingering after its session was killed",
            planted_history(true, |h| {
                // Deadline: 1.01 s + 5 s timeout + slack.
                let late = 1_010 * MS + (5_000 * MS) + LINGER_SLACK.as_nanos() as u64 + 1;
                h.op(
                    0,
                    "read",
                    json!({ "parent": PP }),
                    late,
                    Kind::Ok,
                    json!({ "parent": PP, "present": [&a] }),
                    late + 5 * MS,
                );
            }),
        ),
        (
            "ephemeral lingering after its session closed",
            planted_history(true, |h| {
                h.op(
                    0,
                    "read",
                    json!({ "parent": PP }),
                    2_100 * MS,
                    Kind::Ok,
                    json!({ "parent": PP, "present": [&a, &b] }),
                    2_105 * MS,
                );
            }),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::Validity;
    use crate::workloads::ephemeral::check;
    use crate::workloads::support::planted_ctx;

    #[test]
    fn clean_history_is_valid() {
        let events = clean_history();
        let r = check(&events, &planted_ctx(&events));
        assert_eq!(r.valid, Validity::Valid, "{:?}", r.anomalies);
        assert_eq!(r.stats["kills"], 1);
    }

    #[test]
    fn every_planted_anomaly_is_invalid() {
        crate::workloads::support::assert_every_planted_invalid(planted_anomalies(), check);
    }
}
