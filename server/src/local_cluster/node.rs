//! One node: its child process, the task that copies its stdout into the
//! log and spots the ready line, and the task that owns the child until it
//! exits or is told to stop.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};

use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::process::{Child, ChildStdout, Command};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use super::{
    ready_line_client, EndedBy, Event, LocalClusterError, NodeEnd, NodePlan, Plan, Stop, ME,
    STOP_TIMEOUT,
};

/// Starts one node: a child running `warden serve` with its stderr in the
/// log and its stdout copied there by a forwarding task (returned).
pub(super) fn spawn_node(
    exe: &Path,
    plan: &Plan,
    node: &NodePlan,
    events: mpsc::Sender<Event>,
) -> Result<(Child, JoinHandle<()>), LocalClusterError> {
    let log_err = |source| LocalClusterError::Log {
        id: node.id,
        path: node.log.clone(),
        source,
    };
    let args = plan.serve_args(node);
    let mut log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&node.log)
        .map_err(log_err)?;
    let shown: Vec<_> = args.iter().map(|a| a.to_string_lossy()).collect();
    writeln!(
        log,
        "=== {ME}: starting node {}: {} {}",
        node.id,
        exe.display(),
        shown.join(" ")
    )
    .map_err(log_err)?;
    let stderr = log.try_clone().map_err(log_err)?;

    let mut cmd = Command::new(exe);
    cmd.args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        // Only matters if the supervisor fails in an unplanned way; every
        // planned path stops and reaps the child itself.
        .kill_on_drop(true);
    // Own process group: a terminal's Ctrl-C goes to the supervisor only
    // (see the module docs).
    #[cfg(unix)]
    cmd.process_group(0);
    let mut child = cmd.spawn().map_err(|source| LocalClusterError::Spawn {
        id: node.id,
        source,
    })?;
    let stdout = child.stdout.take().expect("stdout is piped");
    let forwarder = tokio::spawn(forward_stdout(
        node.id,
        stdout,
        tokio::fs::File::from_std(log),
        node.log.clone(),
        events,
    ));
    if let Some(pid) = child.id() {
        if let Err(e) = std::fs::write(&node.pid_file, format!("{pid}\n")) {
            eprintln!(
                "{ME}: warning: cannot write {}: {e}",
                node.pid_file.display()
            );
        }
    }
    Ok((child, forwarder))
}

/// Copies a node's stdout into its log line by line and reports the first
/// ready line. Runs until the child closes stdout (it exits).
async fn forward_stdout(
    id: u64,
    stdout: ChildStdout,
    mut log: tokio::fs::File,
    log_path: PathBuf,
    events: mpsc::Sender<Event>,
) {
    let mut lines = BufReader::new(stdout).lines();
    let mut ready_seen = false;
    let mut log_ok = true;
    loop {
        let line = match lines.next_line().await {
            Ok(Some(line)) => line,
            Ok(None) => break,
            Err(e) => {
                eprintln!("{ME}: node {id}: cannot read its stdout: {e}");
                break;
            }
        };
        if log_ok {
            let written = async {
                log.write_all(line.as_bytes()).await?;
                log.write_all(b"\n").await?;
                log.flush().await
            };
            if let Err(e) = written.await {
                // Keep reading regardless: a child blocked on a full pipe
                // would stall.
                eprintln!(
                    "{ME}: node {id}: cannot write {}: {e}; its stdout is dropped from now on",
                    log_path.display()
                );
                log_ok = false;
            }
        }
        if !ready_seen {
            if let Some(client) = ready_line_client(&line) {
                ready_seen = true;
                // Capacity is reserved for this event; a send error means
                // `run` is gone, and then nobody needs it.
                let _ = events.send(Event::Ready { id, client }).await;
            }
        }
    }
}

/// Owns one node's child until it is gone: reports an unasked exit, or
/// stops it when [`run`](super::run) raises the stop level.
pub(super) async fn supervise(
    node: NodePlan,
    mut child: Child,
    forwarder: JoinHandle<()>,
    mut stop: watch::Receiver<Stop>,
    events: mpsc::Sender<Event>,
) -> NodeEnd {
    let exited = tokio::select! {
        status = child.wait() => Some(status),
        () = requested(&mut stop, Stop::Term) => None,
    };
    let (status, how) = match exited {
        Some(status) => (describe(status), EndedBy::Itself),
        None => terminate(&mut child, &mut stop).await,
    };
    // The child is dead, so its stdout is closed and the forwarder ends
    // soon; waiting for it keeps a ready line ahead of the exit.
    let _ = forwarder.await;
    if how == EndedBy::Itself {
        let _ = events
            .send(Event::Exited {
                id: node.id,
                status: status.clone(),
            })
            .await;
    }
    match std::fs::remove_file(&node.pid_file) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => eprintln!(
            "{ME}: warning: cannot remove {}: {e}",
            node.pid_file.display()
        ),
        _ => {}
    }
    NodeEnd {
        id: node.id,
        status,
        how,
    }
}

/// SIGTERM, then wait up to [`STOP_TIMEOUT`] (or until [`Stop::Kill`]),
/// then SIGKILL.
async fn terminate(child: &mut Child, stop: &mut watch::Receiver<Stop>) -> (String, EndedBy) {
    let kill_now = *stop.borrow() >= Stop::Kill;
    if !kill_now {
        // `id()` is `None` once the child is reaped; until then its pid
        // cannot have been reused, so the signal reaches our child.
        if let Some(pid) = child.id() {
            if let Err(e) = sys::terminate(pid) {
                eprintln!("{ME}: cannot send SIGTERM to pid {pid}: {e}");
            }
        }
        let clean = tokio::select! {
            status = child.wait() => Some(status),
            () = tokio::time::sleep(STOP_TIMEOUT) => None,
            () = requested(stop, Stop::Kill) => None,
        };
        if let Some(status) = clean {
            let clean = matches!(&status, Ok(s) if s.success());
            return (describe(status), EndedBy::Term { clean });
        }
    }
    // Fails only if the child is already gone; `wait` then has its status.
    let _ = child.start_kill();
    (describe(child.wait().await), EndedBy::Kill)
}

/// Completes once the stop level is at least `level`. A dropped sender
/// means [`run`](super::run) is gone, which is taken as a request too.
async fn requested(stop: &mut watch::Receiver<Stop>, level: Stop) {
    // The guard is dropped at once: holding it would block the sender.
    let _ = stop.wait_for(|s| *s >= level).await.map(drop);
}

fn describe(status: std::io::Result<ExitStatus>) -> String {
    match status {
        Ok(status) => status.to_string(),
        Err(e) => format!("exit status unknown: {e}"),
    }
}

/// Sending SIGTERM to a child (`std` and `tokio` can only SIGKILL).
#[cfg(unix)]
mod sys {
    pub fn terminate(pid: u32) -> std::io::Result<()> {
        let pid = libc::pid_t::try_from(pid)
            .map_err(|_| std::io::Error::other(format!("pid {pid} out of range")))?;
        // SAFETY: kill(2) takes two integers and touches no memory of ours.
        if unsafe { libc::kill(pid, libc::SIGTERM) } == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }
}

/// Elsewhere there is no SIGTERM; stopping means killing.
#[cfg(not(unix))]
mod sys {
    pub fn terminate(_pid: u32) -> std::io::Result<()> {
        Err(std::io::Error::other("SIGTERM needs Unix"))
    }
}
