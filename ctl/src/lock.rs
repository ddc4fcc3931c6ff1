//! `wardenctl lock` and `wardenctl lock-holder`: the [`Mutex`] recipe from
//! the shell.
//!
//! `lock NAME -- COMMAND...` holds the lock while COMMAND runs, hands it
//! the grant's fencing token in `WARDEN_FENCING_TOKEN`, and exits with its
//! exit code. The lock lives in wardenctl's own session, so if wardenctl
//! dies the lock is freed after the session timeout (`--ttl`). If the lock
//! is lost while COMMAND runs (the session expired, someone deleted the
//! node), COMMAND gets SIGTERM: it must not go on believing it is alone.
//!
//! Exit codes, beyond the usual 0/1/2: [`EXIT_NOT_ACQUIRED`] when `--wait`
//! ran out, [`EXIT_LOCK_LOST`] when the lock was lost under COMMAND; a
//! COMMAND killed by a signal gives 128 + the signal, as in a shell.

use std::io::{self, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use clap::Args;
use serde::Serialize;
use tokio::signal::unix::{signal, SignalKind};
use warden_client::Client;
use warden_recipes::{Holder, Mutex};

use crate::{Command, Failure, Output};

/// `--wait` ran out before the lock was acquired.
pub const EXIT_NOT_ACQUIRED: u8 = 3;
/// The lock was lost while the command ran.
pub const EXIT_LOCK_LOST: u8 = 4;
/// How long a command has to exit after SIGTERM before it gets SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(10);
/// Environment variable that carries the fencing token to the command.
pub const FENCING_TOKEN_ENV: &str = "WARDEN_FENCING_TOKEN";

#[derive(Debug, Args)]
pub struct LockArgs {
    /// The lock's path, e.g. /locks/backup.
    pub name: String,
    /// Session timeout for the lock, in milliseconds: how long after
    /// wardenctl dies the lock is freed.
    #[arg(long, value_name = "MS")]
    pub ttl: Option<u64>,
    /// Give up (exit 3, without running COMMAND) if the lock is not
    /// acquired within this many milliseconds; 0 = only if free now.
    #[arg(long, value_name = "MS")]
    pub wait: Option<u64>,
    /// The command to run while holding the lock.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct HolderArgs {
    /// The lock's path.
    pub name: String,
}

/// The session timeout a command asks for, if it has an opinion.
pub fn session_timeout(command: &Command) -> Option<Duration> {
    match command {
        Command::Lock(args) => args.ttl.map(Duration::from_millis),
        _ => None,
    }
}

/// `wardenctl lock`.
pub async fn lock(client: &Client, args: LockArgs) -> Result<(), Failure> {
    let mutex = Mutex::new(client.clone(), args.name.clone()).map_err(recipe)?;
    let guard = match args.wait {
        None => Some(mutex.acquire().await.map_err(recipe)?),
        Some(0) => mutex.try_acquire().await.map_err(recipe)?,
        Some(ms) => mutex
            .acquire_timeout(Duration::from_millis(ms))
            .await
            .map_err(recipe)?,
    };
    let Some(guard) = guard else {
        return Err(Failure::Exit {
            code: EXIT_NOT_ACQUIRED,
            message: format!(
                "Timeout: lock {} not acquired within {} ms",
                args.name,
                args.wait.unwrap_or(0)
            ),
        });
    };
    let (program, rest) = args.command.split_first().expect("clap requires a command");
    let mut child = match tokio::process::Command::new(program)
        .args(rest)
        .env(FENCING_TOKEN_ENV, guard.fencing_token().to_string())
        .kill_on_drop(true)
        .spawn()
    {
        Ok(child) => child,
        Err(e) => {
            let _ = guard.release().await;
            return Err(Failure::Exit {
                code: 1,
                message: format!("BadArguments: cannot run {program}: {e}"),
            });
        }
    };
    let lost = guard.lost();
    tokio::pin!(lost);
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let outcome = loop {
        tokio::select! {
            status = child.wait() => break Ok(status?),
            reason = &mut lost => {
                terminate_child(&mut child).await?;
                break Err(Failure::Exit {
                    code: EXIT_LOCK_LOST,
                    message: format!("LockLost: {}: {reason}; the command was stopped", args.name),
                });
            }
            // Passed on, so the command can clean up; we release once it
            // has exited.
            _ = terminate.recv() => forward(&child, libc::SIGTERM),
            _ = interrupt.recv() => forward(&child, libc::SIGINT),
        }
    };
    // After a loss the node is gone or the session is over: nothing to do.
    let released = guard.release().await;
    let status = outcome?;
    released.map_err(recipe)?;
    match exit_code(status) {
        0 => Ok(()),
        code => Err(Failure::Exit {
            code,
            message: String::new(),
        }),
    }
}

/// `wardenctl lock-holder`: prints the holder; exit 1 (and nothing) when
/// the lock is free.
pub async fn holder(client: &Client, args: HolderArgs, out: &Output) -> Result<(), Failure> {
    let mutex = Mutex::new(client.clone(), args.name).map_err(recipe)?;
    let Some(holder) = mutex.holder().await.map_err(recipe)? else {
        return Err(Failure::Exit {
            code: 1,
            message: String::new(),
        });
    };
    if out.json {
        out.json_line(&HolderJson::from(&holder))
    } else {
        writeln!(io::stdout().lock(), "{}", holder_human(&holder))?;
        Ok(())
    }
}

fn holder_human(h: &Holder) -> String {
    format!(
        "{} session={:#x} token={} since_ms={}",
        h.node, h.session_id, h.fencing_token, h.since_ms
    )
}

/// `lock-holder --json`.
#[derive(Debug, Serialize)]
struct HolderJson<'a> {
    node: &'a str,
    session_id: String,
    fencing_token: u64,
    since_ms: i64,
}

impl<'a> From<&'a Holder> for HolderJson<'a> {
    fn from(h: &'a Holder) -> Self {
        Self {
            node: &h.node,
            session_id: format!("{:#x}", h.session_id),
            fencing_token: h.fencing_token,
            since_ms: h.since_ms,
        }
    }
}

/// A recipe error as wardenctl reports it (`Code: detail`).
fn recipe(e: warden_recipes::Error) -> Failure {
    match e {
        warden_recipes::Error::Client(e) => Failure::Warden(e),
        other => Failure::Exit {
            code: 1,
            message: other.to_string(),
        },
    }
}

fn forward(child: &tokio::process::Child, sig: libc::c_int) {
    let Some(pid) = child.id().and_then(|p| libc::pid_t::try_from(p).ok()) else {
        return; // Already exited.
    };
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    unsafe {
        libc::kill(pid, sig);
    }
}

/// SIGTERM, then SIGKILL if the command is still there after
/// [`KILL_GRACE`].
async fn terminate_child(child: &mut tokio::process::Child) -> io::Result<()> {
    forward(child, libc::SIGTERM);
    if tokio::time::timeout(KILL_GRACE, child.wait())
        .await
        .is_err()
    {
        child.kill().await?;
    }
    Ok(())
}

/// A shell's idea of a command's exit code.
fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(1),
        (None, Some(sig)) => u8::try_from(128 + (sig & 0x7f)).unwrap_or(1),
        (None, None) => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holder_line() {
        let h = Holder {
            node: "/l/_c_ab-lock-0000000001".into(),
            session_id: 0x1f,
            fencing_token: 42,
            since_ms: 7,
        };
        assert_eq!(
            holder_human(&h),
            "/l/_c_ab-lock-0000000001 session=0x1f token=42 since_ms=7"
        );
        assert_eq!(
            serde_json::to_string(&HolderJson::from(&h)).unwrap(),
            r#"{"node":"/l/_c_ab-lock-0000000001","session_id":"0x1f","fencing_token":42,"since_ms":7}"#
        );
    }

    #[test]
    fn signals_become_shell_exit_codes() {
        assert_eq!(exit_code(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code(ExitStatus::from_raw(libc::SIGTERM)), 143);
    }
}
