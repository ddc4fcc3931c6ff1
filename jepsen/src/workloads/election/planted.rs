//! Election histories with planted anomalies, for the selftest and the
//! tests.

use serde_json::{json, Value};

use crate::history::{Event, Kind, Process};
use crate::workloads::support::hand_event;

/// Histories of this workload each with one planted anomaly, named; the
/// selftest checks that `check` calls every one invalid (with a 3 s
/// session timeout).
pub fn planted_anomalies() -> Vec<(&'static str, Vec<Event>)> {
    vec![
        (
            "two leaders at once",
            // Process 1 leads while process 0, which resigns cleanly
            // later, still does.
            Plant::new()
                .campaign(0, 0, 10)
                .resign(0, 1_000)
                .campaign(1, 200, 12)
                .resign(1, 600)
                .events(),
        ),
        (
            "token going back",
            Plant::new()
                .campaign(0, 0, 12)
                .resign(0, 100)
                .campaign(1, 200, 10)
                .resign(1, 300)
                .events(),
        ),
        (
            "no successor",
            // Process 0 resigns; two candidates wait a minute with no
            // fault and nobody leads.
            Plant::new()
                .campaign(0, 0, 10)
                .resign(0, 100)
                .waiting(1, 50, 60_000)
                .waiting(2, 60, 60_000)
                .events(),
        ),
        (
            "two leaders, the first one's session expired too soon",
            // Process 0 confirmed its leadership at 0.5 s and then lost
            // touch; process 1 led from 2.2 s: 1.7 s after that contact,
            // sooner than a 3 s session can expire.
            Plant::new()
                .campaign(0, 0, 10)
                .confirm(0, 500)
                .step_down(0, 2_500, "session Disconnected")
                .campaign_done(1, 100, 2_200, 12)
                .resign(1, 2_400)
                .events(),
        ),
        (
            "two leaders, a paused (zombie) leader's session expired too soon",
            // Process 0 confirmed at 0.5 s and was stopped at 0.6 s for
            // 7 s; process 1 led from 2 s, 1.5 s after that contact; the
            // zombie noticed only on waking.
            Plant::new()
                .campaign(0, 0, 10)
                .confirm(0, 500)
                .client_fault("pause-client", 0, 600, Some(7_000))
                .step_down(0, 7_700, "session Expired")
                .campaign_done(1, 100, 2_000, 12)
                .resign(1, 2_500)
                .events(),
        ),
        (
            "slow successor after a killed leader",
            // Process 0 was killed while leading at 0.5 s; process 1,
            // waiting all along with no fault in force, led only 8 s
            // later (bound: 3 s session timeout and 4 s).
            Plant::new()
                .campaign(0, 0, 10)
                .client_fault("kill-client", 0, 500, None)
                .campaign_done(1, 100, 8_500, 12)
                .resign(1, 9_000)
                .events(),
        ),
    ]
}

/// Builds small election histories by hand (times in milliseconds).
pub(super) struct Plant {
    events: Vec<Event>,
}

#[cfg(test)]
pub(super) const MS: u64 = 1_000_000;

impl Plant {
    pub(super) fn new() -> Plant {
        Plant { events: Vec::new() }
    }

    fn push(mut self, process: u64, kind: Kind, f: &str, value: Value, at_ms: u64) -> Plant {
        self.events
            .push(hand_event(Process::Client(process), kind, f, value, at_ms));
        self
    }

    /// `process` campaigns at `at_ms` and leads with `token` 1 ms later.
    pub(super) fn campaign(self, process: u64, at_ms: u64, token: u64) -> Plant {
        self.campaign_done(process, at_ms, at_ms + 1, token)
    }

    /// `process` campaigns at `at_ms` and leads with `token` from
    /// `done_ms`.
    pub(super) fn campaign_done(self, process: u64, at_ms: u64, done_ms: u64, token: u64) -> Plant {
        let session = 100 + process;
        self.push(
            process,
            Kind::Invoke,
            "campaign",
            json!({ "session": session }),
            at_ms,
        )
        .push(
            process,
            Kind::Ok,
            "campaign",
            json!({ "token": token, "session": session, "node": format!("/e/c-{token}") }),
            done_ms,
        )
    }

    /// A campaign from `at_ms` that gave up at `until_ms`.
    pub(super) fn waiting(self, process: u64, at_ms: u64, until_ms: u64) -> Plant {
        self.push(process, Kind::Invoke, "campaign", Value::Null, at_ms)
            .push(process, Kind::Fail, "campaign", Value::Null, until_ms)
    }

    /// A successful resign invoked at `at_ms`.
    pub(super) fn resign(self, process: u64, at_ms: u64) -> Plant {
        self.push(process, Kind::Invoke, "resign", Value::Null, at_ms)
            .push(process, Kind::Ok, "resign", Value::Null, at_ms + 1)
    }

    /// A confirmation that found the leader's node, invoked at `at_ms`.
    pub(super) fn confirm(self, process: u64, at_ms: u64) -> Plant {
        self.push(process, Kind::Invoke, "confirm", Value::Null, at_ms)
            .push(
                process,
                Kind::Ok,
                "confirm",
                json!({ "exists": true }),
                at_ms + 1,
            )
    }

    /// The leader stops believing it leads at `at_ms`.
    pub(super) fn step_down(self, process: u64, at_ms: u64, reason: &str) -> Plant {
        let value = json!({ "reason": reason });
        self.push(process, Kind::Invoke, "step-down", value.clone(), at_ms)
            .push(process, Kind::Ok, "step-down", value, at_ms)
    }

    /// A `kill-client` (`ms` none) or `pause-client` of `process` at
    /// `at_ms`, by process 99.
    pub(super) fn client_fault(self, f: &str, process: u64, at_ms: u64, ms: Option<u64>) -> Plant {
        let value = match ms {
            Some(ms) => json!({ "client": process, "pid": 1, "ms": ms }),
            None => json!({ "client": process, "pid": 1 }),
        };
        let done = at_ms + ms.unwrap_or(0);
        self.push(99, Kind::Invoke, f, value.clone(), at_ms)
            .push(99, Kind::Ok, f, value, done)
    }

    /// A nemesis fault from `from_ms` to `to_ms`; `majority_kept` as the
    /// nemesis would record it.
    #[cfg(test)]
    pub(super) fn kill(self, from_ms: u64, to_ms: u64, majority_kept: bool) -> Plant {
        let mut p = self;
        for (kind, f, at, value) in [
            (
                Kind::Invoke,
                "kill",
                from_ms,
                json!({ "majority_kept": majority_kept }),
            ),
            (
                Kind::Ok,
                "kill",
                from_ms,
                json!({ "majority_kept": majority_kept }),
            ),
            (Kind::Invoke, "restart", to_ms, Value::Null),
            (Kind::Ok, "restart", to_ms, Value::Null),
        ] {
            p.events.push(Event {
                index: 0,
                process: Process::NEMESIS,
                kind,
                f: f.into(),
                value,
                time: at * MS,
                mono_ns: at * MS,
                wall_ns: 0,
                error: None,
            });
        }
        p
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
    use std::time::Duration;

    use super::super::check;
    use super::*;
    use crate::workload::{CheckCtx, Validity};

    fn ctx() -> CheckCtx {
        CheckCtx {
            faults: Vec::new(),
            session_timeout: Duration::from_secs(3),
            end: 0,
        }
    }

    #[test]
    fn every_planted_anomaly_is_caught_alone_and_of_its_kind() {
        let kinds: Vec<String> = planted_anomalies()
            .into_iter()
            .map(|(name, events)| {
                let r = check(&events, &ctx());
                assert_eq!(r.valid, Validity::Invalid, "{name}: {r:?}");
                assert_eq!(r.anomalies.len(), 1, "{name}: {:?}", r.anomalies);
                r.anomalies[0].kind.clone()
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "two-leaders",
                "token-order",
                "no-leader-while-healthy",
                "two-leaders",
                "two-leaders",
                "slow-successor"
            ]
        );
    }

    #[test]
    fn a_killed_leader_ends_its_term_and_a_timely_successor_is_valid() {
        let killed = |successor_ms, nemesis: bool| {
            let p = Plant::new()
                .campaign(0, 0, 10)
                .confirm(0, 250)
                .client_fault("kill-client", 0, 400, None)
                .campaign_done(1, 100, successor_ms, 12)
                .resign(1, successor_ms + 300);
            if nemesis {
                p.kill(1_000, 2_000, true).events()
            } else {
                p.events()
            }
        };
        // Led 3.6 s after the kill: its session (3 s) expired and the
        // successor came within the 7 s bound; no overlap with the dead.
        let r = check(&killed(4_000, false), &ctx());
        assert_eq!(r.valid, Validity::Valid, "{r:?}");
        assert!(r.notes.is_empty(), "{:?}", r.notes);
        assert_eq!(r.stats["terms_ended_by"]["killed"], 1);
        assert_eq!(r.stats["takeovers"]["in_time"], 1);
        assert_eq!(r.stats["takeovers"]["max_ms"], 3_600);
        assert_eq!(r.stats["takeovers"]["successor_bound_ms"], 7_000);
        // 7.6 s: too slow, unless a nemesis fault was in force meanwhile.
        let r = check(&killed(8_000, false), &ctx());
        assert_eq!(r.anomalies[0].kind, "slow-successor", "{r:?}");
        let r = check(&killed(8_000, true), &ctx());
        assert_eq!(r.valid, Validity::Valid, "{r:?}");
        assert_eq!(r.stats["takeovers"]["excused_by_nemesis"], 1);
    }

    #[test]
    fn a_zombie_leader_overlapping_after_its_session_expired_is_a_note() {
        // Stopped at 0.6 s for 7 s after a contact at 0.5 s; the successor
        // led from 3.8 s (3.3 s later) and the zombie noticed at 7.7 s.
        let events = Plant::new()
            .campaign(0, 0, 10)
            .confirm(0, 500)
            .client_fault("pause-client", 0, 600, Some(7_000))
            .step_down(0, 7_700, "session Expired")
            .campaign_done(1, 100, 3_800, 12)
            .resign(1, 4_500)
            .events();
        let r = check(&events, &ctx());
        assert_eq!(r.valid, Validity::Valid, "{r:?}");
        assert_eq!(r.notes[0].kind, "overlap-after-expiry");
        assert_eq!(r.stats["client_faults"]["pause-client"], 1);
        assert_eq!(r.stats["takeovers"]["in_time"], 1);
    }

    #[test]
    fn a_clean_history_is_valid() {
        let events = Plant::new()
            .campaign(0, 0, 10)
            .confirm(0, 250)
            .resign(0, 400)
            .campaign_done(1, 100, 402, 12)
            .step_down(1, 900, "session Disconnected")
            // Process 1's session expired (3 s after its last contact),
            // then process 2 led.
            .campaign_done(2, 200, 3_500, 15)
            .resign(2, 4_000)
            .events();
        let r = check(&events, &ctx());
        assert_eq!(r.valid, Validity::Valid, "{r:?}");
        assert!(r.notes.is_empty(), "{:?}", r.notes);
        assert_eq!(r.stats["terms"], 3);
    }

    #[test]
    fn a_late_overlap_after_losing_touch_is_a_note_but_not_after_a_clean_resign() {
        // Process 0 lost touch after leading at 1 ms and noticed only at
        // 4 s; process 1 led from 2.6 s: its session may have expired.
        let late = Plant::new()
            .campaign(0, 0, 10)
            .step_down(0, 4_000, "session Disconnected")
            .campaign_done(1, 100, 2_600, 12)
            .resign(1, 2_700)
            .events();
        let r = check(&late, &ctx());
        assert_eq!(r.valid, Validity::Valid, "{r:?}");
        assert_eq!(r.notes.len(), 1);
        assert_eq!(r.notes[0].kind, "overlap-after-expiry");
        // The same overlap with process 0 resigning cleanly: its session
        // lived, so two leaders.
        let clean = Plant::new()
            .campaign(0, 0, 10)
            .resign(0, 4_000)
            .campaign_done(1, 100, 2_600, 12)
            .resign(1, 2_700)
            .events();
        assert_eq!(check(&clean, &ctx()).anomalies[0].kind, "two-leaders");
    }

    #[test]
    fn only_faults_that_lose_the_majority_excuse_a_leaderless_stretch() {
        let stall = |majority_kept| {
            Plant::new()
                .campaign(0, 0, 10)
                .resign(0, 100)
                .kill(200, 59_000, majority_kept)
                .waiting(1, 50, 60_000)
                .events()
        };
        let r = check(&stall(false), &ctx());
        assert_eq!(r.valid, Validity::Valid, "{r:?}");
        let r = check(&stall(true), &ctx());
        assert_eq!(r.anomalies[0].kind, "no-leader-while-healthy", "{r:?}");
    }
}
