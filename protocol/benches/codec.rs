//! Frame codec hot paths: encoding and decoding one request frame, a small
//! GetData and SetData with 1 KiB and 64 KiB of data.
//! Run with `cargo bench -p warden-protocol --bench codec`.

use bytes::BytesMut;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use std::hint::black_box;
use tokio_util::codec::{Decoder, Encoder};
use warden_protocol::{pb, FrameCodec};

/// What a client writes (and a server reads).
type ClientSide = FrameCodec<pb::ServerFrame, pb::ClientFrame>;
type ServerSide = FrameCodec<pb::ClientFrame, pb::ServerFrame>;

fn request(op: pb::request::Op) -> pb::ClientFrame {
    pb::ClientFrame {
        kind: Some(pb::client_frame::Kind::Request(pb::Request {
            xid: 42,
            op: Some(op),
        })),
    }
}

fn get_data() -> pb::ClientFrame {
    request(pb::request::Op::GetData(pb::GetDataRequest {
        path: "/bench/clients/c17".into(),
        watch: false,
        linearizable: false,
    }))
}

fn set_data(data_bytes: usize) -> pb::ClientFrame {
    request(pb::request::Op::SetData(pb::SetDataRequest {
        path: "/bench/clients/c17".into(),
        data: vec![0xa5; data_bytes],
        version: Some(3),
        ttl_ms: 0,
        data_null: false,
    }))
}

fn encoded(frame: pb::ClientFrame) -> BytesMut {
    let mut buf = BytesMut::new();
    ClientSide::new()
        .encode(frame, &mut buf)
        .expect("frame under the limit");
    buf
}

fn bench(c: &mut Criterion) {
    let cases = [
        ("get_data", get_data()),
        ("set_data 1 KiB", set_data(1024)),
        ("set_data 64 KiB", set_data(64 * 1024)),
    ];
    let mut g = c.benchmark_group("codec");
    for (name, frame) in cases {
        let wire = encoded(frame.clone());
        g.throughput(Throughput::Bytes(wire.len() as u64));

        // The encoder and decoder consume their input (a message by value,
        // a buffer it splits), so each iteration gets a fresh copy made
        // outside the measurement.
        let mut encoder = ClientSide::new();
        let mut buf = BytesMut::with_capacity(wire.len());
        g.bench_function(format!("encode {name}"), |b| {
            b.iter_batched(
                || frame.clone(),
                |frame| {
                    buf.clear();
                    encoder
                        .encode(black_box(frame), &mut buf)
                        .expect("frame under the limit");
                    black_box(buf.len())
                },
                BatchSize::SmallInput,
            )
        });

        let mut decoder = ServerSide::new();
        g.bench_function(format!("decode {name}"), |b| {
            b.iter_batched(
                || wire.clone(),
                |mut src| black_box(decoder.decode(&mut src).expect("valid frame")),
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
