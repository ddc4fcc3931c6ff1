//! The `lease` workload's planted histories (each with one anomaly the
//! checker must find) and the builder they and the checker's tests use.

use super::*;

/// Histories of this workload each with one planted anomaly, named; the
/// selftest checks that `check` calls every one invalid.
pub fn planted_anomalies() -> Vec<(&'static str, Vec<Event>)> {
    vec![
        (
            "overlapping holds, the first lease live",
            // b is granted at 101 ms while a, granted at 1 ms with a 3 s
            // TTL, holds it until 400 ms.
            Plant::new()
                .round("a", 0, 10, 1, 400)
                .round("b", 100, 12, 2, 500)
                .events(),
        ),
        (
            "overlap a renewal kept live",
            // a is granted at 1 ms, renews at 2.5 s and holds to 5 s; b is
            // granted at 3.2 s: a TTL after a's acquire, not after its
            // renewal.
            Plant::new()
                .acquire_ok("a", 0, 10)
                .renew("a", 2_500, 10, Kind::Ok)
                .release("a", 5_000, 10, Kind::Ok)
                .acquire_ok("b", 3_200, 12)
                .release("b", 5_100, 12, Kind::Ok)
                .events(),
        ),
        (
            "duplicate token",
            Plant::new()
                .round("a", 0, 10, 1, 50)
                .round("b", 100, 10, 2, 150)
                .events(),
        ),
        (
            "token order broken between grants that are not adjacent",
            // a knows its grant at 101 ms; c asks at 200 ms, so c's grant
            // came after a's, yet its token is lower. b asked at 0 and
            // learned of its grant only at 400 ms: a-b and b-c are
            // unordered, and no adjacent pair in grant order is ordered.
            Plant::new()
                .acquire_ok_at("b", 0, 400, 60)
                .release("b", 450, 60, Kind::Ok)
                .acquire_ok_at("a", 100, 101, 50)
                .release("a", 150, 50, Kind::Ok)
                .acquire_ok_at("c", 200, 250, 40)
                .release("c", 300, 40, Kind::Ok)
                .events(),
        ),
        (
            "token going back at the resource, written within its lease",
            // a asked at 50 ms and learned of its grant (token 10) only at
            // 200 ms, after b had held the lease (token 12) and written:
            // no pair of grants is ordered, the holds do not overlap as
            // the clients saw them, yet a's write within its lease lands
            // after b's (what an unfenced resource shows of a grant made
            // while b held the lease).
            Plant::new()
                .acquire_ok_at("a", 50, 200, 10)
                .acquire_ok_at("b", 99, 100, 12)
                .write("b", 102, 12, 1)
                .release("b", 150, 12, Kind::Ok)
                .write("a", 202, 10, 2)
                .release("a", 250, 10, Kind::Ok)
                .events(),
        ),
        (
            "a gone holder's lease outliving its TTL and an election",
            // a is granted at 1 ms and goes silent (its release at the end
            // is refused: the lease lapsed). Its lease must be gone by
            // 8 s (3 s TTL, 5 s bound); b is refused until 10 s and
            // granted only at 12 s. Shorter than the general liveness
            // bound (14 s): only the expiry check sees it.
            Plant::new()
                .acquire_ok("a", 0, 10)
                .write("a", 2, 10, 1)
                .refused("b", 1_000)
                .refused("b", 4_000)
                .refused("b", 7_000)
                .acquire_ok_at("b", 10_000, 12_000, 12)
                .write("b", 12_002, 12, 2)
                .release("b", 12_050, 12, Kind::Ok)
                .release("a", 12_100, 10, Kind::Fail)
                .events(),
        ),
        ("no grant in a long healthy window", {
            // One grant, then ten minutes of refusals with no fault.
            let mut p = Plant::new();
            p.round("a", 0, 10, 1, 50);
            for k in 1..=20u64 {
                p.refused(&format!("w{k}"), k * 30_000);
            }
            p.events()
        }),
    ]
}

/// Builds small lease histories by hand (times in milliseconds; TTL 3 s).
#[derive(Default)]
pub(super) struct Plant {
    /// (time, order recorded, event).
    events: Vec<(u64, usize, Event)>,
    /// A process per client id.
    processes: BTreeMap<String, u64>,
}

pub(super) const MS: u64 = 1_000_000;
const PLANTED_TTL_MS: u64 = 3_000;

impl Plant {
    pub(super) fn new() -> Plant {
        Plant::default()
    }

    pub(super) fn process(&mut self, client_id: &str) -> u64 {
        let next = self.processes.len() as u64;
        *self.processes.entry(client_id.to_string()).or_insert(next)
    }

    pub(super) fn push(&mut self, process: u64, kind: Kind, f: &str, value: Value, at_ms: u64) {
        let time = at_ms * MS;
        let order = self.events.len();
        self.events.push((
            time,
            order,
            Event {
                index: 0,
                process: Process::Client(process),
                kind,
                f: f.to_string(),
                value,
                time,
                mono_ns: time,
                wall_ns: 0,
                error: (kind != Kind::Ok && kind != Kind::Invoke).then(|| "planted".to_string()),
            },
        ));
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn op(
        &mut self,
        client_id: &str,
        f: &str,
        invoke: Value,
        at_ms: u64,
        kind: Kind,
        done: Value,
        done_ms: u64,
    ) -> &mut Plant {
        let p = self.process(client_id);
        self.push(p, Kind::Invoke, f, invoke, at_ms);
        self.push(p, kind, f, done, done_ms);
        self
    }

    pub(super) fn acquire_invoke(client_id: &str) -> Value {
        json!({
            "lock": LEASE_NAME, "client_id": client_id, "node": 1,
            "ttl_ms": PLANTED_TTL_MS, "wait_timeout_ms": 3000,
        })
    }

    /// An acquire invoked at `at_ms` and granted `token` 1 ms later.
    pub(super) fn acquire_ok(&mut self, client_id: &str, at_ms: u64, token: u64) -> &mut Plant {
        self.acquire_ok_at(client_id, at_ms, at_ms + 1, token)
    }

    /// An acquire invoked at `at_ms`, answered `token` at `done_ms`.
    pub(super) fn acquire_ok_at(
        &mut self,
        client_id: &str,
        at_ms: u64,
        done_ms: u64,
        token: u64,
    ) -> &mut Plant {
        self.op(
            client_id,
            "acquire",
            Plant::acquire_invoke(client_id),
            at_ms,
            Kind::Ok,
            json!({ "client_id": client_id, "node": 1, "token": token }),
            done_ms,
        )
    }

    /// An acquire whose answer was lost (`info` at `done_ms`).
    #[cfg(test)]
    pub(super) fn acquire_lost(&mut self, client_id: &str, at_ms: u64, done_ms: u64) -> &mut Plant {
        self.op(
            client_id,
            "acquire",
            Plant::acquire_invoke(client_id),
            at_ms,
            Kind::Info,
            json!({ "client_id": client_id, "node": 1 }),
            done_ms,
        )
    }

    /// An acquire not granted within its 3 s wait (a 409).
    pub(super) fn refused(&mut self, client_id: &str, at_ms: u64) -> &mut Plant {
        self.op(
            client_id,
            "acquire",
            Plant::acquire_invoke(client_id),
            at_ms,
            Kind::Fail,
            json!({ "client_id": client_id, "node": 1, "status": 409, "acquired": false }),
            at_ms + 3_000,
        )
    }

    pub(super) fn renew(
        &mut self,
        client_id: &str,
        at_ms: u64,
        token: u64,
        kind: Kind,
    ) -> &mut Plant {
        let v = json!({ "client_id": client_id, "token": token, "node": 1 });
        self.op(client_id, "renew", v.clone(), at_ms, kind, v, at_ms + 1)
    }

    pub(super) fn release(
        &mut self,
        client_id: &str,
        at_ms: u64,
        token: u64,
        kind: Kind,
    ) -> &mut Plant {
        let v = json!({ "client_id": client_id, "token": token, "node": 1 });
        self.op(client_id, "release", v.clone(), at_ms, kind, v, at_ms + 1)
    }

    /// A write through the fence: accepted as its `seq`th, or refused
    /// (`seq` 0).
    pub(super) fn write(
        &mut self,
        client_id: &str,
        at_ms: u64,
        token: u64,
        seq: u64,
    ) -> &mut Plant {
        let invoke = json!({ "client_id": client_id, "token": token });
        let (kind, done) = if seq == 0 {
            (
                Kind::Fail,
                json!({ "client_id": client_id, "token": token, "accepted": false }),
            )
        } else {
            (
                Kind::Ok,
                json!({ "client_id": client_id, "token": token, "accepted": true, "seq": seq }),
            )
        };
        self.op(client_id, "write", invoke, at_ms, kind, done, at_ms)
    }

    /// Granted `token` at `from_ms` (asked 1 ms before), one write (fence
    /// sequence `seq`), released at `to_ms`.
    pub(super) fn round(
        &mut self,
        client_id: &str,
        from_ms: u64,
        token: u64,
        seq: u64,
        to_ms: u64,
    ) -> &mut Plant {
        self.acquire_ok(client_id, from_ms, token)
            .write(client_id, from_ms + 2, token, seq)
            .release(client_id, to_ms, token, Kind::Ok)
    }

    /// The events in time order (invocations before completions at the same
    /// time, as recorded), numbered.
    pub(super) fn events(&self) -> Vec<Event> {
        let mut sorted = self.events.clone();
        sorted.sort_by_key(|(time, order, _)| (*time, *order));
        sorted
            .into_iter()
            .enumerate()
            .map(|(i, (_, _, mut e))| {
                e.index = i as u64;
                e
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::Validity;
    use crate::workloads::support::{assert_every_planted_invalid, planted_ctx};

    #[test]
    fn every_planted_anomaly_is_invalid() {
        assert_every_planted_invalid(planted_anomalies(), check);
    }

    #[test]
    fn planted_anomalies_are_of_the_right_kind() {
        let kinds: Vec<String> = planted_anomalies()
            .into_iter()
            .map(|(_, events)| {
                check(&events, &planted_ctx(&events)).anomalies[0]
                    .kind
                    .clone()
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "overlap",
                "overlap",
                "duplicate-token",
                "token-order",
                "fence-went-back",
                "lease-outlived-ttl",
                "no-grant-while-healthy"
            ]
        );
    }

    #[test]
    fn a_clean_history_is_valid() {
        let events = Plant::new()
            .round("a", 0, 10, 1, 10)
            .refused("b", 5)
            .round("c", 20, 12, 2, 30)
            .acquire_ok("d", 40, 15)
            .write("d", 42, 15, 3)
            .renew("d", 45, 15, Kind::Ok)
            .write("d", 47, 15, 4)
            .release("d", 50, 15, Kind::Ok)
            .events();
        let result = check(&events, &planted_ctx(&events));
        assert_eq!(result.valid, Validity::Valid, "{result:?}");
        assert!(result.notes.is_empty());
        assert_eq!(result.stats["grants"], 3);
        assert_eq!(result.stats["acquire"]["fail"], 1);
        assert_eq!(result.stats["renew"]["ok"], 1);
        assert_eq!(result.stats["write"]["accepted"], 4);
    }

    #[test]
    fn a_zombie_past_its_ttl_is_a_note_and_its_late_write_refused() {
        // a is granted at 1 ms and stalls; its lease lapses, b is granted
        // at 3.5 s and writes; a's late write is refused, its release too.
        let events = Plant::new()
            .acquire_ok("a", 0, 10)
            .write("a", 2, 10, 1)
            .acquire_ok("b", 3_500, 12)
            .write("b", 3_502, 12, 2)
            .write("a", 3_600, 10, 0)
            .renew("a", 3_610, 10, Kind::Fail)
            .release("a", 3_700, 10, Kind::Fail)
            .release("b", 3_800, 12, Kind::Ok)
            .events();
        let result = check(&events, &planted_ctx(&events));
        assert_eq!(result.valid, Validity::Valid, "{result:?}");
        assert_eq!(result.notes.len(), 1, "{:?}", result.notes);
        assert_eq!(result.notes[0].kind, "overlap-after-expiry");
        assert_eq!(result.stats["write"]["refused"], 1);
    }

    #[test]
    fn an_unfenced_zombie_write_is_a_note_and_a_silent_holders_lease_may_lapse() {
        // As above, with a resource that accepts everything: a's late
        // write after b's is accepted, written past a's lease: a note.
        // b, refused from 1 s to 3.5 s, waited within a's claim (to 8 s).
        let events = Plant::new()
            .acquire_ok("a", 0, 10)
            .write("a", 2, 10, 1)
            .refused("b", 500)
            .acquire_ok("b", 3_500, 12)
            .write("b", 3_502, 12, 2)
            .write("a", 3_600, 10, 3)
            .renew("a", 3_610, 10, Kind::Fail)
            .write("a", 3_620, 10, 4)
            .release("a", 3_700, 10, Kind::Fail)
            .release("b", 3_800, 12, Kind::Ok)
            .events();
        let result = check(&events, &planted_ctx(&events));
        assert_eq!(result.valid, Validity::Valid, "{result:?}");
        let kinds: Vec<&str> = result.notes.iter().map(|n| n.kind.as_str()).collect();
        assert_eq!(
            kinds,
            [
                "overlap-after-expiry",
                "late-write-accepted",
                "late-write-accepted"
            ]
        );
        assert_eq!(result.stats["notes_by_kind"]["late-write-accepted"], 2);

        // A fault boundary (a leader killed at 6 s, back at 7 s) gives a's
        // lease until 7 + 3 + 5 s: b refused until 13 s, granted at
        // 13.5 s, is within it; without the fault it is not.
        let stuck = |with_fault: bool| {
            let mut p = Plant::new();
            p.acquire_ok("a", 0, 10)
                .refused("b", 1_000)
                .refused("b", 4_000)
                .refused("b", 7_000)
                .refused("b", 10_000)
                .acquire_ok_at("b", 13_000, 13_500, 12)
                .release("b", 13_600, 12, Kind::Ok);
            let mut events = p.events();
            if with_fault {
                for (kind, f, at_ms) in [
                    (Kind::Invoke, "kill", 6_000u64),
                    (Kind::Ok, "kill", 6_001),
                    (Kind::Invoke, "restart", 7_000),
                    (Kind::Ok, "restart", 7_001),
                ] {
                    events.push(Event {
                        index: events.len() as u64,
                        process: Process::NEMESIS,
                        kind,
                        f: f.into(),
                        value: json!({"nodes": [1], "majority_kept": true}),
                        time: at_ms * MS,
                        mono_ns: at_ms * MS,
                        wall_ns: 0,
                        error: None,
                    });
                }
                events.sort_by_key(|e| e.time);
            }
            check(&events, &planted_ctx(&events))
        };
        let bare = stuck(false);
        assert_eq!(bare.anomalies.len(), 1, "{bare:?}");
        assert_eq!(bare.anomalies[0].kind, "lease-outlived-ttl");
        assert_eq!(stuck(true).valid, Validity::Valid);
    }

    #[test]
    fn a_retry_after_a_lost_answer_is_the_same_grant() {
        // a's first acquire is lost (it was granted, token 10); the retry
        // answers the same grant. Its TTL runs from the retry (which
        // renewed it), so b's grant 3.1 s after a's first attempt is still
        // an overlap.
        let retried = Plant::new()
            .acquire_lost("a", 0, 1_000)
            .acquire_ok("a", 1_100, 10)
            .release("a", 3_400, 10, Kind::Ok)
            .acquire_ok("b", 3_100, 12)
            .release("b", 3_500, 12, Kind::Ok)
            .events();
        let result = check(&retried, &planted_ctx(&retried));
        assert_eq!(result.valid, Validity::Invalid, "{result:?}");
        assert_eq!(result.anomalies[0].kind, "overlap");
        assert_eq!(result.stats["grants_after_a_lost_answer"], 1);

        // The same grant answered twice is one grant, not a duplicate.
        let twice = Plant::new()
            .acquire_ok("a", 0, 10)
            .acquire_ok("a", 10, 10)
            .release("a", 20, 10, Kind::Ok)
            .round("b", 30, 12, 1, 40)
            .events();
        let result = check(&twice, &planted_ctx(&twice));
        assert_eq!(result.valid, Validity::Valid, "{result:?}");
        assert_eq!(result.stats["grants"], 2);
        assert_eq!(result.stats["grants_answered_twice"], 1);

        // A token granted to a earlier in the run and to b, whose first
        // (lost) attempt was before a's grant: unordered, but a duplicate.
        let dup = Plant::new()
            .acquire_lost("b", 0, 500)
            .round("a", 100, 10, 1, 200)
            .acquire_ok("b", 600, 10)
            .release("b", 700, 10, Kind::Ok)
            .events();
        let result = check(&dup, &planted_ctx(&dup));
        assert_eq!(result.anomalies.len(), 1, "{result:?}");
        assert_eq!(result.anomalies[0].kind, "duplicate-token");
    }

    #[test]
    fn only_faults_that_lose_the_majority_excuse_a_stall() {
        let stalled = planted_anomalies().pop().unwrap().1;
        let with = |value: Value| {
            let mut events = stalled.clone();
            for (kind, f, at_ms) in [
                (Kind::Invoke, "kill", 20u64),
                (Kind::Ok, "kill", 21),
                (Kind::Invoke, "restart", 700_000),
                (Kind::Ok, "restart", 700_001),
            ] {
                events.push(Event {
                    index: events.len() as u64,
                    process: Process::NEMESIS,
                    kind,
                    f: f.into(),
                    value: if f == "kill" {
                        value.clone()
                    } else {
                        Value::Null
                    },
                    time: at_ms * MS,
                    mono_ns: at_ms * MS,
                    wall_ns: 0,
                    error: None,
                });
            }
            events.sort_by_key(|e| e.time);
            events
        };
        let lost = with(json!({"nodes": [1, 2], "majority_kept": false}));
        assert_eq!(check(&lost, &planted_ctx(&lost)).valid, Validity::Valid);
        let kept = with(json!({"nodes": [1], "majority_kept": true}));
        let result = check(&kept, &planted_ctx(&kept));
        assert_eq!(result.valid, Validity::Invalid);
        assert_eq!(result.anomalies[0].kind, "no-grant-while-healthy");
    }

    #[test]
    fn replies_become_outcomes() {
        let base = json!({ "client_id": "c" });
        let answer = |status: u16, body: Value| judge(Reply::Answer { status, body }, base.clone());
        assert!(matches!(
            answer(200, json!({"acquired": true})),
            Answer::Ok(_)
        ));
        match answer(409, json!({"acquired": false, "error": "held"})) {
            Answer::Fail(v, why) => {
                assert_eq!(v["status"], 409);
                assert_eq!(v["acquired"], false);
                assert_eq!(v["client_id"], "c");
                assert!(why.contains("held"));
            }
            _ => panic!("a 409 is a fail"),
        }
        assert!(matches!(answer(400, Value::Null), Answer::Fail(..)));
        assert!(matches!(answer(503, Value::Null), Answer::Info(..)));
        assert!(matches!(answer(500, Value::Null), Answer::Info(..)));
        assert!(matches!(
            judge(Reply::Lost("closed".into()), base.clone()),
            Answer::Info(..)
        ));
        assert!(matches!(
            judge(Reply::NotSent("refused".into()), base),
            Answer::Fail(..)
        ));
    }
}
