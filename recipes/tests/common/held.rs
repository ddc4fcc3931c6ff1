//! A TCP proxy that holds a recipe's create back until the client has
//! cancelled the join that sent it and cleaned up after it: the create
//! then lands *after* the clean-up's look-up, the window an abandoned join
//! must close.
//!
//! Put one proxy in front of each of two servers of a cluster and give the
//! client both addresses. The first create whose path starts with the
//! planned prefix is held back: the client's connection is cut while the
//! connection to the server stays open, and no proxy takes a connection
//! until [`HeldCreate::open`] (so the client can send nothing meanwhile;
//! the one that held stays closed, so the client comes back through the
//! other). After the server answered the first `get_children` of the
//! planned directory that follows (the clean-up's look-up), the held
//! create is sent on its old connection and its answer kept
//! ([`HeldCreate::late`]).
//!
//! [`HeldCreate::hold_creates`] holds the next several creates instead,
//! one per proxy (each closed for good after its hold), and the test
//! sends each back by hand ([`HeldCreate::release`]), or just before the
//! client's next set_data under a prefix passes
//! ([`HeldCreate::release_before_set`]): two creates of one join that
//! both lose their answers.
//!
//! Keep a handle of the client until the held create is answered: the
//! last handle dropped closes the session, and a server drops a closed
//! session's connections, the held create's with them (it is refused
//! unanswered, a [`Late`] of `ConnectionLoss` that proves nothing).
//!
//! Frames are decoded (`warden.proto`), so requests and answers are
//! matched by xid, not by guessing at bytes.

#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prost::Message;
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};
use warden_client::ErrorCode;
use warden_protocol::pb::{self, client_frame, request, server_frame};

use super::late::FrameReader;

/// Longest wait for the held create's answer.
const ANSWER_WAIT: Duration = Duration::from_secs(10);

/// What became of the held create once it was sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Late {
    /// The server's answer.
    pub code: ErrorCode,
    /// The node it made, if it was applied.
    pub created: Option<String>,
}

/// The held create, with the server connection it came on.
struct Held {
    frame: Vec<u8>,
    xid: u64,
    upstream_read: FrameReader,
    upstream_write: OwnedWriteHalf,
}

#[derive(Default)]
struct Plan {
    /// Hold the next creates whose path starts with this.
    create_prefix: Option<String>,
    /// How many more of them to hold.
    holds_left: usize,
    /// Then release the first after the answer to the next listing of
    /// this (empty: released by hand).
    list_dir: String,
    /// The held creates in the order they came (`None` once sent).
    held: Vec<Option<Held>>,
    /// Send held create number `.0` just before the next set_data of a
    /// path under `.1` passes.
    release_before_set: Option<(usize, String)>,
    /// The xid of that listing, once sent.
    list_xid: Option<u64>,
}

struct State {
    plan: Mutex<Plan>,
    /// Closed from the hold until [`HeldCreate::open`].
    gate_open: AtomicBool,
    /// How many creates have been held.
    held: watch::Sender<usize>,
    late: watch::Sender<Option<Late>>,
}

/// Proxies sharing one plan (see the module docs).
pub struct HeldCreate {
    state: Arc<State>,
    pub addrs: Vec<String>,
}

impl HeldCreate {
    /// One proxy per upstream address.
    pub async fn start(upstreams: &[&str]) -> HeldCreate {
        let state = Arc::new(State {
            plan: Mutex::new(Plan::default()),
            gate_open: AtomicBool::new(true),
            held: watch::channel(0).0,
            late: watch::channel(None).0,
        });
        let mut addrs = Vec::new();
        for upstream in upstreams {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            addrs.push(listener.local_addr().unwrap().to_string());
            let closed = Arc::new(AtomicBool::new(false));
            let (state, upstream) = (state.clone(), upstream.to_string());
            tokio::spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    if closed.load(Ordering::SeqCst) || !state.gate_open.load(Ordering::SeqCst) {
                        continue; // dropped: refused
                    }
                    tokio::spawn(conn(
                        client,
                        upstream.clone(),
                        state.clone(),
                        closed.clone(),
                    ));
                }
            });
        }
        HeldCreate { state, addrs }
    }

    /// The client's connect string: every proxy.
    pub fn servers(&self) -> String {
        self.addrs.join(",")
    }

    /// Holds the next create under `create_prefix`, and releases it after
    /// the answer to the next listing of `dir` (see the module docs).
    pub fn hold_create(&self, create_prefix: &str, dir: &str) {
        let mut plan = self.state.plan.lock().unwrap();
        plan.create_prefix = Some(create_prefix.to_string());
        plan.holds_left = 1;
        plan.list_dir = dir.to_string();
    }

    /// Holds the next `count` creates under `create_prefix`, each sent
    /// only by [`HeldCreate::release`].
    pub fn hold_creates(&self, create_prefix: &str, count: usize) {
        let mut plan = self.state.plan.lock().unwrap();
        plan.create_prefix = Some(create_prefix.to_string());
        plan.holds_left = count;
        plan.list_dir = String::new();
    }

    /// Waits until a create is held (the client has just been cut off).
    pub async fn wait_held(&self) {
        self.wait_held_count(1).await;
    }

    /// Waits until `count` creates have been held.
    pub async fn wait_held_count(&self, count: usize) {
        let mut held = self.state.held.subscribe();
        held.wait_for(|h| *h >= count).await.unwrap();
    }

    /// Sends held create number `index` (from 0) on its old connection
    /// just before the client's next set_data of a path under `prefix`
    /// passes; its answer comes from [`HeldCreate::late`].
    pub fn release_before_set(&self, index: usize, prefix: &str) {
        self.state.plan.lock().unwrap().release_before_set = Some((index, prefix.to_string()));
    }

    /// Sends held create number `index` (from 0) on its old connection
    /// and returns its answer.
    pub async fn release(&self, index: usize) -> Late {
        let held = self
            .state
            .plan
            .lock()
            .unwrap()
            .held
            .get_mut(index)
            .and_then(Option::take)
            .unwrap_or_else(|| panic!("no held create {index} to send"));
        send_held(held).await
    }

    /// Lets the client connect again (through a proxy that did not hold).
    pub fn open(&self) {
        self.state.gate_open.store(true, Ordering::SeqCst);
    }

    /// Waits for the held create to be sent and answered.
    pub async fn late(&self) -> Late {
        let mut late = self.state.late.subscribe();
        let answered = late.wait_for(|l| l.is_some()).await.unwrap();
        answered.clone().unwrap()
    }
}

fn decode_request(frame: &[u8]) -> Option<pb::Request> {
    match pb::ClientFrame::decode(&frame[4..]).ok()?.kind? {
        client_frame::Kind::Request(r) => Some(r),
        client_frame::Kind::Connect(_) => None,
    }
}

fn decode_response(frame: &[u8]) -> Option<pb::Response> {
    match pb::ServerFrame::decode(&frame[4..]).ok()?.kind? {
        server_frame::Kind::Response(r) => Some(r),
        _ => None,
    }
}

/// Sends the first held create on its old connection and records its
/// answer.
async fn release(state: Arc<State>) {
    let held = state
        .plan
        .lock()
        .unwrap()
        .held
        .first_mut()
        .and_then(Option::take);
    let Some(held) = held else { return };
    let late = send_held(held).await;
    state.late.send_replace(Some(late));
}

/// Sends `held` on its old connection and waits for its answer.
async fn send_held(mut held: Held) -> Late {
    let answer = async {
        held.upstream_write.write_all(&held.frame).await.ok()?;
        loop {
            let frame = held.upstream_read.next().await.ok()?;
            match decode_response(&frame) {
                Some(r) if r.xid == held.xid => return Some(r),
                _ => continue, // pushes, nothing else of ours
            }
        }
    };
    match tokio::time::timeout(ANSWER_WAIT, answer).await {
        Ok(Some(r)) => Late {
            code: ErrorCode::try_from(r.error).unwrap_or(ErrorCode::SystemError),
            created: match r.result {
                Some(pb::response::Result::Create(c)) => Some(c.path),
                _ => None,
            },
        },
        _ => Late {
            code: ErrorCode::ConnectionLoss,
            created: None,
        },
    }
}

async fn conn(client: TcpStream, upstream: String, state: Arc<State>, closed: Arc<AtomicBool>) {
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let (cr, mut cw) = client.into_split();
    let mut cr = FrameReader::new(cr);
    let (sr, mut sw) = server.into_split();
    let (give_back, mut give_back_rx) = oneshot::channel::<()>();
    let (hand_over, handed) = oneshot::channel::<FrameReader>();
    // Server to client, until the client side goes or the server
    // connection is taken to be held; releases the held create after the
    // answer to the planned listing.
    let answer_state = state.clone();
    let answers = tokio::spawn(async move {
        let mut sr = FrameReader::new(sr);
        loop {
            tokio::select! {
                frame = sr.next() => {
                    let Ok(frame) = frame else { return };
                    if cw.write_all(&frame).await.is_err() {
                        return;
                    }
                    let listed = decode_response(&frame).is_some_and(|r| {
                        answer_state.plan.lock().unwrap().list_xid == Some(r.xid)
                    });
                    if listed {
                        tokio::spawn(release(answer_state.clone()));
                    }
                }
                _ = &mut give_back_rx => {
                    let _ = hand_over.send(sr);
                    return; // drops the client's socket
                }
            }
        }
    });
    while let Ok(frame) = cr.next().await {
        let send_first = {
            let mut plan = state.plan.lock().unwrap();
            let due = match (
                decode_request(&frame).and_then(|r| r.op),
                &plan.release_before_set,
            ) {
                (Some(request::Op::SetData(set)), Some((_, prefix))) => {
                    set.path.starts_with(prefix.as_str())
                }
                _ => false,
            };
            if due {
                let (index, _) = plan.release_before_set.take().unwrap();
                plan.held.get_mut(index).and_then(Option::take)
            } else {
                None
            }
        };
        if let Some(held) = send_first {
            let late = send_held(held).await;
            state.late.send_replace(Some(late));
        }
        let hold = {
            let mut plan = state.plan.lock().unwrap();
            match decode_request(&frame).and_then(|r| Some((r.xid, r.op?))) {
                Some((xid, request::Op::Create(c)))
                    if plan
                        .create_prefix
                        .as_ref()
                        .is_some_and(|p| c.path.starts_with(p.as_str())) =>
                {
                    plan.holds_left = plan.holds_left.saturating_sub(1);
                    if plan.holds_left == 0 {
                        plan.create_prefix = None;
                    }
                    Some(xid)
                }
                Some((xid, request::Op::GetChildren(g)))
                    if !plan.held.is_empty()
                        && plan.list_xid.is_none()
                        && g.path == plan.list_dir =>
                {
                    plan.list_xid = Some(xid);
                    None
                }
                _ => None,
            }
        };
        if let Some(xid) = hold {
            // Hold it, keep the server connection, cut the client's,
            // refuse new connections until `open`, here for good.
            closed.store(true, Ordering::SeqCst);
            state.gate_open.store(false, Ordering::SeqCst);
            let _ = give_back.send(());
            if let Ok(upstream_read) = handed.await {
                let count = {
                    let mut plan = state.plan.lock().unwrap();
                    plan.held.push(Some(Held {
                        frame,
                        xid,
                        upstream_read,
                        upstream_write: sw,
                    }));
                    plan.held.len()
                };
                state.held.send_replace(count);
            }
            return;
        }
        if sw.write_all(&frame).await.is_err() {
            break;
        }
    }
    answers.abort();
}
