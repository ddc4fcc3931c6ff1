//! Reading ZooKeeper's frames (a 4-byte big-endian length, then the body)
//! within the door's packet bound (`--zk-max-packet-bytes`, ZooKeeper's
//! jute.maxbuffer, or `--max-request-bytes` if smaller).
//!
//! tokio's `LengthDelimitedCodec` reserves room for the whole announced
//! body as soon as it has read the length: a client that announces 16 MiB
//! and then sends one byte a second would pin 16 MiB per connection. Here a
//! frame is only cut once all of it has arrived, so what the buffer holds
//! is what the client actually sent; an announced length over the limit is
//! refused before any of the body is read.

use bytes::{Buf, BytesMut};
use tokio_util::codec::Decoder;

const LEN_BYTES: usize = 4;

#[derive(Debug)]
pub struct BoundedFrames {
    frame_bytes_max: usize,
    /// The flag that sets the bound, for the error.
    flag: &'static str,
}

impl BoundedFrames {
    pub fn new(frame_bytes_max: usize, flag: &'static str) -> Self {
        Self {
            frame_bytes_max,
            flag,
        }
    }
}

impl Decoder for BoundedFrames {
    type Item = BytesMut;
    type Error = std::io::Error;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<BytesMut>, std::io::Error> {
        if src.len() < LEN_BYTES {
            return Ok(None);
        }
        let len = u32::from_be_bytes([src[0], src[1], src[2], src[3]]) as usize;
        if len > self.frame_bytes_max {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "frame of {len} bytes exceeds the limit of {} bytes ({})",
                    self.frame_bytes_max, self.flag
                ),
            ));
        }
        if src.len() < LEN_BYTES + len {
            return Ok(None);
        }
        src.advance(LEN_BYTES);
        Ok(Some(src.split_to(len)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BufMut;

    #[test]
    fn frames_are_cut_when_complete_and_bounded() {
        let mut d = BoundedFrames::new(8, "--max-request-bytes");
        let mut buf = BytesMut::new();
        buf.put_u32(3);
        buf.put_slice(b"ab");
        assert!(d.decode(&mut buf).unwrap().is_none());
        buf.put_slice(b"c");
        buf.put_u32(0);
        assert_eq!(&d.decode(&mut buf).unwrap().unwrap()[..], b"abc");
        assert_eq!(d.decode(&mut buf).unwrap().unwrap().len(), 0);
        assert!(d.decode(&mut buf).unwrap().is_none());

        let mut big = BytesMut::new();
        big.put_u32(u32::MAX);
        let err = d.decode(&mut big).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
        assert!(err.to_string().contains("--max-request-bytes"), "{err}");
        assert!(big.capacity() < 1024, "nothing reserved for the body");
    }
}
