//! Faults of client processes: the workloads whose clients are helper
//! processes (`lock-set`, `election`) stop one with SIGSTOP for longer than
//! its session can live and let it go on (a zombie: a GC pause, a stopped
//! VM), or kill it with SIGKILL (a crash: its session is never closed and
//! must expire). Each is an operation of its own process in the history:
//! `pause-client` (from the SIGSTOP to the SIGCONT) and `kill-client`
//! (instant), with `client` (the history process hit), `pid` and what the
//! workload adds.
//!
//! The lock-set workload always pauses its clients (that is its point);
//! the election workload does what `--nemesis` names: `kill-client` and
//! `pause-client`, aimed at the candidate that leads.

use std::str::FromStr;
use std::time::Duration;

use serde_json::{json, Value};

use crate::history::{History, Process};

/// How much longer than twice the session timeout a pause lasts: long
/// enough for the session to expire and a successor to reach the
/// resource or take over.
pub const PAUSE_EXTRA: Duration = Duration::from_secs(1);

/// How long a pause stops a client: twice the session timeout and
/// [`PAUSE_EXTRA`].
pub fn pause_length(session_timeout: Duration) -> Duration {
    session_timeout * 2 + PAUSE_EXTRA
}

/// A fault of client processes, as `--nemesis` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClientFault {
    /// SIGKILL (the process is replaced by a new one).
    Kill,
    /// SIGSTOP for [`pause_length`], then SIGCONT.
    Pause,
}

impl ClientFault {
    pub const ALL: [ClientFault; 2] = [ClientFault::Kill, ClientFault::Pause];

    pub fn name(self) -> &'static str {
        match self {
            ClientFault::Kill => "kill-client",
            ClientFault::Pause => "pause-client",
        }
    }
}

impl FromStr for ClientFault {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ClientFault::ALL
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or_else(|| format!("unknown client fault {s:?}"))
    }
}

/// Sends SIGCONT (harmless if the process is not stopped or gone).
pub fn resume(pid: Option<u32>) {
    if let Some(pid) = pid {
        let _ = signal(pid, libc::SIGCONT);
    }
}

/// kill(2) of a process this run started; `Err` with the OS error.
fn signal(pid: u32, sig: libc::c_int) -> Result<(), std::io::Error> {
    // SAFETY: kill(2) with a pid we started; no memory is involved.
    if unsafe { libc::kill(pid as libc::pid_t, sig) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The value of a client fault's operation: `client`, `pid`, and the
/// fields of `extra` (an object).
fn fault_value(client: Process, pid: u32, extra: Value) -> Value {
    let mut value = json!({ "client": client.client(), "pid": pid });
    if let (Some(v), Value::Object(extra)) = (value.as_object_mut(), extra) {
        v.extend(extra);
    }
    value
}

/// Stops `client` (process `pid`) for `length`, then lets it go on;
/// recorded as a `pause-client` operation of `by`. `false` when the
/// SIGSTOP failed (recorded `info`: `by` must move on to a new process).
pub async fn pause_client(
    history: &History,
    by: Process,
    client: Process,
    pid: u32,
    length: Duration,
    extra: Value,
) -> bool {
    let mut value = fault_value(client, pid, extra);
    value["ms"] = json!(length.as_millis() as u64);
    let inv = history.invoke(by, "pause-client", value.clone());
    match signal(pid, libc::SIGSTOP) {
        Ok(()) => {
            tokio::time::sleep(length).await;
            resume(Some(pid));
            history.ok(&inv, value);
            true
        }
        Err(e) => {
            history.info(&inv, value, format!("SIGSTOP: {e}"));
            false
        }
    }
}

/// Kills `client` (process `pid`) with SIGKILL, recorded as a
/// `kill-client` operation of `by`. `false` when the signal failed
/// (recorded `info`: `by` must move on to a new process).
pub fn kill_client(
    history: &History,
    by: Process,
    client: Process,
    pid: u32,
    extra: Value,
) -> bool {
    let value = fault_value(client, pid, extra);
    let inv = history.invoke(by, "kill-client", value.clone());
    // A stopped process dies of SIGKILL too; no SIGCONT needed.
    match signal(pid, libc::SIGKILL) {
        Ok(()) => {
            history.ok(&inv, value);
            true
        }
        Err(e) => {
            history.info(&inv, value, format!("SIGKILL: {e}"));
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_values_carry_the_extra_fields() {
        for f in ClientFault::ALL {
            assert_eq!(f.name().parse::<ClientFault>(), Ok(f));
        }
        assert!("kill".parse::<ClientFault>().is_err());
        let v = fault_value(Process::Client(4), 77, json!({ "token": 9 }));
        assert_eq!(v, json!({ "client": 4, "pid": 77, "token": 9 }));
        assert_eq!(pause_length(Duration::from_secs(3)), Duration::from_secs(7));
    }
}
