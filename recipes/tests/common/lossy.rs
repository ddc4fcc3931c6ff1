//! A TCP proxy between a client and a server that can lose the answer to
//! one request, hold answers back for a while, or cut the client off
//! altogether.

#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often the partition flag is looked at.
const POLL: Duration = Duration::from_millis(20);

/// A TCP proxy between a client and the server that can lose the answer to
/// one request: it forwards the request, swallows the server's reply and
/// cuts the connection. That is the case protected creation is for: the
/// create was applied, the client only sees `ConnectionLoss`.
pub struct LossyProxy {
    pub addr: String,
    state: Arc<ProxyState>,
}

#[derive(Default)]
struct ProxyState {
    /// Set: the next client frame is forwarded, its answer swallowed.
    arm: AtomicBool,
    /// Set: the next client frame containing these bytes is forwarded,
    /// its answer swallowed.
    marker: std::sync::Mutex<Option<Vec<u8>>>,
    /// Set while an answer is to be swallowed.
    swallow: AtomicBool,
    /// Answers swallowed so far.
    cuts: std::sync::atomic::AtomicU32,
    /// Set: every connection is cut and new ones are refused (a partition).
    partitioned: AtomicBool,
    /// Set: answers are held from the next client frame containing these
    /// bytes on.
    stall_marker: std::sync::Mutex<Option<Vec<u8>>>,
    /// Set while answers are held back (the connection stays open).
    stalled: AtomicBool,
}

impl LossyProxy {
    pub async fn start(upstream: &str) -> LossyProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let state = Arc::new(ProxyState::default());
        let upstream = upstream.to_string();
        let shared = state.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if shared.partitioned.load(Ordering::SeqCst) {
                    continue; // Dropped: closed at once.
                }
                tokio::spawn(proxy_conn(client, upstream.clone(), shared.clone()));
            }
        });
        LossyProxy { addr, state }
    }

    pub fn lose_the_answer_to_the_next_request(&self) {
        self.state.arm.store(true, Ordering::SeqCst);
    }

    /// Loses the answer to the next request whose frame contains
    /// `marker` (a path, say).
    pub fn lose_the_answer_to_the_next_request_with(&self, marker: &str) {
        *self.state.marker.lock().unwrap() = Some(marker.as_bytes().to_vec());
    }

    /// Holds back every answer from the one to the next request whose
    /// frame contains `marker` on, until [`release_answers`](Self::release_answers):
    /// a server that is slow to answer, on a connection that stays up.
    pub fn stall_answers_from(&self, marker: &str) {
        *self.state.stall_marker.lock().unwrap() = Some(marker.as_bytes().to_vec());
    }

    /// Whether answers are being held back.
    pub fn answers_stalled(&self) -> bool {
        self.state.stalled.load(Ordering::SeqCst)
    }

    /// Lets the held answers through, in order.
    pub fn release_answers(&self) {
        self.state.stalled.store(false, Ordering::SeqCst);
    }

    pub fn partition(&self) {
        self.state.partitioned.store(true, Ordering::SeqCst);
    }

    pub fn cuts(&self) -> u32 {
        self.state.cuts.load(Ordering::SeqCst)
    }
}

/// One length-prefixed frame (u32 big-endian length, then the body), raw.
async fn read_frame(r: &mut (impl tokio::io::AsyncRead + Unpin)) -> std::io::Result<Vec<u8>> {
    use tokio::io::AsyncReadExt;
    let mut len = [0u8; 4];
    r.read_exact(&mut len).await?;
    let mut frame = len.to_vec();
    frame.resize(4 + u32::from_be_bytes(len) as usize, 0);
    r.read_exact(&mut frame[4..]).await?;
    Ok(frame)
}

async fn proxy_conn(client: tokio::net::TcpStream, upstream: String, state: Arc<ProxyState>) {
    let Ok(server) = tokio::net::TcpStream::connect(upstream).await else {
        return;
    };
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    // Whichever side ends, both sockets close when this returns.
    tokio::select! {
        _ = requests(&mut cr, &mut sw, &state) => {}
        _ = answers(&mut sr, &mut cw, &state) => {}
        _ = partitioned(&state) => {}
    }
}

/// Resolves once the proxy is partitioned (for as long as that takes).
async fn partitioned(state: &ProxyState) {
    while !state.partitioned.load(Ordering::SeqCst) {
        tokio::time::sleep(POLL).await;
    }
}

/// Client to server; arms the swallow after forwarding an armed request.
async fn requests(
    from: &mut tokio::net::tcp::OwnedReadHalf,
    to: &mut tokio::net::tcp::OwnedWriteHalf,
    state: &ProxyState,
) -> std::io::Result<()> {
    use tokio::io::AsyncWriteExt;
    loop {
        let frame = read_frame(from).await?;
        let marked = {
            let mut marker = state.marker.lock().unwrap();
            let hit = marker
                .as_ref()
                .is_some_and(|m| frame.windows(m.len()).any(|w| w == m.as_slice()));
            if hit {
                *marker = None;
            }
            hit
        };
        let armed = state.arm.swap(false, Ordering::SeqCst) || marked;
        {
            let mut stall = state.stall_marker.lock().unwrap();
            if stall
                .as_ref()
                .is_some_and(|m| frame.windows(m.len()).any(|w| w == m.as_slice()))
            {
                // Before the request goes: its answer cannot overtake.
                *stall = None;
                state.stalled.store(true, Ordering::SeqCst);
            }
        }
        to.write_all(&frame).await?;
        if armed {
            state.swallow.store(true, Ordering::SeqCst);
        }
    }
}

/// Server to client; returns (cutting the connection) instead of
/// forwarding a swallowed answer.
async fn answers(
    from: &mut tokio::net::tcp::OwnedReadHalf,
    to: &mut tokio::net::tcp::OwnedWriteHalf,
    state: &ProxyState,
) -> std::io::Result<()> {
    use tokio::io::AsyncWriteExt;
    loop {
        let frame = read_frame(from).await?;
        while state.stalled.load(Ordering::SeqCst) {
            tokio::time::sleep(POLL).await;
        }
        if state.swallow.swap(false, Ordering::SeqCst) {
            state.cuts.fetch_add(1, Ordering::SeqCst);
            return Ok(());
        }
        to.write_all(&frame).await?;
    }
}
