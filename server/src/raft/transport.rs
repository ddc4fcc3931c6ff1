//! TCP transport between servers.
//!
//! One outbound link per peer ([`super::peer_link`]): the core encodes
//! frames into the link's bounded buffer and never waits, so a slow or
//! dead peer never stalls the raft task or the other peers, and never makes
//! us hold more than [`PEER_QUEUE_BYTES_MAX`] for it; [`Transport::flush`]
//! puts them on the wire (from the core itself on plain TCP). A frame that
//! does not fit, or that was in flight when a connection broke, is
//! dropped: raft retransmits what matters (the core tells raft about
//! dropped appends, so it stops pipelining into the void).
//!
//! The links run on the core's own runtime (its thread): a frame from a
//! peer reaches the core, and one to a peer leaves it, without waking
//! another thread.
//!
//! Inbound connections are accepted on `--peer-listen` (at most
//! [`limits::PEER_CONNECTIONS_PER_SOURCE_MAX`] per source address and
//! [`limits::PEER_CONNECTIONS_MAX`] in all); every frame read is
//! forwarded to the core. Frames are `u32` big-endian length + one
//! [`PeerFrame`], bounded by [`PEER_FRAME_BYTES_MAX`] (a larger one closes
//! its connection before its body is read).
//!
//! TLS handshakes, inbound and outbound, run on the server's runtime, not
//! the core's, bounded by [`PEER_HANDSHAKE_TIMEOUT`]; a link is moved to
//! the core's runtime once its peer proved itself ([`rehome`]).
//!
//! Snapshots do not travel on these links: [`Transport::send_snapshot`]
//! streams one on a connection of its own ([`super::snapstream`]), whose
//! first frame (an offer) makes the listener hand it to the receiver
//! instead of the core.
//!
//! With TLS on, every link is mutual TLS ([`PeerLinks::Tls`]): both ends
//! present a certificate that must chain to the cluster's CA and name the
//! member id it speaks for, and the link is bound to that id
//! ([`super::peer_auth`]): a process without such a certificate gets no
//! frame to the core, in either direction, and one with a member's
//! certificate speaks for that member only.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Handle;
use tokio::sync::mpsc;
use tokio_util::codec::Framed;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn, Instrument};
use warden_protocol::FrameCodec;

use super::peer_auth::{self, Refusal};
use super::peer_link::{self, Link, CONNECT_TIMEOUT};
use super::snapstream::{self, Descriptor, Offered, Outcome, Received, SendJob};
use crate::accept_errors::AcceptErrors;
use crate::limits::{self, Full, IpPermit, SourceCounts, PEER_HANDSHAKE_TIMEOUT};
use crate::opmetrics::OpMetrics;
use crate::proto::{peer_frame, PeerFrame};
use crate::tls::peer_id::member_id_of_chain;
use crate::tls::{PeerTls, Stream, Tls};

/// How links between peers are secured.
#[derive(Clone)]
pub enum PeerLinks {
    /// Plain TCP (TLS is off).
    Plain,
    /// Mutual TLS against the cluster's CA.
    Tls(PeerTls),
    /// TLS is on without a CA: no peer could prove it belongs, so none is
    /// admitted and none is dialled (a single node; adding members needs
    /// `--tls-ca`).
    Refused,
}

impl PeerLinks {
    pub fn of(tls: Option<&Tls>) -> Self {
        match tls {
            None => PeerLinks::Plain,
            Some(Tls {
                peers: Some(peers), ..
            }) => PeerLinks::Tls(peers.clone()),
            Some(_) => PeerLinks::Refused,
        }
    }
}

/// Largest frame between servers (its reason is with the other bounds).
pub use crate::limits::PEER_FRAME_BYTES_MAX;
/// Frames queued for one peer before new ones are dropped. Raft needs few:
/// at most `max_inflight_msgs` appends, plus heartbeats and answers; a deep
/// queue only holds stale frames that delay the fresh ones behind them.
pub const PEER_QUEUE_MAX: usize = 1024;
/// Bytes of encoded frames queued for one peer before new ones are dropped.
/// A larger frame (a snapshot) is queued only into an empty queue.
pub const PEER_QUEUE_BYTES_MAX: usize = 8 * 1024 * 1024;

pub(crate) type PeerCodec = FrameCodec<PeerFrame, PeerFrame>;

/// What the peer port hands the core.
#[derive(Debug)]
pub enum PeerEvent {
    Frame(PeerFrame),
    /// The connection a peer sent `from` ended (its process died, or the
    /// link broke). When it is the leader's, the core need not wait an
    /// election timeout to find out.
    Closed {
        from: u64,
    },
    /// A leader offers a snapshot on a connection of its own: may it come?
    SnapshotOffered(Offered),
    /// A snapshot received whole, checked and built: to be installed.
    SnapshotReceived(Box<Received>),
}

pub(crate) fn codec() -> PeerCodec {
    PeerCodec::with_limit(PEER_FRAME_BYTES_MAX)
}

/// The core's handle on the outbound side.
pub struct Transport {
    me: u64,
    runtime: Handle,
    /// Where the TLS handshakes of outbound links and snapshot transfers
    /// run: off the core's thread (see [`Self::set_handshake_runtime`]).
    handshakes: Handle,
    links: PeerLinks,
    peers: HashMap<u64, Peer>,
    stop: CancellationToken,
    snapshots: SnapshotSends,
    /// Where refused peers are counted.
    metrics: OpMetrics,
}

struct Peer {
    addr: String,
    link: Arc<Link>,
    stop: CancellationToken,
    /// The snapshot transfer to this peer in flight: its number and what
    /// cancels it.
    sending: Option<(u64, CancellationToken)>,
}

/// How snapshots are streamed, and their transfers' outcomes.
struct SnapshotSends {
    /// Bytes per chunk (`--snapshot-chunk-bytes`).
    chunk_bytes: usize,
    /// Test only: how many of the next transfers get a byte flipped.
    corrupt: u64,
    seq: u64,
    done_tx: std::sync::mpsc::Sender<SnapshotSent>,
    done_rx: std::sync::mpsc::Receiver<SnapshotSent>,
}

/// How a snapshot transfer to a peer ended.
#[derive(Debug)]
pub struct SnapshotSent {
    pub to: u64,
    pub index: u64,
    /// Installed or not needed (`Ok`), or what went wrong.
    pub result: Result<Outcome, String>,
    pub took: Duration,
    seq: u64,
}

impl Transport {
    /// `runtime` runs the peer links and snapshot transfers: the core's own
    /// runtime in the server, so the core and its links share a thread.
    pub fn new(me: u64, runtime: Handle, links: PeerLinks) -> Self {
        Self {
            me,
            handshakes: runtime.clone(),
            runtime,
            links,
            peers: HashMap::new(),
            stop: CancellationToken::new(),
            metrics: OpMetrics::new(),
            snapshots: {
                let (done_tx, done_rx) = std::sync::mpsc::channel();
                SnapshotSends {
                    chunk_bytes: snapstream::CHUNK_BYTES_DEFAULT,
                    corrupt: 0,
                    seq: 0,
                    done_tx,
                    done_rx,
                }
            },
        }
    }

    /// The real server's: links secured as `cfg` says, run on
    /// `core_runtime` (the core's thread), their TLS handshakes on the
    /// runtime calling this if there is one (the server's), refusals and
    /// transfers counted in `metrics`. No peers yet: the core adds them.
    pub fn for_server(
        cfg: &crate::config::Config,
        core_runtime: Handle,
        metrics: OpMetrics,
    ) -> Self {
        let links = PeerLinks::of(cfg.tls.as_ref());
        let mut transport = Self::new(cfg.id, core_runtime, links);
        if let Ok(server_runtime) = Handle::try_current() {
            transport.set_handshake_runtime(server_runtime);
        }
        transport.set_metrics(metrics);
        transport.set_snapshot_options(
            cfg.snapshot_chunk_bytes,
            cfg.unsafe_corrupt_snapshot_transfers,
        );
        if cfg.unsafe_corrupt_snapshot_transfers > 0 {
            warn!(
                transfers = cfg.unsafe_corrupt_snapshot_transfers,
                "--unsafe-corrupt-snapshot-transfers: the next snapshot transfers from this server get a byte flipped; for testing the receiver's check only"
            );
        }
        transport
    }

    /// Runs the TLS handshakes of outbound links and snapshot transfers on
    /// `handshakes` (the server's runtime), so that a slow or stalled peer
    /// handshake costs the core's thread nothing; the finished link is
    /// moved back to the core's runtime. Until this is called they run on
    /// the core's runtime. Call before adding peers.
    pub fn set_handshake_runtime(&mut self, handshakes: Handle) {
        self.handshakes = handshakes;
    }

    /// Counts refused peers in `metrics` (the server's; a fresh set until
    /// then). Call before adding peers.
    pub fn set_metrics(&mut self, metrics: OpMetrics) {
        self.metrics = metrics;
    }

    /// Chunk size of snapshot transfers; `corrupt`: how many of the next
    /// transfers get a byte flipped (tests of the receiver's check only).
    pub fn set_snapshot_options(&mut self, chunk_bytes: usize, corrupt: u64) {
        self.snapshots.chunk_bytes = chunk_bytes.clamp(1, snapstream::CHUNK_BYTES_MAX);
        self.snapshots.corrupt = corrupt;
    }

    /// Streams the snapshot file at `path`, described by `descriptor`, to
    /// `to` on a connection of its own (see [`super::snapstream`]); `msg`
    /// is the encoded MsgSnapshot. A transfer to `to` in flight is
    /// cancelled: one per peer. The outcome comes back through
    /// [`Self::snapshot_results`]; an error here means none started.
    pub fn send_snapshot(
        &mut self,
        to: u64,
        index: u64,
        msg: Vec<u8>,
        path: &std::path::Path,
        descriptor: Descriptor,
    ) -> Result<(), String> {
        let Some(peer) = self.peers.get_mut(&to) else {
            return Err(format!("peer {to} is unknown"));
        };
        if let PeerLinks::Refused = self.links {
            return Err("TLS is on without --tls-ca: peer links cannot be secured".into());
        }
        let file =
            std::fs::File::open(path).map_err(|e| format!("opening {}: {e}", path.display()))?;
        if let Some((_, cancel)) = peer.sending.take() {
            cancel.cancel();
        }
        let sends = &mut self.snapshots;
        sends.seq += 1;
        let seq = sends.seq;
        let cancel = peer.stop.child_token();
        peer.sending = Some((seq, cancel.clone()));
        let corrupt = sends.corrupt > 0;
        sends.corrupt = sends.corrupt.saturating_sub(1);
        let job = SendJob {
            me: self.me,
            msg,
            file,
            descriptor,
            chunk_bytes: sends.chunk_bytes,
            corrupt,
            stall: snapstream::STALL_TIMEOUT,
        };
        let addr = peer.addr.clone();
        let links = self.links.clone();
        let metrics = self.metrics.clone();
        let handshakes = self.handshakes.clone();
        let done = sends.done_tx.clone();
        let span = tracing::info_span!("snapshot_send", to, index);
        self.runtime.spawn(
            async move {
                let started = std::time::Instant::now();
                let transfer = async {
                    let stream = dial(to, &addr, &links, &cancel, &metrics, &handshakes).await?;
                    snapstream::send(stream, job).await
                };
                let result = tokio::select! {
                    _ = cancel.cancelled() => Err("cancelled (a newer transfer, or the peer went)".to_string()),
                    r = transfer => r,
                };
                let _ = done.send(SnapshotSent {
                    to,
                    index,
                    result,
                    took: started.elapsed(),
                    seq,
                });
            }
            .instrument(span),
        );
        Ok(())
    }

    /// Transfers that ended since the last call (those a newer transfer
    /// replaced are left out: raft hears of the newer one).
    pub fn snapshot_results(&mut self) -> Vec<SnapshotSent> {
        let mut out = Vec::new();
        while let Ok(sent) = self.snapshots.done_rx.try_recv() {
            let Some(peer) = self.peers.get_mut(&sent.to) else {
                continue;
            };
            match peer.sending.as_ref().map(|(seq, _)| *seq) {
                // Replaced by a newer transfer: raft hears of that one.
                Some(seq) if seq != sent.seq => continue,
                // This one, or one whose peer was re-addressed meanwhile
                // (cancelled: raft must hear it failed).
                _ => peer.sending = None,
            }
            out.push(sent);
        }
        out
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
        let link = Arc::new(Link::default());
        let stop = self.stop.child_token();
        let span = tracing::info_span!("peer", id, addr);
        self.runtime.spawn(
            peer_link::run(
                id,
                addr.to_string(),
                link.clone(),
                stop.clone(),
                self.links.clone(),
                self.metrics.clone(),
                self.handshakes.clone(),
            )
            .instrument(span),
        );
        self.peers.insert(
            id,
            Peer {
                addr: addr.to_string(),
                link,
                stop,
                sending: None,
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

    /// Queues a frame for `to`; false if it was dropped (unknown peer, or
    /// its buffer is full in frames or bytes). It goes out at the next
    /// [`Self::flush`].
    pub fn send(&self, to: u64, frame: PeerFrame) -> bool {
        self.try_send(to, frame).is_ok()
    }

    /// [`Self::send`], handing back a frame that was not queued.
    // The frame comes back by value so the caller can hold it; boxing it
    // would cost an allocation per refused frame for nothing.
    #[allow(clippy::result_large_err)]
    pub fn try_send(&self, to: u64, frame: PeerFrame) -> Result<(), PeerFrame> {
        match self.peers.get(&to) {
            Some(p) => p.link.queue(frame),
            None => Err(frame),
        }
    }

    /// Puts every frame queued so far on its way to its peer.
    pub fn flush(&self) {
        for p in self.peers.values() {
            p.link.flush();
        }
    }

    /// Bytes queued for `to` and not yet written to its connection.
    pub fn queued_bytes(&self, to: u64) -> usize {
        self.peers.get(&to).map_or(0, |p| p.link.queued_bytes())
    }

    pub fn shutdown(&self) {
        self.stop.cancel();
    }
}

impl crate::core::Net for Transport {
    fn add_peer(&mut self, id: u64, addr: &str) {
        Transport::add_peer(self, id, addr)
    }

    fn remove_peer(&mut self, id: u64) {
        Transport::remove_peer(self, id)
    }

    fn peer_ids(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = Transport::peer_ids(self).collect();
        ids.sort_unstable();
        ids
    }

    fn addr_of(&self, id: u64) -> Option<&str> {
        Transport::addr_of(self, id)
    }

    fn try_send(&self, to: u64, frame: PeerFrame) -> Result<(), PeerFrame> {
        Transport::try_send(self, to, frame)
    }

    fn flush(&self) {
        Transport::flush(self)
    }

    fn send_snapshot(
        &mut self,
        to: u64,
        index: u64,
        msg: Vec<u8>,
        path: &std::path::Path,
        descriptor: Descriptor,
    ) -> Result<(), String> {
        Transport::send_snapshot(self, to, index, msg, path, descriptor)
    }

    fn snapshot_results(&mut self) -> Vec<SnapshotSent> {
        Transport::snapshot_results(self)
    }

    fn shutdown(&self) {
        Transport::shutdown(self)
    }
}

impl Drop for Transport {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// A connection of its own to peer `to` (a snapshot transfer's), secured
/// as every peer link is.
async fn dial(
    to: u64,
    addr: &str,
    links: &PeerLinks,
    stop: &CancellationToken,
    metrics: &OpMetrics,
    handshakes: &Handle,
) -> Result<Stream, String> {
    let tcp = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
        .await
        .map_err(|_| format!("connecting to {addr}: timed out"))?
        .map_err(|e| format!("connecting to {addr}: {e}"))?;
    let _ = tcp.set_nodelay(true);
    match links {
        PeerLinks::Plain => Ok(Stream::from(tcp)),
        PeerLinks::Tls(tls) => tls_connect_aside(tls, to, addr, tcp, stop, metrics, handshakes)
            .await
            .ok_or_else(|| format!("TLS with {addr} failed (logged)")),
        PeerLinks::Refused => Err("TLS is on without --tls-ca or --peer-tls-ca".into()),
    }
}

/// [`tls_connect`] run on `handshakes` (not the runtime awaiting it: the
/// core's), the link moved back to the awaiting runtime when done.
pub(super) async fn tls_connect_aside(
    tls: &PeerTls,
    to: u64,
    addr: &str,
    tcp: TcpStream,
    stop: &CancellationToken,
    metrics: &OpMetrics,
    handshakes: &Handle,
) -> Option<Stream> {
    let tcp = match tcp.into_std() {
        Ok(tcp) => tcp,
        Err(e) => {
            debug!(error = %e, "peer connection lost before its handshake");
            return None;
        }
    };
    let (tls, name, stop, metrics) = (tls.clone(), addr.to_string(), stop.clone(), metrics.clone());
    let handshake = handshakes.spawn(async move {
        let tcp = TcpStream::from_std(tcp).ok()?;
        tls_connect(&tls, to, &name, tcp, &stop, &metrics).await
    });
    let stream = handshake.await.ok().flatten()?;
    match rehome(stream) {
        Ok(stream) => Some(stream),
        Err(e) => {
            debug!(error = %e, "peer connection lost after its handshake");
            None
        }
    }
}

/// The client side of a peer link's TLS handshake with member `to`. The
/// peer's certificate must chain to the cluster's CA, name the host we
/// dialled (its SAN, as any TLS client checks) *and* name member `to`
/// (its `warden://node/<id>` URI): a certificate of the cluster stolen
/// from one host does not let its holder pose as another member, at its
/// address or at another. The host is what `--peers` lists, so
/// certificates carry the names (or IPs) the cluster is configured with
/// (`localhost` and `127.0.0.1` for a cluster on one machine). `None`
/// (logged) if the handshake failed or reached another member.
pub(super) async fn tls_connect(
    tls: &PeerTls,
    to: u64,
    addr: &str,
    tcp: TcpStream,
    stop: &CancellationToken,
    metrics: &OpMetrics,
) -> Option<Stream> {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let name = match rustls::pki_types::ServerName::try_from(host.to_string()) {
        Ok(name) => name,
        Err(e) => {
            warn!(host, error = %e, "peer address has no usable TLS server name");
            return None;
        }
    };
    let handshake = tokio::time::timeout(PEER_HANDSHAKE_TIMEOUT, tls.connector.connect(name, tcp));
    let done = tokio::select! {
        _ = stop.cancelled() => return None,
        done = handshake => done,
    };
    match done {
        Ok(Ok(s)) => match peer_auth::outbound_reached(s.get_ref().1.peer_certificates(), to) {
            Ok(()) => Some(Stream::Tls(Box::new(s.into()))),
            Err(e) => {
                let remote = s.get_ref().0.peer_addr().ok();
                peer_auth::refused(metrics, Refusal::WrongPeer, remote, &e);
                None
            }
        },
        Ok(Err(e)) => {
            warn!(error = %e, "TLS handshake with peer failed");
            None
        }
        Err(_) => {
            warn!("TLS handshake with peer timed out");
            None
        }
    }
}

/// Accepts peer connections and forwards every frame to `deliver`;
/// refusals are counted in `metrics`.
///
/// This loop, and each connection's TLS handshake and certificate check,
/// run where it is spawned (the server's runtime, not the core's): a
/// stalled, slow or hostile handshake costs the core neither time nor
/// CPU. A connection whose peer proved itself (or any, on plain TCP) is
/// then moved to `core`, the core's runtime, where its frames are read,
/// so that a frame wakes the core without another thread in between.
///
/// Inbound connections are capped per source address and in all
/// ([`limits::PEER_CONNECTIONS_PER_SOURCE_MAX`],
/// [`limits::PEER_CONNECTIONS_MAX`]); one past a cap is closed at once.
pub async fn listen(
    listener: TcpListener,
    deliver: mpsc::Sender<PeerEvent>,
    stop: CancellationToken,
    links: PeerLinks,
    metrics: OpMetrics,
    core: Handle,
) {
    let counts = SourceCounts::default();
    let mut accept_errors = AcceptErrors::new("peer");
    loop {
        let accepted = tokio::select! {
            _ = stop.cancelled() => return,
            a = listener.accept() => a,
        };
        let (stream, peer) = match accepted {
            Ok(a) => {
                accept_errors.accepted();
                a
            }
            Err(e) => {
                accept_errors.failed(&e).await;
                continue;
            }
        };
        let permit = match counts.admit(
            peer.ip(),
            limits::PEER_CONNECTIONS_PER_SOURCE_MAX,
            limits::PEER_CONNECTIONS_MAX,
        ) {
            Ok(permit) => permit,
            Err(full) => {
                let what = match full {
                    Full::Source(n) => format!(
                        "a connection from {} which already holds {n} (at most {} per source \
                         address); closed",
                        peer.ip(),
                        limits::PEER_CONNECTIONS_PER_SOURCE_MAX
                    ),
                    Full::Total(n) => format!(
                        "a connection while {n} are open (at most {} in all); closed",
                        limits::PEER_CONNECTIONS_MAX
                    ),
                };
                peer_auth::refused(&metrics, Refusal::Connections, Some(peer), &what);
                continue;
            }
        };
        tokio::spawn(inbound(
            stream,
            peer,
            permit,
            deliver.clone(),
            stop.clone(),
            links.clone(),
            metrics.clone(),
            core.clone(),
        ));
    }
}

/// Moves `stream`'s socket to the runtime this is called in (its reads
/// and writes then wake that runtime's tasks directly). A TLS stream
/// keeps its session: its socket is duplicated and the copy registered
/// here, the original closed.
pub(super) fn rehome(stream: Stream) -> std::io::Result<Stream> {
    match stream {
        Stream::Plain(tcp) => Ok(Stream::Plain(TcpStream::from_std(tcp.into_std()?)?)),
        Stream::Tls(mut tls) => {
            use std::os::fd::AsFd as _;
            let (tcp, _) = tls.get_mut();
            let copy = tcp.as_fd().try_clone_to_owned()?;
            let here = TcpStream::from_std(std::net::TcpStream::from(copy))?;
            drop(std::mem::replace(tcp, here));
            Ok(Stream::Tls(tls))
        }
    }
}

/// The server side of an inbound peer connection: the handshake (with
/// TLS) here, then its frames read on the core's runtime.
#[allow(clippy::too_many_arguments)]
async fn inbound(
    tcp: TcpStream,
    peer: SocketAddr,
    permit: IpPermit,
    deliver: mpsc::Sender<PeerEvent>,
    stop: CancellationToken,
    links: PeerLinks,
    metrics: OpMetrics,
    core: Handle,
) {
    let _ = tcp.set_nodelay(true);
    // With TLS, the member this link speaks for, proven by its certificate.
    let (stream, bound) = match links {
        PeerLinks::Plain => (Stream::from(tcp), None),
        PeerLinks::Tls(tls) => {
            let handshake = tokio::time::timeout(
                PEER_HANDSHAKE_TIMEOUT,
                crate::tls::accept(&tls.acceptor, tcp),
            );
            let accepted = tokio::select! {
                _ = stop.cancelled() => return,
                a = handshake => a,
            };
            let a = match accepted {
                Ok(Ok(a)) => a,
                Ok(Err(refused)) => return crate::tls::log_refused("peer", peer, &refused),
                Err(_) => {
                    return crate::tls::log_refused("peer", peer, &crate::tls::Refused::Timeout)
                }
            };
            let subject = a.subject.as_deref().unwrap_or("");
            match member_id_of_chain(a.leaf.as_ref().map(std::slice::from_ref)) {
                Ok(id) => {
                    debug!(%peer, subject, member = id, "peer authenticated");
                    (a.stream, Some(id))
                }
                Err(e) => {
                    let what = format!("a TLS connection from {subject:?}: {e}; closed");
                    return peer_auth::refused(&metrics, Refusal::Certificate, Some(peer), &what);
                }
            }
        }
        PeerLinks::Refused => {
            info!(%peer, "peer connection refused: TLS is on without --tls-ca or --peer-tls-ca, so no peer can prove it belongs");
            return;
        }
    };
    core.spawn(async move {
        let _permit = permit;
        let stream = match rehome(stream) {
            Ok(s) => s,
            Err(e) => {
                return warn!(%peer, error = %e, "peer connection lost while moving it to the core")
            }
        };
        frames(stream, peer, bound, deliver, stop, metrics).await;
    });
}

/// Reads an inbound link's frames and hands them to the core; `bound`:
/// the member its certificate proved, if any.
async fn frames(
    stream: Stream,
    peer: SocketAddr,
    bound: Option<u64>,
    deliver: mpsc::Sender<PeerEvent>,
    stop: CancellationToken,
    metrics: OpMetrics,
) {
    let mut frames = Framed::new(stream, codec());
    // Who sends on this connection (the member it is bound to, else the
    // first frame says; the core drops frames from non-members).
    let mut sender = None;
    loop {
        let next = tokio::select! {
            _ = stop.cancelled() => return,
            n = frames.next() => n,
        };
        match next {
            Some(Ok(frame)) => {
                if let Some(member) = bound.filter(|&member| member != frame.from) {
                    let what = format!(
                        "a frame claiming to be from member {} on a link bound to member {member}; dropped",
                        frame.from
                    );
                    peer_auth::refused(&metrics, Refusal::Sender, Some(peer), &what);
                    continue;
                }
                if sender.is_none() {
                    if let Some(peer_frame::Kind::SnapshotOffer(offer)) = frame.kind {
                        // A snapshot transfer's own connection: not the
                        // core's, and its end says nothing of the leader.
                        return snapstream::receive(frames, frame.from, offer, deliver, stop).await;
                    }
                }
                sender.get_or_insert(frame.from);
                if deliver.send(PeerEvent::Frame(frame)).await.is_err() {
                    return;
                }
            }
            Some(Err(e)) => {
                let what = format!("bad frame from peer; dropping the connection: {e}");
                peer_auth::refused(&metrics, Refusal::Frame, Some(peer), &what);
                break;
            }
            None => break,
        }
    }
    if let Some(from) = sender {
        let _ = deliver.send(PeerEvent::Closed { from }).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node dialling member 3 at an address where node 2 answers (with
    /// its own valid certificate from the cluster's CA, for the host
    /// dialled) refuses the link: the certificate must name member 3.
    #[tokio::test]
    async fn a_dialled_peer_must_prove_the_member_dialled() {
        use crate::tls::certs::{Ca, Role, LOCAL_SANS};
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::open_or_create(dir.path()).unwrap();
        let sans: Vec<String> = LOCAL_SANS.iter().map(|s| s.to_string()).collect();
        let load = |name: &str| {
            let issued = ca.issue(name, Role::Node, &sans).unwrap();
            crate::tls::load(&crate::tls::TlsFiles {
                cert: issued.cert,
                key: issued.key,
                ca: Some(ca.cert_path()),
                peer_ca: None,
                client_auth: crate::tls::ClientAuth::Optional,
            })
            .unwrap()
            .peers
            .unwrap()
        };
        let (n1, n2) = (load("n1"), load("n2"));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let acceptor = n2.acceptor.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    if let Ok(mut tls) = acceptor.accept(tcp).await {
                        let mut buf = [0u8; 16];
                        let _ = tokio::io::AsyncReadExt::read(&mut tls, &mut buf).await;
                    }
                });
            }
        });
        let metrics = OpMetrics::new();
        let stop = CancellationToken::new();
        let dial = |to| {
            let (n1, addr, stop, metrics) =
                (n1.clone(), addr.clone(), stop.clone(), metrics.clone());
            async move {
                let tcp = TcpStream::connect(&addr).await.unwrap();
                tls_connect(&n1, to, &addr, tcp, &stop, &metrics)
                    .await
                    .is_some()
            }
        };
        assert!(!dial(3).await, "node 2's certificate passed for member 3");
        assert!(dial(2).await, "node 2's certificate refused for member 2");
        let mut registry = prometheus_client::registry::Registry::default();
        metrics.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains("peer_refused_total{reason=\"wrong_peer\"} 1"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn a_dead_peer_never_holds_more_than_the_byte_bound() {
        // Nobody listens there: the peer's task drops what queued up.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        drop(listener);
        let mut t = Transport::new(1, Handle::current(), PeerLinks::Plain);
        t.add_peer(2, &addr);
        let frame = PeerFrame {
            from: 1,
            kind: Some(crate::proto::peer_frame::Kind::Raft(vec![0; 64 * 1024])),
        };
        let mut sent = 0;
        for _ in 0..1000 {
            if t.send(2, frame.clone()) {
                sent += 1;
            }
            assert!(t.queued_bytes(2) <= PEER_QUEUE_BYTES_MAX);
        }
        assert!(sent > 0);
        assert!(sent < 1000, "64 MB cannot all be queued");
        assert!(!t.send(3, frame), "unknown peer");
    }
}
