//! `warden-jepsen selftest`: proof that the suite can fail. Every checker is
//! fed its workload's histories with planted anomalies, the lock workload
//! runs against a real cluster with a deliberately unsafe client, and the
//! register workload against servers in a known-bad mode (linearizable
//! reads without ReadIndex) under partitions; each must be judged invalid.
//! The last shows the suite catches server bugs, not only client ones; so
//! does the register workload against servers that never fsync their Raft
//! log, under the `lose-unsynced` nemesis, and the lease workload against
//! servers that keep TTL removals in flight across role changes, under
//! `isolate-after-expiry`.

use crate::run::{self, TestOpts, Workload};
use crate::workload::{CheckCtx, Validity};

/// One selftest case and whether the suite caught it.
#[derive(Debug, Clone)]
pub struct Case {
    pub name: String,
    pub caught: bool,
    pub detail: String,
}

/// The planted-history cases (no cluster needed).
pub fn planted_cases() -> Vec<Case> {
    let mut out = Vec::new();
    for w in Workload::ALL {
        let planted = w.planted_anomalies();
        if planted.is_empty() {
            out.push(Case {
                name: format!("{}: planted anomalies", w.name()),
                caught: false,
                detail: "the workload plants no anomalies".into(),
            });
        }
        for (name, events) in planted {
            let ctx = CheckCtx {
                faults: crate::history::fault_periods(&events),
                session_timeout: std::time::Duration::from_secs(3),
                end: events.last().map(|e| e.time).unwrap_or(0),
            };
            let r = w.check(&events, &ctx);
            let kinds: Vec<&str> = r.anomalies.iter().map(|a| a.kind.as_str()).collect();
            out.push(Case {
                name: format!("{}: {name}", w.name()),
                caught: r.valid == Validity::Invalid,
                detail: format!("valid: {:?}, anomalies: {}", r.valid, kinds.join(", ")),
            });
        }
    }
    out
}

/// The unsafe lock client against a real cluster.
pub async fn unsafe_lock_case(opts: &TestOpts) -> Case {
    let mut opts = opts.clone();
    opts.workload = Workload::Lock;
    opts.unsafe_client = true;
    match run::test(&opts).await {
        Ok(o) => Case {
            name: "lock: unsafe client on a real cluster".into(),
            caught: o.valid == Validity::Invalid,
            detail: format!(
                "valid: {:?}, anomalies: {} ({})",
                o.valid,
                o.results["anomalies"].as_array().map(Vec::len).unwrap_or(0),
                o.dir.display()
            ),
        },
        Err(e) => Case {
            name: "lock: unsafe client on a real cluster".into(),
            caught: false,
            detail: format!("could not run: {e}"),
        },
    }
}

/// The register workload against servers that skip ReadIndex, under
/// partitions: a server cut off from the majority answers "linearizable"
/// reads from its stale tree, which the linearizability checker must find.
pub async fn unsafe_server_case(opts: &TestOpts) -> Case {
    let mut opts = opts.clone();
    opts.workload = Workload::Register;
    opts.unsafe_client = false;
    opts.unsafe_server = true;
    opts.faults = vec![crate::nemesis::Fault::Partition];
    opts.concurrency = 10;
    opts.rate = 400.0;
    // A write stuck on the cut-off server gives up soon, so its client
    // goes on to read there (each client runs one operation at a time).
    opts.request_timeout = std::time::Duration::from_secs(1);
    opts.time_limit = opts.time_limit.max(std::time::Duration::from_secs(20));
    opts.interval = std::time::Duration::from_secs(2);
    opts.fault_duration = std::time::Duration::from_secs(4);
    let name = "register: servers skipping ReadIndex, under partitions".to_string();
    // Catching it takes a client reading on the cut-off server a value the
    // majority has since overwritten: likely in 20 s, not certain (it was
    // missed once in CI, and twice in a row on a machine loaded by builds
    // beside the suite, where the same binary caught it in every quiet
    // run). Three runs are allowed; a suite that cannot catch the bug
    // misses all three.
    let mut details = Vec::new();
    for attempt in 0..3u64 {
        opts.seed = opts.seed.wrapping_add(attempt);
        match run::test(&opts).await {
            Ok(o) => {
                details.push(format!(
                    "valid: {:?}, anomalies: {} ({})",
                    o.valid,
                    o.results["anomalies"].as_array().map(Vec::len).unwrap_or(0),
                    o.dir.display()
                ));
                if o.valid == Validity::Invalid {
                    return Case {
                        name,
                        caught: true,
                        detail: details.join("; "),
                    };
                }
            }
            Err(e) => details.push(format!("could not run: {e}")),
        }
    }
    Case {
        name,
        caught: false,
        detail: details.join("; "),
    }
}

/// The register workload against servers that acknowledge Raft entries
/// without fsync (`--unsafe-skip-fsync`), under `lose-unsynced`: a power
/// failure of the whole cluster loses the write acknowledged just before
/// it (`acknowledged-write-lost`) and often register writes
/// (`not-linearizable`), and a follower that lost entries it acknowledged
/// cannot start again (raft-rs stops it). An invalid run or a refused
/// restart counts as caught; the real server shows neither
/// (tests/suite.rs). The seed is fixed: with it the nemesis's first two
/// faults are whole-cluster power failures (the nemesis's choices depend
/// on the seed alone), so the case does not hang on the odds of one.
pub async fn unsafe_skip_fsync_case(opts: &TestOpts) -> Case {
    let mut opts = opts.clone();
    opts.workload = Workload::Register;
    opts.unsafe_client = false;
    opts.unsafe_server = false;
    opts.unsafe_skip_fsync = true;
    opts.faults = vec![crate::nemesis::Fault::LoseUnsynced];
    opts.seed = 43;
    opts.concurrency = 5;
    opts.rate = 100.0;
    opts.time_limit = opts.time_limit.max(std::time::Duration::from_secs(20));
    // About six faults: each has about even odds of biting.
    opts.interval = std::time::Duration::from_secs(1);
    opts.fault_duration = std::time::Duration::from_secs(2);
    let name = "register: servers skipping fsync, under lose-unsynced".to_string();
    match run::test(&opts).await {
        Ok(o) => {
            let refused = o.results["faults"]["refused_restarts"]
                .as_u64()
                .unwrap_or(0);
            Case {
                name,
                caught: o.valid == Validity::Invalid || refused > 0,
                detail: format!(
                    "valid: {:?}, anomalies: {}, refused restarts: {refused} ({})",
                    o.valid,
                    o.results["anomalies"].as_array().map(Vec::len).unwrap_or(0),
                    o.dir.display()
                ),
            }
        }
        Err(e) => Case {
            name,
            caught: false,
            detail: format!("could not run: {e}"),
        },
    }
}

/// The lease workload against servers that keep TTL removals in flight
/// across role changes (`--unsafe-keep-removals-across-roles`), under
/// `isolate-after-expiry`: the leader is cut off just after it proposes the
/// removal of a stalled holder's lease, and when that proposal was lost
/// with its leadership, leadership moves until that server leads again.
/// It then never proposes the removal again: the lease outlives its TTL
/// until the next leader change, and the waiting clients' refused acquires
/// are `lease-outlived-ttl`. The real server re-arms the removal when it
/// leads again (docs/jepsen.md: valid under the same schedule). The cut
/// does not always beat the proposal's round trip to a follower (then
/// nothing was lost, and the run is valid for the known-bad server too),
/// so up to three runs are allowed; a run counts only when the schedule
/// happened (`led_again` in the fault's history value).
pub async fn unsafe_keep_removals_case(opts: &TestOpts) -> Case {
    let mut opts = opts.clone();
    opts.workload = Workload::Lease;
    opts.unsafe_client = false;
    opts.unsafe_server = false;
    opts.unsafe_skip_fsync = false;
    opts.unsafe_keep_removals = true;
    opts.faults = vec![crate::nemesis::Fault::IsolateAfterExpiry];
    opts.concurrency = 5;
    opts.rate = 0.0;
    // The first stalled holder (5 s in) expires about 9 s in; the moves
    // take a few seconds; the stuck lease shows a TTL and the expiry bound
    // (8 s) after the fault's end.
    opts.time_limit = std::time::Duration::from_secs(30);
    opts.interval = std::time::Duration::from_secs(2);
    opts.fault_duration = std::time::Duration::from_secs(1);
    let name =
        "lease: servers keeping removals across roles, under isolate-after-expiry".to_string();
    let mut details = Vec::new();
    for attempt in 0..3u64 {
        opts.seed = opts.seed.wrapping_add(attempt);
        match run::test(&opts).await {
            Ok(o) => {
                let led_again = schedule_happened(&o.dir);
                let outlived = o.results["stats"]["anomalies_by_kind"]
                    .get("lease-outlived-ttl")
                    .is_some();
                details.push(format!(
                    "valid: {:?}, lease-outlived-ttl: {outlived}, old leader led again: \
                     {led_again} ({})",
                    o.valid,
                    o.dir.display()
                ));
                if o.valid == Validity::Invalid && outlived {
                    return Case {
                        name,
                        caught: true,
                        detail: details.join("; "),
                    };
                }
                if led_again {
                    // The schedule happened and the suite missed it.
                    break;
                }
            }
            Err(e) => details.push(format!("could not run: {e}")),
        }
    }
    Case {
        name,
        caught: false,
        detail: details.join("; "),
    }
}

/// Whether an `isolate-after-expiry` fault of the run in `dir` lost a
/// removal with the leadership and saw that server lead again (the node
/// still there then).
fn schedule_happened(dir: &std::path::Path) -> bool {
    let Ok(text) = std::fs::read_to_string(dir.join("history.jsonl")) else {
        return false;
    };
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .any(|e| {
            e["f"] == "isolate-after-expiry"
                && e["type"] == "ok"
                && e["value"]["removal_lost"] == serde_json::Value::Bool(true)
        })
}
