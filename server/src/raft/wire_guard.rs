//! A check of raft's protobuf bytes before the `protobuf` crate sees them.
//!
//! raft-rs 0.7 encodes its messages with `protobuf` 2.28, which
//! RUSTSEC-2024-0437 flags: rust-protobuf's decoder skipped unknown
//! *group* fields by recursing once per nested group, so a few hundred
//! kilobytes of start-group tags overflowed the stack and aborted the
//! process. The recursive skip is 3.x code (fixed in 3.7.2); 2.28 skips a
//! group in a loop and answers a nested one with an error, which the test
//! `protobuf_2_28_answers_the_advisorys_shape_without_recursing` holds it
//! to. Warden does not rely on that alone: raft's messages are proto3 and
//! have no groups, so a group tag (wire types 3 and 4) never appears in
//! bytes a Warden node wrote. This module walks the wire format —
//! iteratively at each level, descending only into the fields that hold
//! raft messages of their own, as the generated decoder does — and refuses
//! the bytes at the first group tag, malformed tag or truncated field,
//! before any decoding, whatever the protobuf version does with them.
//! The walk skips every bytes field by its length, so it costs a few
//! steps per field, not per byte.
//!
//! Every decode of raft protobuf from outside the process goes through
//! here: a peer's frame ([`decode_message`]) and the configuration changes
//! in committed entries ([`decode_conf_change`], [`decode_conf_change_v2`]),
//! whose bytes a peer's proposal may have carried.

use protobuf::Message as _;
use raft::eraftpb::{ConfChange, ConfChangeV2, Message};

/// The fields of a raft message type that hold messages of their own;
/// every other length-delimited field is bytes, a string or a packed
/// scalar list, which the decoder never parses as fields.
struct Shape {
    name: &'static str,
    nested: &'static [(u32, &'static Shape)],
}

const CONF_STATE: Shape = Shape {
    name: "ConfState",
    nested: &[],
};
const SNAPSHOT_METADATA: Shape = Shape {
    name: "SnapshotMetadata",
    nested: &[(1, &CONF_STATE)],
};
const SNAPSHOT: Shape = Shape {
    name: "Snapshot",
    nested: &[(2, &SNAPSHOT_METADATA)],
};
const ENTRY: Shape = Shape {
    name: "Entry",
    nested: &[],
};
const MESSAGE: Shape = Shape {
    name: "Message",
    nested: &[(7, &ENTRY), (9, &SNAPSHOT)],
};
const CONF_CHANGE: Shape = Shape {
    name: "ConfChange",
    nested: &[],
};
const CONF_CHANGE_SINGLE: Shape = Shape {
    name: "ConfChangeSingle",
    nested: &[],
};
const CONF_CHANGE_V2: Shape = Shape {
    name: "ConfChangeV2",
    nested: &[(2, &CONF_CHANGE_SINGLE)],
};

/// Why bytes were refused before decoding.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GuardError {
    #[error("group field {field} (wire type {wire_type}) in {message} at byte {at}: raft messages have no groups")]
    Group {
        message: &'static str,
        field: u64,
        wire_type: u8,
        at: usize,
    },
    #[error("malformed {message} at byte {at}: {what}")]
    Malformed {
        message: &'static str,
        at: usize,
        what: &'static str,
    },
    #[error("{message} does not decode: {error}")]
    Decode {
        message: &'static str,
        error: String,
    },
}

/// Decodes a raft message from a peer, refusing group fields first.
pub fn decode_message(bytes: &[u8]) -> Result<Message, GuardError> {
    decode(bytes, &MESSAGE)
}

/// Decodes a committed `EntryConfChange` entry's data.
pub fn decode_conf_change(bytes: &[u8]) -> Result<ConfChange, GuardError> {
    decode(bytes, &CONF_CHANGE)
}

/// Decodes a committed `EntryConfChangeV2` entry's data.
pub fn decode_conf_change_v2(bytes: &[u8]) -> Result<ConfChangeV2, GuardError> {
    decode(bytes, &CONF_CHANGE_V2)
}

fn decode<M: protobuf::Message>(bytes: &[u8], shape: &'static Shape) -> Result<M, GuardError> {
    check(bytes, shape)?;
    M::parse_from_bytes(bytes).map_err(|e| GuardError::Decode {
        message: shape.name,
        error: e.to_string(),
    })
}

/// Walks `bytes` as a `shape` message. The depth is bounded by the shapes
/// themselves (at most four levels), never by the input.
fn check(bytes: &[u8], shape: &'static Shape) -> Result<(), GuardError> {
    check_at(bytes, 0, shape)
}

fn check_at(bytes: &[u8], base: usize, shape: &'static Shape) -> Result<(), GuardError> {
    let malformed = |at: usize, what| GuardError::Malformed {
        message: shape.name,
        at: base + at,
        what,
    };
    let mut at = 0;
    while at < bytes.len() {
        let tag_at = at;
        let tag = varint(bytes, &mut at).ok_or_else(|| malformed(tag_at, "truncated tag"))?;
        let field = tag >> 3;
        let wire_type = (tag & 7) as u8;
        if field == 0 {
            return Err(malformed(tag_at, "field number 0"));
        }
        match wire_type {
            0 => {
                varint(bytes, &mut at).ok_or_else(|| malformed(at, "truncated varint"))?;
            }
            1 | 5 => {
                let width = if wire_type == 1 { 8 } else { 4 };
                at = at
                    .checked_add(width)
                    .filter(|end| *end <= bytes.len())
                    .ok_or_else(|| malformed(tag_at, "truncated fixed-width field"))?;
            }
            2 => {
                let len =
                    varint(bytes, &mut at).ok_or_else(|| malformed(at, "truncated length"))?;
                let start = at;
                let end = usize::try_from(len)
                    .ok()
                    .and_then(|len| start.checked_add(len))
                    .filter(|end| *end <= bytes.len())
                    .ok_or_else(|| malformed(tag_at, "length past the end"))?;
                if let Some((_, inner)) = shape
                    .nested
                    .iter()
                    .find(|(number, _)| u64::from(*number) == field)
                {
                    check_at(&bytes[start..end], base + start, inner)?;
                }
                at = end;
            }
            3 | 4 => {
                return Err(GuardError::Group {
                    message: shape.name,
                    field,
                    wire_type,
                    at: base + tag_at,
                })
            }
            _ => return Err(malformed(tag_at, "unknown wire type")),
        }
    }
    Ok(())
}

/// Reads a base-128 varint of at most ten bytes.
fn varint(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let mut value = 0u64;
    for shift in 0..10 {
        let byte = *bytes.get(*at)?;
        *at += 1;
        value |= u64::from(byte & 0x7f) << (7 * shift);
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

/// Bytes of the advisory's shape: a valid raft heartbeat from `from` to
/// `to`, followed by `depth` nested start-group tags of an unknown field.
/// Public for the tests that show both the crash it causes unguarded and
/// its refusal here.
pub fn nested_groups(from: u64, to: u64, depth: usize) -> Vec<u8> {
    let mut m = Message::default();
    m.set_msg_type(raft::eraftpb::MessageType::MsgHeartbeat);
    m.from = from;
    m.to = to;
    let mut bytes = m.write_to_bytes().expect("a heartbeat encodes");
    // Field 100, wire type 3 (start group): tag 803 = varint a3 06.
    for _ in 0..depth {
        bytes.extend_from_slice(&[0xa3, 0x06]);
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;
    use raft::eraftpb::{ConfChangeSingle, ConfChangeType, Entry, EntryType, Snapshot};

    fn full_message() -> Message {
        let mut m = Message::default();
        m.set_msg_type(raft::eraftpb::MessageType::MsgAppend);
        m.from = 2;
        m.to = 1;
        m.term = 7;
        m.commit = 40;
        let mut e = Entry::default();
        e.set_entry_type(EntryType::EntryConfChangeV2);
        e.index = 41;
        e.term = 7;
        e.data = vec![0x0b; 300].into();
        e.context = b"ctx".to_vec().into();
        m.mut_entries().push(e.clone());
        m.mut_entries().push(e);
        let mut s = Snapshot {
            data: vec![0x1b; 5000].into(),
            ..Default::default()
        };
        s.mut_metadata().index = 39;
        s.mut_metadata().mut_conf_state().voters = vec![1, 2, 3];
        s.mut_metadata().mut_conf_state().learners = vec![4];
        m.set_snapshot(s);
        m.context = vec![0xa3, 0x06, 0xa3].into();
        m
    }

    #[test]
    fn every_field_of_a_real_message_passes_and_decodes_the_same() {
        let m = full_message();
        let bytes = m.write_to_bytes().unwrap();
        assert_eq!(decode_message(&bytes).unwrap(), m);
        // Bytes fields may hold anything, group-like bytes included: they
        // are never parsed as fields, so they are never checked as such.
        assert_eq!(
            decode_message(&Message::default().write_to_bytes().unwrap()).unwrap(),
            Message::default()
        );
    }

    #[test]
    fn conf_changes_pass() {
        let mut cc = ConfChangeV2::default();
        let mut single = ConfChangeSingle::default();
        single.set_change_type(ConfChangeType::AddLearnerNode);
        single.node_id = 4;
        cc.mut_changes().push(single);
        cc.context = b"127.0.0.1:7004".to_vec().into();
        assert_eq!(
            decode_conf_change_v2(&cc.write_to_bytes().unwrap()).unwrap(),
            cc
        );
        let old = ConfChange {
            node_id: 5,
            ..Default::default()
        };
        assert_eq!(
            decode_conf_change(&old.write_to_bytes().unwrap()).unwrap(),
            old
        );
    }

    #[test]
    fn the_advisorys_shape_is_refused_without_recursion() {
        // Deep enough to overflow any thread's stack in a recursive
        // decoder.
        let bytes = nested_groups(2, 1, 2_000_000);
        let err = decode_message(&bytes).unwrap_err();
        assert!(
            matches!(
                err,
                GuardError::Group {
                    message: "Message",
                    field: 100,
                    wire_type: 3,
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("group field 100"), "{err}");
    }

    #[test]
    fn protobuf_2_28_answers_the_advisorys_shape_without_recursing() {
        // On a 64 KiB stack: a decoder recursing per group would overflow
        // it (and abort the test binary) long before a million levels.
        let bytes = nested_groups(2, 1, 1_000_000);
        let decoded = std::thread::Builder::new()
            .stack_size(64 * 1024)
            .spawn(move || Message::parse_from_bytes(&bytes).map_err(|e| e.to_string()))
            .unwrap()
            .join()
            .unwrap();
        let err = decoded.unwrap_err();
        assert!(err.to_lowercase().contains("wire type"), "{err}");
    }

    #[test]
    fn groups_nested_in_entries_snapshots_and_conf_changes_are_refused() {
        // An entry whose own fields end in an unknown group.
        let mut entry = Entry::default().write_to_bytes().unwrap();
        entry.extend_from_slice(&[0x0b, 0x0c]); // field 1 start + end group
        let mut bytes = Message::default().write_to_bytes().unwrap();
        bytes.push(7 << 3 | 2);
        bytes.push(entry.len() as u8);
        bytes.extend_from_slice(&entry);
        let err = decode_message(&bytes).unwrap_err();
        assert!(
            matches!(
                err,
                GuardError::Group {
                    message: "Entry",
                    ..
                }
            ),
            "{err}"
        );

        // Message.snapshot.metadata.conf_state holding a group.
        let conf_state = [0x5b_u8, 0x5c]; // field 11 start + end
        let metadata = [&[1 << 3 | 2, 2][..], &conf_state].concat();
        let snapshot = [&[2 << 3 | 2, metadata.len() as u8][..], &metadata].concat();
        let bytes = [&[9 << 3 | 2, snapshot.len() as u8][..], &snapshot].concat();
        let err = decode_message(&bytes).unwrap_err();
        assert!(
            matches!(
                err,
                GuardError::Group {
                    message: "ConfState",
                    at: 6,
                    ..
                }
            ),
            "{err}"
        );

        let single = [0x1b_u8, 0x1c];
        let bytes = [&[2 << 3 | 2, 2][..], &single].concat();
        let err = decode_conf_change_v2(&bytes).unwrap_err();
        assert!(
            matches!(
                err,
                GuardError::Group {
                    message: "ConfChangeSingle",
                    ..
                }
            ),
            "{err}"
        );
        assert!(decode_conf_change(&[0x0b, 0x0c]).is_err());
    }

    #[test]
    fn malformed_bytes_are_refused_by_name() {
        for (bytes, what) in [
            (&[0x08][..], "truncated varint"),
            (&[0x80][..], "truncated tag"),
            (&[0x00, 0x00][..], "field number 0"),
            (&[0x0e][..], "unknown wire type"),
            (&[0x3a, 0x05, 0x01][..], "length past the end"),
            (&[0x21, 0, 0][..], "truncated fixed-width field"),
        ] {
            let err = decode_message(bytes).unwrap_err();
            assert!(
                matches!(err, GuardError::Malformed { what: w, .. } if w == what),
                "{bytes:?}: {err}"
            );
        }
    }

    proptest::proptest! {
        /// The guard never panics, whatever the bytes.
        #[test]
        fn any_bytes_are_checked_without_panicking(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..256)) {
            let _ = decode_message(&bytes);
            let _ = decode_conf_change_v2(&bytes);
        }

        /// It never refuses what a node writes: any message with entries
        /// and a snapshot, whatever their bytes hold, passes and decodes.
        #[test]
        fn every_encoded_message_passes(
            term in proptest::num::u64::ANY,
            datas in proptest::collection::vec(proptest::collection::vec(proptest::num::u8::ANY, 0..64), 0..4),
            snap in proptest::collection::vec(proptest::num::u8::ANY, 0..64),
            voters in proptest::collection::vec(proptest::num::u64::ANY, 0..5),
        ) {
            let mut m = Message::default();
            m.set_msg_type(raft::eraftpb::MessageType::MsgSnapshot);
            m.term = term;
            m.priority = -1;
            for data in &datas {
                m.mut_entries().push(Entry {
                    data: data.clone().into(),
                    context: data.clone().into(),
                    ..Default::default()
                });
            }
            m.mut_snapshot().data = snap.clone().into();
            m.mut_snapshot().mut_metadata().mut_conf_state().voters = voters;
            m.context = snap.into();
            let bytes = m.write_to_bytes().unwrap();
            proptest::prop_assert_eq!(decode_message(&bytes).unwrap(), m);
        }
    }
}
