//! [`StoreClient`]: a small async client of the store's HTTP API, for Rust
//! callers (and this crate's tests and example). HTTP/1.1 over plain TCP,
//! one request per connection: the store is a reference resource, not a
//! hot path.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::store::{Record, Stale};

/// How long one request may take before it fails.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(transparent)]
    Stale(#[from] Stale),
    #[error("{addr}: {why}")]
    Io { addr: String, why: String },
    #[error("the store answered {status}: {body}")]
    Refused { status: u16, body: String },
}

/// A client of one store at `addr` (`host:port`).
#[derive(Debug, Clone)]
pub struct StoreClient {
    addr: String,
}

impl StoreClient {
    pub fn new(addr: impl Into<String>) -> StoreClient {
        StoreClient { addr: addr.into() }
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Writes `value` to `key` with `token`; a stale token is
    /// [`ClientError::Stale`].
    pub async fn write(
        &self,
        key: &str,
        value: Value,
        token: u64,
        client_id: Option<&str>,
    ) -> Result<(), ClientError> {
        let body = json!({"value": value, "fencing_token": token, "client_id": client_id});
        let (status, answer) = self
            .request("PUT", &key_path(key), Some(&body.to_string()))
            .await?;
        match status {
            200 => Ok(()),
            409 => {
                let field = |name: &str| answer[name].as_u64();
                match (field("fencing_token"), field("highest_fencing_token")) {
                    (Some(offered), Some(highest)) => Err(Stale {
                        key: key.to_string(),
                        offered,
                        highest,
                    }
                    .into()),
                    _ => Err(refused(status, &answer)),
                }
            }
            _ => Err(refused(status, &answer)),
        }
    }

    /// The record of `key`; `None` if it was never written.
    pub async fn read(&self, key: &str) -> Result<Option<Record>, ClientError> {
        let (status, answer) = self.request("GET", &key_path(key), None).await?;
        match status {
            200 => Ok(Some(Record {
                value: answer["value"].clone(),
                fencing_token: answer["fencing_token"]
                    .as_u64()
                    .ok_or_else(|| refused(status, &answer))?,
                client_id: answer["client_id"].as_str().map(str::to_string),
            })),
            404 => Ok(None),
            _ => Err(refused(status, &answer)),
        }
    }

    /// One request to the store with a JSON `body` (see [`request`]).
    pub async fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> Result<(u16, Value), ClientError> {
        request(&self.addr, method, path, body).await
    }
}

/// One HTTP/1.1 request with a JSON `body` to `addr` (any JSON API: the
/// store's, or Warden's lock API); (status, JSON answer, `Null` if the
/// answer is not JSON).
pub async fn request(
    addr: &str,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> Result<(u16, Value), ClientError> {
    let io = |why: String| ClientError::Io {
        addr: addr.to_string(),
        why,
    };
    let exchange = async {
        let mut stream = TcpStream::connect(addr)
            .await
            .map_err(|e| io(format!("connect: {e}")))?;
        let body = body.unwrap_or("");
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| io(format!("send: {e}")))?;
        let mut raw = Vec::new();
        stream
            .read_to_end(&mut raw)
            .await
            .map_err(|e| io(format!("receive: {e}")))?;
        let split = raw
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .ok_or_else(|| io("an answer without a complete head".into()))?;
        let head = String::from_utf8_lossy(&raw[..split]);
        let rest = &raw[split + 4..];
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| io(format!("no status in {head:?}")))?;
        let chunked = head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked");
        let body = if chunked {
            dechunk(rest)
        } else {
            rest.to_vec()
        };
        Ok((status, serde_json::from_slice(&body).unwrap_or(Value::Null)))
    };
    tokio::time::timeout(REQUEST_TIMEOUT, exchange)
        .await
        .unwrap_or_else(|_| Err(io(format!("no answer within {REQUEST_TIMEOUT:?}"))))
}

fn refused(status: u16, answer: &Value) -> ClientError {
    ClientError::Refused {
        status,
        body: answer.to_string(),
    }
}

/// `/v1/keys/KEY`, the key percent-encoded (all but unreserved bytes).
pub fn key_path(key: &str) -> String {
    let mut path = String::from("/v1/keys/");
    for b in key.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            path.push(char::from(b));
        } else {
            path.push_str(&format!("%{b:02X}"));
        }
    }
    path
}

fn dechunk(mut s: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = s.windows(2).position(|w| w == b"\r\n") {
        let len = std::str::from_utf8(&s[..eol]).unwrap_or("");
        let Ok(n) = usize::from_str_radix(len.trim(), 16) else {
            break;
        };
        let rest = &s[eol + 2..];
        if n == 0 || rest.len() < n {
            break;
        }
        out.extend_from_slice(&rest[..n]);
        s = rest[n..].strip_prefix(b"\r\n").unwrap_or(&rest[n..]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_percent_encoded() {
        assert_eq!(key_path("a-b_c.d~1"), "/v1/keys/a-b_c.d~1");
        assert_eq!(key_path("a/b c"), "/v1/keys/a%2Fb%20c");
        assert_eq!(key_path("é"), "/v1/keys/%C3%A9");
    }

    #[test]
    fn chunked_bodies_are_joined() {
        assert_eq!(dechunk(b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"), b"abcde");
    }
}
