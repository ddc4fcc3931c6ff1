//! Sessions: the handshake, liveness and expiry.
//!
//! The session table itself (id, password, timeout) is replicated state in
//! the tree; a session is created and closed only by entries the tree
//! applies. What is *not* replicated is when each session was last heard
//! from. Only the leader tracks that ([`SessionTracker`]), from its own
//! monotonic clock, and when a deadline passes it proposes a
//! `CloseSession` — it never deletes anything itself. A follower collects
//! the sessions it hears from and reports them to the leader. A new leader
//! re-arms every session with a full timeout from its own clock, so a
//! leader change can only extend a session's life, never shorten it.
//!
//! [`Sessions`] is that whole liveness side, role included; [`handshake`]
//! decides what a connect asks for (a new session, a resume, a refusal)
//! from the replicated table.
//!
//! [`ReadOnlySessions`] are the other kind: ZooKeeper's read-only sessions
//! (`--zk-read-only`), made by this server alone while it knows no
//! leader, for clients that accept stale reads and no writes. They are
//! never proposed, never replicated, and forgotten when a leader is back.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::Rng;

use warden_protocol::pb::{self, ErrorCode};

use crate::limits::{self, Limit};
use crate::proto::CreateSessionTxn;
use crate::tree::DataTree;

/// Liveness of every session, as this server's role lets it decide.
#[derive(Debug, Default)]
pub struct Sessions {
    /// Deadlines: kept only while this server leads.
    tracker: SessionTracker,
    leader: bool,
    /// Sessions heard from on this follower since the last report.
    touched: HashSet<u64>,
}

impl Sessions {
    /// The session was heard from: the leader pushes its deadline out, a
    /// follower remembers it for its next report to the leader.
    pub fn touch(&mut self, id: u64, now: Instant) {
        if self.leader {
            self.tracker.touch(id, now);
        } else {
            self.touched.insert(id);
        }
    }

    /// A follower's report of sessions it heard from (ignored unless this
    /// server leads: a follower that thinks we lead is simply wrong).
    pub fn touched_elsewhere(&mut self, ids: impl IntoIterator<Item = u64>, now: Instant) {
        if self.leader {
            for id in ids {
                self.tracker.touch(id, now);
            }
        }
    }

    /// The sessions to report to the leader (sorted), forgotten here.
    pub fn take_touched(&mut self) -> Vec<u64> {
        let mut ids: Vec<u64> = self.touched.drain().collect();
        ids.sort_unstable();
        ids
    }

    /// A CreateSession applied: the leader starts its clock.
    pub fn created(&mut self, id: u64, timeout: Duration, now: Instant) {
        if self.leader {
            self.tracker.arm(id, timeout, now);
        }
    }

    /// A CloseSession applied: nothing more to track.
    pub fn closed(&mut self, id: u64) {
        self.tracker.remove(id);
    }

    /// This server became leader: every session of the table gets a full
    /// timeout from now.
    pub fn promote(&mut self, sessions: impl IntoIterator<Item = (u64, Duration)>, now: Instant) {
        self.leader = true;
        self.touched.clear();
        self.tracker.rearm_all(sessions, now);
    }

    /// This server stopped leading: it decides nothing any more.
    pub fn demote(&mut self) {
        self.leader = false;
        self.touched.clear();
        self.tracker.clear();
    }

    /// Sessions past their deadline whose CloseSession is to be proposed
    /// (empty unless leading); see [`SessionTracker::take_expired`].
    pub fn take_expired(&mut self, now: Instant) -> Vec<u64> {
        if !self.leader {
            return Vec::new();
        }
        self.tracker.take_expired(now)
    }

    /// The CloseSession of `id` could not be proposed: try again later.
    pub fn close_failed(&mut self, id: u64) {
        self.tracker.unmark_closing(id);
    }

    pub fn is_tracked(&self, id: u64) -> bool {
        self.tracker.is_tracked(id)
    }
}

/// What a connect request gets.
#[derive(Debug, PartialEq)]
pub enum Handshake {
    /// Propose this CreateSession; answer when it applies.
    Create(CreateSessionTxn),
    /// The session lives and the password matches: answer at once.
    Resume(pb::ConnectResponse),
    /// Refused; `limit` names the limit it hit, if that is why.
    Refuse {
        code: ErrorCode,
        message: String,
        limit: Option<Limit>,
    },
}

/// The bounds a server puts on sessions.
#[derive(Debug, Clone, Copy)]
pub struct SessionBounds {
    pub min_timeout_ms: u32,
    pub max_timeout_ms: u32,
    /// `--max-sessions`.
    pub max_sessions: usize,
}

/// Decides a connect from the replicated session table. `creating`: new
/// sessions this server proposed that have not applied yet (they count
/// against the limit; creates in flight on other servers do not, so the
/// bound is exact per server and may be passed by what other servers
/// create meanwhile). A new session's id and password are drawn from
/// `rng`, the core's.
pub fn handshake(
    tree: &DataTree,
    node_id: u64,
    bounds: SessionBounds,
    c: &pb::ConnectRequest,
    creating: usize,
    rng: &mut StdRng,
) -> Handshake {
    let applied = tree.applied_index();
    if let Some(refusal) = refuse_if_behind(applied, c) {
        return refusal;
    }
    if c.session_id == 0 {
        let live = tree.session_count() + creating;
        if live >= bounds.max_sessions {
            return Handshake::Refuse {
                code: ErrorCode::LimitExceeded,
                message: limits::message(
                    Limit::Sessions,
                    bounds.max_sessions,
                    format!("{live} sessions are open, no new one is accepted"),
                ),
                limit: Some(Limit::Sessions),
            };
        }
        return Handshake::Create(CreateSessionTxn {
            session_id: new_session_id(rng, node_id),
            password: new_password(rng),
            timeout_ms: negotiate_timeout(
                c.timeout_ms,
                bounds.min_timeout_ms,
                bounds.max_timeout_ms,
            ),
        });
    }
    let id = c.session_id;
    match tree.session(id) {
        Some(s) if s.password == c.password => Handshake::Resume(pb::ConnectResponse {
            error: ErrorCode::Ok as i32,
            message: String::new(),
            session_id: id,
            password: c.password.clone(),
            timeout_ms: s.timeout_ms,
            zxid: applied,
            server_id: node_id,
            read_only: false,
        }),
        _ => Handshake::Refuse {
            code: ErrorCode::SessionExpired,
            message: format!("session {id:#x} has expired or never existed"),
            limit: None,
        },
    }
}

/// The refusal of a client that has seen a later zxid than this server
/// has `applied` (its reads here would go back in time), if it has.
fn refuse_if_behind(applied: u64, c: &pb::ConnectRequest) -> Option<Handshake> {
    (c.last_zxid_seen > applied).then(|| Handshake::Refuse {
        code: ErrorCode::ServerBehind,
        message: format!(
            "this server has applied zxid {applied}, the client has seen {}",
            c.last_zxid_seen
        ),
        limit: None,
    })
}

/// ZooKeeper's read-only sessions: while this server has no quorum, a
/// client that connected with canBeReadOnly gets one, served reads from
/// this server's tree and NotReadOnly for every write. A new one has an id
/// this server makes (its id in the top byte, as for the replicated
/// kind); a replicated session the client already holds may be resumed
/// read-only too (ZooKeeper does both). Nothing here is ever proposed:
/// the table lives on this server only, each session until its timeout
/// passes unheard or a leader is back (then every read-only connection is
/// closed, and its client reconnects for a read-write session).
#[derive(Debug, Default)]
pub struct ReadOnlySessions {
    local: HashMap<u64, ReadOnlySession>,
}

#[derive(Debug, Clone)]
struct ReadOnlySession {
    password: Vec<u8>,
    timeout: Duration,
    heard: Instant,
}

impl ReadOnlySessions {
    /// Decides a read-only connect: a new local session, the resume of a
    /// local one, or of a replicated one (as read-only), or a refusal.
    /// Answers carry `read_only`. A new session's id and password are
    /// drawn from `rng`, the core's.
    pub fn handshake(
        &mut self,
        tree: &DataTree,
        node_id: u64,
        bounds: SessionBounds,
        c: &pb::ConnectRequest,
        now: Instant,
        rng: &mut StdRng,
    ) -> Handshake {
        let applied = tree.applied_index();
        // Reads must never go back in time, read-only or not.
        if let Some(refusal) = refuse_if_behind(applied, c) {
            return refusal;
        }
        let answer = |session_id: u64, password: Vec<u8>, timeout_ms: u32| {
            Handshake::Resume(pb::ConnectResponse {
                error: ErrorCode::Ok as i32,
                message: String::new(),
                session_id,
                password,
                timeout_ms,
                zxid: applied,
                server_id: node_id,
                read_only: true,
            })
        };
        if c.session_id == 0 {
            let live = tree.session_count() + self.local.len();
            if live >= bounds.max_sessions {
                return Handshake::Refuse {
                    code: ErrorCode::LimitExceeded,
                    message: limits::message(
                        Limit::Sessions,
                        bounds.max_sessions,
                        format!("{live} sessions are open (read-only ones included), no new one is accepted"),
                    ),
                    limit: Some(Limit::Sessions),
                };
            }
            let timeout_ms =
                negotiate_timeout(c.timeout_ms, bounds.min_timeout_ms, bounds.max_timeout_ms);
            let id = loop {
                let id = new_session_id(rng, node_id);
                if tree.session(id).is_none() && !self.local.contains_key(&id) {
                    break id;
                }
            };
            let password = new_password(rng);
            self.local.insert(
                id,
                ReadOnlySession {
                    password: password.clone(),
                    timeout: Duration::from_millis(u64::from(timeout_ms)),
                    heard: now,
                },
            );
            return answer(id, password, timeout_ms);
        }
        match self.local.get_mut(&c.session_id) {
            Some(s) if s.password == c.password => {
                s.heard = now;
                let timeout_ms = s.timeout.as_millis() as u32;
                return answer(c.session_id, c.password.clone(), timeout_ms);
            }
            Some(_) => {}
            None => match handshake(tree, node_id, bounds, c, 0, rng) {
                Handshake::Resume(r) => return answer(r.session_id, r.password, r.timeout_ms),
                refused @ Handshake::Refuse { .. } => return refused,
                Handshake::Create(_) => unreachable!("a resume never creates"),
            },
        }
        Handshake::Refuse {
            code: ErrorCode::SessionExpired,
            message: format!("session {:#x} has expired or never existed", c.session_id),
            limit: None,
        }
    }

    /// Whether `id` is one of this server's read-only sessions.
    pub fn is_local(&self, id: u64) -> bool {
        self.local.contains_key(&id)
    }

    /// The session was heard from.
    pub fn touch(&mut self, id: u64, now: Instant) {
        if let Some(s) = self.local.get_mut(&id) {
            s.heard = now;
        }
    }

    /// The client closed its read-only session.
    pub fn close(&mut self, id: u64) {
        self.local.remove(&id);
    }

    /// Read-only sessions unheard for their timeout: forgotten, and
    /// returned (sorted) so that their connections can be told.
    pub fn take_expired(&mut self, now: Instant) -> Vec<u64> {
        let mut out: Vec<u64> = self
            .local
            .iter()
            .filter(|(_, s)| now.duration_since(s.heard) >= s.timeout)
            .map(|(id, _)| *id)
            .collect();
        out.sort_unstable();
        for id in &out {
            self.local.remove(id);
        }
        out
    }

    /// A leader is back: every read-only session ends.
    pub fn clear(&mut self) {
        self.local.clear();
    }

    pub fn len(&self) -> usize {
        self.local.len()
    }

    pub fn is_empty(&self) -> bool {
        self.local.is_empty()
    }
}

/// Deadlines of live sessions, on the leader's monotonic clock.
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
/// different servers never collide), drawn from `rng` below.
pub fn new_session_id(rng: &mut StdRng, node_id: u64) -> u64 {
    loop {
        let low: u64 = rng.random::<u64>() & 0x00ff_ffff_ffff_ffff;
        let id = ((node_id & 0xff) << 56) | low;
        if id != 0 {
            return id;
        }
    }
}

/// A new session password: 16 bytes drawn from `rng` (a CSPRNG seeded
/// from the OS in the real server, see [`crate::core::CoreInputs`]).
pub fn new_password(rng: &mut StdRng) -> Vec<u8> {
    rng.random::<[u8; 16]>().to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn rng() -> StdRng {
        StdRng::seed_from_u64(28)
    }

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
        let mut rng = rng();
        let id = new_session_id(&mut rng, 3);
        assert_eq!(id >> 56, 3);
        assert_ne!(new_session_id(&mut rng, 3), id);
        assert_eq!(new_password(&mut rng).len(), 16);
    }

    #[test]
    fn only_the_leader_keeps_deadlines_followers_report() {
        let t0 = Instant::now();
        let mut s = Sessions::default();
        // A follower: touches are collected for the leader, nothing expires.
        s.touch(7, t0);
        s.touch(3, t0);
        s.touched_elsewhere([9], t0);
        s.created(5, Duration::from_secs(1), t0);
        assert!(!s.is_tracked(5));
        assert_eq!(s.take_touched(), vec![3, 7]);
        assert!(s.take_touched().is_empty());
        assert!(s.take_expired(t0 + Duration::from_secs(100)).is_empty());
        // Promoted: every session of the table is armed from now.
        s.touch(4, t0);
        s.promote([(5, Duration::from_secs(1))], t0);
        assert!(s.take_touched().is_empty(), "a leader reports to nobody");
        s.created(6, Duration::from_secs(2), t0);
        s.touched_elsewhere([5], t0 + Duration::from_millis(800));
        assert!(s.take_expired(t0 + Duration::from_millis(1500)).is_empty());
        assert_eq!(s.take_expired(t0 + Duration::from_secs(2)), vec![5, 6]);
        s.close_failed(6);
        assert_eq!(s.take_expired(t0 + Duration::from_secs(2)), vec![6]);
        s.closed(5);
        assert!(!s.is_tracked(5));
        // Demoted: it decides nothing any more.
        s.demote();
        assert!(!s.is_tracked(6));
        assert!(s.take_expired(t0 + Duration::from_secs(100)).is_empty());
    }

    fn tree_with_session(id: u64, password: &[u8]) -> DataTree {
        use crate::proto::{txn::Kind, Txn};
        let mut tree = DataTree::new();
        tree.apply(
            1,
            0,
            &Txn {
                kind: Some(Kind::CreateSession(CreateSessionTxn {
                    session_id: id,
                    password: password.to_vec(),
                    timeout_ms: 4000,
                })),
                ..Default::default()
            },
        );
        tree
    }

    const BOUNDS: SessionBounds = SessionBounds {
        min_timeout_ms: 1000,
        max_timeout_ms: 10_000,
        max_sessions: 2,
    };

    #[test]
    fn read_only_sessions_are_local_and_expire() {
        let mut rng = rng();
        let t0 = Instant::now();
        let replicated = 0x0100_0000_0000_0042;
        let tree = tree_with_session(replicated, b"pw");
        let mut ro = ReadOnlySessions::default();
        let new = pb::ConnectRequest {
            timeout_ms: 3000,
            ..Default::default()
        };
        let Handshake::Resume(r) = ro.handshake(&tree, 2, BOUNDS, &new, t0, &mut rng) else {
            panic!("no read-only session");
        };
        assert!(r.read_only);
        assert_eq!(r.session_id >> 56, 2, "an id of this server");
        assert!(ro.is_local(r.session_id));
        // Only in this server's table: the replicated one has 1 session.
        assert_eq!(tree.session_count(), 1);
        // The limit counts read-only sessions too (BOUNDS: 2 sessions).
        assert!(matches!(
            ro.handshake(&tree, 2, BOUNDS, &new, t0, &mut rng),
            Handshake::Refuse {
                code: ErrorCode::LimitExceeded,
                ..
            }
        ));
        // Its client resumes it, with the password only.
        let again = pb::ConnectRequest {
            session_id: r.session_id,
            password: r.password.clone(),
            ..Default::default()
        };
        assert!(matches!(
            ro.handshake(&tree, 2, BOUNDS, &again, t0, &mut rng),
            Handshake::Resume(pb::ConnectResponse {
                read_only: true,
                ..
            })
        ));
        let wrong = pb::ConnectRequest {
            password: b"nope".to_vec(),
            ..again.clone()
        };
        assert!(matches!(
            ro.handshake(&tree, 2, BOUNDS, &wrong, t0, &mut rng),
            Handshake::Refuse {
                code: ErrorCode::SessionExpired,
                ..
            }
        ));
        // A replicated session is resumed read-only.
        let held = pb::ConnectRequest {
            session_id: replicated,
            password: b"pw".to_vec(),
            ..Default::default()
        };
        match ro.handshake(&tree, 2, BOUNDS, &held, t0, &mut rng) {
            Handshake::Resume(r) => {
                assert!(r.read_only);
                assert_eq!((r.session_id, r.timeout_ms), (replicated, 4000));
            }
            other => panic!("{other:?}"),
        }
        assert!(!ro.is_local(replicated));
        // Unheard for its timeout, a local session is forgotten.
        ro.touch(r.session_id, t0 + Duration::from_secs(2));
        assert!(ro.take_expired(t0 + Duration::from_secs(4)).is_empty());
        assert_eq!(
            ro.take_expired(t0 + Duration::from_secs(5)),
            vec![r.session_id]
        );
        assert!(ro.is_empty());
        assert!(matches!(
            ro.handshake(&tree, 2, BOUNDS, &again, t0, &mut rng),
            Handshake::Refuse {
                code: ErrorCode::SessionExpired,
                ..
            }
        ));
    }

    #[test]
    fn read_only_handshake_refuses_a_client_ahead_of_this_server() {
        let mut rng = rng();
        let tree = tree_with_session(0x0100_0000_0000_0042, b"pw");
        let mut ro = ReadOnlySessions::default();
        // The tree has applied zxid 1; reads must never go back in time.
        let ahead = pb::ConnectRequest {
            timeout_ms: 3000,
            last_zxid_seen: 2,
            ..Default::default()
        };
        match ro.handshake(&tree, 2, BOUNDS, &ahead, Instant::now(), &mut rng) {
            Handshake::Refuse { code, message, .. } => {
                assert_eq!(code, ErrorCode::ServerBehind);
                assert!(message.contains("applied zxid 1"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        assert!(!ro.is_local(0), "nothing was made");
    }

    #[test]
    fn handshake_creates_resumes_and_refuses() {
        let mut rng = rng();
        let tree = tree_with_session(0x0100_0000_0000_0042, b"pw");
        let new = pb::ConnectRequest {
            timeout_ms: 60_000,
            ..Default::default()
        };
        match handshake(&tree, 1, BOUNDS, &new, 0, &mut rng) {
            Handshake::Create(cs) => {
                assert_eq!(cs.timeout_ms, 10_000, "clamped to the bounds");
                assert_eq!(cs.session_id >> 56, 1);
            }
            other => panic!("{other:?}"),
        }
        // The limit counts sessions being created here too.
        match handshake(&tree, 1, BOUNDS, &new, 1, &mut rng) {
            Handshake::Refuse { code, limit, .. } => {
                assert_eq!(code, ErrorCode::LimitExceeded);
                assert_eq!(limit, Some(Limit::Sessions));
            }
            other => panic!("{other:?}"),
        }
        let resume = pb::ConnectRequest {
            session_id: 0x0100_0000_0000_0042,
            password: b"pw".to_vec(),
            last_zxid_seen: 1,
            ..Default::default()
        };
        match handshake(&tree, 1, BOUNDS, &resume, 5, &mut rng) {
            Handshake::Resume(r) => {
                assert_eq!(
                    (r.session_id, r.timeout_ms, r.zxid),
                    (0x0100_0000_0000_0042, 4000, 1)
                );
            }
            other => panic!("{other:?}"),
        }
        let wrong = pb::ConnectRequest {
            password: b"nope".to_vec(),
            ..resume.clone()
        };
        assert!(matches!(
            handshake(&tree, 1, BOUNDS, &wrong, 0, &mut rng),
            Handshake::Refuse {
                code: ErrorCode::SessionExpired,
                ..
            }
        ));
        // A client that has seen more than this server applied.
        let ahead = pb::ConnectRequest {
            last_zxid_seen: 2,
            ..resume
        };
        match handshake(&tree, 1, BOUNDS, &ahead, 0, &mut rng) {
            Handshake::Refuse { code, message, .. } => {
                assert_eq!(code, ErrorCode::ServerBehind);
                assert!(message.contains("applied zxid 1"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }
}
