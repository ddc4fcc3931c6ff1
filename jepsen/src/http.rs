//! A minimal HTTP/1.1 client for the harness: one JSON `POST` (or `GET`) per
//! connection (`Connection: close`), with a bound on the whole exchange.
//! Enough for the lease lock API, without a dependency; and it tells apart
//! what the history needs to know: a request that was certainly never sent
//! (the connection was refused), an answer, and no (complete) answer, after
//! which the request may or may not have been applied.

use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The longest answer read (the lock API's are a few hundred bytes).
const ANSWER_MAX: usize = 1 << 20;

/// How one request went.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// A complete answer: the status and the body (JSON, or `Null` if the
    /// body was empty or not JSON).
    Answer { status: u16, body: Value },
    /// Not sent: the connection could not be opened.
    NotSent(String),
    /// Sent (perhaps), but no complete answer came: a closed connection, a
    /// garbled answer or the time bound. The request may have been
    /// applied.
    Lost(String),
}

/// POSTs `body` as JSON to `http://addr{path}`, waiting at most `bound`
/// for the whole exchange.
pub async fn post_json(addr: &str, path: &str, body: &Value, bound: Duration) -> Reply {
    let payload = body.to_string();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{payload}",
        payload.len()
    );
    exchange(addr, request, bound).await
}

/// GETs `http://addr{path}`, waiting at most `bound`.
pub async fn get_json(addr: &str, path: &str, bound: Duration) -> Reply {
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    exchange(addr, request, bound).await
}

/// GETs `http://addr{path}` and returns the body as text: `None` unless
/// the answer, within `bound`, was a 200.
pub async fn get_text(addr: &str, path: &str, bound: Duration) -> Option<String> {
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    match exchange_raw(addr, request, bound).await {
        Ok((200, body)) => String::from_utf8(body).ok(),
        _ => None,
    }
}

/// Sends `request` on a new connection and reads the answer.
async fn exchange(addr: &str, request: String, bound: Duration) -> Reply {
    match exchange_raw(addr, request, bound).await {
        Ok((status, body)) => Reply::Answer {
            status,
            body: json_body(&body),
        },
        Err(reply) => reply,
    }
}

/// A body as JSON (`Null` if empty or not JSON).
fn json_body(body: &[u8]) -> Value {
    if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(body).unwrap_or(Value::Null)
    }
}

/// [`exchange`] with the body as bytes; `Err` is the `Reply` of a failure.
async fn exchange_raw(
    addr: &str,
    request: String,
    bound: Duration,
) -> Result<(u16, Vec<u8>), Reply> {
    let connected = match tokio::time::timeout(bound, TcpStream::connect(addr)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(Reply::NotSent(format!("connect {addr}: {e}"))),
        Err(_) => return Err(Reply::NotSent(format!("connect {addr}: timed out"))),
    };
    let talk = async move {
        let mut stream = connected;
        let _ = stream.set_nodelay(true);
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| format!("sending to {addr}: {e}"))?;
        let mut answer = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) => break,
                Ok(n) => {
                    answer.extend_from_slice(&buf[..n]);
                    if answer.len() > ANSWER_MAX {
                        return Err(format!("answer from {addr} longer than {ANSWER_MAX} bytes"));
                    }
                    // Done as soon as the answer is complete (a server may
                    // keep the connection open a moment after it).
                    if let Ok(Some(_)) = parse_raw(&answer, false) {
                        break;
                    }
                }
                Err(e) => return Err(format!("reading from {addr}: {e}")),
            }
        }
        match parse_raw(&answer, true) {
            Ok(Some(reply)) => Ok(reply),
            Ok(None) if answer.is_empty() => Err(format!("{addr} closed without answering")),
            Ok(None) => Err(format!(
                "{addr} closed after {} bytes of an answer",
                answer.len()
            )),
            Err(e) => Err(format!("garbled answer from {addr}: {e}")),
        }
    };
    match tokio::time::timeout(bound, talk).await {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(e)) => Err(Reply::Lost(e)),
        Err(_) => Err(Reply::Lost(format!(
            "no answer from {addr} within {} ms",
            bound.as_millis()
        ))),
    }
}

/// [`parse_raw`] with the body read as JSON.
#[cfg(test)]
fn parse(bytes: &[u8], eof: bool) -> Result<Option<(u16, Value)>, String> {
    Ok(parse_raw(bytes, eof)?.map(|(status, body)| (status, json_body(&body))))
}

/// Parses an HTTP/1.1 answer, its body as bytes: `Ok(None)` while
/// incomplete. Bodies are delimited by Content-Length or chunked, or with
/// neither by the end of the connection (`eof`: it has ended).
fn parse_raw(bytes: &[u8], eof: bool) -> Result<Option<(u16, Vec<u8>)>, String> {
    let Some(head_end) = find(bytes, b"\r\n\r\n") else {
        return Ok(None);
    };
    let head = std::str::from_utf8(&bytes[..head_end]).map_err(|_| "head not UTF-8")?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or_default();
    if !version.starts_with("HTTP/1.") {
        return Err(format!("status line {status_line:?}"));
    }
    let status: u16 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("status line {status_line:?}"))?;
    let mut length: Option<usize> = None;
    let mut chunked = false;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            length = Some(
                value
                    .parse()
                    .map_err(|_| format!("Content-Length {value:?}"))?,
            );
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.to_ascii_lowercase().contains("chunked");
        }
    }
    let rest = &bytes[head_end + 4..];
    let body = if chunked {
        match dechunk(rest)? {
            Some(b) => b,
            None => return Ok(None),
        }
    } else if let Some(n) = length {
        if rest.len() < n {
            return Ok(None);
        }
        rest[..n].to_vec()
    } else if eof {
        rest.to_vec()
    } else {
        return Ok(None);
    };
    Ok(Some((status, body)))
}

/// A chunked body, or `None` while incomplete.
fn dechunk(mut rest: &[u8]) -> Result<Option<Vec<u8>>, String> {
    let mut body = Vec::new();
    loop {
        let Some(line_end) = find(rest, b"\r\n") else {
            return Ok(None);
        };
        let size_text = std::str::from_utf8(&rest[..line_end]).map_err(|_| "chunk size")?;
        let size_text = size_text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| format!("chunk size {size_text:?}"))?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Ok(Some(body));
        }
        if rest.len() < size + 2 {
            return Ok(None);
        }
        body.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tokio::net::TcpListener;

    #[test]
    fn answers_parse_by_length_and_by_chunks() {
        let plain = b"HTTP/1.1 409 Conflict\r\ncontent-length: 15\r\n\r\n{\"acquired\":fa";
        assert_eq!(parse(plain, false), Ok(None));
        let plain = b"HTTP/1.1 409 Conflict\r\ncontent-length: 18\r\n\r\n{\"acquired\":false}";
        assert_eq!(
            parse(plain, false),
            Ok(Some((409, json!({"acquired": false}))))
        );
        let to_eof = b"HTTP/1.0 503 Service Unavailable\r\n\r\n{\"error\":\"x\"}";
        assert_eq!(parse(to_eof, false), Ok(None));
        assert_eq!(parse(to_eof, true), Ok(Some((503, json!({"error": "x"})))));
        let chunked =
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"a\":\r\n2\r\n1}\r\n0\r\n\r\n";
        assert_eq!(parse(chunked, false), Ok(Some((200, json!({"a": 1})))));
        assert_eq!(parse(&chunked[..chunked.len() - 7], false), Ok(None));
        assert!(parse(b"SSH-2.0\r\n\r\n", true).is_err());
    }

    /// A one-shot server that reads a request and answers `answer`, or
    /// closes without answering when `answer` is empty.
    async fn server(answer: &'static [u8]) -> String {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut buf = vec![0u8; 4096];
            let mut got = Vec::new();
            // Read the head and the body (its length is in the head).
            while find(&got, b"}").is_none() {
                let n = s.read(&mut buf).await.unwrap();
                if n == 0 {
                    return;
                }
                got.extend_from_slice(&buf[..n]);
            }
            assert!(got.starts_with(b"POST /x HTTP/1.1\r\n"));
            if !answer.is_empty() {
                s.write_all(answer).await.unwrap();
            }
        });
        addr
    }

    #[tokio::test]
    async fn posts_and_tells_lost_from_not_sent() {
        let bound = Duration::from_secs(5);
        let addr = server(b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n{\"ok\":true}").await;
        assert_eq!(
            post_json(&addr, "/x", &json!({"a": 1}), bound).await,
            Reply::Answer {
                status: 200,
                body: json!({"ok": true})
            }
        );
        let addr = server(b"").await;
        assert!(matches!(
            post_json(&addr, "/x", &json!({"a": 1}), bound).await,
            Reply::Lost(_)
        ));
        // Nothing listens on a port just freed.
        let freed = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = freed.local_addr().unwrap().to_string();
        drop(freed);
        assert!(matches!(
            post_json(&addr, "/x", &json!({}), bound).await,
            Reply::NotSent(_)
        ));
    }
}
