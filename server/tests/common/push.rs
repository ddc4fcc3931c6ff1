//! Clients of the HTTP door's push streams for tests: a Server-Sent
//! Events reader and a WebSocket (tungstenite, blocking). Every read has a
//! deadline ([`EVENT_TIMEOUT`]): a test waiting for an event that never
//! comes fails instead of hanging.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{Shutdown, TcpStream};
use std::time::Duration;

use serde_json::Value;
use tungstenite::{Message, WebSocket};

/// How long a test waits for one event.
pub const EVENT_TIMEOUT: Duration = Duration::from_secs(30);

/// One Server-Sent Event.
#[derive(Debug, Clone)]
pub struct SseEvent {
    pub event: String,
    pub id: Option<String>,
    pub data: Value,
}

/// An open event stream.
pub struct Sse {
    reader: BufReader<TcpStream>,
    buf: String,
}

/// Opens `path` as an event stream: the stream, or (status, body) if the
/// server answered otherwise.
pub fn sse(addr: &str, path: &str, headers: &[(&str, String)]) -> Result<Sse, (u16, String)> {
    let mut stream = TcpStream::connect(addr).expect("connect to the HTTP door");
    stream.set_read_timeout(Some(EVENT_TIMEOUT)).unwrap();
    let extra: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    let req =
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n{extra}\r\n");
    stream.write_all(req.as_bytes()).expect("send request");
    let mut reader = BufReader::new(stream);
    let mut head = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).expect("a response head");
        let line = line.trim_end().to_string();
        if line.is_empty() {
            break;
        }
        head.push(line);
    }
    let status: u16 = head[0]
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status code");
    let header = |name: &str| {
        head.iter().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    };
    if status != 200 {
        let len: usize = header("content-length")
            .and_then(|l| l.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; len];
        reader.read_exact(&mut body).expect("an error body");
        return Err((status, String::from_utf8_lossy(&body).into_owned()));
    }
    let kind = header("content-type").unwrap_or_default();
    assert!(kind.starts_with("text/event-stream"), "content type {kind}");
    assert_eq!(
        header("transfer-encoding").as_deref(),
        Some("chunked"),
        "an event stream is chunked"
    );
    Ok(Sse {
        reader,
        buf: String::new(),
    })
}

impl Sse {
    /// The next event (comments and keep-alives skipped); `None` when the
    /// server ended the stream.
    pub fn next(&mut self) -> Option<SseEvent> {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                let (mut event, mut id, mut data) = ("message".to_string(), None, String::new());
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("event:") {
                        event = v.trim().to_string();
                    } else if let Some(v) = line.strip_prefix("id:") {
                        id = Some(v.trim().to_string());
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.strip_prefix(' ').unwrap_or(v));
                    }
                }
                if data.is_empty() {
                    continue;
                }
                let data = serde_json::from_str(&data)
                    .unwrap_or_else(|e| panic!("event data is not JSON ({e}): {data}"));
                return Some(SseEvent { event, id, data });
            }
            // One chunk: its size in hex, the bytes, CRLF.
            let mut size = String::new();
            let read = self
                .reader
                .read_line(&mut size)
                .unwrap_or_else(|e| panic!("no event within {EVENT_TIMEOUT:?}: {e}"));
            if read == 0 {
                return None;
            }
            let size = usize::from_str_radix(size.trim(), 16).expect("a chunk size");
            if size == 0 {
                return None;
            }
            let mut chunk = vec![0; size + 2];
            self.reader
                .read_exact(&mut chunk)
                .unwrap_or_else(|e| panic!("a chunk cut short: {e}"));
            chunk.truncate(size);
            self.buf
                .push_str(&String::from_utf8(chunk).expect("UTF-8 events"));
        }
    }

    /// The next event, which must exist.
    pub fn expect(&mut self) -> SseEvent {
        self.next().expect("the stream ended early")
    }

    /// Hangs up.
    pub fn close(self) {
        let _ = self.reader.get_ref().shutdown(Shutdown::Both);
    }
}

/// A WebSocket to `path`.
pub fn ws(addr: &str, path: &str) -> WebSocket<TcpStream> {
    let stream = TcpStream::connect(addr).expect("connect to the HTTP door");
    stream.set_read_timeout(Some(EVENT_TIMEOUT)).unwrap();
    let url = format!("ws://{addr}{path}");
    let (socket, _) = tungstenite::client(url.as_str(), stream)
        .unwrap_or_else(|e| panic!("WebSocket handshake with {url}: {e}"));
    socket
}

/// Sends one JSON message.
pub fn ws_send(socket: &mut WebSocket<TcpStream>, message: Value) {
    socket
        .send(Message::Text(message.to_string().into()))
        .expect("send a WebSocket message");
}

/// The next JSON message.
pub fn ws_next(socket: &mut WebSocket<TcpStream>) -> Value {
    loop {
        match socket.read() {
            Ok(Message::Text(text)) => {
                return serde_json::from_str(text.as_str())
                    .unwrap_or_else(|e| panic!("a message that is not JSON ({e}): {text}"))
            }
            Ok(Message::Ping(_) | Message::Pong(_)) => {}
            Ok(other) => panic!("unexpected WebSocket message {other:?}"),
            Err(e) => panic!("no WebSocket message within {EVENT_TIMEOUT:?}: {e}"),
        }
    }
}

/// Closes the socket and waits until the server has closed its end too
/// (so the server is done with the connection when this returns).
pub fn ws_close(mut socket: WebSocket<TcpStream>) {
    let _ = socket.close(None);
    loop {
        match socket.read() {
            Ok(_) => {}
            Err(tungstenite::Error::ConnectionClosed | tungstenite::Error::AlreadyClosed) => return,
            Err(tungstenite::Error::Io(e)) if e.kind() != std::io::ErrorKind::WouldBlock => return,
            Err(tungstenite::Error::Protocol(_)) => return,
            Err(e) => panic!("closing a WebSocket: {e}"),
        }
    }
}
