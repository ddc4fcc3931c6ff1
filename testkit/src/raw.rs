//! A minimal blocking client speaking raw native-protocol frames, for
//! tests that must control the bytes: malformed frames, handshakes with
//! chosen fields, retries with a chosen xid, connections dropped at a
//! chosen moment.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use prost::Message;
use warden_protocol::pb::{self, client_frame, request::Op, server_frame};

/// How long a read waits before the test fails instead of hanging.
pub const RAW_READ_TIMEOUT: Duration = Duration::from_secs(20);

pub struct RawConn {
    stream: TcpStream,
}

impl RawConn {
    pub fn connect(addr: &str) -> RawConn {
        let stream = TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(RAW_READ_TIMEOUT))
            .expect("set read timeout");
        RawConn { stream }
    }

    pub fn send_bytes(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write");
    }

    pub fn send(&mut self, frame: pb::ClientFrame) {
        let body = frame.encode_to_vec();
        let mut buf = (body.len() as u32).to_be_bytes().to_vec();
        buf.extend_from_slice(&body);
        self.send_bytes(&buf);
    }

    /// The next frame, or None when the server closed the connection.
    pub fn recv(&mut self) -> Option<pb::ServerFrame> {
        let mut len = [0u8; 4];
        if self.stream.read_exact(&mut len).is_err() {
            return None;
        }
        let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
        self.stream.read_exact(&mut body).ok()?;
        Some(pb::ServerFrame::decode(&body[..]).expect("server frames decode"))
    }

    /// Sends a ConnectRequest and returns the answer.
    pub fn connect_request(&mut self, request: pb::ConnectRequest) -> pb::ConnectResponse {
        self.send(pb::ClientFrame {
            kind: Some(client_frame::Kind::Connect(request)),
        });
        match self.recv() {
            Some(pb::ServerFrame {
                kind: Some(server_frame::Kind::Connect(c)),
            }) => c,
            other => panic!("expected a ConnectResponse, got {other:?}"),
        }
    }

    /// A new (`session_id` 0) or resumed session with a 30 s timeout.
    pub fn handshake(&mut self, session_id: u64, password: Vec<u8>) -> pb::ConnectResponse {
        self.connect_request(pb::ConnectRequest {
            protocol_version: warden_protocol::PROTOCOL_VERSION,
            session_id,
            password,
            timeout_ms: 30_000,
            last_zxid_seen: 0,
        })
    }

    /// Resumes `session_id` on the server at `addr` as a real client does
    /// when it moves: it names the last zxid it has seen, and a server
    /// that has not applied that far yet refuses (ServerBehind) rather
    /// than judge the session by an older tree (where a session made a
    /// moment ago on another server does not exist yet); the client then
    /// connects again. Tries until `RAW_READ_TIMEOUT`, then returns the
    /// last answer, whatever it was.
    pub fn resume(
        addr: &str,
        session_id: u64,
        password: Vec<u8>,
        last_zxid_seen: u64,
    ) -> (RawConn, pb::ConnectResponse) {
        let deadline = std::time::Instant::now() + RAW_READ_TIMEOUT;
        let mut pause = Duration::from_millis(5);
        loop {
            let mut conn = RawConn::connect(addr);
            let answer = conn.connect_request(pb::ConnectRequest {
                protocol_version: warden_protocol::PROTOCOL_VERSION,
                session_id,
                password: password.clone(),
                timeout_ms: 30_000,
                last_zxid_seen,
            });
            if answer.error != pb::ErrorCode::ServerBehind as i32
                || std::time::Instant::now() >= deadline
            {
                return (conn, answer);
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(200));
        }
    }

    /// Sends a request without waiting for its answer.
    pub fn send_request(&mut self, xid: u64, op: Op) {
        self.send(pb::ClientFrame {
            kind: Some(client_frame::Kind::Request(pb::Request {
                xid,
                op: Some(op),
            })),
        });
    }

    /// The next response (watch and session events are skipped).
    pub fn response(&mut self) -> pb::Response {
        loop {
            match self.recv() {
                Some(pb::ServerFrame {
                    kind: Some(server_frame::Kind::Response(r)),
                }) => return r,
                Some(_) => continue,
                None => panic!("connection closed while waiting for a response"),
            }
        }
    }

    /// Sends a request and waits for its answer.
    pub fn request(&mut self, xid: u64, op: Op) -> pb::Response {
        self.send_request(xid, op);
        self.response()
    }

    /// Reads until the server closes; returns the responses seen.
    pub fn drain_until_closed(&mut self) -> Vec<pb::Response> {
        let mut out = Vec::new();
        while let Some(f) = self.recv() {
            if let Some(server_frame::Kind::Response(r)) = f.kind {
                out.push(r);
            }
        }
        out
    }
}
