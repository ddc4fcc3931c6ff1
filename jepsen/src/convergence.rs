//! After the final heal: do the replicas hold the same tree?
//!
//! A checker judges what clients saw; a replica that silently diverged
//! (applied an entry differently, lost one to a bad disk, installed a
//! snapshot over a gap) may never show in a client's history. So once the
//! nemesis has healed everything and the workload has stopped, every
//! member's tree digest (`GET /commands/hash`: a hash over every node's
//! path, data, ACL and stat, the digest ZooKeeper's `hash` word prints) is
//! read at the same applied index and compared. Replicas at different
//! indexes are asked again (the group may still be applying session
//! closes) until the deadline.
//!
//! Verdicts: equal digests at one index (converged); different digests at
//! one index (`replicas-diverged`, the run is invalid); no common index
//! before the deadline (`replicas-not-converged`, the run is unknown).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::http::{get_json, Reply};
use crate::workload::Anomaly;

/// One member's tree digest and the index it was taken at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading {
    pub zxid: u64,
    pub digest: i64,
}

/// What the comparison found.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Every member has `digest` at `zxid`.
    Converged { zxid: u64, digest: i64 },
    /// Members at the same index hold different trees.
    Diverged {
        zxid: u64,
        by_member: BTreeMap<u64, i64>,
    },
    /// Members at different indexes (or unanswered): ask again.
    NotYet(String),
}

/// Compares one round of readings (`None`: no answer from that member).
pub fn compare(readings: &BTreeMap<u64, Option<Reading>>) -> Verdict {
    if readings.is_empty() {
        return Verdict::NotYet("no members".into());
    }
    let missing: Vec<u64> = readings
        .iter()
        .filter(|(_, r)| r.is_none())
        .map(|(id, _)| *id)
        .collect();
    if !missing.is_empty() {
        return Verdict::NotYet(format!("no digest from members {missing:?}"));
    }
    let read: BTreeMap<u64, Reading> = readings
        .iter()
        .filter_map(|(id, r)| r.map(|r| (*id, r)))
        .collect();
    let zxids: BTreeMap<u64, u64> = read.iter().map(|(id, r)| (*id, r.zxid)).collect();
    let first = *zxids.values().next().expect("not empty");
    if zxids.values().any(|z| *z != first) {
        return Verdict::NotYet(format!("members at different indexes: {zxids:?}"));
    }
    let by_member: BTreeMap<u64, i64> = read.iter().map(|(id, r)| (*id, r.digest)).collect();
    let digest = *by_member.values().next().expect("not empty");
    if by_member.values().all(|d| *d == digest) {
        Verdict::Converged {
            zxid: first,
            digest,
        }
    } else {
        Verdict::Diverged {
            zxid: first,
            by_member,
        }
    }
}

/// Parses `GET /commands/hash`'s answer.
fn reading(body: &Value) -> Option<Reading> {
    let d = body["digests"].as_array()?.first()?;
    Some(Reading {
        zxid: d["zxid"].as_u64()?,
        digest: d["digest"].as_i64()?,
    })
}

/// Reads every member's digest (`members`: id and HTTP address) until they
/// agree on an index or `timeout` passes. Returns the verdict and, for the
/// run's results, what was seen.
pub async fn check(members: &[(u64, String)], timeout: Duration) -> (Verdict, Value) {
    let deadline = Instant::now() + timeout;
    let mut rounds = 0u32;
    loop {
        rounds += 1;
        let mut readings = BTreeMap::new();
        for (id, addr) in members {
            let r = match get_json(addr, "/commands/hash", Duration::from_secs(5)).await {
                Reply::Answer { status: 200, body } => reading(&body),
                _ => None,
            };
            readings.insert(*id, r);
        }
        let verdict = compare(&readings);
        let done = !matches!(verdict, Verdict::NotYet(_));
        if done || Instant::now() >= deadline {
            let seen: BTreeMap<String, Value> = readings
                .iter()
                .map(|(id, r)| {
                    (
                        id.to_string(),
                        r.map_or(Value::Null, |r| json!({"zxid": r.zxid, "digest": r.digest})),
                    )
                })
                .collect();
            return (verdict, json!({"rounds": rounds, "last_readings": seen}));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The anomaly a verdict makes, if any: (invalid?, anomaly).
pub fn anomaly(verdict: &Verdict, seen: &Value) -> Option<(bool, Anomaly)> {
    match verdict {
        Verdict::Converged { .. } => None,
        Verdict::Diverged { zxid, by_member } => Some((
            true,
            Anomaly {
                kind: "replicas-diverged".into(),
                message: format!(
                    "after the final heal the members hold different trees at index {zxid}: digests {by_member:?}"
                ),
                ops: Vec::new(),
                detail: seen.clone(),
            },
        )),
        Verdict::NotYet(why) => Some((
            false,
            Anomaly {
                kind: "replicas-not-converged".into(),
                message: format!(
                    "the members never stood at one index to compare their trees: {why}"
                ),
                ops: Vec::new(),
                detail: seen.clone(),
            },
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(zxid: u64, digest: i64) -> Option<Reading> {
        Some(Reading { zxid, digest })
    }

    #[test]
    fn equal_digests_at_one_index_converge() {
        let readings = BTreeMap::from([(1, r(50, 7)), (2, r(50, 7)), (3, r(50, 7))]);
        assert_eq!(
            compare(&readings),
            Verdict::Converged {
                zxid: 50,
                digest: 7
            }
        );
    }

    #[test]
    fn a_different_digest_at_the_same_index_is_divergence() {
        let readings = BTreeMap::from([(1, r(50, 7)), (2, r(50, 8)), (3, r(50, 7))]);
        let v = compare(&readings);
        assert!(matches!(&v, Verdict::Diverged { zxid: 50, by_member } if by_member[&2] == 8));
        let (invalid, a) = anomaly(&v, &Value::Null).unwrap();
        assert!(invalid);
        assert_eq!(a.kind, "replicas-diverged");
    }

    #[test]
    fn different_indexes_or_silence_ask_again() {
        let behind = BTreeMap::from([(1, r(50, 7)), (2, r(49, 6))]);
        assert!(matches!(compare(&behind), Verdict::NotYet(_)));
        let silent = BTreeMap::from([(1, r(50, 7)), (2, None)]);
        let v = compare(&silent);
        assert!(matches!(&v, Verdict::NotYet(w) if w.contains("[2]")));
        let (invalid, a) = anomaly(&v, &Value::Null).unwrap();
        assert!(!invalid);
        assert_eq!(a.kind, "replicas-not-converged");
    }

    #[test]
    fn parses_the_admin_answer() {
        let body = json!({"digests": [{"zxid": 12, "digest": -5}]});
        assert_eq!(
            reading(&body),
            Some(Reading {
                zxid: 12,
                digest: -5
            })
        );
        assert_eq!(reading(&json!({"digests": []})), None);
    }
}
