//! wardenctl's HTTP calls (`snapshot save`, `locks`): HTTP/1.1 by hand,
//! one GET on a connection the server closes after the answer (a content
//! length is required). A 200 answer's body goes to a [`Sink`] as it
//! arrives ([`fetch`] collects it whole; `snapshot save` writes it to a
//! file); another status's body, the server's error, is read whole.

use std::time::Duration;

use base64::Engine as _;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::TcpStream;
use warden_client::TlsOptions;

use super::Failure;

/// Largest response head.
const HEAD_BYTES_MAX: usize = 64 * 1024;

fn fail(message: impl Into<String>) -> Failure {
    Failure::Exit {
        code: 1,
        message: message.into(),
    }
}

/// Where a 200 answer's body goes as it arrives.
pub trait Sink {
    /// The length the answer announces, before any of its bytes.
    fn length(&mut self, length: u64) -> Result<(), Failure>;
    /// The next bytes of the body.
    fn bytes(&mut self, bytes: &[u8]) -> Result<(), Failure>;
}

/// A body collected whole.
impl Sink for Vec<u8> {
    fn length(&mut self, length: u64) -> Result<(), Failure> {
        self.reserve(length as usize);
        Ok(())
    }
    fn bytes(&mut self, bytes: &[u8]) -> Result<(), Failure> {
        self.extend_from_slice(bytes);
        Ok(())
    }
}

/// Largest error body read.
const ERROR_BYTES_MAX: u64 = 1 << 20;

/// `GET path` from the HTTP port `http` (HTTPS with `tls`; `auth`, a
/// `user:password`, as `Authorization: Basic`): the body of a 200 answer
/// of at most `max_bytes`, or a failure naming the server and, for any
/// other status, its `{"error": ...}` message.
pub async fn fetch(
    http: &str,
    path: &str,
    tls: Option<TlsOptions>,
    auth: Option<&str>,
    max_bytes: u64,
) -> Result<Vec<u8>, Failure> {
    let mut body = Vec::new();
    fetch_into(http, path, tls, auth, max_bytes, None, &mut body).await?;
    Ok(body)
}

/// [`fetch`], the body of a 200 answer handed to `sink` as it arrives; a
/// connection that closes before the announced length is a failure saying
/// how much arrived. With `idle`, connecting, the TLS handshake and every
/// read each fail after that long without progress (a long download that
/// keeps arriving is never cut short).
pub async fn fetch_into(
    http: &str,
    path: &str,
    tls: Option<TlsOptions>,
    auth: Option<&str>,
    max_bytes: u64,
    idle: Option<Duration>,
    sink: &mut dyn Sink,
) -> Result<(), Failure> {
    let tcp = within(idle, http, "connecting", TcpStream::connect(http))
        .await?
        .map_err(|e| fail(format!("cannot connect to {http}: {e}")))?;
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: {http}\r\nConnection: close\r\n");
    if let Some(c) = auth {
        let b = base64::engine::general_purpose::STANDARD.encode(c);
        request.push_str(&format!("Authorization: Basic {b}\r\n"));
    }
    request.push_str("\r\n");
    match tls {
        None => exchange(tcp, &request, http, max_bytes, idle, sink).await,
        Some(tls) => {
            let stream = within(idle, http, "the TLS handshake", tls.connect(http, tcp))
                .await?
                .map_err(fail)?;
            exchange(stream, &request, http, max_bytes, idle, sink).await
        }
    }
}

async fn exchange(
    mut s: impl AsyncRead + AsyncWrite + Unpin,
    request: &str,
    http: &str,
    max_bytes: u64,
    idle: Option<Duration>,
    sink: &mut dyn Sink,
) -> Result<(), Failure> {
    let io = |e: std::io::Error| fail(format!("{http}: {e}"));
    s.write_all(request.as_bytes()).await.map_err(io)?;
    s.flush().await.map_err(io)?;
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > HEAD_BYTES_MAX {
            return Err(fail(format!("{http}: not an HTTP answer")));
        }
        let n = within(idle, http, "waiting for an answer", s.read(&mut chunk))
            .await?
            .map_err(io)?;
        if n == 0 {
            return Err(fail(format!(
                "{http}: the connection closed before an answer"
            )));
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| fail(format!("{http}: not an HTTP answer")))?;
    let mut length = None;
    for line in lines {
        if let Some((k, v)) = line.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                length = v.trim().parse::<u64>().ok();
            } else if k.eq_ignore_ascii_case("transfer-encoding") {
                return Err(fail(format!(
                    "{http}: unexpected transfer encoding {}",
                    v.trim()
                )));
            }
        }
    }
    let length = length.ok_or_else(|| fail(format!("{http}: the answer has no length")))?;
    let limit = if status == 200 {
        max_bytes
    } else {
        ERROR_BYTES_MAX
    };
    if length > limit {
        return Err(fail(format!(
            "{http}: announces {length} bytes, over the limit"
        )));
    }
    let mut error_body = Vec::new();
    let sink: &mut dyn Sink = if status == 200 { sink } else { &mut error_body };
    sink.length(length)?;
    let early = buf.split_off(head_end);
    let mut got = early.len().min(length as usize) as u64;
    sink.bytes(&early[..got as usize])?;
    while got < length {
        let what = format!("after {got} of {length} bytes");
        let n = within(idle, http, &what, s.read(&mut chunk))
            .await?
            .map_err(io)?;
        if n == 0 {
            return Err(fail(format!(
                "{http}: the connection closed after {got} of {length} bytes"
            )));
        }
        let n = n.min((length - got) as usize);
        sink.bytes(&chunk[..n])?;
        got += n as u64;
    }
    if status != 200 {
        // The server's `{"error": "..."}`.
        let message = serde_json::from_slice::<serde_json::Value>(&error_body)
            .ok()
            .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_string))
            .unwrap_or_else(|| String::from_utf8_lossy(&error_body).into_owned());
        return Err(fail(format!("{http}: HTTP {status}: {message}")));
    }
    Ok(())
}

/// `f`, failing after `idle` (if given) with what it was doing.
async fn within<T>(
    idle: Option<Duration>,
    http: &str,
    what: &str,
    f: impl std::future::Future<Output = T>,
) -> Result<T, Failure> {
    match idle {
        None => Ok(f.await),
        Some(d) => tokio::time::timeout(d, f).await.map_err(|_| {
            fail(format!(
                "{http}: nothing received for {} ms ({what})",
                d.as_millis()
            ))
        }),
    }
}
