//! Flow control and reassembly: which chunk the leader sends next, and
//! what the follower checks of each chunk and of the whole file.

use xxhash_rust::xxh3::Xxh3;

use super::{Descriptor, TRAILER_LEN};

/// The sender's flow control: which chunk goes next, and no more than
/// `max_unacked` chunks sent and not acknowledged.
#[derive(Debug)]
pub struct Window {
    len: u64,
    chunk: u64,
    max_unacked: u64,
    sent: u64,
    acked: u64,
}

impl Window {
    pub fn new(len: u64, chunk: usize, max_unacked: u64) -> Self {
        Self {
            len,
            chunk: chunk.max(1) as u64,
            max_unacked: max_unacked.max(1),
            sent: 0,
            acked: 0,
        }
    }

    /// The next chunk to send (offset, length), if the window allows one.
    pub fn next(&self) -> Option<(u64, usize)> {
        let n = (self.len - self.sent).min(self.chunk);
        if n == 0 || self.unacked() + n > self.max_unacked * self.chunk {
            return None;
        }
        Some((self.sent, n as usize))
    }

    /// The chunk [`Self::next`] named went out.
    pub fn sent(&mut self, len: usize) {
        self.sent += len as u64;
        debug_assert!(self.sent <= self.len);
    }

    /// The follower has written `received` bytes.
    pub fn ack(&mut self, received: u64) -> Result<(), String> {
        if received < self.acked || received > self.sent {
            return Err(format!(
                "the follower acknowledged {received} bytes with {} acknowledged and {} sent",
                self.acked, self.sent
            ));
        }
        self.acked = received;
        Ok(())
    }

    /// Bytes sent and not acknowledged.
    pub fn unacked(&self) -> u64 {
        self.sent - self.acked
    }

    pub fn all_sent(&self) -> bool {
        self.sent == self.len
    }
}

/// The receiver's side: chunks in order, the file's length, and the
/// running checksum of everything before the trailer.
pub struct Reassembly {
    expected: Descriptor,
    received: u64,
    hash: Xxh3,
    trailer: Vec<u8>,
}

impl Reassembly {
    pub fn new(expected: Descriptor) -> Self {
        Self {
            expected,
            received: 0,
            hash: Xxh3::new(),
            trailer: Vec::with_capacity(TRAILER_LEN as usize),
        }
    }

    pub fn received(&self) -> u64 {
        self.received
    }

    pub fn complete(&self) -> bool {
        self.received == self.expected.file_bytes
    }

    /// Takes the chunk at `offset`; an error names what is wrong with it.
    pub fn push(&mut self, offset: u64, data: &[u8]) -> Result<(), String> {
        if offset != self.received {
            return Err(format!(
                "chunk at offset {offset}, expected {}",
                self.received
            ));
        }
        if data.is_empty() {
            return Err(format!("empty chunk at offset {offset}"));
        }
        let end = offset + data.len() as u64;
        if end > self.expected.file_bytes {
            return Err(format!(
                "chunk at {offset} of {} bytes runs past the file's {} bytes",
                data.len(),
                self.expected.file_bytes
            ));
        }
        let body_end = self.expected.file_bytes.saturating_sub(TRAILER_LEN);
        let split = body_end.saturating_sub(offset).min(data.len() as u64) as usize;
        self.hash.update(&data[..split]);
        self.trailer.extend_from_slice(&data[split..]);
        self.received = end;
        Ok(())
    }

    /// Once every byte is in: the checksum computed over the file agrees
    /// with its trailer and with the leader's descriptor.
    pub fn finish(&self) -> Result<(), String> {
        if !self.complete() {
            return Err(format!(
                "{} of {} bytes received",
                self.received, self.expected.file_bytes
            ));
        }
        if self.expected.file_bytes < TRAILER_LEN {
            return Err(format!("a file of {} bytes", self.expected.file_bytes));
        }
        let stored = u64::from_le_bytes(self.trailer[..].try_into().expect("8 bytes"));
        let computed = self.hash.digest();
        if stored != computed {
            return Err(format!(
                "checksum mismatch (stored {stored:#018x}, computed {computed:#018x})"
            ));
        }
        if stored != self.expected.checksum {
            return Err(format!(
                "the file's checksum {stored:#018x} is not the offered {:#018x}",
                self.expected.checksum
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_of(body: &[u8]) -> (Vec<u8>, Descriptor) {
        let mut file = body.to_vec();
        let sum = xxhash_rust::xxh3::xxh3_64(body);
        file.extend_from_slice(&sum.to_le_bytes());
        let d = Descriptor {
            file_bytes: file.len() as u64,
            checksum: sum,
        };
        (file, d)
    }

    #[test]
    fn the_window_never_has_more_than_its_chunks_unacknowledged() {
        let mut w = Window::new(10_500, 1000, 4);
        let mut sent = Vec::new();
        while let Some((off, n)) = w.next() {
            sent.push((off, n));
            w.sent(n);
        }
        assert_eq!(
            sent,
            vec![(0, 1000), (1000, 1000), (2000, 1000), (3000, 1000)]
        );
        assert_eq!(w.unacked(), 4000);
        // Half a chunk acknowledged: still no room for a whole one.
        w.ack(500).unwrap();
        assert_eq!(w.next(), None);
        w.ack(1000).unwrap();
        assert_eq!(w.next(), Some((4000, 1000)), "room for one more");
        w.sent(1000);
        assert_eq!(w.next(), None);
        w.ack(5000).unwrap();
        let mut rest = Vec::new();
        while let Some((off, n)) = w.next() {
            rest.push((off, n));
            w.sent(n);
            assert!(w.unacked() <= 4000);
            if w.next().is_none() && !w.all_sent() {
                // Full: the follower acknowledges the oldest chunk.
                w.ack(off + n as u64 - 3000).unwrap();
            }
        }
        assert_eq!(rest.len(), 6);
        assert_eq!(rest.last(), Some(&(10_000, 500)), "the short last chunk");
        assert!(w.all_sent());
        assert_eq!(w.next(), None);
        // Acknowledgements go forward, and never past what was sent.
        assert!(w.ack(4000).is_err());
        assert!(w.ack(20_000).is_err());
        w.ack(10_500).unwrap();
        assert_eq!(w.unacked(), 0);
    }

    #[test]
    fn chunks_reassemble_into_the_file_and_its_checksum_is_checked() {
        let body: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
        let (file, d) = file_of(&body);
        // Chunk sizes that split the trailer, and that do not.
        for chunk in [1, 3, 1000, 10_004, 10_008, 20_000] {
            let mut r = Reassembly::new(d);
            for (i, c) in file.chunks(chunk).enumerate() {
                assert!(!r.complete());
                r.push((i * chunk) as u64, c).unwrap();
            }
            assert!(r.complete());
            r.finish().unwrap_or_else(|e| panic!("chunk {chunk}: {e}"));
        }
    }

    #[test]
    fn a_damaged_or_disordered_transfer_is_refused_naming_the_problem() {
        let body = vec![7u8; 5000];
        let (file, d) = file_of(&body);
        // A flipped byte.
        let mut damaged = file.clone();
        damaged[2500] ^= 1;
        let mut r = Reassembly::new(d);
        for (i, c) in damaged.chunks(1000).enumerate() {
            r.push(i as u64 * 1000, c).unwrap();
        }
        let err = r.finish().unwrap_err();
        assert!(err.contains("checksum mismatch"), "{err}");
        // A file whole in itself, but not the one offered.
        let (other, _) = file_of(&[8u8; 5000]);
        let mut r = Reassembly::new(d);
        r.push(0, &other).unwrap();
        let err = r.finish().unwrap_err();
        assert!(err.contains("not the offered"), "{err}");
        // Out of order, a repeat, past the end, empty, short.
        let mut r = Reassembly::new(d);
        r.push(0, &file[..1000]).unwrap();
        let err = r.push(2000, &file[2000..3000]).unwrap_err();
        assert!(err.contains("offset 2000, expected 1000"), "{err}");
        let err = r.push(0, &file[..1000]).unwrap_err();
        assert!(err.contains("expected 1000"), "{err}");
        let err = r.push(1000, &[0u8; 5000]).unwrap_err();
        assert!(err.contains("runs past"), "{err}");
        assert!(r.push(1000, &[]).is_err());
        let err = r.finish().unwrap_err();
        assert!(err.contains("1000 of 5008 bytes"), "{err}");
    }
}
