//! An in-memory stand-in for `warden serve`, for testing the client.
//!
//! It speaks the wire protocol of `warden.proto` and keeps a znode tree,
//! sessions and per-connection watches with ZooKeeper's semantics, but no
//! Raft, no disk, no timers: sessions expire only when a test says so. It
//! runs on its own thread and runtime, so both async tests and plain tests
//! (driving the `wardenctl` binary) can use it, and it lets a test cut every
//! connection or refuse new ones to exercise reconnects and expiry.
//!
//! It is test scaffolding, not a model of the real server: where the two
//! could differ, the real-server twins of these tests decide.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use futures::{SinkExt, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::Framed;
use warden_protocol::pb::{self, ErrorCode, EventType};
use warden_protocol::{path, FrameCodec};

/// The timeout the fake grants, whatever was asked, unless told otherwise.
const SESSION_TIMEOUT_MS_DEFAULT: u32 = 10_000;

/// A running fake server; stops on drop.
pub struct FakeWarden {
    pub addr: String,
    shared: Arc<Mutex<State>>,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

#[derive(Clone)]
struct Node {
    data: Vec<u8>,
    stat: pb::Stat,
    acl: Vec<pb::Acl>,
    children: BTreeSet<String>,
}

#[derive(Default)]
struct Watches {
    data: HashSet<String>,
    exist: HashSet<String>,
    child: HashSet<String>,
    persistent: HashSet<String>,
    recursive: HashSet<String>,
}

struct Conn {
    session: u64,
    out: mpsc::UnboundedSender<pb::ServerFrame>,
    watches: Watches,
}

struct State {
    nodes: BTreeMap<String, Node>,
    zxid: u64,
    /// session id → password
    sessions: HashMap<u64, Vec<u8>>,
    next_session: u64,
    conns: HashMap<u64, Conn>,
    tasks: HashMap<u64, tokio::task::AbortHandle>,
    next_conn: u64,
    accepting: bool,
    /// When set, requests are swallowed unanswered (pings too).
    stalled: bool,
    /// Refuse a session close with this code, as a server without a leader
    /// does.
    close_refusal: Option<ErrorCode>,
    requests_seen: u64,
    timeout_ms: u32,
    /// What clients sent, for assertions.
    pub set_watches_seen: Vec<pb::SetWatchesRequest>,
    pub connects_seen: Vec<pb::ConnectRequest>,
    pub pings_seen: u64,
}

type Failure = (ErrorCode, String);
/// Changes a write made, to fire watches with.
type Events = Vec<(EventType, String)>;

fn fail(code: ErrorCode, path: &str) -> Failure {
    (code, format!("{}: {path}", code.name()))
}

impl FakeWarden {
    /// Starts the fake on `127.0.0.1:<free port>`.
    pub fn start() -> FakeWarden {
        let mut nodes = BTreeMap::new();
        nodes.insert(
            "/".to_string(),
            Node {
                data: Vec::new(),
                stat: pb::Stat::default(),
                acl: warden_protocol::open_acl(),
                children: BTreeSet::new(),
            },
        );
        let shared = Arc::new(Mutex::new(State {
            nodes,
            zxid: 0,
            sessions: HashMap::new(),
            next_session: 0x1000,
            conns: HashMap::new(),
            tasks: HashMap::new(),
            next_conn: 1,
            accepting: true,
            stalled: false,
            close_refusal: None,
            requests_seen: 0,
            timeout_ms: SESSION_TIMEOUT_MS_DEFAULT,
            set_watches_seen: Vec::new(),
            connects_seen: Vec::new(),
            pings_seen: 0,
        }));
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (shutdown_tx, shutdown_rx) = oneshot::channel();
        let for_thread = shared.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("fake runtime");
            rt.block_on(async move {
                let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
                addr_tx
                    .send(listener.local_addr().expect("addr").to_string())
                    .expect("send addr");
                tokio::select! {
                    _ = accept_loop(listener, for_thread) => {}
                    _ = shutdown_rx => {}
                }
            });
        });
        let addr = addr_rx.recv().expect("fake server address");
        FakeWarden {
            addr,
            shared,
            shutdown: Some(shutdown_tx),
            thread: Some(thread),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.shared.lock().expect("fake state")
    }

    /// Cuts every client connection (sessions live on).
    pub fn drop_connections(&self) {
        let mut st = self.state();
        for (_, task) in st.tasks.drain() {
            task.abort();
        }
        st.conns.clear();
    }

    /// Whether new connections are served (false: accepted and closed).
    pub fn set_accepting(&self, accepting: bool) {
        self.state().accepting = accepting;
    }

    /// Whether requests go unanswered, as on a hung server.
    pub fn set_stalled(&self, stalled: bool) {
        self.state().stalled = stalled;
    }

    /// Whether a close is refused (with `code`) instead of done.
    pub fn set_close_refusal(&self, code: Option<ErrorCode>) {
        self.state().close_refusal = code;
    }

    /// Requests received so far (answered or not).
    pub fn requests_seen(&self) -> u64 {
        self.state().requests_seen
    }

    /// Persistent (and recursive) watches held for all connections.
    pub fn persistent_watch_count(&self) -> usize {
        self.state()
            .conns
            .values()
            .map(|c| c.watches.persistent.len() + c.watches.recursive.len())
            .sum()
    }

    /// The session timeout granted to new and resumed sessions.
    pub fn set_timeout_ms(&self, timeout_ms: u32) {
        self.state().timeout_ms = timeout_ms;
    }

    /// Expires a session as the leader would: ephemerals go, its connection
    /// is told, resuming it is refused.
    pub fn expire(&self, session: u64) {
        let mut st = self.state();
        st.end_session(session);
        let conns: Vec<u64> = st
            .conns
            .iter()
            .filter(|(_, c)| c.session == session)
            .map(|(id, _)| *id)
            .collect();
        for id in conns {
            if let Some(conn) = st.conns.get(&id) {
                let _ = conn.out.send(pb::ServerFrame {
                    kind: Some(pb::server_frame::Kind::SessionEvent(pb::SessionEvent {
                        state: pb::SessionState::Expired as i32,
                        message: "session expired".into(),
                    })),
                });
            }
        }
    }

    /// Changes a node as another client would (fires watches).
    pub fn set_data(&self, node: &str, data: &[u8]) {
        let mut st = self.state();
        let zxid = st.zxid + 1;
        let events = st.set_data(node, data, None, zxid).expect("set_data").1;
        st.zxid = zxid;
        st.fire(events, zxid);
    }

    pub fn set_watches_seen(&self) -> Vec<pb::SetWatchesRequest> {
        self.state().set_watches_seen.clone()
    }

    pub fn connects_seen(&self) -> Vec<pb::ConnectRequest> {
        self.state().connects_seen.clone()
    }

    pub fn pings_seen(&self) -> u64 {
        self.state().pings_seen
    }

    pub fn connection_count(&self) -> usize {
        self.state().conns.len()
    }

    pub fn session_alive(&self, session: u64) -> bool {
        self.state().sessions.contains_key(&session)
    }

    pub fn exists(&self, node: &str) -> bool {
        self.state().nodes.contains_key(node)
    }
}

impl Drop for FakeWarden {
    fn drop(&mut self) {
        self.drop_connections();
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Mutex<State>>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let mut st = shared.lock().expect("fake state");
        if !st.accepting {
            drop(stream);
            continue;
        }
        let id = st.next_conn;
        st.next_conn += 1;
        let task = tokio::spawn(serve(stream, id, shared.clone()));
        st.tasks.insert(id, task.abort_handle());
    }
}

async fn serve(stream: TcpStream, id: u64, shared: Arc<Mutex<State>>) {
    let mut framed = Framed::new(
        stream,
        FrameCodec::<pb::ClientFrame, pb::ServerFrame>::new(),
    );
    let Some(Ok(pb::ClientFrame {
        kind: Some(pb::client_frame::Kind::Connect(request)),
    })) = framed.next().await
    else {
        return;
    };
    let (out_tx, mut out_rx) = mpsc::unbounded_channel();
    let response = shared
        .lock()
        .expect("fake state")
        .connect(id, request, out_tx);
    let refused = response.error != ErrorCode::Ok as i32;
    let frame = pb::ServerFrame {
        kind: Some(pb::server_frame::Kind::Connect(response)),
    };
    if framed.send(frame).await.is_err() || refused {
        return;
    }
    loop {
        tokio::select! {
            frame = framed.next() => {
                let Some(Ok(frame)) = frame else { break };
                let close = shared.lock().expect("fake state").handle(id, frame);
                if close {
                    while let Ok(frame) = out_rx.try_recv() {
                        let _ = framed.send(frame).await;
                    }
                    break;
                }
            }
            frame = out_rx.recv() => {
                let Some(frame) = frame else { break };
                if framed.send(frame).await.is_err() {
                    break;
                }
            }
        }
    }
    let mut st = shared.lock().expect("fake state");
    st.conns.remove(&id);
    st.tasks.remove(&id);
}

impl State {
    fn connect(
        &mut self,
        id: u64,
        req: pb::ConnectRequest,
        out: mpsc::UnboundedSender<pb::ServerFrame>,
    ) -> pb::ConnectResponse {
        self.connects_seen.push(req.clone());
        let refuse = |code: ErrorCode, message: &str| pb::ConnectResponse {
            error: code as i32,
            message: message.into(),
            ..Default::default()
        };
        if req.last_zxid_seen > self.zxid {
            return refuse(ErrorCode::ServerBehind, "server behind");
        }
        let (session, password) = if req.session_id == 0 {
            let session = self.next_session;
            self.next_session += 1;
            let password = session.to_be_bytes().to_vec();
            self.sessions.insert(session, password.clone());
            (session, password)
        } else {
            match self.sessions.get(&req.session_id) {
                Some(pw) if *pw == req.password => (req.session_id, pw.clone()),
                _ => return refuse(ErrorCode::SessionExpired, "session expired"),
            }
        };
        // A session lives on one connection at a time.
        self.conns.retain(|_, c| c.session != session);
        self.conns.insert(
            id,
            Conn {
                session,
                out,
                watches: Watches::default(),
            },
        );
        pb::ConnectResponse {
            error: ErrorCode::Ok as i32,
            message: String::new(),
            session_id: session,
            password,
            timeout_ms: self.timeout_ms,
            zxid: self.zxid,
            server_id: 1,
            read_only: false,
        }
    }

    fn end_session(&mut self, session: u64) {
        if self.sessions.remove(&session).is_none() {
            return;
        }
        let ephemerals: Vec<String> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.stat.ephemeral_owner == session)
            .map(|(p, _)| p.clone())
            .collect();
        for node in ephemerals {
            let zxid = self.zxid + 1;
            if let Ok(events) = self.delete(&node, None, zxid) {
                self.zxid = zxid;
                self.fire(events, zxid);
            }
        }
    }

    /// Handles one frame; true when the connection must close after
    /// flushing.
    fn handle(&mut self, id: u64, frame: pb::ClientFrame) -> bool {
        let Some(pb::client_frame::Kind::Request(req)) = frame.kind else {
            return true;
        };
        let Some(session) = self.conns.get(&id).map(|c| c.session) else {
            return true;
        };
        self.requests_seen += 1;
        if self.stalled {
            return false;
        }
        let mut close = false;
        let outcome: Result<Option<pb::response::Result>, Failure> = match req.op {
            None => Err(fail(ErrorCode::MarshallingError, "")),
            Some(op) => match op {
                pb::request::Op::Ping(_) => {
                    self.pings_seen += 1;
                    Ok(None)
                }
                pb::request::Op::Close(_) => match self.close_refusal {
                    Some(code) => Err(fail(code, "no leader")),
                    None => {
                        self.end_session(session);
                        close = true;
                        Ok(None)
                    }
                },
                pb::request::Op::Sync(s) => {
                    Ok(Some(pb::response::Result::Sync(pb::SyncResponse {
                        path: s.path,
                    })))
                }
                pb::request::Op::GetData(g) => match self.nodes.get(&g.path) {
                    Some(n) => {
                        let result = pb::response::Result::GetData(pb::GetDataResponse {
                            data: n.data.clone(),
                            stat: Some(n.stat),
                            data_null: false,
                        });
                        if g.watch {
                            self.watches(id).data.insert(g.path);
                        }
                        Ok(Some(result))
                    }
                    None => Err(fail(ErrorCode::NoNode, &g.path)),
                },
                pb::request::Op::Exists(e) => {
                    let stat = self.nodes.get(&e.path).map(|n| n.stat);
                    if e.watch {
                        let w = self.watches(id);
                        if stat.is_some() {
                            w.data.insert(e.path);
                        } else {
                            w.exist.insert(e.path);
                        }
                    }
                    Ok(Some(pb::response::Result::Stat(pb::StatResponse { stat })))
                }
                pb::request::Op::GetChildren(g) => match self.nodes.get(&g.path) {
                    Some(n) => {
                        let result = pb::response::Result::GetChildren(pb::GetChildrenResponse {
                            children: n.children.iter().cloned().collect(),
                            stat: Some(n.stat),
                        });
                        if g.watch {
                            self.watches(id).child.insert(g.path);
                        }
                        Ok(Some(result))
                    }
                    None => Err(fail(ErrorCode::NoNode, &g.path)),
                },
                pb::request::Op::GetAcl(g) => match self.nodes.get(&g.path) {
                    Some(n) => Ok(Some(pb::response::Result::GetAcl(pb::GetAclResponse {
                        acl: n.acl.clone(),
                        stat: Some(n.stat),
                    }))),
                    None => Err(fail(ErrorCode::NoNode, &g.path)),
                },
                pb::request::Op::SetAcl(s) => match self.nodes.get_mut(&s.path) {
                    Some(n) if s.version.is_some_and(|v| v != n.stat.aversion) => {
                        Err(fail(ErrorCode::BadVersion, &s.path))
                    }
                    Some(n) => {
                        n.acl = s.acl;
                        n.stat.aversion += 1;
                        Ok(Some(pb::response::Result::Stat(pb::StatResponse {
                            stat: Some(n.stat),
                        })))
                    }
                    None => Err(fail(ErrorCode::NoNode, &s.path)),
                },
                pb::request::Op::AddWatch(a) => {
                    let w = self.watches(id);
                    if a.mode == pb::AddWatchMode::PersistentRecursive as i32 {
                        w.recursive.insert(a.path);
                    } else {
                        w.persistent.insert(a.path);
                    }
                    Ok(None)
                }
                pb::request::Op::RemoveWatches(r) => {
                    let w = self.watches(id);
                    let removed = if r.watcher_type == pb::WatcherType::PersistentRecursive as i32 {
                        w.recursive.remove(&r.path)
                    } else {
                        w.persistent.remove(&r.path)
                    };
                    if removed {
                        Ok(None)
                    } else {
                        Err(fail(ErrorCode::NoWatcher, &r.path))
                    }
                }
                pb::request::Op::SetWatches(s) => {
                    self.set_watches(id, s);
                    Ok(None)
                }
                pb::request::Op::Multi(m) => Ok(Some(self.multi(session, m))),
                write => self.write(session, write),
            },
        };
        let (error, message, result) = match outcome {
            Ok(result) => (ErrorCode::Ok, String::new(), result),
            Err((code, message)) => (code, message, None),
        };
        let response = pb::Response {
            xid: req.xid,
            zxid: self.zxid,
            error: error as i32,
            message,
            result,
        };
        if let Some(conn) = self.conns.get(&id) {
            let _ = conn.out.send(pb::ServerFrame {
                kind: Some(pb::server_frame::Kind::Response(response)),
            });
        }
        close
    }

    fn watches(&mut self, id: u64) -> &mut Watches {
        &mut self.conns.get_mut(&id).expect("live connection").watches
    }

    /// One write outside a multi: its own zxid.
    fn write(
        &mut self,
        session: u64,
        op: pb::request::Op,
    ) -> Result<Option<pb::response::Result>, Failure> {
        let zxid = self.zxid + 1;
        let (result, events) = match op {
            pb::request::Op::Create(c) => {
                let (path, stat, events) = self.create(session, c, zxid)?;
                (
                    pb::response::Result::Create(pb::CreateResponse {
                        path,
                        stat: Some(stat),
                    }),
                    events,
                )
            }
            pb::request::Op::Delete(d) => {
                let events = self.delete(&d.path, d.version, zxid)?;
                self.zxid = zxid;
                self.fire(events, zxid);
                return Ok(None);
            }
            pb::request::Op::SetData(s) => {
                let (stat, events) = self.set_data(&s.path, &s.data, s.version, zxid)?;
                (
                    pb::response::Result::Stat(pb::StatResponse { stat: Some(stat) }),
                    events,
                )
            }
            _ => return Err(fail(ErrorCode::Unimplemented, "")),
        };
        self.zxid = zxid;
        self.fire(events, zxid);
        Ok(Some(result))
    }

    fn multi(&mut self, session: u64, m: pb::MultiRequest) -> pb::response::Result {
        let zxid = self.zxid + 1;
        let snapshot = self.nodes.clone();
        let mut results = Vec::new();
        let mut all_events = Vec::new();
        let mut failed = false;
        for op in m.ops {
            if failed {
                results.push(pb::MultiOpResult {
                    error: ErrorCode::RuntimeInconsistency as i32,
                    ..Default::default()
                });
                continue;
            }
            let outcome = match op.op {
                Some(pb::multi_op::Op::Create(c)) => {
                    self.create(session, c, zxid).map(|(path, stat, ev)| {
                        (
                            Some(pb::multi_op_result::Result::Create(pb::CreateResponse {
                                path,
                                stat: Some(stat),
                            })),
                            ev,
                        )
                    })
                }
                Some(pb::multi_op::Op::Delete(d)) => {
                    self.delete(&d.path, d.version, zxid).map(|ev| (None, ev))
                }
                Some(pb::multi_op::Op::SetData(s)) => self
                    .set_data(&s.path, &s.data, s.version, zxid)
                    .map(|(stat, ev)| {
                        (
                            Some(pb::multi_op_result::Result::SetData(pb::StatResponse {
                                stat: Some(stat),
                            })),
                            ev,
                        )
                    }),
                Some(pb::multi_op::Op::Check(c)) => match self.nodes.get(&c.path) {
                    None => Err(fail(ErrorCode::NoNode, &c.path)),
                    Some(n) if c.version.is_some_and(|v| v != n.stat.version) => {
                        Err(fail(ErrorCode::BadVersion, &c.path))
                    }
                    Some(_) => Ok((None, Vec::new())),
                },
                None => Err(fail(ErrorCode::MarshallingError, "")),
            };
            match outcome {
                Ok((result, events)) => {
                    all_events.extend(events);
                    results.push(pb::MultiOpResult {
                        error: ErrorCode::Ok as i32,
                        message: String::new(),
                        result,
                    });
                }
                Err((code, message)) => {
                    failed = true;
                    results.push(pb::MultiOpResult {
                        error: code as i32,
                        message,
                        result: None,
                    });
                }
            }
        }
        if failed {
            self.nodes = snapshot;
            for r in &mut results {
                if r.error == ErrorCode::Ok as i32 {
                    r.result = None;
                }
            }
        } else {
            self.zxid = zxid;
            self.fire(all_events, zxid);
        }
        pb::response::Result::Multi(pb::MultiResponse { results })
    }

    fn create(
        &mut self,
        session: u64,
        c: pb::CreateRequest,
        zxid: u64,
    ) -> Result<(String, pb::Stat, Events), Failure> {
        let base = if c.sequential && c.path.ends_with('/') {
            c.path.clone()
        } else {
            if path::validate(&c.path).is_err() || c.path == "/" {
                return Err(fail(ErrorCode::InvalidPath, &c.path));
            }
            c.path.clone()
        };
        let parent_path = if base.ends_with('/') {
            base.trim_end_matches('/').to_string()
        } else {
            path::parent(&base).to_string()
        };
        let parent_path = if parent_path.is_empty() {
            "/".to_string()
        } else {
            parent_path
        };
        let Some(parent) = self.nodes.get_mut(&parent_path) else {
            return Err(fail(ErrorCode::NoNode, &c.path));
        };
        if parent.stat.ephemeral_owner != 0 {
            return Err(fail(ErrorCode::NoChildrenForEphemerals, &c.path));
        }
        let full = if c.sequential {
            format!("{base}{:010}", parent.stat.cversion)
        } else {
            base
        };
        if self.nodes.contains_key(&full) {
            return Err(fail(ErrorCode::NodeExists, &full));
        }
        let parent = self.nodes.get_mut(&parent_path).expect("checked above");
        parent.children.insert(path::name(&full).to_string());
        parent.stat.cversion += 1;
        parent.stat.pzxid = zxid;
        parent.stat.num_children += 1;
        let stat = pb::Stat {
            czxid: zxid,
            mzxid: zxid,
            pzxid: zxid,
            ephemeral_owner: if c.ephemeral { session } else { 0 },
            data_length: c.data.len() as u32,
            ..Default::default()
        };
        self.nodes.insert(
            full.clone(),
            Node {
                data: c.data,
                stat,
                acl: if c.acl.is_empty() {
                    warden_protocol::open_acl()
                } else {
                    c.acl
                },
                children: BTreeSet::new(),
            },
        );
        let events = vec![
            (EventType::NodeCreated, full.clone()),
            (EventType::NodeChildrenChanged, parent_path),
        ];
        Ok((full, stat, events))
    }

    fn delete(&mut self, node: &str, version: Option<i32>, zxid: u64) -> Result<Events, Failure> {
        if node == "/" {
            return Err(fail(ErrorCode::BadArguments, node));
        }
        let Some(n) = self.nodes.get(node) else {
            return Err(fail(ErrorCode::NoNode, node));
        };
        if version.is_some_and(|v| v != n.stat.version) {
            return Err(fail(ErrorCode::BadVersion, node));
        }
        if !n.children.is_empty() {
            return Err(fail(ErrorCode::NotEmpty, node));
        }
        self.nodes.remove(node);
        let parent_path = path::parent(node).to_string();
        let parent = self
            .nodes
            .get_mut(&parent_path)
            .expect("parent of a node exists");
        parent.children.remove(path::name(node));
        parent.stat.cversion += 1;
        parent.stat.pzxid = zxid;
        parent.stat.num_children -= 1;
        Ok(vec![
            (EventType::NodeDeleted, node.to_string()),
            (EventType::NodeChildrenChanged, parent_path),
        ])
    }

    fn set_data(
        &mut self,
        node: &str,
        data: &[u8],
        version: Option<i32>,
        zxid: u64,
    ) -> Result<(pb::Stat, Events), Failure> {
        let Some(n) = self.nodes.get_mut(node) else {
            return Err(fail(ErrorCode::NoNode, node));
        };
        if version.is_some_and(|v| v != n.stat.version) {
            return Err(fail(ErrorCode::BadVersion, node));
        }
        n.data = data.to_vec();
        n.stat.version += 1;
        n.stat.mzxid = zxid;
        n.stat.data_length = data.len() as u32;
        Ok((n.stat, vec![(EventType::NodeDataChanged, node.to_string())]))
    }

    /// ZooKeeper's rules: one event per connection per (path, type); one-shot
    /// watches are consumed.
    fn fire(&mut self, events: Events, zxid: u64) {
        for (t, node) in events {
            for conn in self.conns.values_mut() {
                let w = &mut conn.watches;
                let mut hit = false;
                match t {
                    EventType::NodeCreated | EventType::NodeDataChanged => {
                        hit |= w.data.remove(&node);
                        hit |= w.exist.remove(&node);
                    }
                    EventType::NodeChildrenChanged => hit |= w.child.remove(&node),
                    EventType::NodeDeleted => {
                        hit |= w.data.remove(&node);
                        hit |= w.exist.remove(&node);
                        hit |= w.child.remove(&node);
                    }
                    EventType::Unspecified => {}
                }
                hit |= w.persistent.contains(&node);
                if t != EventType::NodeChildrenChanged {
                    hit |= w.recursive.contains(&node)
                        || path::ancestors(&node).any(|a| w.recursive.contains(a));
                }
                if hit {
                    let _ = conn.out.send(pb::ServerFrame {
                        kind: Some(pb::server_frame::Kind::WatchEvent(pb::WatchEvent {
                            r#type: t as i32,
                            path: node.clone(),
                            zxid,
                        })),
                    });
                }
            }
        }
    }

    /// Re-registers watches, firing at once those whose trigger came after
    /// `relative_zxid` (ZooKeeper's rules).
    fn set_watches(&mut self, id: u64, s: pb::SetWatchesRequest) {
        self.set_watches_seen.push(s.clone());
        let rel = s.relative_zxid;
        let now = self.zxid;
        let mut fire_now = Vec::new();
        for p in s.data_watches {
            match self.nodes.get(&p) {
                None => fire_now.push((EventType::NodeDeleted, p)),
                Some(n) if n.stat.mzxid > rel => fire_now.push((EventType::NodeDataChanged, p)),
                Some(_) => {
                    self.watches(id).data.insert(p);
                }
            }
        }
        for p in s.exist_watches {
            if self.nodes.contains_key(&p) {
                fire_now.push((EventType::NodeCreated, p));
            } else {
                self.watches(id).exist.insert(p);
            }
        }
        for p in s.child_watches {
            match self.nodes.get(&p) {
                None => fire_now.push((EventType::NodeDeleted, p)),
                Some(n) if n.stat.pzxid > rel => fire_now.push((EventType::NodeChildrenChanged, p)),
                Some(_) => {
                    self.watches(id).child.insert(p);
                }
            }
        }
        let w = self.watches(id);
        w.persistent.extend(s.persistent_watches);
        w.recursive.extend(s.persistent_recursive_watches);
        let out = self.conns.get(&id).expect("live connection").out.clone();
        for (t, p) in fire_now {
            let _ = out.send(pb::ServerFrame {
                kind: Some(pb::server_frame::Kind::WatchEvent(pb::WatchEvent {
                    r#type: t as i32,
                    path: p,
                    zxid: now,
                })),
            });
        }
    }
}
