//! A connection's outbound queue: the bounded channel on which the core
//! pushes answers and events, and a count of the bytes waiting in it.
//!
//! The channel bounds the frames; the byte count lets the core bound the
//! memory a client that does not read can pin (`--max-queued-bytes-per-
//! connection`): the core pauses that connection's reads, then drops the
//! connection, instead of queueing without end. The count covers frames in
//! the channel; the connection's writer takes them out one at a time.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use prost::Message as _;
use tokio::sync::mpsc::{self, error::TrySendError};

/// Why a frame was not queued (the frame is dropped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushError {
    /// The queue holds its most frames: the client does not read.
    Full,
    /// The connection is gone.
    Closed,
}
use warden_protocol::pb;

/// The sending side (the core, and the connection task for its own
/// handshake answers).
#[derive(Debug, Clone)]
pub struct OutboundTx {
    tx: mpsc::Sender<pb::ServerFrame>,
    bytes: Arc<AtomicUsize>,
}

/// The receiving side: the connection's writer.
#[derive(Debug)]
pub struct OutboundRx {
    rx: mpsc::Receiver<pb::ServerFrame>,
    bytes: Arc<AtomicUsize>,
}

/// A queue of at most `frames_max` frames.
pub fn channel(frames_max: usize) -> (OutboundTx, OutboundRx) {
    let (tx, rx) = mpsc::channel(frames_max);
    let bytes = Arc::new(AtomicUsize::new(0));
    (
        OutboundTx {
            tx,
            bytes: bytes.clone(),
        },
        OutboundRx { rx, bytes },
    )
}

/// The size a frame is counted at (its encoded body).
pub fn frame_bytes(frame: &pb::ServerFrame) -> usize {
    frame.encoded_len()
}

impl OutboundTx {
    /// Bytes of frames waiting to be written.
    pub fn queued_bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Queues `frame` (of `len` bytes, see [`frame_bytes`]) without waiting.
    pub fn try_send_sized(&self, frame: pb::ServerFrame, len: usize) -> Result<(), PushError> {
        // Counted before it is visible to the writer, which subtracts it.
        self.bytes.fetch_add(len, Ordering::Relaxed);
        self.tx.try_send(frame).map_err(|e| {
            self.bytes.fetch_sub(len, Ordering::Relaxed);
            match e {
                TrySendError::Full(_) => PushError::Full,
                TrySendError::Closed(_) => PushError::Closed,
            }
        })
    }

    /// Queues `frame`, waiting for room (the connection task's own answers
    /// before the core has the connection).
    pub async fn send(&self, frame: pb::ServerFrame) -> Result<(), ()> {
        let len = frame_bytes(&frame);
        self.bytes.fetch_add(len, Ordering::Relaxed);
        self.tx.send(frame).await.map_err(|_| {
            self.bytes.fetch_sub(len, Ordering::Relaxed);
        })
    }
}

impl OutboundRx {
    fn taken(&self, frame: &pb::ServerFrame) {
        self.bytes.fetch_sub(frame_bytes(frame), Ordering::Relaxed);
    }

    /// The next frame; None once every sender is gone and the queue empty.
    pub async fn recv(&mut self) -> Option<pb::ServerFrame> {
        let frame = self.rx.recv().await?;
        self.taken(&frame);
        Some(frame)
    }

    /// The next frame if one is queued.
    pub fn try_recv(&mut self) -> Option<pb::ServerFrame> {
        let frame = self.rx.try_recv().ok()?;
        self.taken(&frame);
        Some(frame)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(message: &str) -> pb::ServerFrame {
        pb::ServerFrame {
            kind: Some(pb::server_frame::Kind::Response(pb::Response {
                message: message.into(),
                ..Default::default()
            })),
        }
    }

    #[tokio::test]
    async fn bytes_are_counted_in_and_out() {
        let (tx, mut rx) = channel(2);
        let a = frame("aaaa");
        let len = frame_bytes(&a);
        tx.try_send_sized(a, len).unwrap();
        tx.send(frame("bb")).await.unwrap();
        assert_eq!(tx.queued_bytes(), len + frame_bytes(&frame("bb")));
        // Full: refused and not counted.
        assert!(tx.try_send_sized(frame("c"), 3).is_err());
        assert_eq!(tx.queued_bytes(), len + frame_bytes(&frame("bb")));
        rx.recv().await.unwrap();
        rx.try_recv().unwrap();
        assert_eq!(tx.queued_bytes(), 0);
    }
}
