//! `wardenctl snapshot save FILE --http ADDR`: a backup of the whole
//! state. Downloads `GET /api/v1/snapshot` from a server's HTTP port
//! (HTTPS with `--tls-ca`; `--auth` sent as `Authorization: Basic`, the
//! super user's when the servers check passwords), checks it as a server
//! checks its own snapshot files (header, format version, lengths, xxh3
//! checksum, and that the tree decodes), and writes FILE durably:
//! a temporary name beside it, fsync, rename, fsync of the directory.
//!
//! The download is `http_get.rs`'s.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use prost::Message as _;
use warden_client::TlsOptions;

use super::{http_get, Failure};

/// Largest snapshot downloaded (a guard against a wrong port answering
/// forever): 64 GiB.
const SNAPSHOT_BYTES_MAX: u64 = 64 << 30;

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
    let fetch = http_get::fetch(http, "/api/v1/snapshot", tls, auth, SNAPSHOT_BYTES_MAX);
    let body = tokio::time::timeout(timeout.max(Duration::from_secs(60)), fetch)
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
