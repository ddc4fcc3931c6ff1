//! Why a lock needs fencing tokens, in one run, against a real Warden
//! server, a real `warden-fenced` store and a SQLite database file.
//!
//! 1. Holder A takes a lock (the session lock recipe, token `tA`) and
//!    writes to the store and to the database.
//! 2. A "pauses": a stop-the-world pause, simulated by blocking the thread
//!    its client runs on. Its heartbeats stop with it, so the server
//!    expires its session past the session timeout and deletes its lock
//!    node.
//! 3. B acquires the lock (token `tB > tA`) and writes.
//! 4. A wakes up, still believing it holds the lock, and writes: the store
//!    answers 409 and the fenced SQL update refuses it, both naming `tB`.
//!
//! Run a server and a store first, then the example:
//!
//! ```text
//! warden serve &
//! warden-fenced &
//! cargo run -p warden-fenced --example zombie_writer
//! ```
//!
//! `WARDEN_SERVERS` picks the servers (default `127.0.0.1:7000`),
//! `WARDEN_FENCED_ADDR` the store (default `127.0.0.1:7500`). It exits
//! non-zero if a late write was accepted. A test runs it in CI
//! (`fenced/tests/zombie_example.rs`).

use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::Connection;
use serde_json::json;
use warden_client::{Client, ConnectOptions};
use warden_fenced::{ClientError, FencedSql, FencedSqlError, Record, Stale, StoreClient};
use warden_recipes::Mutex;

/// The lock both writers take.
const LOCK_PATH: &str = "/locks/zombie-writer-example";
/// A's session timeout: short, so that its pause outlives it quickly.
const SESSION_TIMEOUT: Duration = Duration::from_millis(2_000);
/// How long B waits for the lock at most.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(30);
/// The database row both update.
const ACCOUNT: &str = "acct-1";

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What a run saw.
#[derive(Debug)]
pub struct Outcome {
    pub token_a: u64,
    pub token_b: u64,
    /// The store's answer to A's late write.
    pub store_refusal: Stale,
    /// The database's answer to A's late update.
    pub sql_refusal: FencedSqlError,
    /// The store's record afterwards.
    pub store_record: Record,
    /// The row afterwards: (balance, last_fencing_token).
    pub row: (i64, i64),
}

fn main() -> Result<(), BoxError> {
    let servers = std::env::var("WARDEN_SERVERS").unwrap_or_else(|_| "127.0.0.1:7000".into());
    let store = std::env::var("WARDEN_FENCED_ADDR").unwrap_or_else(|_| "127.0.0.1:7500".into());
    let dir = std::env::temp_dir().join(format!("zombie-writer-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let outcome = run(&servers, &store, &dir.join("accounts.sqlite"));
    let _ = std::fs::remove_dir_all(&dir);
    let outcome = outcome?;
    println!(
        "store: {:?} = {} (token {}); database: balance {} (token {})",
        "balance",
        outcome.store_record.value,
        outcome.store_record.fencing_token,
        outcome.row.0,
        outcome.row.1
    );
    Ok(())
}

/// Runs the scenario against Warden `servers`, the store at `store_addr`
/// and a new SQLite database at `sqlite`. Err if anything failed,
/// including a late write being accepted.
pub fn run(servers: &str, store_addr: &str, sqlite: &Path) -> Result<Outcome, BoxError> {
    // A key of its own per run: tokens are only comparable within one
    // Warden cluster, and a store may outlive a test cluster.
    let stamp = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis();
    let key = format!("zombie-writer/{stamp}/balance");
    let conn = Connection::open(sqlite)?;
    conn.execute_batch(
        "CREATE TABLE accounts (
             id TEXT PRIMARY KEY,
             balance INTEGER NOT NULL,
             last_fencing_token BIGINT NOT NULL DEFAULT 0
         );
         INSERT INTO accounts (id, balance) VALUES ('acct-1', 100);",
    )?;
    drop(conn);
    let (a_holds, a_holds_rx) = mpsc::channel::<u64>();
    let (b_wrote, b_wrote_rx) = mpsc::channel::<()>();

    let a = std::thread::spawn({
        let (servers, store, key) = (
            servers.to_string(),
            StoreClient::new(store_addr),
            key.clone(),
        );
        let sqlite = sqlite.to_path_buf();
        move || -> Result<(Stale, FencedSqlError), String> {
            let e = |e: &dyn std::fmt::Display| e.to_string();
            let runtime = runtime().map_err(|x| e(&x))?;
            let db = database(&sqlite).map_err(|x| e(&x))?;
            let accounts = FencedSql::new("accounts", "id").map_err(|x| e(&x))?;
            let guard = runtime
                .block_on(async {
                    let client = Client::connect(&servers, options())
                        .await
                        .map_err(warden_recipes::Error::from)?;
                    Mutex::new(client, LOCK_PATH)?.acquire().await
                })
                .map_err(|x| e(&x))?;
            let token = guard.fencing_token();
            println!("A: acquired the lock, fencing token {token}");
            runtime
                .block_on(store.write(&key, json!(90), token, Some("A")))
                .map_err(|x| e(&x))?;
            accounts
                .update(&db, ACCOUNT, token, "balance = balance - 10", &[])
                .map_err(|x| e(&x))?;
            println!("A: wrote balance = 90 to the store and the database");
            println!("A: pausing (a simulated stop-the-world pause) ...");
            let _ = a_holds.send(token);
            // Blocking the runtime's only thread: no heartbeats from here on.
            let _ = b_wrote_rx.recv();
            println!("A: wakes up, still thinks it holds the lock, writes with token {token}");
            let store_refusal =
                match runtime.block_on(store.write(&key, json!(80), token, Some("A"))) {
                    Err(ClientError::Stale(stale)) => stale,
                    Ok(()) => return Err("the store ACCEPTED A's late write".into()),
                    Err(other) => return Err(e(&other)),
                };
            println!("store: refused A's write: {store_refusal}");
            let sql_refusal =
                match accounts.update(&db, ACCOUNT, token, "balance = balance - 10", &[]) {
                    Err(stale @ FencedSqlError::Stale { .. }) => stale,
                    Ok(()) => return Err("the database ACCEPTED A's late update".into()),
                    Err(other) => return Err(e(&other)),
                };
            println!("database: refused A's update: {sql_refusal}");
            let lost = runtime.block_on(guard.lost());
            println!("A: finds out it had lost the lock: {lost}");
            drop(guard);
            Ok((store_refusal, sql_refusal))
        }
    });

    let runtime = runtime()?;
    let store = StoreClient::new(store_addr);
    runtime.block_on(async {
        let Ok(token_a) = a_holds_rx.recv() else {
            let why = a
                .join()
                .map_err(|_| "A panicked")?
                .err()
                .unwrap_or_default();
            return Err(format!("A failed before its pause: {why}").into());
        };
        let client = Client::connect(servers, options()).await?;
        let lock = Mutex::new(client.clone(), LOCK_PATH)?;
        println!("B: waiting for the lock (until A's session expires) ...");
        let guard = lock
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .await?
            .ok_or("B did not get the lock in time")?;
        let token_b = guard.fencing_token();
        println!("B: acquired the lock, fencing token {token_b}");
        store.write(&key, json!(250), token_b, Some("B")).await?;
        let db = database(sqlite)?;
        FencedSql::new("accounts", "id")?.update(
            &db,
            ACCOUNT,
            token_b,
            "balance = :b",
            &[(":b", &250)],
        )?;
        println!("B: wrote balance = 250 to the store and the database");
        let _ = b_wrote.send(());
        let (store_refusal, sql_refusal) = a.join().map_err(|_| "A panicked")??;
        let store_record = store.read(&key).await?.ok_or("the store lost the key")?;
        let row = db.query_row(
            "SELECT balance, last_fencing_token FROM accounts WHERE id = ?1",
            [ACCOUNT],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        guard.release().await?;
        client.close().await?;
        Ok(Outcome {
            token_a,
            token_b,
            store_refusal,
            sql_refusal,
            store_record,
            row,
        })
    })
}

fn database(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(10))?;
    Ok(conn)
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
