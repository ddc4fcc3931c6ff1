//! TCP transport between servers.
//!
//! One outbound connection per peer, owned by its own task with a bounded
//! queue: the core hands frames over with `try_send` and never waits, so a
//! slow or dead peer never stalls the raft task or the other peers. A frame
//! that does not fit the queue, or that was in flight when a connection
//! broke, is dropped: raft retransmits what matters. The task reconnects with
//! capped exponential backoff.
//!
//! Inbound connections are accepted on `--peer-listen`; every frame read is
//! forwarded to the core. Frames are `u32` big-endian length + one
//! [`PeerFrame`], bounded by [`PEER_FRAME_BYTES_MAX`] (snapshots travel in
//! one frame).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Handle;
use tokio::sync::mpsc;
use tokio_util::codec::{FramedRead, FramedWrite};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn, Instrument};
use warden_protocol::FrameCodec;

use crate::proto::PeerFrame;

/// Largest frame between servers (a snapshot is one frame).
pub const PEER_FRAME_BYTES_MAX: usize = 1024 * 1024 * 1024;
/// Frames queued for one peer before new ones are dropped.
pub const PEER_QUEUE_MAX: usize = 4096;
const BACKOFF_MIN: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(2);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

type PeerCodec = FrameCodec<PeerFrame, PeerFrame>;

fn codec() -> PeerCodec {
    PeerCodec::with_limit(PEER_FRAME_BYTES_MAX)
}

/// The core's handle on the outbound side.
pub struct Transport {
    me: u64,
    runtime: Handle,
    peers: HashMap<u64, Peer>,
    stop: CancellationToken,
}

struct Peer {
    addr: String,
    queue: mpsc::Sender<PeerFrame>,
    stop: CancellationToken,
}

impl Transport {
    /// `runtime` runs the peer tasks (not the core's own runtime).
    pub fn new(me: u64, runtime: Handle) -> Self {
        Self {
            me,
            runtime,
            peers: HashMap::new(),
            stop: CancellationToken::new(),
        }
    }

    /// Adds (or re-addresses) a peer. The local node is ignored.
    pub fn add_peer(&mut self, id: u64, addr: &str) {
        if id == self.me {
            return;
        }
        if let Some(p) = self.peers.get(&id) {
            if p.addr == addr {
                return;
            }
            p.stop.cancel();
        }
        let (tx, rx) = mpsc::channel(PEER_QUEUE_MAX);
        let stop = self.stop.child_token();
        let span = tracing::info_span!("peer", id, addr);
        self.runtime
            .spawn(outbound(addr.to_string(), rx, stop.clone()).instrument(span));
        self.peers.insert(
            id,
            Peer {
                addr: addr.to_string(),
                queue: tx,
                stop,
            },
        );
    }

    pub fn remove_peer(&mut self, id: u64) {
        if let Some(p) = self.peers.remove(&id) {
            p.stop.cancel();
        }
    }

    pub fn peer_ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.peers.keys().copied()
    }

    pub fn addr_of(&self, id: u64) -> Option<&str> {
        self.peers.get(&id).map(|p| p.addr.as_str())
    }

    /// Queues a frame for `to`; false if it was dropped (unknown peer or
    /// full queue).
    pub fn send(&self, to: u64, frame: PeerFrame) -> bool {
        match self.peers.get(&to) {
            Some(p) => p.queue.try_send(frame).is_ok(),
            None => false,
        }
    }

    pub fn shutdown(&self) {
        self.stop.cancel();
    }
}

impl Drop for Transport {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn outbound(addr: String, mut rx: mpsc::Receiver<PeerFrame>, stop: CancellationToken) {
    let mut backoff = BACKOFF_MIN;
    let mut was_connected = false;
    loop {
        let connected = tokio::select! {
            _ = stop.cancelled() => return,
            c = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&addr)) => c,
        };
        let stream = match connected {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                if was_connected {
                    debug!(error = %e, "peer unreachable");
                }
                was_connected = false;
                // Drop what queued up meanwhile: raft resends what matters,
                // and stale heartbeats only confuse.
                while rx.try_recv().is_ok() {}
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(BACKOFF_MAX);
                continue;
            }
            Err(_) => {
                backoff = (backoff * 2).min(BACKOFF_MAX);
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        if !was_connected {
            info!("connected to peer");
        }
        was_connected = true;
        backoff = BACKOFF_MIN;
        let mut sink = FramedWrite::new(stream, codec());
        loop {
            let frame = tokio::select! {
                _ = stop.cancelled() => return,
                f = rx.recv() => f,
            };
            let Some(frame) = frame else { return };
            // Batch what is already queued into one flush.
            if let Err(e) = sink.feed(frame).await {
                debug!(error = %e, "peer write failed");
                break;
            }
            let mut failed = false;
            while let Ok(more) = rx.try_recv() {
                if let Err(e) = sink.feed(more).await {
                    debug!(error = %e, "peer write failed");
                    failed = true;
                    break;
                }
            }
            if failed || sink.flush().await.is_err() {
                break;
            }
        }
    }
}

/// Accepts peer connections and forwards every frame to `deliver`.
pub async fn listen(
    listener: TcpListener,
    deliver: mpsc::Sender<PeerFrame>,
    stop: CancellationToken,
) {
    loop {
        let accepted = tokio::select! {
            _ = stop.cancelled() => return,
            a = listener.accept() => a,
        };
        match accepted {
            Ok((stream, peer)) => {
                tokio::spawn(inbound(stream, peer, deliver.clone(), stop.clone()));
            }
            Err(e) => warn!(error = %e, "peer accept failed"),
        }
    }
}

async fn inbound(
    stream: TcpStream,
    peer: SocketAddr,
    deliver: mpsc::Sender<PeerFrame>,
    stop: CancellationToken,
) {
    let _ = stream.set_nodelay(true);
    let mut frames = FramedRead::new(stream, codec());
    loop {
        let next = tokio::select! {
            _ = stop.cancelled() => return,
            n = frames.next() => n,
        };
        match next {
            Some(Ok(frame)) => {
                if deliver.send(frame).await.is_err() {
                    return;
                }
            }
            Some(Err(e)) => {
                warn!(%peer, error = %e, "bad frame from peer; dropping the connection");
                return;
            }
            None => return,
        }
    }
}
