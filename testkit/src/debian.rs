//! Tools from Debian packages for tests (`promtool` from `prometheus`):
//! the one on `PATH` if there is one, else the package's files unpacked
//! under `target/debian/<package>` with `apt-get download` and
//! `dpkg-deb -x` — nothing installed system-wide, no service started.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The path of `binary` from Debian's `package`, fetched on first use; an
/// error saying why when it cannot be had (no apt, no network), for the
/// caller to report.
pub fn tool(package: &str, binary: &str) -> Result<PathBuf, String> {
    if let Some(on_path) = which(binary) {
        return Ok(on_path);
    }
    file(package, &format!("usr/bin/{binary}"))
}

/// The file at `path` (relative, as in the package: `bin/nc.openbsd`)
/// of Debian's `package`, unpacked under `target/debian/<package>` on
/// first use (for a program the package installs under another name
/// than the one on `PATH`); an error saying why when it cannot be had.
pub fn file(package: &str, path: &str) -> Result<PathBuf, String> {
    let target = crate::binary("warden")
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/warden")
        .to_path_buf();
    let dir = target.join("debian").join(package);
    let unpacked = dir.join(path);
    if unpacked.is_file() {
        return Ok(unpacked);
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let download = || {
        Command::new("apt-get")
            .args(["download", package])
            .current_dir(&dir)
            .output()
    };
    let mut out = download().map_err(|e| format!("apt-get: {e}"))?;
    if !out.status.success() {
        // A fresh machine may have no package lists yet.
        let _ = Command::new("apt-get").args(["update", "-qq"]).output();
        out = download().map_err(|e| format!("apt-get: {e}"))?;
    }
    if !out.status.success() {
        return Err(format!(
            "apt-get download {package} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let deb = std::fs::read_dir(&dir)
        .map_err(|e| e.to_string())?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .ok_or_else(|| {
            format!(
                "apt-get download {package} left no .deb in {}",
                dir.display()
            )
        })?;
    let out = Command::new("dpkg-deb")
        .arg("-x")
        .arg(&deb)
        .arg(&dir)
        .output()
        .map_err(|e| format!("dpkg-deb: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "dpkg-deb -x {} failed: {}",
            deb.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let _ = std::fs::remove_file(&deb);
    if unpacked.is_file() {
        Ok(unpacked)
    } else {
        Err(format!("{package} has no {path}"))
    }
}

fn which(binary: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(binary))
        .find(|p| p.is_file())
}
