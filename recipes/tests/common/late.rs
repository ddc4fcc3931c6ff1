//! A TCP proxy that makes a create commit *late*: after its client has
//! given up on it, looked for it, and is about to create again. That is
//! the lost-answer case the queue's orphan sweep exists for.
//!
//! Put one proxy in front of each of two servers of a cluster and give the
//! client both addresses. The first client frame that contains `marker`
//! (the path prefix of the recipe's queue node, so: its create) is held
//! back, the client's connection is cut (it sees `ConnectionLoss`) while
//! the connection to the server stays open, and that proxy takes no new
//! connections, so the client resumes its session through the other one.
//! When a frame with `marker` comes again (the retried create), the held
//! create is first sent on the old connection and its answer awaited:
//! it arrives just before the retry, after every look-up the client made
//! (and is refused since the join settles its session's writes before
//! it looks; without that it would commit there).

#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;

/// The held create, with the server connection it came on.
struct Held {
    frame: Vec<u8>,
    upstream_read: FrameReader,
    upstream_write: OwnedWriteHalf,
}

/// Reads length-prefixed frames (u32 big-endian length, then the body);
/// `next` is cancel-safe (bytes read stay buffered).
pub struct FrameReader {
    r: OwnedReadHalf,
    buf: Vec<u8>,
}

impl FrameReader {
    pub fn new(r: OwnedReadHalf) -> FrameReader {
        FrameReader { r, buf: Vec::new() }
    }

    pub async fn next(&mut self) -> std::io::Result<Vec<u8>> {
        loop {
            if self.buf.len() >= 4 {
                let len = u32::from_be_bytes(self.buf[..4].try_into().unwrap()) as usize;
                if self.buf.len() >= 4 + len {
                    return Ok(self.buf.drain(..4 + len).collect());
                }
            }
            if self.r.read_buf(&mut self.buf).await? == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
        }
    }
}

#[derive(Default)]
struct State {
    marker: Mutex<Option<Vec<u8>>>,
    held: Mutex<Option<Held>>,
    /// Set once the held create was answered with the created path.
    late_created: AtomicBool,
    /// Set once the held create was answered at all (created or refused).
    late_answered: AtomicBool,
}

/// Proxies sharing one plan (see the module docs).
pub struct LateCreate {
    state: Arc<State>,
    pub addrs: Vec<String>,
}

impl LateCreate {
    /// One proxy per upstream address.
    pub async fn start(upstreams: &[&str]) -> LateCreate {
        let state = Arc::new(State::default());
        let mut addrs = Vec::new();
        for upstream in upstreams {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            addrs.push(listener.local_addr().unwrap().to_string());
            let closed = Arc::new(AtomicBool::new(false));
            let (state, upstream) = (state.clone(), upstream.to_string());
            tokio::spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    if closed.load(Ordering::SeqCst) {
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
        LateCreate { state, addrs }
    }

    /// The client's connect string: every proxy.
    pub fn servers(&self) -> String {
        self.addrs.join(",")
    }

    /// Holds the next frame containing `marker` (see the module docs).
    pub async fn hold_next(&self, marker: &str) {
        *self.state.marker.lock().await = Some(marker.as_bytes().to_vec());
    }

    /// Whether the held create was applied late (answered with the path
    /// it created).
    pub fn late_created(&self) -> bool {
        self.state.late_created.load(Ordering::SeqCst)
    }

    /// Whether the held create was sent late and answered (applied or
    /// refused): the schedule took place.
    pub fn late_answered(&self) -> bool {
        self.state.late_answered.load(Ordering::SeqCst)
    }
}

/// Whether `answer` carries a created path: `marker`, then a name ending
/// in a 10-digit sequence number (an error names the path asked for,
/// without one).
fn created(answer: &[u8], marker: &[u8]) -> bool {
    let Some(at) = answer.windows(marker.len()).position(|w| w == marker) else {
        return false;
    };
    let name: Vec<u8> = answer[at + marker.len()..]
        .iter()
        .copied()
        .take_while(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_')
        .collect();
    name.len() > 10 && name[name.len() - 10..].iter().all(u8::is_ascii_digit)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

async fn conn(client: TcpStream, upstream: String, state: Arc<State>, closed: Arc<AtomicBool>) {
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let (cr, mut cw) = client.into_split();
    let mut cr = FrameReader {
        r: cr,
        buf: Vec::new(),
    };
    let (sr, mut sw) = server.into_split();
    let (give_back, mut give_back_rx) = tokio::sync::oneshot::channel::<()>();
    let (hand_over, handed) = tokio::sync::oneshot::channel::<FrameReader>();
    // Server to client, until the client side goes or the server
    // connection is taken to be held.
    let answers = tokio::spawn(async move {
        let mut sr = FrameReader {
            r: sr,
            buf: Vec::new(),
        };
        loop {
            tokio::select! {
                frame = sr.next() => {
                    let Ok(frame) = frame else { return };
                    if cw.write_all(&frame).await.is_err() {
                        return;
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
        let marker = state.marker.lock().await.clone();
        if let Some(marker) = marker.filter(|m| contains(&frame, m)) {
            let mut held = state.held.lock().await;
            if let Some(mut h) = held.take() {
                // The retried create: let the held one commit first.
                let _ = h.upstream_write.write_all(&h.frame).await;
                if let Ok(Ok(answer)) =
                    tokio::time::timeout(Duration::from_secs(10), h.upstream_read.next()).await
                {
                    state.late_answered.store(true, Ordering::SeqCst);
                    if created(&answer, &marker) {
                        state.late_created.store(true, Ordering::SeqCst);
                    }
                }
                *state.marker.lock().await = None;
            } else {
                // The first create: hold it, keep the server connection,
                // cut the client's, refuse new connections here.
                closed.store(true, Ordering::SeqCst);
                let _ = give_back.send(());
                if let Ok(upstream_read) = handed.await {
                    *held = Some(Held {
                        frame,
                        upstream_read,
                        upstream_write: sw,
                    });
                }
                return;
            }
        }
        if sw.write_all(&frame).await.is_err() {
            break;
        }
    }
    answers.abort();
}
