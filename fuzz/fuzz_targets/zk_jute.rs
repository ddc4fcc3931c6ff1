//! The ZooKeeper door: length-prefixed framing, ConnectRequest, every request record, then plan/apply/read.
//! The work is in `warden_server::fuzzing::zk_jute`, shared with the stable
//! corpus replay test.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| warden_server::fuzzing::zk_jute(data));
