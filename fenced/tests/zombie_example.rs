//! Runs the zombie-writer example (`examples/zombie_writer.rs`, compiled
//! in here as a module) against a real server and a real store, and checks
//! what it saw: A's late write refused by both, B's write standing.

mod common;

#[allow(dead_code)]
#[path = "../examples/zombie_writer.rs"]
mod zombie_writer;

use common::Fenced;
use serde_json::json;
use warden_fenced::FencedSqlError;
use warden_testkit::Server;

#[test]
fn the_zombie_writer_example_is_fenced_out() {
    let server = Server::start();
    let store = Fenced::start();
    let outcome = zombie_writer::run(
        server.addr(),
        store.addr(),
        &store.dir().join("accounts.sqlite"),
    )
    .unwrap_or_else(|e| panic!("the example failed: {e}"));
    assert!(outcome.token_b > outcome.token_a, "{outcome:?}");
    assert_eq!(
        (outcome.store_refusal.offered, outcome.store_refusal.highest),
        (outcome.token_a, outcome.token_b)
    );
    match &outcome.sql_refusal {
        FencedSqlError::Stale {
            offered, highest, ..
        } => assert_eq!((*offered, *highest), (outcome.token_a, outcome.token_b)),
        other => panic!("not a stale refusal: {other:?}"),
    }
    assert_eq!(outcome.store_record.value, json!(250));
    assert_eq!(outcome.store_record.fencing_token, outcome.token_b);
    assert_eq!(outcome.row, (250, outcome.token_b as i64));
}
