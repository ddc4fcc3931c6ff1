//! The lock API's gateway (issue 26, attacks 5 to 7), tried against real
//! `warden` processes:
//!
//! - a lease's `client_id` is its holder's secret: a second caller's 409,
//!   a state read and the listing show a label, never the `client_id`,
//!   and a label presented as a `client_id` proves nothing;
//! - with authentication, a lease belongs to the identity that took it:
//!   another identity presenting the same `client_id` neither gets the
//!   grant nor renews nor releases it;
//! - a flood of never-seen Basic credentials opens no gateway session
//!   (no Raft proposal: `warden_gateway_sessions_opened_total` stays put)
//!   while a holder keeps renewing;
//! - a TTL below `--min-lock-ttl-ms` is refused, naming the field and the
//!   minimum, and changes nothing.

#[path = "../common/http.rs"]
#[allow(dead_code)]
mod http;

use std::thread;

use base64::Engine as _;
use serde_json::{json, Value};
use warden_protocol::auth::digest_id;
use warden_server::http::holder::label_of;
use warden_testkit::{Server, ServerOptions};

/// A secret as a careless caller picks one (the example).
const SECRET: &str = "worker-secret-7";

fn basic(credentials: &str) -> (&'static str, String) {
    (
        "Authorization",
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(credentials)
        ),
    )
}

/// One request with `headers`; (status, body text).
fn call(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: Option<Value>,
) -> (u16, String) {
    let body = body.map(|b| b.to_string());
    http::request_with(addr, method, path, headers, body.as_deref())
}

fn json_of(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::Null)
}

/// A counter's value on `/metrics` (`None`: not there).
fn metric(addr: &str, name: &str) -> Option<f64> {
    let (status, text) = http::request(addr, "GET", "/metrics", None);
    assert_eq!(status, 200, "{text}");
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn a_holders_client_id_is_shown_to_nobody_else() {
    let server = Server::start();
    let http = server.http_addr();
    let acquire =
        |client_id: &str| json!({"client_id": client_id, "ttl_ms": 30_000, "wait_timeout_ms": 0});
    let (st, granted) = call(
        http,
        "POST",
        "/api/v1/locks/payments/acquire",
        &[],
        Some(acquire(SECRET)),
    );
    assert_eq!(st, 200, "{granted}");
    let granted = json_of(&granted);
    // The holder's own answer echoes what it sent.
    assert_eq!(granted["client_id"], SECRET, "{granted}");
    let token = granted["fencing_token"].as_u64().unwrap();
    let label = label_of(None, SECRET);

    // A second caller: refused, shown the holder's label and token only.
    let (st, refused) = call(
        http,
        "POST",
        "/api/v1/locks/payments/acquire",
        &[],
        Some(acquire("worker-8")),
    );
    assert_eq!(st, 409, "{refused}");
    assert!(
        !refused.contains(SECRET),
        "a 409 shows the secret: {refused}"
    );
    let refused = json_of(&refused);
    assert_eq!(refused["holder"]["label"], label.as_str(), "{refused}");
    assert_eq!(refused["holder"]["fencing_token"], token, "{refused}");

    // A state read and the listing (both forms) show the same.
    let (st, state) = call(http, "GET", "/api/v1/locks/payments", &[], None);
    assert_eq!(st, 200, "{state}");
    assert!(!state.contains(SECRET), "a state read shows it: {state}");
    assert_eq!(json_of(&state)["holder"]["label"], label.as_str());
    for path in [
        "/api/v1/locks",
        "/api/v1/locks?waiters=list&consistency=local",
    ] {
        let (st, listing) = call(http, "GET", path, &[], None);
        assert_eq!(st, 200, "{listing}");
        assert!(!listing.contains(SECRET), "{path} shows it: {listing}");
        assert!(listing.contains(&label), "{path}: {listing}");
    }

    // The label proves nothing: presented as a client id it neither takes
    // the grant nor renews nor releases it.
    let (st, body) = call(
        http,
        "POST",
        "/api/v1/locks/payments/acquire",
        &[],
        Some(acquire(&label)),
    );
    assert_eq!(st, 409, "{body}");
    for op in ["renew", "release"] {
        let body = json!({"client_id": label, "fencing_token": token, "ttl_ms": 30_000});
        let (st, answer) = call(
            http,
            "POST",
            &format!("/api/v1/locks/payments/{op}"),
            &[],
            Some(body),
        );
        assert_eq!(st, 409, "{op}: {answer}");
    }

    // The holder's retry after a lost answer, and its re-entry: the same
    // grant.
    let (st, again) = call(
        http,
        "POST",
        "/api/v1/locks/payments/acquire",
        &[],
        Some(acquire(SECRET)),
    );
    assert_eq!(st, 200, "{again}");
    assert_eq!(json_of(&again)["fencing_token"], token, "{again}");
    let renew = json!({"client_id": SECRET, "fencing_token": token, "ttl_ms": 30_000});
    let (st, renewed) = call(
        http,
        "POST",
        "/api/v1/locks/payments/renew",
        &[],
        Some(renew),
    );
    assert_eq!(st, 200, "{renewed}");
}

#[test]
fn another_identity_presenting_the_holders_client_id_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    let listed = format!(
        "{}\n{}\n",
        digest_id("alice:alice-pw").unwrap(),
        digest_id("mallory:mallory-pw").unwrap()
    );
    std::fs::write(&users, listed).unwrap();
    let server = Server::start_with(ServerOptions {
        extra_args: vec!["--auth-users".into(), users.display().to_string()],
        ..Default::default()
    });
    let http = server.http_addr();
    let alice = [basic("alice:alice-pw")];
    let mallory = [basic("mallory:mallory-pw")];
    let acquire = json!({"client_id": "shared-7", "ttl_ms": 30_000, "wait_timeout_ms": 0});
    let (st, granted) = call(
        http,
        "POST",
        "/api/v1/locks/jobs/acquire",
        &alice,
        Some(acquire.clone()),
    );
    assert_eq!(st, 200, "{granted}");
    let token = json_of(&granted)["fencing_token"].as_u64().unwrap();

    // Mallory knows the client id (and the token): not the holder.
    let (st, body) = call(
        http,
        "POST",
        "/api/v1/locks/jobs/acquire",
        &mallory,
        Some(acquire.clone()),
    );
    assert_eq!(st, 409, "another identity got the grant: {body}");
    for op in ["renew", "release"] {
        let body = json!({"client_id": "shared-7", "fencing_token": token, "ttl_ms": 30_000});
        let (st, answer) = call(
            http,
            "POST",
            &format!("/api/v1/locks/jobs/{op}"),
            &mallory,
            Some(body),
        );
        assert_eq!(st, 409, "{op} by another identity: {answer}");
    }
    // Anonymous with the same client id: someone else too.
    let (st, body) = call(
        http,
        "POST",
        "/api/v1/locks/jobs/acquire",
        &[],
        Some(acquire.clone()),
    );
    assert_eq!(st, 409, "{body}");

    // Nothing changed: alice still holds it with her token, and renews.
    let (st, state) = call(http, "GET", "/api/v1/locks/jobs", &alice, None);
    assert_eq!(st, 200, "{state}");
    let state = json_of(&state);
    assert_eq!(state["holder"]["fencing_token"], token, "{state}");
    let alice_id = digest_id("alice:alice-pw").unwrap();
    assert_eq!(
        state["holder"]["label"],
        label_of(Some(&alice_id), "shared-7").as_str()
    );
    let renew = json!({"client_id": "shared-7", "fencing_token": token, "ttl_ms": 30_000});
    let (st, body) = call(
        http,
        "POST",
        "/api/v1/locks/jobs/renew",
        &alice,
        Some(renew),
    );
    assert_eq!(st, 200, "{body}");
    let (st, again) = call(
        http,
        "POST",
        "/api/v1/locks/jobs/acquire",
        &alice,
        Some(acquire),
    );
    assert_eq!(st, 200, "{again}");
    assert_eq!(json_of(&again)["fencing_token"], token, "{again}");
}

/// Flooding clients, and requests each sends.
const FLOODERS: usize = 8;
const FLOOD_REQUESTS: usize = 25;

#[test]
fn a_flood_of_unseen_credentials_opens_no_session() {
    // No --auth-users: before the fix, every user:password was a fresh
    // identity, and a session (Raft writes) of its own.
    let server = Server::start();
    let http = server.http_addr().to_string();
    let acquire = json!({"client_id": "holder-1", "ttl_ms": 30_000, "wait_timeout_ms": 0});
    let (st, granted) = call(
        &http,
        "POST",
        "/api/v1/locks/jobs/acquire",
        &[],
        Some(acquire),
    );
    assert_eq!(st, 200, "{granted}");
    let token = json_of(&granted)["fencing_token"].as_u64().unwrap();
    let opened = "warden_gateway_sessions_opened_total";
    let refused = "warden_gateway_credentials_refused_total";
    let opened_before = metric(&http, opened);
    let refused_before = metric(&http, refused);
    let sessions_before = metric(&http, "warden_sessions").expect("warden_sessions");

    let flood: Vec<_> = (0..FLOODERS)
        .map(|t| {
            let http = http.clone();
            thread::spawn(move || {
                for i in 0..FLOOD_REQUESTS {
                    let who = [basic(&format!("flood-{t}-{i}:pw-{t}-{i}"))];
                    let body = json!({"client_id": format!("f{t}"), "ttl_ms": 30_000});
                    let (st, answer) = call(
                        &http,
                        "POST",
                        "/api/v1/locks/jobs/acquire",
                        &who,
                        Some(body),
                    );
                    assert_eq!(st, 401, "an unseen credential: {answer}");
                    assert!(answer.contains("unknown credentials"), "{answer}");
                }
            })
        })
        .collect();
    // The holder keeps renewing all along.
    let mut renewals = 0;
    while !flood.iter().all(|f| f.is_finished()) || renewals == 0 {
        let body = json!({"client_id": "holder-1", "fencing_token": token, "ttl_ms": 30_000});
        let (st, answer) = call(&http, "POST", "/api/v1/locks/jobs/renew", &[], Some(body));
        assert_eq!(st, 200, "the holder's renewal under the flood: {answer}");
        renewals += 1;
    }
    for f in flood {
        f.join().expect("a flooding client failed");
    }
    let sessions_after = metric(&http, "warden_sessions").expect("warden_sessions");
    assert!(
        sessions_after <= sessions_before,
        "sessions went from {sessions_before} to {sessions_after}"
    );
    let opened_before = opened_before.expect("the gateway counts its sessions");
    assert_eq!(
        metric(&http, opened),
        Some(opened_before),
        "unseen credentials opened gateway sessions"
    );
    let refused_before = refused_before.expect("the gateway counts refusals");
    assert_eq!(
        metric(&http, refused),
        Some(refused_before + (FLOODERS * FLOOD_REQUESTS) as f64)
    );
}

#[test]
fn a_ttl_below_the_minimum_is_refused_and_changes_nothing() {
    let server = Server::start();
    let http = server.http_addr();
    // Below the default minimum (1 s), each contract's field by its name.
    for (path, body, field) in [
        (
            "/api/v1/locks/tiny/acquire",
            json!({"client_id": "w", "ttl_ms": 1, "wait_timeout_ms": 0}),
            "ttl_ms",
        ),
        (
            "/api/v1/locks/acquire",
            json!({"lock_key": "tiny", "client_id": "w", "lease_time_ms": 999}),
            "lease_time_ms",
        ),
    ] {
        let (st, answer) = call(http, "POST", path, &[], Some(body));
        assert_eq!(st, 400, "{answer}");
        let error = json_of(&answer)["error"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(error.contains(field) && error.contains("1000"), "{error}");
    }
    let (st, state) = call(http, "GET", "/api/v1/locks/tiny", &[], None);
    assert_eq!(st, 404, "a refused acquire left a lease: {state}");

    // A renewal below it leaves the lease as it was.
    let acquire = json!({"client_id": "w", "ttl_ms": 30_000, "wait_timeout_ms": 0});
    let (st, granted) = call(
        http,
        "POST",
        "/api/v1/locks/tiny/acquire",
        &[],
        Some(acquire),
    );
    assert_eq!(st, 200, "{granted}");
    let granted = json_of(&granted);
    let token = granted["fencing_token"].as_u64().unwrap();
    let renew = json!({"client_id": "w", "fencing_token": token, "ttl_ms": 5});
    let (st, answer) = call(http, "POST", "/api/v1/locks/tiny/renew", &[], Some(renew));
    assert_eq!(st, 400, "{answer}");
    assert!(
        answer.contains("ttl_ms") && answer.contains("1000"),
        "{answer}"
    );
    let (st, state) = call(http, "GET", "/api/v1/locks/tiny", &[], None);
    assert_eq!(st, 200, "{state}");
    let state = json_of(&state);
    assert_eq!(state["holder"]["fencing_token"], token, "{state}");
    assert_eq!(
        state["holder"]["expires_at_ms"], granted["expires_at_ms"],
        "{state}"
    );
}
