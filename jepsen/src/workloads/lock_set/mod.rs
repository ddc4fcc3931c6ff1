//! The `lock-set` workload, after Jepsen's lock-set: clients take one lock
//! (the recipes' [`Mutex`](warden_recipes::Mutex), fencing tokens) and,
//! under it, read-modify-write a resource, with a delay between the read
//! and the write. Now and then the run SIGSTOPs a client process right
//! after its read, for longer than two session timeouts, and lets it go
//! on: a zombie, whose session expired while another client took the lock,
//! and which wakes up believing it still holds it and writes.
//!
//! The resource lives in the run ([`Resource`]): one counter with a
//! version, behind recipes' [`FencedResource`], which refuses a read or a
//! write whose token is below the highest it has seen (reads count: a
//! newer holder that has only read must still stop the zombie's write).
//! With `--unsafe-resource` it does not fence, and the zombie's write goes
//! through and loses the update of the holder in between: the run must be
//! judged invalid (CI runs it as proof that the checker can fail).
//!
//! Each client is a helper process (`warden-jepsen lock-set-client`, see
//! [`client`]) that the run talks to by lines; its acquires and releases
//! carry the client's CLOCK_MONOTONIC times, the reads and writes are
//! recorded by the run when they reach the resource. A client whose
//! session ended (or whose acquire's outcome is unknown) exits and is
//! replaced by a new process.
//!
//! The checker ([`check`](mod@check)) judges the resource's accepted writes, not the
//! grants: in the resource's order they form one chain (each was based on
//! the version the previous one made: no lost update) and their tokens
//! never go back; and the lock is granted in every long enough stretch
//! without faults.

pub mod check;
pub mod client;

use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{ChildStdin, ChildStdout};
use tokio::time::Instant;
use warden_recipes::FencedResource;

use crate::history::{History, Invocation, Kind, Process};
use crate::workload::RunCtx;
use crate::workloads::client_faults::{pause_client, pause_length, PAUSE_EXTRA};
use crate::workloads::support::{
    finish_helpers, helper_args, keep_helpers, run_tag, send_line, HelperProc, Processes,
};

pub use check::{check, planted_anomalies};

/// Where each run makes its lock.
pub const ROOT: &str = "/jepsen/lock-set";
/// The hidden subcommand of the client processes.
pub const CLIENT_SUBCOMMAND: &str = "lock-set-client";
/// Least time from one zombie's wake-up to the next zombie's pause (one at
/// a time: each stalls the lock for a session timeout).
const ZOMBIE_SPACING: Duration = Duration::from_secs(3);
/// One read in this many is followed by a pause, when no zombie is in
/// force and the spacing allows.
const ZOMBIE_ODDS: u32 = 3;
/// How long the run waits for its clients to finish after asking them to.
const FINISH_WAIT: Duration = Duration::from_secs(15);
/// Most client processes one run starts.
const CLIENTS_MAX: usize = 500;
/// The resource's name in the fence's table.
const RESOURCE: &str = "lock-set";

/// Drives clients until `ctx.deadline` against a fencing resource.
pub async fn run(ctx: &RunCtx) -> Result<(), String> {
    run_with(ctx, true).await
}

/// The same with a resource that does not fence (`--unsafe-resource`): its
/// history must be judged invalid.
pub async fn run_unsafe(ctx: &RunCtx) -> Result<(), String> {
    run_with(ctx, false).await
}

async fn run_with(ctx: &RunCtx, fenced: bool) -> Result<(), String> {
    let shared = Arc::new(Shared {
        ctx: ctx.clone(),
        resource: Resource::new(fenced),
        zombies: StdMutex::new(Zombies::default()),
        rng: StdMutex::new(StdRng::seed_from_u64(ctx.seed ^ 0x10c5e7)),
        processes: Processes::default(),
        pauser: StdMutex::new(None),
    });
    *shared.pauser.lock().expect("pauser lock") = Some(shared.processes.fresh());
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(ctx.dir.join("lock-set-clients.log"))
        .map_err(|e| format!("client log in {}: {e}", ctx.dir.display()))?;
    let lock = format!("{ROOT}/{}", run_tag(ctx));
    let (mut clients, result) =
        keep_helpers(ctx.deadline, ctx.concurrency.max(2), CLIENTS_MAX, |n| {
            spawn_client(&shared, &lock, n, &log)
        })
        .await;
    // Ask every client to finish its round, then make sure none is left.
    let until = Instant::now() + FINISH_WAIT + pause_length(ctx.session_timeout);
    finish_helpers(&mut clients, until).await;
    result
}

/// The resource the lock protects: a counter and its version (the number
/// of writes accepted), fenced or not.
#[derive(Debug)]
pub struct Resource {
    fence: Option<FencedResource>,
    state: StdMutex<Register>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Register {
    version: u64,
    value: u64,
}

impl Resource {
    pub fn new(fenced: bool) -> Resource {
        Resource {
            fence: fenced.then(FencedResource::new),
            state: StdMutex::default(),
        }
    }

    /// Runs `f` on the register if `token` passes the fence (always, when
    /// unfenced); `Err(highest)` if refused.
    fn with<T>(&self, token: u64, f: impl FnOnce(&mut Register) -> T) -> Result<T, u64> {
        let run = || f(&mut self.state.lock().unwrap_or_else(|e| e.into_inner()));
        match &self.fence {
            Some(fence) => fence.write_with(RESOURCE, token, run).map_err(|s| s.seen),
            None => Ok(run()),
        }
    }

    /// `Ok((version, value))`, or `Err(highest token seen)`.
    pub fn read(&self, token: u64) -> Result<(u64, u64), u64> {
        self.with(token, |r| (r.version, r.value))
    }

    /// Sets the value (whatever it was based on, as a plain store does);
    /// `Ok(seq)`: accepted as the `seq`th write (the new version).
    pub fn write(&self, token: u64, value: u64) -> Result<u64, u64> {
        self.with(token, |r| {
            r.version += 1;
            r.value = value;
            r.version
        })
    }
}

/// Whether a zombie is in force and when the last one woke.
#[derive(Debug, Default)]
struct Zombies {
    active: bool,
    last_woke: Option<Instant>,
}

/// What the run's tasks share.
struct Shared {
    ctx: RunCtx,
    resource: Resource,
    zombies: StdMutex<Zombies>,
    rng: StdMutex<StdRng>,
    processes: Processes,
    /// The process that records `pause-client` operations (a new one after
    /// an `info`).
    pauser: StdMutex<Option<Process>>,
}

impl Shared {
    fn history(&self) -> &History {
        &self.ctx.history
    }

    fn pause_length(&self) -> Duration {
        pause_length(self.ctx.session_timeout)
    }

    /// Whether to make a zombie now (and if so, marks one in force).
    fn start_zombie(&self) -> bool {
        let now = Instant::now();
        if now + self.pause_length() + PAUSE_EXTRA > self.ctx.deadline {
            return false;
        }
        let mut z = self.zombies.lock().expect("zombies lock");
        let spaced = z.last_woke.is_none_or(|t| now >= t + ZOMBIE_SPACING);
        if z.active || !spaced {
            return false;
        }
        if self
            .rng
            .lock()
            .expect("rng lock")
            .random_range(0..ZOMBIE_ODDS)
            != 0
        {
            return false;
        }
        z.active = true;
        true
    }

    fn end_zombie(&self) {
        let mut z = self.zombies.lock().expect("zombies lock");
        z.active = false;
        z.last_woke = Some(Instant::now());
    }
}

/// Starts client process `n` and the task that serves it.
fn spawn_client(
    shared: &Arc<Shared>,
    lock: &str,
    n: usize,
    log: &std::fs::File,
) -> Result<HelperProc, String> {
    let ctx = &shared.ctx;
    let mut args = helper_args(ctx, &ctx.servers_for(n));
    args.extend([
        "--lock".to_string(),
        lock.to_string(),
        "--seed".to_string(),
        (ctx.seed ^ (n as u64).wrapping_mul(0x9e37_79b9)).to_string(),
    ]);
    let process = shared.processes.fresh();
    let shared = shared.clone();
    HelperProc::start(
        ctx,
        CLIENT_SUBCOMMAND,
        &args,
        log,
        move |pid, stdout, stdin| serve(shared, process, pid, stdout, stdin),
    )
}

/// Records what one client prints and answers its resource requests.
async fn serve(
    shared: Arc<Shared>,
    process: Process,
    pid: Option<u32>,
    stdout: ChildStdout,
    stdin: Arc<tokio::sync::Mutex<Option<ChildStdin>>>,
) {
    let history = shared.history().clone();
    let mut lines = BufReader::new(stdout).lines();
    // The open acquire or release (invocation), and the grant held.
    let mut open: Option<Invocation> = None;
    let mut token: Option<u64> = None;
    let mut zombie = false;
    let answer = |line: String| {
        let stdin = stdin.clone();
        async move { send_line(&stdin, &line).await }
    };
    while let Ok(Some(line)) = lines.next_line().await {
        let words: Vec<&str> = line.split_whitespace().collect();
        let n = |i: usize| words.get(i).and_then(|w| w.parse::<u64>().ok());
        let text = || words.get(2..).map(|w| w.join(" ")).unwrap_or_default();
        let at = n(1).unwrap_or_else(crate::clock::mono_ns);
        match words.first().copied() {
            Some("acquiring") => {
                let e = history.record_at(process, Kind::Invoke, "acquire", Value::Null, None, at);
                open = Some(invocation(process, "acquire", &e));
            }
            Some("granted") => {
                if let (Some(_), Some(t), Some(session)) = (open.take(), n(2), n(3)) {
                    let value = json!({ "token": t, "session": session });
                    history.record_at(process, Kind::Ok, "acquire", value, None, at);
                    token = Some(t);
                    zombie = false;
                }
            }
            Some("not-granted") => {
                if open.take().is_some() {
                    let error = Some("not granted within the wait".to_string());
                    history.record_at(process, Kind::Fail, "acquire", Value::Null, error, at);
                }
            }
            Some("acquire-unknown") => {
                if open.take().is_some() {
                    history.record_at(
                        process,
                        Kind::Info,
                        "acquire",
                        Value::Null,
                        Some(text()),
                        at,
                    );
                }
            }
            Some("read") => {
                let Some(t) = n(1) else { continue };
                let inv = history.invoke(process, "read", json!({ "token": t }));
                match shared.resource.read(t) {
                    Ok((version, value)) => {
                        let v = json!({ "token": t, "version": version, "value": value });
                        history.ok(&inv, v);
                        answer(format!("value {version} {value}")).await;
                        if shared.start_zombie() {
                            zombie = true;
                            pause(&shared, process, pid).await;
                        }
                    }
                    Err(highest) => {
                        refuse(&history, &inv, json!({ "token": t }), t, highest);
                        answer(format!("refused {highest}")).await;
                    }
                }
            }
            Some("write") => {
                let (Some(t), Some(based_on), Some(value)) = (n(1), n(2), n(3)) else {
                    continue;
                };
                let args =
                    json!({ "token": t, "based_on": based_on, "value": value, "zombie": zombie });
                let inv = history.invoke(process, "write", args.clone());
                match shared.resource.write(t, value) {
                    Ok(seq) => {
                        let mut v = args;
                        v["seq"] = json!(seq);
                        history.ok(&inv, v);
                        answer(format!("accepted {seq}")).await;
                    }
                    Err(highest) => {
                        refuse(&history, &inv, args, t, highest);
                        answer(format!("refused {highest}")).await;
                    }
                }
            }
            Some("releasing") => {
                let value = json!({ "token": token });
                let e = history.record_at(process, Kind::Invoke, "release", value, None, at);
                open = Some(invocation(process, "release", &e));
            }
            Some("released") => {
                if open.take().is_some() {
                    history.record_at(
                        process,
                        Kind::Ok,
                        "release",
                        json!({ "token": token }),
                        None,
                        at,
                    );
                }
                token = None;
            }
            Some("release-failed") => {
                if open.take().is_some() {
                    let value = json!({ "token": token });
                    history.record_at(process, Kind::Info, "release", value, Some(text()), at);
                }
                token = None;
            }
            Some("ended") => {
                let state = words.get(2).copied().unwrap_or("?");
                let value = json!({ "state": state });
                history.record_at(
                    process,
                    Kind::Invoke,
                    "session-ended",
                    value.clone(),
                    None,
                    at,
                );
                history.record_at(process, Kind::Ok, "session-ended", value, None, at);
            }
            _ => tracing::warn!(%line, "unreadable line from a lock-set client"),
        }
    }
    // The process is gone with an operation open: unknown.
    if let Some(inv) = open {
        let error = Some("the client exited before answering".to_string());
        history.record_at(
            process,
            Kind::Info,
            &inv.f,
            Value::Null,
            error,
            crate::clock::mono_ns(),
        );
    }
}

fn invocation(process: Process, f: &str, e: &crate::history::Event) -> Invocation {
    Invocation {
        process,
        f: f.to_string(),
        index: e.index,
        time: e.time,
    }
}

fn refuse(history: &History, inv: &Invocation, mut value: Value, token: u64, highest: u64) {
    value["highest"] = json!(highest);
    history.fail(
        inv,
        value,
        format!("Stale: token {token} is older than {highest}, already seen"),
    );
}

/// Stops client `pid` for [`Shared::pause_length`] (see
/// [`pause_client`]).
async fn pause(shared: &Shared, process: Process, pid: Option<u32>) {
    let Some(pid) = pid else {
        shared.end_zombie();
        return;
    };
    let pauser = shared
        .pauser
        .lock()
        .expect("pauser lock")
        .expect("pauser set at start");
    let length = shared.pause_length();
    if !pause_client(shared.history(), pauser, process, pid, length, json!({})).await {
        *shared.pauser.lock().expect("pauser lock") = Some(shared.processes.fresh());
    }
    shared.end_zombie();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_resource_fences_reads_and_writes_unless_unsafe() {
        let r = Resource::new(true);
        assert_eq!(r.read(5), Ok((0, 0)));
        assert_eq!(r.write(5, 1), Ok(1));
        // A newer holder's read alone stops the older one's write.
        assert_eq!(r.read(7), Ok((1, 1)));
        assert_eq!(r.write(5, 2), Err(7));
        assert_eq!(r.read(6), Err(7));
        assert_eq!(r.write(7, 2), Ok(2));
        let u = Resource::new(false);
        assert_eq!(u.read(7), Ok((0, 0)));
        assert_eq!(u.write(5, 1), Ok(1));
    }
}
