//! A backup file in pieces: written by the server as it is sent
//! (`GET /api/v1/snapshot`, `http/snapshot.rs`) and checked by `wardenctl
//! snapshot save` as it arrives, so neither holds the whole file.
//!
//! The file is a snapshot file exactly as [`crate::raft::snapfile`] writes
//! and reads it (header: magic, format version, metadata length, data
//! length; raft's metadata; the encoded tree; xxh3-64 of everything
//! before it). The header is made and checked by that module
//! ([`snapfile::header_for`], [`snapfile::check_header`]), so the layout,
//! the magic bytes and the format version stay its own; the tests below
//! hold the streamed bytes equal to `snapfile::encode`'s and check them
//! with `snapfile::decode`, which is what `warden restore` reads a backup
//! with.
//!
//! [`Checker`] checks a file fed to it in pieces as `snapfile::decode`
//! would whole (header, format version, lengths against the size
//! announced, checksum, metadata) and that the tree decodes, one
//! top-level field (node, session, member) at a time.

use prost::Message as _;
use protobuf::Message as _;
use raft::eraftpb::SnapshotMetadata;
use xxhash_rust::xxh3::Xxh3;

use crate::proto::{SnapshotMember, SnapshotNode, SnapshotSession};
use crate::raft::snapfile;

use snapfile::{CHECKSUM_LEN, HEADER_LEN};

/// Writes a backup file in pieces: [`Writer::start`] gives its first
/// bytes, [`Writer::data`] hashes each piece of the tree as it goes out,
/// [`Writer::trailer`] the checksum that ends it.
pub struct Writer {
    sum: Xxh3,
}

impl Writer {
    /// The writer, the header and metadata bytes that open the file, and
    /// the whole file's length, for a tree of `data_len` bytes.
    pub fn start(meta: &SnapshotMetadata, data_len: u64) -> Result<(Writer, Vec<u8>, u64), String> {
        let (header, meta_bytes) =
            snapfile::header_for(meta, data_len).map_err(|e| e.to_string())?;
        let mut head = header.to_vec();
        head.extend_from_slice(&meta_bytes);
        let mut sum = Xxh3::new();
        sum.update(&head);
        let total = head.len() as u64 + data_len + CHECKSUM_LEN as u64;
        Ok((Writer { sum }, head, total))
    }

    /// Counts `bytes` of the tree into the checksum.
    pub fn data(&mut self, bytes: &[u8]) {
        self.sum.update(bytes);
    }

    /// The file's last bytes: the checksum.
    pub fn trailer(&self) -> [u8; CHECKSUM_LEN] {
        self.sum.digest().to_le_bytes()
    }
}

/// What a whole, checked backup file holds.
#[derive(Debug)]
pub struct Summary {
    pub meta: SnapshotMetadata,
    pub nodes: usize,
}

/// Checks a backup file of a known size fed in pieces ([`Checker::update`],
/// then [`Checker::finish`]); errors say what is wrong with the file.
pub struct Checker {
    size: u64,
    /// Bytes taken so far.
    pos: u64,
    /// Header and metadata, until complete.
    head: Vec<u8>,
    head_len: u64,
    data_end: u64,
    meta: Option<SnapshotMetadata>,
    sum: Xxh3,
    trailer: Vec<u8>,
    tree: TreeFields,
}

impl Checker {
    /// A checker for a file announced to hold `size` bytes.
    pub fn new(size: u64) -> Checker {
        Checker {
            size,
            pos: 0,
            head: Vec::with_capacity(HEADER_LEN),
            head_len: HEADER_LEN as u64,
            data_end: u64::MAX,
            meta: None,
            sum: Xxh3::new(),
            trailer: Vec::with_capacity(CHECKSUM_LEN),
            tree: TreeFields::default(),
        }
    }

    /// Takes the next `bytes` of the file.
    pub fn update(&mut self, mut bytes: &[u8]) -> Result<(), String> {
        while !bytes.is_empty() {
            if self.pos < self.head_len {
                let n = bytes.len().min((self.head_len - self.pos) as usize);
                self.head.extend_from_slice(&bytes[..n]);
                self.sum.update(&bytes[..n]);
                self.pos += n as u64;
                bytes = &bytes[n..];
                if self.head.len() == HEADER_LEN && self.data_end == u64::MAX {
                    self.header()?;
                }
                if self.data_end != u64::MAX && self.pos == self.head_len && self.meta.is_none() {
                    let meta = SnapshotMetadata::parse_from_bytes(&self.head[HEADER_LEN..])
                        .map_err(|e| format!("metadata: {e}"))?;
                    self.meta = Some(meta);
                }
            } else if self.pos < self.data_end {
                let n = bytes.len().min((self.data_end - self.pos) as usize);
                self.sum.update(&bytes[..n]);
                self.tree.update(&bytes[..n])?;
                self.pos += n as u64;
                bytes = &bytes[n..];
            } else {
                if self.trailer.len() + bytes.len() > CHECKSUM_LEN {
                    return Err(format!(
                        "more than the {} bytes its header announces",
                        self.size
                    ));
                }
                self.trailer.extend_from_slice(bytes);
                self.pos += bytes.len() as u64;
                bytes = &[];
            }
        }
        Ok(())
    }

    /// Checks the header once its 24 bytes are in: magic bytes and format
    /// version as `snapfile` writes them, lengths adding up to the size.
    fn header(&mut self) -> Result<(), String> {
        let h: &[u8; HEADER_LEN] = self.head[..HEADER_LEN].try_into().expect("header length");
        let (meta_len, data_len) = snapfile::check_header(h, self.size)?;
        let (meta_len, data_len) = (meta_len as u64, data_len as u64);
        self.head_len = HEADER_LEN as u64 + meta_len;
        self.data_end = self.head_len + data_len;
        self.head.reserve(meta_len as usize);
        Ok(())
    }

    /// After the last byte: the size, the checksum and a whole tree.
    pub fn finish(self) -> Result<Summary, String> {
        if self.pos != self.size || self.trailer.len() != CHECKSUM_LEN {
            return Err(format!("truncated: {} of {} bytes", self.pos, self.size));
        }
        let stored = u64::from_le_bytes(self.trailer[..].try_into().expect("8 bytes"));
        let actual = self.sum.digest();
        if stored != actual {
            return Err(format!(
                "checksum mismatch (stored {stored:#018x}, computed {actual:#018x})"
            ));
        }
        if !self.tree.pending.is_empty() {
            return Err("the tree ends inside a field".into());
        }
        Ok(Summary {
            meta: self.meta.ok_or("no metadata")?,
            nodes: self.tree.nodes,
        })
    }
}

/// The tree (a `proto::Snapshot` message) decoded one top-level field at
/// a time: each node, session and member must decode; only the bytes of
/// an incomplete field are held.
#[derive(Default)]
struct TreeFields {
    pending: Vec<u8>,
    nodes: usize,
}

impl TreeFields {
    fn update(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.pending.extend_from_slice(bytes);
        let mut at = 0;
        while let Some((key, key_len)) = varint(&self.pending[at..]) {
            let (field, wire) = (key >> 3, key & 7);
            let body = at + key_len;
            match wire {
                0 => match varint(&self.pending[body..]) {
                    Some((_, n)) => at = body + n,
                    None => break,
                },
                2 => {
                    let Some((len, n)) = varint(&self.pending[body..]) else {
                        break;
                    };
                    let start = body + n;
                    let end = start
                        .checked_add(usize::try_from(len).map_err(|_| "a field too long")?)
                        .ok_or("a field too long")?;
                    if end > self.pending.len() {
                        break;
                    }
                    let msg = &self.pending[start..end];
                    let bad = |what: &str, e: prost::DecodeError| format!("the tree: {what}: {e}");
                    match field {
                        2 => {
                            SnapshotNode::decode(msg).map_err(|e| bad("a node", e))?;
                            self.nodes += 1;
                        }
                        3 => {
                            SnapshotSession::decode(msg).map_err(|e| bad("a session", e))?;
                        }
                        4 => {
                            SnapshotMember::decode(msg).map_err(|e| bad("a member", e))?;
                        }
                        _ => {}
                    }
                    at = end;
                }
                _ => return Err(format!("the tree: field {field} of wire type {wire}")),
            }
        }
        self.pending.drain(..at);
        Ok(())
    }
}

/// A protobuf varint at the start of `b` and its length; None if `b`
/// ends first.
fn varint(b: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, byte) in b.iter().enumerate().take(10) {
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{txn::Kind, CreateTxn, Txn};
    use crate::tree::DataTree;

    fn meta() -> SnapshotMetadata {
        let mut m = SnapshotMetadata {
            index: 41,
            term: 3,
            ..Default::default()
        };
        m.mut_conf_state().voters = vec![1, 2, 3];
        m
    }

    fn tree(n: usize) -> DataTree {
        let mut tree = DataTree::new();
        for i in 0..n {
            let txn = Txn {
                kind: Some(Kind::Create(CreateTxn {
                    path: format!("/n{i:04}"),
                    data: vec![b'x'; i % 300],
                    ..Default::default()
                })),
                ..Default::default()
            };
            tree.apply(i as u64 + 1, 0, &txn);
        }
        tree
    }

    /// The file streamed as the server sends it.
    fn streamed(tree: &DataTree) -> Vec<u8> {
        let mut view = tree.freeze();
        let len = view.encoded_len() as u64;
        let (mut w, head, total) = Writer::start(&meta(), len).unwrap();
        let mut out = head;
        view.encode_chunks(|c| {
            w.data(&c);
            out.extend_from_slice(&c);
            true
        });
        out.extend_from_slice(&w.trailer());
        assert_eq!(out.len() as u64, total);
        out
    }

    fn check_in_pieces(file: &[u8], piece: usize) -> Result<Summary, String> {
        let mut c = Checker::new(file.len() as u64);
        for p in file.chunks(piece) {
            c.update(p)?;
        }
        c.finish()
    }

    #[test]
    fn a_streamed_file_is_the_snapshot_files_bytes() {
        let tree = tree(3000);
        let file = streamed(&tree);
        let whole = snapfile::encode(&meta(), &tree.freeze().encode()).unwrap();
        assert_eq!(file, whole);
        let snap = snapfile::decode(std::path::Path::new("x.snap"), file).unwrap();
        assert_eq!(snap.get_metadata().index, 41);
    }

    #[test]
    fn a_file_checked_in_pieces_of_any_size_is_whole() {
        let tree = tree(500);
        let file = streamed(&tree);
        for piece in [1, 7, 24, 4096, file.len()] {
            let s = check_in_pieces(&file, piece).unwrap();
            assert_eq!(s.nodes, 501, "pieces of {piece}");
            assert_eq!((s.meta.index, s.meta.term), (41, 3));
        }
    }

    #[test]
    fn damage_truncation_and_other_versions_are_named() {
        let file = streamed(&tree(200));
        let mut flipped = file.clone();
        let mid = flipped.len() / 2;
        flipped[mid] ^= 1;
        let e = check_in_pieces(&flipped, 1000).unwrap_err();
        assert!(
            e.contains("checksum mismatch") || e.contains("the tree"),
            "{e}"
        );

        let mut c = Checker::new(file.len() as u64);
        c.update(&file[..file.len() - 100]).unwrap();
        let e = c.finish().unwrap_err();
        assert!(e.contains("truncated"), "{e}");

        let mut newer = file.clone();
        newer[8] += 1;
        let e = check_in_pieces(&newer, 1000).unwrap_err();
        assert!(e.contains("format version 2, this build reads 1"), "{e}");

        let e = check_in_pieces(b"<html>not a snapshot file</html>", 1000).unwrap_err();
        assert!(e.contains("wrong magic"), "{e}");

        let mut c = Checker::new(file.len() as u64 - 8);
        let e = c.update(&file).unwrap_err();
        assert!(e.contains("announces"), "{e}");
    }
}
