//! Signals to processes, and whether one still exists.

/// Sends SIGTERM to `pid`.
pub fn sigterm(pid: u32) {
    signal(pid, libc::SIGTERM);
}

/// Sends SIGKILL to `pid`.
pub fn sigkill(pid: u32) {
    signal(pid, libc::SIGKILL);
}

fn signal(pid: u32, sig: libc::c_int) {
    let pid = libc::pid_t::try_from(pid).expect("pid fits in pid_t");
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    // A failure (the process is already gone) is not an error for tests.
    unsafe {
        libc::kill(pid, sig);
    }
}

/// Whether a process with this pid exists (a zombie counts: it has not
/// been reaped yet).
pub fn process_exists(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 only checks that the process exists; no memory of
    // ours is touched.
    let rc = unsafe { libc::kill(pid, 0) };
    // EPERM: it exists but belongs to someone else.
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn process_exists_follows_a_child() {
        let mut child = Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        assert!(process_exists(child.id()));
        sigkill(child.id());
        let _ = child.wait();
        assert!(!process_exists(child.id()));
    }
}
