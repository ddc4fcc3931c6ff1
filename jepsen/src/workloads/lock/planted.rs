//! Lock histories with planted anomalies, for the selftest and the tests.

use super::*;
use crate::workloads::support::hand_event;

/// Histories of this workload each with one planted anomaly, named; the
/// selftest checks that `check` calls every one invalid.
pub fn planted_anomalies() -> Vec<(&'static str, Vec<Event>)> {
    vec![
        (
            "overlapping holds",
            Planted::new()
                .round(0, 0, 10, 1, 30)
                .round(1, 20, 12, 2, 40)
                .events(),
        ),
        (
            "duplicate token",
            Planted::new()
                .round(0, 0, 10, 1, 10)
                .round(1, 20, 10, 2, 30)
                .events(),
        ),
        (
            "token going back at the fence",
            Planted::new()
                .round(0, 0, 10, 1, 10)
                .round(1, 20, 12, 2, 30)
                // Process 0 writes again with its old token, long after
                // its release, and the resource takes it.
                .write(0, 40, 10, 3)
                .events(),
        ),
        (
            "decreasing tokens in grant order",
            // (No writes: the fence would have refused the second.)
            Planted::new()
                .round(0, 0, 12, 0, 10)
                .round(1, 20, 10, 0, 30)
                .events(),
        ),
        ("no grant in a long healthy window", {
            // One grant, then ten minutes of refusals with no fault: far
            // beyond the bound for any session timeout a run uses.
            let mut p = Planted::new().round(0, 0, 10, 1, 10);
            for k in 1..=20u64 {
                p = p.refused(k % 3, k * 30_000);
            }
            p.events()
        }),
        (
            "token order broken over non-adjacent grants",
            // 20, then 30 held long by a session that ended, then 15
            // granted during 30's hold but late enough for its expiry:
            // adjacent grants show nothing wrong (20 < 30, and 30/15
            // overlap, excused), the pair 20/15 does.
            Planted::new()
                .round(0, 0, 20, 0, 10)
                .round(1, 20, 30, 0, 12_000)
                .session_ended(1)
                .round(2, 9_500, 15, 0, 9_600)
                .events(),
        ),
        (
            "overlap excused by an expired session too early",
            // The first holder's session ended, but the second grant came
            // 20 ms after its acquire: no server can have expired it.
            Planted::new()
                .round(0, 0, 10, 1, 30)
                .session_ended(0)
                .round(1, 20, 12, 2, 40)
                .events(),
        ),
    ]
}

/// Builds small lock histories by hand (times in milliseconds).
pub(super) struct Planted {
    events: Vec<Event>,
}

#[cfg(test)]
pub(super) const MS: u64 = 1_000_000;

impl Planted {
    pub(super) fn new() -> Planted {
        Planted { events: Vec::new() }
    }

    fn push(mut self, process: u64, kind: Kind, f: &str, value: Value, at_ms: u64) -> Planted {
        self.events
            .push(hand_event(Process::Client(process), kind, f, value, at_ms));
        self
    }

    /// A full round by `process`: granted `token` at `from_ms`, one write
    /// (fence sequence `seq`; none if 0), released at `to_ms`.
    pub(super) fn round(
        self,
        process: u64,
        from_ms: u64,
        token: u64,
        seq: u64,
        to_ms: u64,
    ) -> Planted {
        let session = 100 + process;
        let released = json!({
            "token": token, "session": session, "expired": false,
            "disconnected": false, "lost": null,
        });
        let granted = self
            .push(process, Kind::Invoke, "acquire", Value::Null, from_ms)
            .push(
                process,
                Kind::Ok,
                "acquire",
                json!({ "token": token, "session": session }),
                from_ms + 1,
            );
        let written = if seq == 0 {
            granted
        } else {
            granted.write(process, from_ms + 2, token, seq)
        };
        written
            .push(
                process,
                Kind::Invoke,
                "release",
                json!({ "token": token }),
                to_ms,
            )
            .push(process, Kind::Ok, "release", released, to_ms + 1)
    }

    /// Marks `process`'s releases as having seen its session expire.
    pub(super) fn session_ended(mut self, process: u64) -> Planted {
        for e in self.events.iter_mut() {
            if e.f == "release" && e.kind == Kind::Ok && e.process == Process::Client(process) {
                e.value["expired"] = json!(true);
            }
        }
        self
    }

    /// A write the fence accepted as its `seq`th.
    pub(super) fn write(self, process: u64, at_ms: u64, token: u64, seq: u64) -> Planted {
        self.push(
            process,
            Kind::Invoke,
            "write",
            json!({ "token": token }),
            at_ms,
        )
        .push(
            process,
            Kind::Ok,
            "write",
            json!({ "token": token, "accepted": true, "seq": seq }),
            at_ms,
        )
    }

    /// An acquire that was refused (its wait ran out).
    pub(super) fn refused(self, process: u64, at_ms: u64) -> Planted {
        self.push(process, Kind::Invoke, "acquire", Value::Null, at_ms)
            .push(process, Kind::Fail, "acquire", Value::Null, at_ms + 5_000)
    }

    /// The events in time order, numbered.
    pub(super) fn events(mut self) -> Vec<Event> {
        self.events.sort_by_key(|e| e.time);
        for (i, e) in self.events.iter_mut().enumerate() {
            e.index = i as u64;
        }
        self.events
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::Validity;

    fn ctx() -> CheckCtx {
        CheckCtx {
            faults: Vec::new(),
            session_timeout: Duration::from_secs(10),
            end: 0,
        }
    }

    #[test]
    fn every_planted_anomaly_is_invalid() {
        for (name, events) in planted_anomalies() {
            let result = check(&events, &ctx());
            assert_eq!(result.valid, Validity::Invalid, "{name}: {result:?}");
            assert_eq!(result.anomalies.len(), 1, "{name}: {:?}", result.anomalies);
        }
    }

    #[test]
    fn planted_anomalies_are_of_the_right_kind() {
        let kinds: Vec<String> = planted_anomalies()
            .into_iter()
            .map(|(_, events)| check(&events, &ctx()).anomalies[0].kind.clone())
            .collect();
        assert_eq!(
            kinds,
            [
                "overlap",
                "duplicate-token",
                "fence-went-back",
                "token-order",
                "no-grant-while-healthy",
                "token-order",
                "overlap"
            ]
        );
    }
}
