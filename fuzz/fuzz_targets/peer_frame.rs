//! The peer link: PeerFrame framing and the raft message inside (and a snapshot it carries).
//! The work is in `warden_server::fuzzing::peer_frame`, shared with the stable
//! corpus replay test.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| warden_server::fuzzing::peer_frame(data));
