//! One outbound link to a peer: the frames the core encoded for it, and
//! the task that keeps the connection up.
//!
//! The core encodes each frame into the link's buffer ([`Link::queue`]) and
//! never waits. [`Link::flush`] then writes the buffer: on a plain TCP
//! link the core writes it to the socket itself, without blocking, so a
//! leader's appends are on the wire before it starts its own fsync and a
//! follower's ack leaves the moment its fsync ends, with no other thread to
//! wake. Whatever the socket does not take at once (and everything on a
//! TLS link) is written by the link's task. The buffer is bounded in
//! frames and bytes; a frame that does not fit is refused, and what was
//! queued when a connection broke is dropped: raft retransmits what
//! matters. The task reconnects with capped exponential backoff.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio_util::codec::Encoder;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use prost::Message as _;

use super::transport::{
    codec, tls_connect_aside, PeerLinks, PEER_FRAME_BYTES_MAX, PEER_QUEUE_BYTES_MAX, PEER_QUEUE_MAX,
};
use crate::opmetrics::OpMetrics;
use crate::proto::PeerFrame;
use crate::tls::Stream;

const BACKOFF_MIN: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(2);
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// What the core and a peer's task share.
#[derive(Default)]
pub(super) struct Link {
    state: Mutex<State>,
    /// Rung when the buffer holds bytes the task must write.
    wake: Notify,
}

#[derive(Default)]
struct State {
    /// Encoded frames not yet handed to the connection.
    pending: BytesMut,
    /// Frames in `pending`.
    frames: usize,
    /// Bytes the task took off `pending` and is writing now (the core
    /// writes nothing itself meanwhile, so frames keep their order).
    writing: usize,
    /// The connection, when it is plain TCP and up: the core writes to it.
    direct: Option<Arc<TcpStream>>,
}

impl Link {
    fn state(&self) -> MutexGuard<'_, State> {
        // Nothing panics while holding it; a poisoned lock's data is whole.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Encodes `frame` into the buffer; hands it back if it does not fit
    /// (a frame larger than the byte bound fits only an empty buffer).
    #[allow(clippy::result_large_err)]
    pub(super) fn queue(&self, frame: PeerFrame) -> Result<(), PeerFrame> {
        let bytes = frame.encoded_len() + 4;
        let mut st = self.state();
        let queued = st.pending.len() + st.writing;
        if st.frames >= PEER_QUEUE_MAX || (queued > 0 && queued + bytes > PEER_QUEUE_BYTES_MAX) {
            return Err(frame);
        }
        if bytes - 4 > PEER_FRAME_BYTES_MAX {
            debug!(bytes, "peer frame over the frame bound; dropped");
            return Err(frame);
        }
        codec()
            .encode(frame, &mut st.pending)
            .expect("a frame under the bound encodes");
        st.frames += 1;
        Ok(())
    }

    /// Writes what the buffer holds: straight to a plain connection that is
    /// up and idle, as far as the socket takes it without blocking; the
    /// rest (all of it on TLS, or while connecting) by the task.
    pub(super) fn flush(&self) {
        let mut st = self.state();
        if st.pending.is_empty() {
            return;
        }
        if st.writing == 0 {
            if let Some(tcp) = st.direct.clone() {
                while !st.pending.is_empty() {
                    match tcp.try_write(&st.pending) {
                        Ok(n) => st.pending.advance(n),
                        // Full, or broken: the task waits for room, or
                        // finds the error and reconnects.
                        Err(_) => break,
                    }
                }
                if st.pending.is_empty() {
                    st.frames = 0;
                    return;
                }
            }
        }
        drop(st);
        self.wake.notify_one();
    }

    /// Bytes queued and not yet written to the connection.
    pub(super) fn queued_bytes(&self) -> usize {
        let st = self.state();
        st.pending.len() + st.writing
    }

    /// Drops what is queued (a connection broke, or none could be made).
    fn drop_queued(&self) {
        let mut st = self.state();
        st.pending.clear();
        st.frames = 0;
        st.direct = None;
    }

    /// Takes the buffer for the task to write; `None` if it is empty.
    fn take(&self) -> Option<BytesMut> {
        let mut st = self.state();
        if st.pending.is_empty() {
            return None;
        }
        let chunk = st.pending.split();
        st.frames = 0;
        st.writing = chunk.len();
        Some(chunk)
    }

    fn written(&self) {
        self.state().writing = 0;
    }
}

/// The connection the task writes to.
enum Conn {
    /// Shared with the core, which writes to it too (never both at once).
    Plain(Arc<TcpStream>),
    Tls(WriteHalf<Stream>),
}

/// The read side of a link, watched only to learn that the peer closed its
/// end: the peer never writes on it.
enum Watch {
    Plain(Arc<TcpStream>),
    Tls(ReadHalf<Stream>),
}

impl Watch {
    /// Resolves when the peer's end closes (or fails); anything the peer
    /// sends is read and ignored. Writes alone would not always tell:
    /// where the peer's address now leads nowhere (a container's, gone
    /// with it), they are neither refused nor answered, and TCP gives up
    /// only after many minutes, all that time the peer hearing nothing.
    async fn closed(&mut self) {
        let mut scratch = [0u8; 256];
        match self {
            Watch::Plain(tcp) => loop {
                if tcp.readable().await.is_err() {
                    return;
                }
                match tcp.try_read(&mut scratch) {
                    Ok(0) => return,
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(_) => return,
                }
            },
            Watch::Tls(read) => while matches!(read.read(&mut scratch).await, Ok(n) if n > 0) {},
        }
    }
}

impl Conn {
    async fn write_all(&mut self, mut buf: &[u8]) -> std::io::Result<()> {
        match self {
            Conn::Plain(tcp) => {
                while !buf.is_empty() {
                    tcp.writable().await?;
                    match tcp.try_write(buf) {
                        Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                        Ok(n) => buf = &buf[n..],
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok(())
            }
            Conn::Tls(w) => {
                w.write_all(buf).await?;
                w.flush().await
            }
        }
    }
}

/// After a failed dial: drops what queued up meanwhile (raft resends what
/// matters, and stale heartbeats only confuse), waits `backoff` and
/// doubles it up to its cap; false if the link was stopped meanwhile.
async fn back_off(link: &Link, stop: &CancellationToken, backoff: &mut Duration) -> bool {
    link.drop_queued();
    tokio::select! {
        _ = stop.cancelled() => return false,
        _ = tokio::time::sleep(*backoff) => {}
    }
    *backoff = (*backoff * 2).min(BACKOFF_MAX);
    true
}

/// The task of member `id`'s link: connects, writes what the core could
/// not, reconnects after a failure.
pub(super) async fn run(
    id: u64,
    addr: String,
    link: Arc<Link>,
    stop: CancellationToken,
    links: PeerLinks,
    metrics: OpMetrics,
    handshakes: tokio::runtime::Handle,
) {
    if let PeerLinks::Refused = links {
        warn!("not dialling the peer: TLS is on without --tls-ca, so peer links cannot be secured");
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = link.wake.notified() => link.drop_queued(),
            }
        }
    }
    let mut backoff = BACKOFF_MIN;
    let mut was_connected = false;
    loop {
        let connected = tokio::select! {
            _ = stop.cancelled() => return,
            c = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&addr)) => c,
        };
        let tcp = match connected {
            Ok(Ok(s)) => s,
            failed => {
                if let (true, Ok(Err(e))) = (was_connected, failed) {
                    debug!(error = %e, "peer unreachable");
                }
                was_connected = false;
                if !back_off(&link, &stop, &mut backoff).await {
                    return;
                }
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let (mut conn, mut watch) = match &links {
            PeerLinks::Tls(tls) => {
                match tls_connect_aside(tls, id, &addr, tcp, &stop, &metrics, &handshakes).await {
                    Some(s) => {
                        let (read, write) = tokio::io::split(s);
                        (Conn::Tls(write), Watch::Tls(read))
                    }
                    None => {
                        if !back_off(&link, &stop, &mut backoff).await {
                            return;
                        }
                        continue;
                    }
                }
            }
            _ => {
                let tcp = Arc::new(tcp);
                link.state().direct = Some(tcp.clone());
                (Conn::Plain(tcp.clone()), Watch::Plain(tcp))
            }
        };
        // The link is dropped and dialled afresh (resolving the name again)
        // as soon as the peer's end closes, even in the middle of a write.
        let closed = watch.closed();
        tokio::pin!(closed);
        if !was_connected {
            info!("connected to peer");
        }
        was_connected = true;
        backoff = BACKOFF_MIN;
        'connected: loop {
            while let Some(chunk) = link.take() {
                let result = tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = &mut closed => Err(std::io::ErrorKind::ConnectionReset.into()),
                    r = conn.write_all(&chunk) => r,
                };
                link.written();
                if let Err(e) = result {
                    debug!(error = %e, "peer write failed");
                    link.drop_queued();
                    break 'connected;
                }
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = &mut closed => {
                    debug!("peer closed the link");
                    link.drop_queued();
                    break 'connected;
                }
                _ = link.wake.notified() => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::peer_frame::Kind;
    use crate::raft::transport::Transport;
    use futures::StreamExt;

    fn frame(seq: u64, bytes: usize) -> PeerFrame {
        let mut data = vec![0u8; bytes.max(8)];
        data[..8].copy_from_slice(&seq.to_be_bytes());
        PeerFrame {
            from: 1,
            kind: Some(Kind::Raft(data)),
        }
    }

    #[test]
    fn the_buffer_is_bounded_but_takes_one_large_frame_when_empty() {
        let link = Link::default();
        let big = PEER_QUEUE_BYTES_MAX / 2;
        assert!(link.queue(frame(1, big)).is_ok());
        assert!(link.queue(frame(2, big)).is_err(), "over the byte bound");
        assert!(link.queue(frame(3, 100)).is_ok());
        link.drop_queued();
        assert_eq!(link.queued_bytes(), 0);
        // A snapshot-sized frame goes, alone.
        assert!(link.queue(frame(4, 2 * PEER_QUEUE_BYTES_MAX)).is_ok());
        assert!(link.queue(frame(5, 8)).is_err());
        link.drop_queued();
        for i in 0..PEER_QUEUE_MAX as u64 {
            assert!(link.queue(frame(i, 8)).is_ok());
        }
        assert!(link.queue(frame(0, 8)).is_err(), "over the frame bound");
    }

    /// Small frames the core writes itself and large ones that fill the
    /// socket (written by the task): all arrive, in order, none twice.
    #[tokio::test]
    async fn frames_arrive_in_order_whoever_writes_them() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        const N: u64 = 3000;
        let reader = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let mut frames = tokio_util::codec::FramedRead::new(tcp, codec());
            let mut seen = Vec::new();
            while (seen.len() as u64) < N {
                let f = frames.next().await.expect("connection open").unwrap();
                let Some(Kind::Raft(data)) = f.kind else {
                    panic!("not a raft frame")
                };
                seen.push(u64::from_be_bytes(data[..8].try_into().unwrap()));
                if seen.len() % 10 == 0 {
                    // A slow reader: the sender's socket fills up.
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
            seen
        });
        let mut t = Transport::new(1, tokio::runtime::Handle::current(), PeerLinks::Plain);
        t.add_peer(2, &addr);
        for seq in 0..N {
            // Runs of frames large enough to fill the socket's buffer.
            let bytes = if seq % 100 < 12 { 512 * 1024 } else { 64 };
            let mut f = frame(seq, bytes);
            loop {
                match t.try_send(2, f) {
                    Ok(()) => break,
                    Err(back) => {
                        f = back;
                        t.flush();
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                }
            }
            if seq % 7 == 0 {
                t.flush();
            }
            if seq % 100 == 50 {
                tokio::task::yield_now().await;
            }
        }
        t.flush();
        let seen = tokio::time::timeout(Duration::from_secs(60), reader)
            .await
            .expect("every frame arrives")
            .unwrap();
        assert_eq!(seen, (0..N).collect::<Vec<_>>());
    }

    /// The peer's end closes (FIN) but nothing refuses what is written
    /// after, as where its address now leads nowhere: the link notices and
    /// dials again.
    #[tokio::test]
    async fn a_link_whose_peer_closed_its_end_is_dialled_again() {
        use tokio::io::AsyncReadExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let mut t = Transport::new(1, tokio::runtime::Handle::current(), PeerLinks::Plain);
        t.add_peer(2, &addr);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        // Sends until the listener gets a connection (the link dials on
        // its own; a frame now and then keeps it writing).
        async fn accept(
            listener: &tokio::net::TcpListener,
            t: &Transport,
            deadline: tokio::time::Instant,
        ) -> TcpStream {
            loop {
                t.send(2, frame(0, 16));
                t.flush();
                tokio::select! {
                    a = listener.accept() => return a.unwrap().0,
                    _ = tokio::time::sleep(Duration::from_millis(20)) => {}
                }
                assert!(tokio::time::Instant::now() < deadline, "no connection came");
            }
        }
        let first = accept(&listener, &t, deadline).await;
        let (mut read, mut write) = first.into_split();
        write.shutdown().await.unwrap();
        // Its socket stays open, swallowing whatever arrives.
        let swallow = tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            while matches!(read.read(&mut buf).await, Ok(n) if n > 0) {}
            drop(write);
        });
        let _second = accept(&listener, &t, deadline).await;
        swallow.abort();
    }
}
