//! What the wire guard adds to decoding a peer's raft frame: a typical
//! append (32 entries of 150 bytes) decoded by protobuf alone and through
//! `raft::wire_guard::decode_message`, as the core does.
//! Run with `cargo bench -p warden-server --bench peer_decode`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use protobuf::Message as _;
use raft::eraftpb::{Entry, Message, MessageType};
use std::hint::black_box;
use warden_server::raft::wire_guard::decode_message;

fn append() -> Vec<u8> {
    let mut m = Message::default();
    m.set_msg_type(MessageType::MsgAppend);
    m.from = 2;
    m.to = 1;
    m.term = 9;
    m.index = 1000;
    m.log_term = 9;
    m.commit = 990;
    for i in 0..32 {
        m.mut_entries().push(Entry {
            term: 9,
            index: 1001 + i,
            data: vec![7u8; 150].into(),
            ..Default::default()
        });
    }
    m.write_to_bytes().unwrap()
}

fn bench(c: &mut Criterion) {
    let bytes = append();
    let mut g = c.benchmark_group("peer_decode");
    g.throughput(Throughput::Elements(32));
    g.bench_function("protobuf only", |b| {
        b.iter(|| black_box(Message::parse_from_bytes(black_box(&bytes)).unwrap()))
    });
    g.bench_function("wire guard + protobuf", |b| {
        b.iter(|| black_box(decode_message(black_box(&bytes)).unwrap()))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
