//! wardenctl's HTTP calls (`snapshot save`, `locks`): HTTP/1.1 by hand,
//! one GET on a connection the server closes after the answer, read
//! whole (a content length is required).

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
    let tcp = TcpStream::connect(http)
        .await
        .map_err(|e| fail(format!("cannot connect to {http}: {e}")))?;
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: {http}\r\nConnection: close\r\n");
    if let Some(c) = auth {
        let b = base64::engine::general_purpose::STANDARD.encode(c);
        request.push_str(&format!("Authorization: Basic {b}\r\n"));
    }
    request.push_str("\r\n");
    match tls {
        None => exchange(tcp, &request, http, max_bytes).await,
        Some(tls) => {
            let stream = tls.connect(http, tcp).await.map_err(fail)?;
            exchange(stream, &request, http, max_bytes).await
        }
    }
}

async fn exchange(
    mut s: impl AsyncRead + AsyncWrite + Unpin,
    request: &str,
    http: &str,
    max_bytes: u64,
) -> Result<Vec<u8>, Failure> {
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
        let n = s.read(&mut chunk).await.map_err(io)?;
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
    if length > max_bytes {
        return Err(fail(format!(
            "{http}: announces {length} bytes, over the limit"
        )));
    }
    let mut body = buf.split_off(head_end);
    body.reserve((length as usize).saturating_sub(body.len()));
    while (body.len() as u64) < length {
        let n = s.read(&mut chunk).await.map_err(io)?;
        if n == 0 {
            return Err(fail(format!(
                "{http}: the connection closed after {} of {length} bytes",
                body.len()
            )));
        }
        body.extend_from_slice(&chunk[..n]);
    }
    body.truncate(length as usize);
    if status != 200 {
        // The server's `{"error": "..."}`.
        let message = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_string))
            .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned());
        return Err(fail(format!("{http}: HTTP {status}: {message}")));
    }
    Ok(body)
}
