//! Stale mounts: a harness killed with SIGKILL cannot unmount its layers,
//! and its FUSE mounts stay behind with nobody serving them (every access
//! fails with `ENOTCONN`, "Transport endpoint is not connected"). A new
//! run detaches the stale ones under its store before it starts
//! ([`detach_stale_under`]); a mount still served — another run in the
//! same store, alive — answers and is left alone.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The source a layer's mount shows in `/proc/self/mountinfo` (its
/// `FSName`; the type is `fuse`, or `fuse.faultfs` where the subtype
/// shows).
const SOURCE: &str = "warden-faultfs";

/// Mount points of the layer's filesystem type in a `mountinfo` text.
pub fn faultfs_mounts(mountinfo: &str) -> Vec<PathBuf> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let (fields, rest) = line.split_once(" - ")?;
            let mut rest = rest.split_whitespace();
            let (fstype, source) = (rest.next()?, rest.next()?);
            let mountpoint = fields.split_whitespace().nth(4)?;
            (fstype.starts_with("fuse") && source == SOURCE)
                .then(|| PathBuf::from(unescape(mountpoint)))
        })
        .collect()
}

/// `mountinfo` writes space, tab, newline and backslash as `\ooo`.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b.get(i + 1..i + 4).and_then(|d| {
            std::str::from_utf8(d)
                .ok()
                .and_then(|d| u8::from_str_radix(d, 8).ok())
        });
        match (b[i], octal) {
            (b'\\', Some(c)) => {
                out.push(c);
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether a mount point's FUSE server is gone.
fn is_stale(mountpoint: &Path) -> bool {
    matches!(
        std::fs::metadata(mountpoint),
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN)
    )
}

/// Detaches (`umount -l`) every layer mount under `root` whose server is
/// gone; returns the mount points detached, and those that could not be.
pub fn detach_stale_under(root: &Path) -> (Vec<PathBuf>, Vec<(PathBuf, String)>) {
    let (mut done, mut failed) = (Vec::new(), Vec::new());
    let Ok(root) = root.canonicalize() else {
        return (done, failed); // no store yet: nothing mounted in it
    };
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return (done, failed);
    };
    for mnt in faultfs_mounts(&info) {
        if !mnt.starts_with(&root) || !is_stale(&mnt) {
            continue;
        }
        let Ok(path) = CString::new(mnt.as_os_str().as_bytes()) else {
            continue;
        };
        // SAFETY: umount2 with a valid NUL-terminated path.
        if unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) } == 0 {
            done.push(mnt);
        } else {
            failed.push((mnt, std::io::Error::last_os_error().to_string()));
        }
    }
    (done, failed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    #[test]
    fn mountinfo_lines_name_the_layer_mounts() {
        let info = "\
36 35 98:0 / /store/x/nodes/node-1 rw,nosuid - fuse.faultfs warden-faultfs rw,user_id=0
37 35 98:0 / /with\\040space rw - fuse warden-faultfs rw
38 35 8:1 / /home rw - ext4 /dev/sda1 rw
39 35 0:40 / /other rw - fuse sshfs rw
";
        assert_eq!(
            faultfs_mounts(info),
            [
                PathBuf::from("/store/x/nodes/node-1"),
                PathBuf::from("/with space")
            ]
        );
    }

    /// The child side of the next test: mounts a layer at the path in
    /// `FAULTFS_STALE_CHILD`, says so and waits to be killed.
    #[test]
    fn stale_mount_child() {
        let Some(dir) = std::env::var_os("FAULTFS_STALE_CHILD") else {
            return; // only when run by the test below
        };
        let dir = PathBuf::from(dir);
        match super::super::Layer::mount(&dir.join("disk"), &dir.join("mnt")) {
            Ok(layer) => {
                println!("MOUNTED");
                std::thread::sleep(std::time::Duration::from_secs(120));
                drop(layer);
            }
            Err(e) => println!("SKIPPED: {e}"),
        }
    }

    /// A process holding a layer is killed with SIGKILL: its mount goes
    /// stale, and the clean-up detaches it (a live mount is left alone).
    #[test]
    fn a_killed_harness_leaves_a_stale_mount_that_is_detached() {
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "faultfs::stale::tests::stale_mount_child",
                "--nocapture",
            ])
            .env("FAULTFS_STALE_CHILD", dir.path())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut said = String::new();
        for line in BufReader::new(child.stdout.take().unwrap()).lines() {
            let line = line.unwrap();
            if line.starts_with("MOUNTED") || line.starts_with("SKIPPED") {
                said = line;
                break;
            }
        }
        if said.starts_with("SKIPPED") || said.is_empty() {
            let _ = child.kill();
            let _ = child.wait();
            eprintln!("SKIPPED: cannot mount here ({said})");
            return;
        }
        let mnt = dir.path().join("mnt");
        // Served: not stale, left alone.
        assert!(!is_stale(&mnt));
        assert!(detach_stale_under(dir.path()).0.is_empty());
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(is_stale(&mnt), "the killed server's mount answers ENOTCONN");
        let (done, failed) = detach_stale_under(dir.path());
        assert_eq!(
            done,
            [mnt.canonicalize().unwrap_or(mnt.clone())],
            "{failed:?}"
        );
        assert!(failed.is_empty());
        assert!(std::fs::read_dir(&mnt).unwrap().next().is_none());
    }
}
