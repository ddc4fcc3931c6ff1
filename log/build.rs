//! Bakes the git revision into `warden_log::VERSION` (`0.1.0 (git 1a2b3c4d5e6f)`).
//!
//! The revision comes from `WARDEN_GIT_REV` if set (packagers building from
//! a tarball can name it), else from `git rev-parse`; without either (a
//! tarball, no git installed) the build still succeeds and says so.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=WARDEN_GIT_REV");
    let rev = match std::env::var("WARDEN_GIT_REV") {
        Ok(rev) if !rev.trim().is_empty() => Some(rev.trim().to_string()),
        _ => git_rev(),
    };
    let rev = rev.unwrap_or_else(|| "revision unknown".to_string());
    println!("cargo:rustc-env=WARDEN_GIT_REV={rev}");
}

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!text.is_empty()).then_some(text)
}

fn git_rev() -> Option<String> {
    let git_dir = PathBuf::from(git(&["rev-parse", "--absolute-git-dir"])?);
    // Rebuild when HEAD moves: HEAD itself (a checkout), the branch's ref
    // (a commit), packed-refs (a gc). Only paths that exist are named:
    // cargo reruns every time for a missing one.
    let mut watch = vec![git_dir.join("HEAD"), git_dir.join("packed-refs")];
    if let Ok(head) = std::fs::read_to_string(git_dir.join("HEAD")) {
        if let Some(branch) = head.trim().strip_prefix("ref: ") {
            watch.push(git_dir.join(branch));
        }
    }
    for path in watch.iter().filter(|p| Path::exists(p)) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    git(&["rev-parse", "--short=12", "HEAD"]).map(|rev| format!("git {rev}"))
}
