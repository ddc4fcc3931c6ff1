//! A tiny HTTP/1.1 client for tests of the HTTP door: one request per
//! connection, the answer read whole (chunked or not).

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::Value;

/// How long a test waits for one answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// One request with extra `headers`; (status, body text).
pub fn request_with(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: Option<&str>,
) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).expect("connect to the HTTP door");
    stream
        .set_read_timeout(Some(ANSWER_TIMEOUT))
        .expect("read timeout");
    let body = body.unwrap_or("");
    let extra: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{extra}\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(req.as_bytes()).expect("send request");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("read response");
    let text = String::from_utf8(raw).expect("utf-8 response");
    let (head, rest) = text.split_once("\r\n\r\n").expect("a response head");
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status code");
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let body = if chunked {
        dechunk(rest)
    } else {
        rest.to_string()
    };
    (status, body)
}

/// One request; (status, body text).
pub fn request(addr: &str, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    request_with(addr, method, path, &[], body)
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((len, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(len.trim(), 16).expect("chunk length");
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        s = &rest[n + 2..];
    }
    out
}

/// POSTs `body` as JSON; (status, JSON answer, `Null` if it is none).
pub fn post(addr: &str, path: &str, body: Value) -> (u16, Value) {
    post_text(addr, path, &body.to_string())
}

/// POSTs `body` exactly as given (e.g. a document's example verbatim).
pub fn post_text(addr: &str, path: &str, body: &str) -> (u16, Value) {
    let (status, text) = request(addr, "POST", path, Some(body));
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// GETs `path`; (status, JSON answer, `Null` if it is none).
pub fn get_json(addr: &str, path: &str) -> (u16, Value) {
    let (status, text) = request(addr, "GET", path, None);
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// Sends a request and returns the connection without reading the
/// answer: dropping it later (the server done) loses the answer. (Hanging
/// up at once would cancel the request instead.)
pub fn post_unread(addr: &str, path: &str, body: Value) -> TcpStream {
    let body = body.to_string();
    let mut stream = TcpStream::connect(addr).expect("connect to the HTTP door");
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(req.as_bytes()).expect("send request");
    stream
}
