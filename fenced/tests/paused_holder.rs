//! The whole of fencing with real processes: a 3-node Warden cluster (its
//! HTTP lock API), a `warden-fenced` store process and a SQLite database
//! file.
//!
//! Holder A takes a lease with a short TTL and writes; then it pauses: it
//! neither renews nor writes, past its lease. B asks for the lease through
//! another node and is granted it (a higher token) only once A's lease has
//! lapsed; B writes. A wakes and writes late with its old token: the store
//! answers 409 and the fenced SQL update refuses it, and neither changes
//! what B wrote.

mod common;

use std::path::Path;
use std::time::Duration;

use common::Fenced;
use rusqlite::Connection;
use serde_json::{json, Value};
use warden_fenced::{request, ClientError, FencedSql, FencedSqlError, Record};
use warden_testkit::Cluster;

/// The lease both holders take.
const LOCK: &str = "fenced-account";
/// A's lease: short, so that its pause outlives it.
const TTL_SHORT_MS: u64 = 1_000;
/// B's lease: never lapses during the test.
const TTL_LONG_MS: u64 = 60_000;
/// How long B waits for A's lease to lapse, at most.
const WAIT_MS: u64 = 20_000;
const ACCOUNT: &str = "acct-1";

/// Acquires the lease through the HTTP lock API at `http`; the token.
async fn acquire(http: &str, client_id: &str, ttl_ms: u64, wait_ms: u64) -> u64 {
    let body = json!({"client_id": client_id, "ttl_ms": ttl_ms, "wait_timeout_ms": wait_ms});
    let path = format!("/api/v1/locks/{LOCK}/acquire");
    let (status, answer) = request(http, "POST", &path, Some(&body.to_string()))
        .await
        .expect("the lock API answers");
    assert_eq!(status, 200, "{client_id}'s acquire: {answer}");
    answer["fencing_token"]
        .as_u64()
        .unwrap_or_else(|| panic!("no fencing_token in {answer}"))
}

/// Seed 004's kind of table: each row with the highest token that
/// updated it.
fn create_accounts(path: &Path) {
    let conn = Connection::open(path).unwrap();
    conn.execute_batch(
        "CREATE TABLE accounts (
             id TEXT PRIMARY KEY,
             balance INTEGER NOT NULL,
             last_fencing_token BIGINT NOT NULL DEFAULT 0
         );
         INSERT INTO accounts (id, balance) VALUES ('acct-1', 100);",
    )
    .unwrap();
}

/// A connection of one writer (each holder has its own, as separate
/// processes would).
fn connect(path: &Path) -> Connection {
    let conn = Connection::open(path).unwrap();
    conn.busy_timeout(Duration::from_secs(10)).unwrap();
    conn
}

fn account(conn: &Connection) -> (i64, i64) {
    conn.query_row(
        "SELECT balance, last_fencing_token FROM accounts WHERE id = ?1",
        [ACCOUNT],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .unwrap()
}

#[tokio::test]
async fn a_paused_holders_late_write_is_refused_by_the_store_and_by_sql() {
    let cluster = Cluster::start(3);
    let store = Fenced::start();
    let db = store.dir().join("accounts.sqlite");
    create_accounts(&db);
    let accounts = FencedSql::new("accounts", "id").unwrap();
    let client = store.client();

    // A holds the lease and writes, to the store and to the database.
    let token_a = acquire(cluster.http_addr(1), "A", TTL_SHORT_MS, 0).await;
    let conn_a = connect(&db);
    client
        .write("balance", json!(90), token_a, Some("A"))
        .await
        .expect("A's write while it holds the lease");
    accounts
        .update(&conn_a, ACCOUNT, token_a, "balance = balance - 10", &[])
        .expect("A's update while it holds the lease");

    // A pauses. B, through another node, is granted the lease only once
    // A's has lapsed.
    let token_b = acquire(cluster.http_addr(2), "B", TTL_LONG_MS, WAIT_MS).await;
    assert!(token_b > token_a, "B's token {token_b} after A's {token_a}");
    let conn_b = connect(&db);
    client
        .write("balance", json!(250), token_b, Some("B"))
        .await
        .expect("B's write");
    accounts
        .update(&conn_b, ACCOUNT, token_b, "balance = :b", &[(":b", &250)])
        .expect("B's update");

    // A wakes up: its lease is gone (a renewal says so)...
    let renew = json!({"client_id": "A", "fencing_token": token_a, "ttl_ms": TTL_SHORT_MS});
    let path = format!("/api/v1/locks/{LOCK}/renew");
    let (status, answer) = request(
        cluster.http_addr(3),
        "POST",
        &path,
        Some(&renew.to_string()),
    )
    .await
    .unwrap();
    assert_eq!(status, 409, "A's renewal after its pause: {answer}");

    // ...but it writes first, as a zombie would. The store refuses it...
    match client.write("balance", json!(80), token_a, Some("A")).await {
        Err(ClientError::Stale(stale)) => {
            assert_eq!(stale.key, "balance");
            assert_eq!((stale.offered, stale.highest), (token_a, token_b));
        }
        other => panic!("the store took A's late write: {other:?}"),
    }
    // ...and so does the database.
    match accounts.update(&conn_a, ACCOUNT, token_a, "balance = balance - 10", &[]) {
        Err(FencedSqlError::Stale {
            key,
            offered,
            highest,
            ..
        }) => {
            assert_eq!(key, ACCOUNT);
            assert_eq!((offered, highest), (token_a, token_b));
        }
        other => panic!("the database took A's late update: {other:?}"),
    }

    // What B wrote stands, in both.
    assert_eq!(
        client.read("balance").await.unwrap(),
        Some(Record {
            value: json!(250),
            fencing_token: token_b,
            client_id: Some("B".into())
        })
    );
    assert_eq!(account(&connect(&db)), (250, token_b as i64));
    let (_, answer): (u16, Value) = client
        .request("GET", "/v1/keys/balance", None)
        .await
        .unwrap();
    assert_eq!(answer["fencing_token"], token_b);
}
