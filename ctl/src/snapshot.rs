//! `wardenctl snapshot save FILE --http ADDR`: a backup of the whole
//! state. Downloads `GET /api/v1/snapshot` from a server's HTTP port
//! (HTTPS with `--tls-ca`; `--auth` sent as `Authorization: Basic`, the
//! super user's when the servers check passwords), checks it as a server
//! checks its own snapshot files (header, format version, lengths, xxh3
//! checksum, and that the tree decodes), and writes FILE durably:
//! a temporary name beside it, fsync, rename, fsync of the directory.
//!
//! HTTP/1.1 by hand, one request on a connection the server closes
//! after the answer: this is the tool's only HTTP call.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use prost::Message as _;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::TcpStream;
use warden_client::TlsOptions;

use super::Failure;

/// Largest snapshot downloaded (a guard against a wrong port answering
/// forever): 64 GiB.
const SNAPSHOT_BYTES_MAX: u64 = 64 << 30;
/// Largest response head.
const HEAD_BYTES_MAX: usize = 64 * 1024;

#[derive(Debug, clap::Subcommand)]
pub enum SnapshotCommand {
    /// Save a consistent snapshot of the whole state (every write
    /// acknowledged before the request) to FILE, from any server's HTTP
    /// port; restore it with `warden restore --snapshot FILE`.
    Save {
        /// Where to write the snapshot (replaced if it exists).
        file: PathBuf,
        /// The HTTP address of a server (`warden serve --http-listen`).
        #[arg(long, value_name = "ADDR", env = "WARDEN_HTTP")]
        http: String,
    },
}

fn fail(message: impl Into<String>) -> Failure {
    Failure::Exit {
        code: 1,
        message: message.into(),
    }
}

pub async fn run(
    cmd: &SnapshotCommand,
    tls: Option<TlsOptions>,
    auth: Option<&str>,
    timeout: Duration,
) -> Result<(), Failure> {
    let SnapshotCommand::Save { file, http } = cmd;
    let body = tokio::time::timeout(timeout.max(Duration::from_secs(60)), fetch(http, tls, auth))
        .await
        .map_err(|_| fail(format!("{http}: no whole snapshot within the timeout")))??;
    let checked = check(file, body)?;
    write_durably(file, &checked.bytes)
        .map_err(|e| fail(format!("writing {}: {e}", file.display())))?;
    println!(
        "saved {} ({} bytes, index {}, term {}, {} znodes)",
        file.display(),
        checked.bytes.len(),
        checked.index,
        checked.term,
        checked.nodes
    );
    Ok(())
}

async fn fetch(
    http: &str,
    tls: Option<TlsOptions>,
    auth: Option<&str>,
) -> Result<Vec<u8>, Failure> {
    let tcp = TcpStream::connect(http)
        .await
        .map_err(|e| fail(format!("cannot connect to {http}: {e}")))?;
    let mut request =
        format!("GET /api/v1/snapshot HTTP/1.1\r\nHost: {http}\r\nConnection: close\r\n");
    if let Some(c) = auth {
        let b = base64::engine::general_purpose::STANDARD.encode(c);
        request.push_str(&format!("Authorization: Basic {b}\r\n"));
    }
    request.push_str("\r\n");
    match tls {
        None => exchange(tcp, &request, http).await,
        Some(tls) => {
            let stream = tls.connect(http, tcp).await.map_err(fail)?;
            exchange(stream, &request, http).await
        }
    }
}

async fn exchange(
    mut s: impl AsyncRead + AsyncWrite + Unpin,
    request: &str,
    http: &str,
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
    if length > SNAPSHOT_BYTES_MAX {
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

struct Checked {
    bytes: Vec<u8>,
    index: u64,
    term: u64,
    nodes: usize,
}

/// Checks the downloaded file as `warden restore` will read it.
fn check(file: &Path, bytes: Vec<u8>) -> Result<Checked, Failure> {
    let what = file.with_extension("download");
    let snap = warden_server::raft::snapfile::decode(&what, bytes.clone()).map_err(|e| {
        fail(format!(
            "the downloaded snapshot is damaged, not saved: {e}"
        ))
    })?;
    let tree = warden_server::proto::Snapshot::decode(&snap.data[..]).map_err(|e| {
        fail(format!(
            "the downloaded snapshot holds no valid tree, not saved: {e}"
        ))
    })?;
    let meta = snap.get_metadata();
    Ok(Checked {
        index: meta.index,
        term: meta.term,
        nodes: tree.nodes.len(),
        bytes,
    })
}

/// Temporary name, fsync, rename, fsync of the directory: FILE is either
/// the old file or the whole new one.
fn write_durably(file: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let name = file
        .file_name()
        .ok_or_else(|| std::io::Error::other("not a file name"))?;
    let dir = match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut tmp_name = name.to_os_string();
    tmp_name.push(".tmp");
    let tmp = dir.join(tmp_name);
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, file)?;
        std::fs::File::open(&dir)?.sync_all()
    };
    write().inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}
