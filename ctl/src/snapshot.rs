//! `wardenctl snapshot save FILE --http ADDR`: a backup of the whole
//! state. Downloads `GET /api/v1/snapshot` from a server's HTTP port
//! (HTTPS with `--tls-ca`; `--auth` sent as `Authorization: Basic`, the
//! super user's when the servers check passwords) and writes it as it
//! arrives to a temporary name beside FILE (`FILE.tmp`), checking it on the
//! way as a server checks its own snapshot files (header, format version,
//! lengths, and that the tree decodes, field by field:
//! `warden_server::backupfile::Checker`); once the last byte is in and the
//! xxh3 checksum matches, fsync, rename to FILE, fsync of the directory.
//! So wardenctl holds a few reads' worth of the file, not all of it, and a
//! failed, damaged or truncated download leaves no FILE (an older FILE
//! stays as it was) and no temporary file.
//!
//! The download is `http_get.rs`'s.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use warden_client::TlsOptions;
use warden_server::backupfile::Checker;

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
    let tmp = temporary(file).map_err(|e| fail(format!("{}: {e}", file.display())))?;
    let mut download = Download {
        tmp: &tmp,
        out: None,
        check: None,
        written: 0,
    };
    // No limit on the whole download (a big backup takes as long as it
    // takes while it keeps arriving); each step fails after `idle`
    // without progress.
    let idle = timeout.max(Duration::from_secs(60));
    let fetch = http_get::fetch_into(
        http,
        "/api/v1/snapshot",
        tls,
        auth,
        SNAPSHOT_BYTES_MAX,
        Some(idle),
        &mut download,
    );
    let outcome = fetch.await.and_then(|()| download.finish(file));
    let summary = outcome.inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })?;
    println!(
        "saved {} ({} bytes, index {}, term {}, {} znodes)",
        file.display(),
        summary.bytes,
        summary.index,
        summary.term,
        summary.nodes
    );
    Ok(())
}

/// `FILE.tmp` beside FILE.
fn temporary(file: &Path) -> std::io::Result<PathBuf> {
    let name = file
        .file_name()
        .ok_or_else(|| std::io::Error::other("not a file name"))?;
    let mut tmp_name = name.to_os_string();
    tmp_name.push(".tmp");
    Ok(directory(file).join(tmp_name))
}

fn directory(file: &Path) -> PathBuf {
    match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// The download as it arrives: checked, and written to the temporary file.
struct Download<'a> {
    tmp: &'a Path,
    out: Option<std::fs::File>,
    check: Option<Checker>,
    written: u64,
}

struct Saved {
    index: u64,
    term: u64,
    nodes: usize,
    bytes: u64,
}

fn damaged(e: String) -> Failure {
    fail(format!(
        "the downloaded snapshot is damaged, not saved: {e}"
    ))
}

impl http_get::Sink for Download<'_> {
    fn length(&mut self, length: u64) -> Result<(), Failure> {
        let f = std::fs::File::create(self.tmp)
            .map_err(|e| fail(format!("creating {}: {e}", self.tmp.display())))?;
        self.out = Some(f);
        self.check = Some(Checker::new(length));
        Ok(())
    }

    fn bytes(&mut self, bytes: &[u8]) -> Result<(), Failure> {
        let (Some(out), Some(check)) = (&mut self.out, &mut self.check) else {
            return Err(fail("bytes before the length"));
        };
        check.update(bytes).map_err(damaged)?;
        out.write_all(bytes)
            .map_err(|e| fail(format!("writing {}: {e}", self.tmp.display())))?;
        self.written += bytes.len() as u64;
        Ok(())
    }
}

impl Download<'_> {
    /// After the last byte: the whole file checked, then made durable
    /// under FILE (fsync, rename, fsync of the directory).
    fn finish(self, file: &Path) -> Result<Saved, Failure> {
        let (Some(out), Some(check)) = (self.out, self.check) else {
            return Err(fail("no snapshot arrived"));
        };
        let summary = check.finish().map_err(damaged)?;
        let durable = || -> std::io::Result<()> {
            out.sync_all()?;
            drop(out);
            std::fs::rename(self.tmp, file)?;
            std::fs::File::open(directory(file))?.sync_all()
        };
        durable().map_err(|e| fail(format!("writing {}: {e}", file.display())))?;
        Ok(Saved {
            index: summary.meta.index,
            term: summary.meta.term,
            nodes: summary.nodes,
            bytes: self.written,
        })
    }
}
