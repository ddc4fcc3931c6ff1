//! Length-prefixed prost frames.
//!
//! A frame is a `u32` big-endian length followed by that many bytes holding
//! one protobuf message. The decoder checks the length against its bound
//! *before* reserving memory for the body, so a hostile peer cannot make us
//! allocate 4 GiB by sending four bytes.

use std::marker::PhantomData;

use bytes::{Buf, BufMut, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

use crate::FRAME_BYTES_MAX;

const LEN_BYTES: usize = 4;
/// Most the decoder reserves for a frame's bytes that have not arrived.
/// A length prefix is a claim, not bytes: a peer that announces a frame of
/// the maximum size and then sends nothing must not make us allocate it
/// (the peer link allows frames larger than a client's). A larger frame grows the buffer as
/// its bytes come in, by amortized doubling.
pub const RESERVE_AHEAD_BYTES_MAX: usize = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge { len: usize, max: usize },
    #[error("malformed frame: {0}")]
    Decode(#[from] prost::DecodeError),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

/// Encodes `Out` messages and decodes `In` messages.
#[derive(Debug)]
pub struct FrameCodec<In, Out> {
    frame_bytes_max: usize,
    _marker: PhantomData<fn(Out) -> In>,
}

impl<In, Out> FrameCodec<In, Out> {
    pub fn new() -> Self {
        Self::with_limit(FRAME_BYTES_MAX)
    }

    pub fn with_limit(frame_bytes_max: usize) -> Self {
        Self {
            frame_bytes_max,
            _marker: PhantomData,
        }
    }
}

impl<In, Out> Default for FrameCodec<In, Out> {
    fn default() -> Self {
        Self::new()
    }
}

impl<In: prost::Message + Default, Out> Decoder for FrameCodec<In, Out> {
    type Item = In;
    type Error = FrameError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<In>, FrameError> {
        if src.len() < LEN_BYTES {
            return Ok(None);
        }
        let len = u32::from_be_bytes([src[0], src[1], src[2], src[3]]) as usize;
        if len > self.frame_bytes_max {
            return Err(FrameError::TooLarge {
                len,
                max: self.frame_bytes_max,
            });
        }
        if src.len() < LEN_BYTES + len {
            src.reserve((LEN_BYTES + len - src.len()).min(RESERVE_AHEAD_BYTES_MAX));
            return Ok(None);
        }
        src.advance(LEN_BYTES);
        let body = src.split_to(len);
        Ok(Some(In::decode(body.freeze())?))
    }
}

impl<In, Out: prost::Message> Encoder<Out> for FrameCodec<In, Out> {
    type Error = FrameError;

    fn encode(&mut self, item: Out, dst: &mut BytesMut) -> Result<(), FrameError> {
        let len = item.encoded_len();
        if len > self.frame_bytes_max {
            return Err(FrameError::TooLarge {
                len,
                max: self.frame_bytes_max,
            });
        }
        dst.reserve(LEN_BYTES + len);
        dst.put_u32(len as u32);
        item.encode(dst)
            .expect("buffer reserved for the encoded length");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb;
    use proptest::prelude::*;

    type ServerSide = FrameCodec<pb::ClientFrame, pb::ServerFrame>;
    type ClientSide = FrameCodec<pb::ServerFrame, pb::ClientFrame>;

    fn get_frame(xid: u64, path: String) -> pb::ClientFrame {
        pb::ClientFrame {
            kind: Some(pb::client_frame::Kind::Request(pb::Request {
                xid,
                op: Some(pb::request::Op::GetData(pb::GetDataRequest {
                    path,
                    watch: true,
                    linearizable: false,
                })),
            })),
        }
    }

    #[test]
    fn oversized_length_is_rejected_before_allocation() {
        let mut codec = ServerSide::new();
        let mut buf = BytesMut::new();
        buf.put_u32(u32::MAX);
        let err = codec.decode(&mut buf).unwrap_err();
        assert!(matches!(err, FrameError::TooLarge { .. }), "{err}");
        assert!(
            buf.capacity() < 1024,
            "must not reserve for a rejected frame"
        );
    }

    /// Found by the `peer_frame` fuzz target: the first bytes of a peer
    /// frame read as a length prefix (135 MB) made the decoder reserve the
    /// whole announced frame before a byte of it had arrived.
    #[test]
    fn an_announced_frame_is_not_reserved_before_it_arrives() {
        let mut codec = FrameCodec::<pb::ClientFrame, pb::ClientFrame>::with_limit(1 << 30);
        let mut buf =
            BytesMut::from(&[0x08, 0x08, 0x10, 0x02, 0x18, 0x01, 0x20, 0x03, 0x40, 0x07][..]);
        assert!(codec.decode(&mut buf).unwrap().is_none());
        assert!(
            buf.capacity() <= 2 * RESERVE_AHEAD_BYTES_MAX,
            "reserved {} bytes for a frame that has not arrived",
            buf.capacity()
        );
    }

    #[test]
    fn a_frame_larger_than_the_reserve_arrives_in_pieces() {
        let mut client = ClientSide::new();
        let mut server = ServerSide::new();
        let frame = get_frame(9, format!("/{}", "x".repeat(4 * RESERVE_AHEAD_BYTES_MAX)));
        let mut whole = BytesMut::new();
        client.encode(frame.clone(), &mut whole).unwrap();
        let mut buf = BytesMut::new();
        let mut decoded = None;
        for piece in whole.chunks(8 * 1024) {
            assert!(decoded.is_none(), "decoded before the last piece");
            buf.extend_from_slice(piece);
            decoded = server.decode(&mut buf).unwrap();
        }
        assert_eq!(decoded, Some(frame));
        assert!(buf.is_empty());
    }

    #[test]
    fn an_announced_frame_reserves_little_until_it_arrives() {
        let mut codec = ServerSide::new();
        let mut buf = BytesMut::new();
        buf.put_u32((FRAME_BYTES_MAX - 1) as u32);
        buf.put_u8(1);
        assert!(codec.decode(&mut buf).unwrap().is_none());
        assert!(
            buf.capacity() <= 2 * RESERVE_AHEAD_BYTES_MAX,
            "{}",
            buf.capacity()
        );
    }

    #[test]
    fn garbage_body_is_a_decode_error() {
        let mut codec = ServerSide::new();
        let mut buf = BytesMut::new();
        buf.put_u32(3);
        buf.put_slice(&[0xff, 0xff, 0xff]);
        assert!(matches!(codec.decode(&mut buf), Err(FrameError::Decode(_))));
    }

    #[test]
    fn partial_frames_wait_for_more_bytes() {
        let mut client = ClientSide::new();
        let mut server = ServerSide::new();
        let mut buf = BytesMut::new();
        client.encode(get_frame(7, "/a".into()), &mut buf).unwrap();
        let full = buf.clone();
        let mut part = BytesMut::from(&full[..full.len() - 1]);
        assert!(server.decode(&mut part).unwrap().is_none());
        part.extend_from_slice(&full[full.len() - 1..]);
        assert_eq!(
            server.decode(&mut part).unwrap(),
            Some(get_frame(7, "/a".into()))
        );
        assert!(part.is_empty());
    }

    proptest! {
        #[test]
        fn round_trip(frames in proptest::collection::vec((any::<u64>(), "/[a-z]{0,12}"), 1..8)) {
            let mut client = ClientSide::new();
            let mut server = ServerSide::new();
            let mut buf = BytesMut::new();
            for (xid, path) in &frames {
                client.encode(get_frame(*xid, path.clone()), &mut buf).unwrap();
            }
            for (xid, path) in &frames {
                prop_assert_eq!(server.decode(&mut buf).unwrap(), Some(get_frame(*xid, path.clone())));
            }
            prop_assert!(server.decode(&mut buf).unwrap().is_none());
        }
    }
}
