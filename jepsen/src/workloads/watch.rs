//! The `watch` workload: watchers on nodes that writers update. Each
//! watcher must see changes in zxid order; a persistent watch must miss no
//! change unless its session was disconnected meanwhile; a one-shot watch
//! fires at most once, and only for a change newer than the read that set
//! it.
//!
//! Writers `set_data` on `BASE/0..3` ([`NODES`]) and record the mzxid of
//! each acknowledged write. Persistent watchers hold a recursive watch on
//! `BASE`, recording every event with its zxid and delivery time (each
//! wait for the next event is an `event` operation). One-shot watchers
//! loop: `read-watch` (get_data with a watch, recording the mzxid read),
//! then `oneshot` (wait for it to fire). Every watcher also records when
//! its session was disconnected (`disconnected` operations), watching its
//! session state in the same task, ahead of its events, so a reconnect is
//! always recorded before the events that follow it.
//!
//! A reconnect re-adds persistent watches without replaying the changes
//! made while disconnected (ZooKeeper's rule too: only one-shot watches
//! are caught up), so a persistent watcher legitimately misses the changes
//! of a disconnect; the checker excuses exactly those.
//!
//! At the deadline writers stop; watchers then drain for at most
//! [`drain_bound`], until a persistent watcher has seen the newest
//! acknowledged write and a one-shot watcher's pending watch has nothing
//! left to fire for.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use tokio::sync::watch;
use tokio::time::Instant;
use warden_client::{Client, SessionState};

use super::support::{
    connect_options, connect_until, ensure_path, run_tag, write_outcome, Planted, Processes,
    ERROR_PAUSE, RETRY_PAUSE,
};
use crate::checkers::{
    check_watch, AckedWrite, Delivered, Disconnect, Oneshot, PersistentSegment, WatchAnomaly,
};
use crate::history::{pair, Event, History, Kind, Process};
use crate::workload::{Anomaly, CheckCtx, CheckResult, RunCtx};

/// Where each run makes its own nodes.
pub const ROOT: &str = "/jepsen/watch";
/// Nodes written under the run's base.
pub const NODES: usize = 4;
/// Persistent and one-shot watchers each.
const WATCHERS_EACH: usize = 2;

/// How long watchers drain after the writers stop: two session timeouts
/// (a watcher cut off from a lagging server notices after two thirds of
/// one and reconnects within one) and 10 s for a loaded machine.
pub fn drain_bound(session_timeout: Duration) -> Duration {
    2 * session_timeout + Duration::from_secs(10)
}

/// What watchers are told.
#[derive(Debug, Clone, PartialEq)]
enum Phase {
    Running,
    /// Writers have stopped; the newest acknowledged zxid per node, and
    /// when to give up.
    Drain(BTreeMap<String, u64>, Instant),
}

/// Drives clients until `ctx.deadline`, recording every operation.
pub async fn run(ctx: &RunCtx) -> Result<(), String> {
    let base = format!("{ROOT}/{}", run_tag(ctx));
    let nodes: Vec<String> = (0..NODES).map(|i| format!("{base}/{i}")).collect();
    for n in &nodes {
        ensure_path(ctx, n).await?;
    }
    let processes = Processes::default();
    let acked: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
    let (phase_tx, phase) = watch::channel(Phase::Running);

    let mut watchers = Vec::new();
    for w in 0..WATCHERS_EACH {
        let watcher = Watcher::new(ctx, w, &processes);
        watchers.push(tokio::spawn(persistent(
            watcher,
            base.clone(),
            phase.clone(),
        )));
    }
    for w in WATCHERS_EACH..2 * WATCHERS_EACH {
        let watcher = Watcher::new(ctx, w, &processes);
        watchers.push(tokio::spawn(oneshots(
            watcher,
            nodes.clone(),
            phase.clone(),
        )));
    }
    let writers: Vec<_> = (0..(ctx.concurrency / 2).max(1))
        .map(|w| {
            tokio::spawn(writer(
                ctx.clone(),
                w,
                nodes.clone(),
                processes.clone(),
                acked.clone(),
            ))
        })
        .collect();
    let mut failed = None;
    for w in writers {
        if let Err(e) = w.await {
            failed = Some(format!("watch writer panicked: {e}"));
        }
    }
    let targets = acked.lock().expect("acked lock").clone();
    let _ = phase_tx.send(Phase::Drain(
        targets,
        Instant::now() + drain_bound(ctx.session_timeout),
    ));
    for w in watchers {
        if let Err(e) = w.await {
            failed = Some(format!("watcher panicked: {e}"));
        }
    }
    failed.map_or(Ok(()), Err)
}

async fn writer(
    ctx: RunCtx,
    w: usize,
    nodes: Vec<String>,
    processes: Processes,
    acked: Arc<Mutex<BTreeMap<String, u64>>>,
) {
    let options = connect_options(&ctx);
    let servers = ctx.servers_for(w);
    let interval = ctx.worker_interval();
    let mut rng = StdRng::seed_from_u64(ctx.seed ^ (w as u64) << 8);
    let mut process = processes.fresh();
    let mut client: Option<Client> = None;
    let mut n = 0u64;
    while Instant::now() < ctx.deadline {
        let c = match &client {
            Some(c) if !c.session_events().borrow().is_terminal() => c.clone(),
            _ => match connect_until(&servers, &options, ctx.deadline).await {
                Some(c) => {
                    client = Some(c.clone());
                    c
                }
                None => break,
            },
        };
        let node = &nodes[rng.random_range(0..nodes.len())];
        n += 1;
        let data = format!("{w}-{n}");
        let inv = ctx
            .history
            .invoke(process, "write", json!({ "node": node, "data": data }));
        match c.set_data(node, data.as_bytes(), None).await {
            Ok(stat) => {
                ctx.history
                    .ok(&inv, json!({ "node": node, "zxid": stat.mzxid }));
                let mut acked = acked.lock().expect("acked lock");
                let top = acked.entry(node.clone()).or_insert(0);
                *top = (*top).max(stat.mzxid);
            }
            Err(e) => {
                let value = json!({ "node": node, "data": data });
                if write_outcome(&e) == Kind::Fail {
                    ctx.history.fail(&inv, value, e.to_string());
                } else {
                    ctx.history.info(&inv, value, e.to_string());
                    process = processes.fresh();
                }
                // While disconnected calls fail at once: do not spin.
                tokio::time::sleep_until((Instant::now() + ERROR_PAUSE).min(ctx.deadline)).await;
            }
        }
        if !interval.is_zero() {
            tokio::time::sleep_until((Instant::now() + interval).min(ctx.deadline)).await;
        }
    }
    if let Some(c) = client {
        let _ = c.close().await;
    }
}

/// A watcher's identity, its two processes (its operations; its session's
/// disconnects) and its session.
struct Watcher {
    ctx: RunCtx,
    id: usize,
    process: Process,
    session: SessionLog,
    client: Option<Client>,
}

/// Records a watcher's disconnected stretches from its session states.
struct SessionLog {
    history: History,
    process: Process,
    watcher: usize,
    states: Option<watch::Receiver<SessionState>>,
    open: Option<crate::history::Invocation>,
}

impl SessionLog {
    /// Follows a new session (ending the record of the old one's last
    /// disconnect, if any, as unknown).
    fn follow(&mut self, client: &Client) {
        if let Some(inv) = self.open.take() {
            self.history.info(&inv, self.value(), "session replaced");
        }
        let mut states = client.session_events();
        states.borrow_and_update();
        self.states = Some(states);
    }

    fn value(&self) -> Value {
        json!({ "watcher": self.watcher })
    }

    /// Waits for the next state change and records it; returns the new
    /// state. Pends for ever with no session.
    async fn changed(&mut self) -> SessionState {
        let Some(states) = self.states.as_mut() else {
            return std::future::pending().await;
        };
        if states.changed().await.is_err() {
            self.states = None;
            return SessionState::Closed;
        }
        let state = *states.borrow_and_update();
        match (state, self.open.is_some()) {
            (SessionState::Disconnected, false) => {
                self.open = Some(
                    self.history
                        .invoke(self.process, "disconnected", self.value()),
                );
            }
            (SessionState::Connected, true) => {
                let inv = self.open.take().expect("checked open");
                self.history.ok(&inv, self.value());
            }
            // Disconnected and reconnected before this task looked: a
            // blip, recorded as an instant.
            (SessionState::Connected, false) => {
                let inv = self
                    .history
                    .invoke(self.process, "disconnected", self.value());
                self.history
                    .ok(&inv, json!({ "watcher": self.watcher, "blip": true }));
            }
            (s, _) if s.is_terminal() => {
                let inv = match self.open.take() {
                    Some(inv) => inv,
                    None => self
                        .history
                        .invoke(self.process, "disconnected", self.value()),
                };
                self.history.info(&inv, self.value(), format!("{s:?}"));
                self.states = None;
            }
            _ => {}
        }
        state
    }
}

impl Watcher {
    fn new(ctx: &RunCtx, id: usize, processes: &Processes) -> Watcher {
        Watcher {
            ctx: ctx.clone(),
            id,
            process: processes.fresh(),
            session: SessionLog {
                history: ctx.history.clone(),
                process: processes.fresh(),
                watcher: id,
                states: None,
                open: None,
            },
            client: None,
        }
    }

    /// The watcher's live session, connecting a new one if needed; `None`
    /// once `until` passes without one.
    async fn client(&mut self, until: Instant) -> Option<Client> {
        if let Some(c) = &self.client {
            if !c.session_events().borrow().is_terminal() {
                return Some(c.clone());
            }
        }
        let servers = self.ctx.servers_for(self.id);
        let c = connect_until(&servers, &connect_options(&self.ctx), until).await?;
        self.session.follow(&c);
        self.client = Some(c.clone());
        Some(c)
    }

    async fn close(&mut self) {
        if let Some(c) = self.client.take() {
            let _ = c.close().await;
        }
        if let Some(inv) = self.session.open.take() {
            self.ctx
                .history
                .info(&inv, self.session.value(), "watcher stopped");
        }
    }
}

/// When a watcher stops: the drain's deadline, or far off while running.
fn give_up_at(phase: &Phase) -> Instant {
    match phase {
        Phase::Running => Instant::now() + Duration::from_secs(24 * 3600),
        Phase::Drain(_, until) => *until,
    }
}

async fn persistent(mut w: Watcher, base: String, mut phase: watch::Receiver<Phase>) {
    let history = w.ctx.history.clone();
    let mut segment = 0u64;
    let mut seen = 0u64;
    'segments: loop {
        let until = give_up_at(&phase.borrow());
        let Some(client) = w.client(until).await else {
            break;
        };
        segment += 1;
        let value = json!({ "watcher": w.id, "segment": segment });
        let inv = history.invoke(w.process, "watch", value.clone());
        let mut stream = match client.watch(&base, true).await {
            Ok(s) => {
                history.ok(&inv, value.clone());
                s
            }
            Err(e) => {
                // Registering changes nothing the checker models.
                history.fail(&inv, value, e.to_string());
                if Instant::now() >= until {
                    break;
                }
                tokio::time::sleep(RETRY_PAUSE).await;
                continue;
            }
        };
        loop {
            let inv = history.invoke(w.process, "event", value.clone());
            let stopped =
                |lasted: bool| json!({ "watcher": w.id, "segment": segment, "lasted": lasted });
            loop {
                let target = match &*phase.borrow() {
                    Phase::Running => None,
                    Phase::Drain(targets, until) => {
                        Some((targets.values().copied().max().unwrap_or(0), *until))
                    }
                };
                if let Some((top, until)) = target {
                    if seen >= top || Instant::now() >= until {
                        history.fail(&inv, stopped(true), "stopped after the drain");
                        break 'segments;
                    }
                }
                let until = give_up_at(&phase.borrow());
                tokio::select! {
                    biased;
                    state = w.session.changed() => {
                        if state.is_terminal() {
                            history.fail(&inv, stopped(false), format!("session {state:?}"));
                            continue 'segments;
                        }
                    }
                    item = stream.next() => match item {
                        Some(Ok(event)) => {
                            seen = seen.max(event.zxid);
                            history.ok(&inv, json!({
                                "watcher": w.id,
                                "segment": segment,
                                "zxid": event.zxid,
                                "type": event.event_type.name(),
                                "path": event.path,
                            }));
                            break;
                        }
                        Some(Err(e)) => {
                            history.fail(&inv, stopped(false), e.to_string());
                            continue 'segments;
                        }
                        None => {
                            history.fail(&inv, stopped(false), "the watch stream ended");
                            continue 'segments;
                        }
                    },
                    _ = phase.changed() => {}
                    _ = tokio::time::sleep_until(until) => {}
                }
            }
        }
    }
    w.close().await;
}

async fn oneshots(mut w: Watcher, nodes: Vec<String>, mut phase: watch::Receiver<Phase>) {
    let history = w.ctx.history.clone();
    let mut rng = StdRng::seed_from_u64(w.ctx.seed ^ (w.id as u64) << 16);
    'reads: while *phase.borrow() == Phase::Running {
        let Some(client) = w.client(w.ctx.deadline).await else {
            break;
        };
        let node = &nodes[rng.random_range(0..nodes.len())];
        let read = history.invoke(
            w.process,
            "read-watch",
            json!({ "watcher": w.id, "node": node }),
        );
        let (mzxid, fut) = match client.get_data_watch(node).await {
            Ok((_, stat, fut)) => {
                history.ok(
                    &read,
                    json!({ "watcher": w.id, "node": node, "mzxid": stat.mzxid }),
                );
                (stat.mzxid, fut)
            }
            Err(e) => {
                history.fail(
                    &read,
                    json!({ "watcher": w.id, "node": node }),
                    e.to_string(),
                );
                tokio::time::sleep(RETRY_PAUSE).await;
                continue;
            }
        };
        let value =
            json!({ "watcher": w.id, "node": node, "registration": read.index, "mzxid": mzxid });
        let inv = history.invoke(w.process, "oneshot", value);
        let stopped =
            |lasted: bool| json!({ "watcher": w.id, "registration": read.index, "lasted": lasted });
        tokio::pin!(fut);
        loop {
            if let Phase::Drain(targets, until) = &*phase.borrow() {
                let pending = targets.get(node).is_some_and(|&t| t > mzxid);
                if !pending || Instant::now() >= *until {
                    history.fail(&inv, stopped(true), "stopped after the drain");
                    break 'reads;
                }
            }
            let until = give_up_at(&phase.borrow());
            tokio::select! {
                biased;
                state = w.session.changed() => {
                    if state.is_terminal() {
                        history.fail(&inv, stopped(false), format!("session {state:?}"));
                        continue 'reads;
                    }
                }
                fired = &mut fut => {
                    match fired {
                        Ok(event) => history.ok(&inv, json!({
                            "watcher": w.id,
                            "registration": read.index,
                            "zxid": event.zxid,
                            "type": event.event_type.name(),
                        })),
                        Err(e) => history.fail(&inv, stopped(false), e.to_string()),
                    }
                    continue 'reads;
                }
                _ = phase.changed() => {}
                _ = tokio::time::sleep_until(until) => {}
            }
        }
    }
    w.close().await;
}

/// Judges a history of this workload.
pub fn check(events: &[Event], ctx: &CheckCtx) -> CheckResult {
    let mut writes = Vec::new();
    let mut segments: BTreeMap<(u64, u64), PersistentSegment> = BTreeMap::new();
    let mut oneshots: BTreeMap<u64, Oneshot> = BTreeMap::new();
    let mut disconnects = Vec::new();
    let (mut writes_info, mut writes_fail, mut blips) = (0u64, 0u64, 0u64);
    let ops = pair(events);
    let u = |v: &Value, k: &str| v[k].as_u64().unwrap_or(0);
    for op in &ops {
        let v = op.value();
        let done = op.complete.as_ref().map(|c| c.time).unwrap_or(ctx.end);
        let watcher = u(&op.invoke.value, "watcher");
        match (op.invoke.f.as_str(), op.outcome()) {
            ("write", Kind::Ok) => writes.push(AckedWrite {
                op: op.invoke.index,
                path: v["node"].as_str().unwrap_or_default().to_string(),
                zxid: u(v, "zxid"),
                invoked: op.invoke.time,
                completed: done,
            }),
            ("write", Kind::Info) => writes_info += 1,
            ("write", _) => writes_fail += 1,
            ("watch", Kind::Ok) => {
                let segment = u(v, "segment");
                segments.insert(
                    (watcher, segment),
                    PersistentSegment {
                        watcher,
                        segment,
                        started: done,
                        events: Vec::new(),
                        ended: ctx.end,
                        lasted: false,
                    },
                );
            }
            ("event", kind) => {
                let key = (watcher, u(&op.invoke.value, "segment"));
                let Some(seg) = segments.get_mut(&key) else {
                    continue;
                };
                if kind == Kind::Ok {
                    seg.events.push(Delivered {
                        op: op.invoke.index,
                        zxid: u(v, "zxid"),
                        at: done,
                    });
                } else {
                    seg.ended = done;
                    seg.lasted = v["lasted"].as_bool().unwrap_or(false);
                }
            }
            ("read-watch", Kind::Ok) => {
                oneshots.insert(
                    op.invoke.index,
                    Oneshot {
                        watcher,
                        op: op.invoke.index,
                        path: v["node"].as_str().unwrap_or_default().to_string(),
                        read_mzxid: u(v, "mzxid"),
                        fired: Vec::new(),
                        ended: ctx.end,
                        lasted: false,
                    },
                );
            }
            ("oneshot", kind) => {
                let Some(o) = oneshots.get_mut(&u(&op.invoke.value, "registration")) else {
                    continue;
                };
                if kind == Kind::Ok {
                    o.fired.push(Delivered {
                        op: op.invoke.index,
                        zxid: u(v, "zxid"),
                        at: done,
                    });
                    o.ended = done;
                } else if o.fired.is_empty() {
                    o.ended = done;
                    o.lasted = v["lasted"].as_bool().unwrap_or(false);
                }
            }
            ("disconnected", _) => {
                if v["blip"].as_bool() == Some(true) {
                    blips += 1;
                }
                disconnects.push(Disconnect {
                    watcher,
                    from: op.invoke.time,
                    to: done,
                });
            }
            _ => {}
        }
    }
    let segments: Vec<PersistentSegment> = segments.into_values().collect();
    let oneshots: Vec<Oneshot> = oneshots.into_values().collect();
    let stats = json!({
        "writes_ok": writes.len(),
        "writes_info": writes_info,
        "writes_fail": writes_fail,
        "persistent_segments": segments.len(),
        "persistent_events": segments.iter().map(|s| s.events.len()).sum::<usize>(),
        "oneshots_set": oneshots.len(),
        "oneshots_fired": oneshots.iter().filter(|o| !o.fired.is_empty()).count(),
        "disconnects": disconnects.len(),
        "disconnect_blips": blips,
    });
    let anomalies = check_watch(&writes, &segments, &oneshots, &disconnects)
        .into_iter()
        .map(to_anomaly)
        .collect();
    CheckResult::from_anomalies(anomalies, Vec::new(), stats)
}

fn to_anomaly(a: WatchAnomaly) -> Anomaly {
    let (kind, message, ops) = match &a {
        WatchAnomaly::OutOfOrder {
            watcher,
            before,
            after,
        } => (
            "watch-out-of-order",
            format!(
                "watcher {watcher} got zxid {} after zxid {}",
                after.zxid, before.zxid
            ),
            vec![before.op, after.op],
        ),
        WatchAnomaly::Missed {
            watcher,
            segment,
            write_op,
            zxid,
        } => (
            "watch-missed",
            format!(
                "persistent watcher {watcher} (registration {segment}) never got the \
                 acknowledged write at zxid {zxid}, and was not disconnected in between"
            ),
            vec![*write_op],
        ),
        WatchAnomaly::FiredTwice { watcher, op } => (
            "oneshot-fired-twice",
            format!("a one-shot watch of watcher {watcher} fired more than once"),
            vec![*op],
        ),
        WatchAnomaly::Stale {
            watcher,
            op,
            read_mzxid,
            zxid,
        } => (
            "oneshot-stale",
            format!(
                "a one-shot watch of watcher {watcher} set by a read of mzxid {read_mzxid} \
                 fired for zxid {zxid}"
            ),
            vec![*op],
        ),
        WatchAnomaly::NeverFired {
            watcher,
            op,
            write_op,
            zxid,
        } => (
            "oneshot-never-fired",
            format!(
                "a one-shot watch of watcher {watcher} never fired, though the write at \
                 zxid {zxid} changed its node after its read"
            ),
            vec![*op, *write_op],
        ),
    };
    Anomaly {
        kind: kind.into(),
        message,
        ops,
        detail: json!({ "anomaly": format!("{a:?}") }),
    }
}

const MS: u64 = 1_000_000;
const NODE: &str = "/jepsen/watch/planted/0";

/// A planted history: writes at zxids 5, 7, 9; a persistent watcher
/// (watcher 0) that got `events` (zxid, delivered at ms); a one-shot
/// watcher (watcher 1) that read mzxid `read_mzxid` and got `fired`.
fn planted_history(events: &[(u64, u64)], read_mzxid: u64, fired: &[u64]) -> Vec<Event> {
    let h = Planted::new();
    h.op(
        0,
        "watch",
        json!({ "watcher": 0, "segment": 1 }),
        0,
        Kind::Ok,
        json!({ "watcher": 0, "segment": 1 }),
        MS,
    );
    let registration = h.op(
        1,
        "read-watch",
        json!({ "watcher": 1, "node": NODE }),
        0,
        Kind::Ok,
        json!({ "watcher": 1, "node": NODE, "mzxid": read_mzxid }),
        MS,
    );
    for (i, zxid) in [5u64, 7, 9].into_iter().enumerate() {
        let at = (10 + 10 * i as u64) * MS;
        h.op(
            2,
            "write",
            json!({ "node": NODE }),
            at,
            Kind::Ok,
            json!({ "node": NODE, "zxid": zxid }),
            at + 2 * MS,
        );
    }
    let seg = json!({ "watcher": 0, "segment": 1 });
    for &(zxid, at) in events {
        h.op(
            0,
            "event",
            seg.clone(),
            MS,
            Kind::Ok,
            json!({ "watcher": 0, "segment": 1, "zxid": zxid }),
            at * MS,
        );
    }
    h.op(
        0,
        "event",
        seg,
        50 * MS,
        Kind::Fail,
        json!({ "watcher": 0, "segment": 1, "lasted": true }),
        60 * MS,
    );
    for &zxid in fired {
        h.op(
            1,
            "oneshot",
            json!({ "watcher": 1, "registration": registration, "mzxid": read_mzxid }),
            MS,
            Kind::Ok,
            json!({ "watcher": 1, "registration": registration, "zxid": zxid }),
            15 * MS,
        );
    }
    h.events()
}

const CLEAN_EVENTS: &[(u64, u64)] = &[(5, 13), (7, 23), (9, 33)];

/// A clean history.
pub fn clean_history() -> Vec<Event> {
    planted_history(CLEAN_EVENTS, 3, &[5])
}

/// Histories of this workload each with one planted anomaly, named; the
/// selftest checks that `check` calls every one invalid.
pub fn planted_anomalies() -> Vec<(&'static str, Vec<Event>)> {
    vec![
        (
            "watch event out of order",
            planted_history(&[(5, 13), (9, 23), (7, 33)], 3, &[5]),
        ),
        (
            "missed event on a persistent watch",
            planted_history(&[(5, 13), (9, 33)], 3, &[5]),
        ),
        (
            "one-shot fired for an old zxid",
            planted_history(CLEAN_EVENTS, 5, &[5]),
        ),
        (
            "one-shot fired twice",
            planted_history(CLEAN_EVENTS, 3, &[5, 7]),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::Validity;
    use crate::workloads::support::planted_ctx;

    #[test]
    fn clean_history_is_valid() {
        let events = clean_history();
        let r = check(&events, &planted_ctx(&events));
        assert_eq!(r.valid, Validity::Valid, "{:?}", r.anomalies);
        assert_eq!(r.stats["persistent_events"], 3);
    }

    #[test]
    fn every_planted_anomaly_is_invalid() {
        crate::workloads::support::assert_every_planted_invalid(planted_anomalies(), check);
    }

    #[test]
    fn a_disconnect_excuses_a_missed_event() {
        let mut events = planted_anomalies().remove(1).1;
        let h = History::starting_at(0);
        let inv = h.record_at(
            Process::Client(7),
            Kind::Invoke,
            "disconnected",
            json!({ "watcher": 0 }),
            None,
            25 * MS,
        );
        assert_eq!(inv.index, 0);
        let ok = h.record_at(
            Process::Client(7),
            Kind::Ok,
            "disconnected",
            json!({ "watcher": 0 }),
            None,
            26 * MS,
        );
        let next = events.len() as u64;
        events.push(Event { index: next, ..inv });
        events.push(Event {
            index: next + 1,
            ..ok
        });
        let r = check(&events, &planted_ctx(&events));
        assert_eq!(r.valid, Validity::Valid, "{:?}", r.anomalies);
    }
}
