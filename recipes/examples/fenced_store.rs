//! Why a lock needs fencing tokens, in one run.
//!
//! A small in-process "store" accepts a write only through a
//! [`FencedResource`]: the write must carry a fencing token at least as new
//! as any it has accepted. Then:
//!
//! 1. holder A takes the lock (token `tA`) and "pauses" — a simulated GC
//!    pause: it stops heartbeating past its session timeout, so the server
//!    expires its session and deletes its lock node;
//! 2. B acquires the lock (token `tB > tA`) and writes;
//! 3. A wakes up, still believing it holds the lock, and writes: the store
//!    refuses the write as stale.
//!
//! The pause is real: A runs on a runtime of its own, on a thread of its
//! own, and that thread blocks — its client's heartbeats stop with it, as
//! they would in a stop-the-world pause. A blocks until B has written, and
//! B can only get the lock once the server has expired A's session.
//!
//! It starts nothing itself: run a server first (`warden serve`), then
//! `cargo run -p warden-recipes --example fenced_store`
//! (`WARDEN_SERVERS` picks the servers; default `127.0.0.1:7000`).

use std::collections::HashMap;
use std::time::Duration;

use warden_client::{Client, ConnectOptions};
use warden_recipes::{FencedResource, Mutex, Stale};

/// The lock both writers take.
const LOCK_PATH: &str = "/locks/fenced-store-example";
/// The key both write.
const KEY: &str = "balance";
/// A's session timeout: short, so that its "pause" outlives it quickly.
const SESSION_TIMEOUT: Duration = Duration::from_millis(2_000);
/// How long B waits for the lock at most.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(30);

/// The resource server: data, plus the fencing check in front of it.
#[derive(Default)]
struct Store {
    fence: FencedResource,
    data: std::sync::Mutex<HashMap<String, String>>,
}

impl Store {
    fn write(&self, key: &str, value: &str, token: u64) -> Result<(), Stale> {
        // Check and write in one step: nothing can slip in between.
        self.fence.write_with(key, token, || {
            let mut data = self.data.lock().unwrap_or_else(|e| e.into_inner());
            data.insert(key.to_string(), value.to_string());
        })
    }

    fn read(&self, key: &str) -> Option<String> {
        let data = self.data.lock().unwrap_or_else(|e| e.into_inner());
        data.get(key).cloned()
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let servers = std::env::var("WARDEN_SERVERS").unwrap_or_else(|_| "127.0.0.1:7000".into());
    let store = std::sync::Arc::new(Store::default());
    let (a_holds, a_holds_rx) = std::sync::mpsc::channel::<()>();
    let (b_wrote, b_wrote_rx) = std::sync::mpsc::channel::<()>();

    let a = std::thread::spawn({
        let (servers, store) = (servers.clone(), store.clone());
        move || -> Result<(), String> {
            let runtime = runtime().map_err(|e| e.to_string())?;
            let guard = runtime
                .block_on(async {
                    let client = Client::connect(&servers, options())
                        .await
                        .map_err(warden_recipes::Error::from)?;
                    let lock = Mutex::new(client, LOCK_PATH)?;
                    lock.acquire().await
                })
                .map_err(|e| e.to_string())?;
            let token = guard.fencing_token();
            println!("A: acquired the lock, fencing token {token}");
            store
                .write(KEY, "100 (written by A)", token)
                .map_err(|e| e.to_string())?;
            println!("A: wrote {KEY} = 100");
            println!("A: pausing (simulated stop-the-world GC pause) ...");
            let _ = a_holds.send(());
            // Blocking the runtime's only thread: no heartbeats from here on.
            let _ = b_wrote_rx.recv();
            println!("A: wakes up, still thinks it holds the lock, writes with token {token}");
            match store.write(KEY, "90 (zombie write by A)", token) {
                Ok(()) => println!("A: write ACCEPTED (this should never happen)"),
                Err(stale) => println!("store: refused A's write: {stale}"),
            }
            let lost = runtime.block_on(guard.lost());
            println!("A: finds out it had lost the lock: {lost}");
            drop(guard);
            Ok(())
        }
    });

    let runtime = runtime()?;
    runtime.block_on(async {
        a_holds_rx
            .recv()
            .map_err(|_| "A failed before taking the lock")?;
        let client = Client::connect(&servers, options()).await?;
        let lock = Mutex::new(client.clone(), LOCK_PATH)?;
        println!("B: waiting for the lock (until A's session expires) ...");
        let guard = lock
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .await?
            .ok_or("B did not get the lock in time")?;
        let token = guard.fencing_token();
        println!("B: acquired the lock, fencing token {token}");
        store.write(KEY, "250 (written by B)", token)?;
        println!("B: wrote {KEY} = 250");
        let _ = b_wrote.send(());
        let a_result = a.join().map_err(|_| "A panicked")?;
        a_result?;
        println!("store: {KEY} = {}", store.read(KEY).unwrap_or_default());
        guard.release().await?;
        client.close().await?;
        Ok(())
    })
}

fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

fn options() -> ConnectOptions {
    ConnectOptions {
        session_timeout: SESSION_TIMEOUT,
        ..ConnectOptions::default()
    }
}
