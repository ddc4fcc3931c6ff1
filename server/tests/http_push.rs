//! The lock API's push doors against a real `warden` (docs/http-push.md):
//! waiting for a grant over Server-Sent Events and over a WebSocket, the
//! FIFO place kept across a reconnect (and given up past the grace
//! period), the holder watch resuming from a version, and bad input.
//!
//! Every wait here is for an event with a deadline (`common::push`), or
//! for a condition (`wait_until`): no sleeps, no timing asserted.

mod common;

use std::time::Duration;

use common::http::{get_json, post, request};
use common::push::{sse, ws, ws_close, ws_next, ws_send, Sse};
use serde_json::{json, Value};
use warden_server::http::holder::label_of;
use warden_testkit::{wait_until, Cluster, Server};

/// The fields of every grant (the acquire's 200 answer), plus `type`.
const GRANTED_FIELDS: &[&str] = &[
    "acquired",
    "client_id",
    "expires_at",
    "expires_at_epoch_ms",
    "expires_at_ms",
    "fencing_token",
    "lock_key",
    "type",
];

/// A lease taken with a plain POST; its fencing token.
fn acquire(http: &str, lock: &str, client: &str) -> u64 {
    let (st, a) = post(
        http,
        &format!("/api/v1/locks/{lock}/acquire"),
        json!({"client_id": client, "ttl_ms": 60000}),
    );
    assert_eq!(st, 200, "{a}");
    a["fencing_token"].as_u64().expect("a token")
}

fn release(http: &str, lock: &str, client: &str, token: u64) {
    let (st, a) = post(
        http,
        &format!("/api/v1/locks/{lock}/release"),
        json!({"client_id": client, "fencing_token": token}),
    );
    assert_eq!(st, 200, "{a}");
}

/// The anonymous holder of `label` among the client ids these tests use
/// (the server shows a holder by its label only, never its client id).
fn named(label: &str) -> String {
    ["a", "b", "c", "d"]
        .into_iter()
        .find(|id| label_of(None, id) == label)
        .unwrap_or(label)
        .to_string()
}

/// The holder's client id, and the number of waiters, by a (linearizable)
/// state read; `None` when free.
fn holder(http: &str, lock: &str) -> Option<(String, u64)> {
    let (st, s) = get_json(http, &format!("/api/v1/locks/{lock}"));
    match st {
        404 => None,
        200 => Some((
            named(s["holder"]["label"].as_str().unwrap()),
            s["waiters"].as_u64().unwrap(),
        )),
        other => panic!("state read answered {other}: {s}"),
    }
}

fn sse_wait(http: &str, lock: &str, client: &str, extra: &str) -> Sse {
    let path =
        format!("/api/v1/locks/{lock}/acquire/events?client_id={client}&ttl_ms=60000{extra}");
    sse(http, &path, &[]).unwrap_or_else(|(st, body)| panic!("{path}: {st} {body}"))
}

fn ws_wait(
    http: &str,
    lock: &str,
    client: &str,
    extra: Value,
) -> tungstenite::WebSocket<std::net::TcpStream> {
    let mut socket = ws(http, &format!("/api/v1/locks/{lock}/ws"));
    let mut ask = json!({"op": "acquire", "client_id": client, "ttl_ms": 60000});
    for (k, v) in extra.as_object().unwrap() {
        ask[k] = v.clone();
    }
    ws_send(&mut socket, ask);
    socket
}

/// Checks a `queued` message.
fn check_queued(m: &Value, lock: &str, client: &str, resumed: bool) {
    assert_eq!(m["type"], "queued", "{m}");
    assert_eq!(m["lock_key"], lock, "{m}");
    assert_eq!(m["client_id"], client, "{m}");
    assert_eq!(m["ttl_ms"], 60000, "{m}");
    assert_eq!(m["resumed"], resumed, "{m}");
}

/// Checks a `granted` message field by field; its token.
fn check_granted(m: &Value, lock: &str, client: &str) -> u64 {
    assert_eq!(m["type"], "granted", "{m}");
    let mut fields: Vec<&str> = m.as_object().unwrap().keys().map(String::as_str).collect();
    fields.sort_unstable();
    assert_eq!(fields, GRANTED_FIELDS, "{m}");
    assert_eq!(m["acquired"], true, "{m}");
    assert_eq!(m["lock_key"], lock, "{m}");
    assert_eq!(m["client_id"], client, "{m}");
    assert_eq!(m["expires_at_ms"], m["expires_at_epoch_ms"], "{m}");
    let expires = m["expires_at_ms"].as_i64().expect("expires_at_ms");
    let rfc = m["expires_at"].as_str().expect("expires_at");
    let parsed = humantime::parse_rfc3339(rfc).expect("RFC 3339");
    let parsed = parsed.duration_since(std::time::UNIX_EPOCH).unwrap();
    assert_eq!(parsed.as_millis() as i64, expires, "{m}");
    m["fencing_token"].as_u64().expect("a token")
}

#[test]
fn sse_and_websocket_waiters_are_told_of_their_grant() {
    let server = Server::start();
    let http = server.http_addr();
    let a = acquire(http, "jobs", "a");

    // B waits on SSE, then C on a WebSocket, behind A.
    let mut b = sse_wait(http, "jobs", "b", "");
    let queued = b.expect();
    assert_eq!(queued.event, "queued");
    check_queued(&queued.data, "jobs", "b", false);
    let mut c = ws_wait(http, "jobs", "c", json!({}));
    check_queued(&ws_next(&mut c), "jobs", "c", false);
    assert_eq!(holder(http, "jobs"), Some(("a".to_string(), 2)));

    // A releases: B is told, with a later token, and holds.
    release(http, "jobs", "a", a);
    let granted = b.expect();
    assert_eq!(granted.event, "granted");
    let tb = check_granted(&granted.data, "jobs", "b");
    assert!(tb > a, "{tb} after {a}");
    assert!(b.next().is_none(), "the stream ends after the grant");
    assert_eq!(holder(http, "jobs"), Some(("b".to_string(), 1)));

    // B releases over HTTP: C is told on its socket, and can release on it.
    release(http, "jobs", "b", tb);
    let tc = check_granted(&ws_next(&mut c), "jobs", "c");
    assert!(tc > tb, "{tc} after {tb}");
    ws_send(
        &mut c,
        json!({"op": "renew", "fencing_token": tc, "ttl_ms": 30000}),
    );
    let renewed = ws_next(&mut c);
    assert_eq!(renewed["type"], "renewed", "{renewed}");
    assert_eq!(renewed["fencing_token"], tc, "{renewed}");
    ws_send(&mut c, json!({"op": "release", "fencing_token": tc}));
    let released = ws_next(&mut c);
    assert_eq!(released["type"], "released", "{released}");
    assert_eq!(released["released"], true, "{released}");
    assert_eq!(holder(http, "jobs"), None);
    ws_close(c);
}

#[test]
fn a_waiter_keeps_its_place_across_a_reconnect() {
    let server = Server::start();
    let http = server.http_addr();
    let a = acquire(http, "queue", "a");
    let mut b = ws_wait(http, "queue", "b", json!({"grace_ms": 300000}));
    check_queued(&ws_next(&mut b), "queue", "b", false);
    let mut c = ws_wait(http, "queue", "c", json!({}));
    check_queued(&ws_next(&mut c), "queue", "c", false);

    // B hangs up (the server has closed its end when this returns) and
    // comes back with the same client id, on SSE this time: the same wait.
    ws_close(b);
    let mut b = sse_wait(http, "queue", "b", "&grace_ms=300000");
    check_queued(&b.expect().data, "queue", "b", true);

    // A releases: B is granted, not C.
    release(http, "queue", "a", a);
    let tb = check_granted(&b.expect().data, "queue", "b");
    assert_eq!(holder(http, "queue"), Some(("b".to_string(), 1)));
    release(http, "queue", "b", tb);
    let tc = check_granted(&ws_next(&mut c), "queue", "c");
    assert!(tc > tb);
    ws_close(c);
}

#[test]
fn a_grant_made_while_away_is_answered_on_reconnect() {
    let server = Server::start();
    let http = server.http_addr();
    let a = acquire(http, "away", "a");
    let mut b = ws_wait(http, "away", "b", json!({"grace_ms": 300000}));
    check_queued(&ws_next(&mut b), "away", "b", false);
    ws_close(b);
    // Granted while B is away, within its grace period.
    release(http, "away", "a", a);
    wait_until(Duration::from_secs(30), "B granted while away", || {
        holder(http, "away").is_some_and(|h| h.0 == "b")
    });
    let (_, state) = get_json(http, "/api/v1/locks/away");
    let token = state["holder"]["fencing_token"].as_u64().unwrap();
    // B comes back: the grant ended that wait, so this is a new one, and
    // the recipe's acquire answers the grant B holds, same token.
    let mut b = sse_wait(http, "away", "b", "");
    check_queued(&b.expect().data, "away", "b", false);
    assert_eq!(check_granted(&b.expect().data, "away", "b"), token);
}

#[test]
fn past_the_grace_period_the_place_is_given_up() {
    let server = Server::start();
    let http = server.http_addr();
    let a = acquire(http, "grace", "a");
    let mut b = ws_wait(http, "grace", "b", json!({"grace_ms": 0}));
    check_queued(&ws_next(&mut b), "grace", "b", false);
    let mut c = ws_wait(http, "grace", "c", json!({}));
    check_queued(&ws_next(&mut c), "grace", "c", false);
    ws_close(b);
    // B's place goes: only C waits.
    wait_until(Duration::from_secs(30), "B's place given up", || {
        holder(http, "grace") == Some(("a".to_string(), 1))
    });
    // B comes back: a new wait, behind C.
    let mut b = sse_wait(http, "grace", "b", "");
    check_queued(&b.expect().data, "grace", "b", false);
    release(http, "grace", "a", a);
    let tc = check_granted(&ws_next(&mut c), "grace", "c");
    assert_eq!(holder(http, "grace"), Some(("c".to_string(), 1)));
    ws_send(&mut c, json!({"op": "release", "fencing_token": tc}));
    assert_eq!(ws_next(&mut c)["type"], "released");
    check_granted(&b.expect().data, "grace", "b");
    ws_close(c);
}

#[test]
fn push_works_through_any_server() {
    let cluster = Cluster::start(3);
    let ids = cluster.node_ids();
    for &i in &ids {
        wait_until(Duration::from_secs(20), "every server healthy", || {
            get_json(cluster.http_addr(i), "/health").0 == 200
        });
    }
    let (one, two, three) = (
        cluster.http_addr(ids[0]),
        cluster.http_addr(ids[1]),
        cluster.http_addr(ids[2]),
    );
    let a = acquire(one, "spread", "a");
    let mut watch = sse(three, "/api/v1/locks/spread/watch", &[]).expect("a watch");
    let mut last = 0;
    until_holder(&mut watch, &mut last, Some("a"));
    let mut b = sse_wait(two, "spread", "b", "");
    check_queued(&b.expect().data, "spread", "b", false);
    // Linearizable through any server: the waiter is counted everywhere.
    for http in [one, two, three] {
        assert_eq!(holder(http, "spread"), Some(("a".to_string(), 1)));
    }
    release(one, "spread", "a", a);
    let tb = check_granted(&b.expect().data, "spread", "b");
    let seen = until_holder(&mut watch, &mut last, Some("b"));
    assert_eq!(seen["fencing_token"], tb);
    for http in [one, two, three] {
        assert_eq!(holder(http, "spread"), Some(("b".to_string(), 0)));
    }
}

/// Reads holder events until one shows `want` (a client id, or `None` for
/// free), checking that versions rise strictly; the event.
fn until_holder(stream: &mut Sse, last: &mut u64, want: Option<&str>) -> Value {
    loop {
        let e = stream.expect();
        assert_eq!(e.event, "holder", "{:?}", e);
        let v = e.data["version"].as_u64().expect("a version");
        assert!(v > *last, "version {v} after {last}: {}", e.data);
        assert_eq!(e.id, Some(v.to_string()), "the event id is the version");
        *last = v;
        let client = e.data["label"].as_str().map(named);
        assert_eq!(e.data["held"], client.is_some(), "{}", e.data);
        if client.as_deref() == want {
            return e.data;
        }
        // A grant shows twice at most: made, then stamped (same holder).
        assert!(
            client.is_some() && e.data["kind"] == "change",
            "unexpected holder event {} while waiting for {want:?}",
            e.data
        );
    }
}

#[test]
fn the_watch_shows_each_holder_change_and_resumes_from_a_version() {
    let server = Server::start();
    let http = server.http_addr();
    // The lock root exists, so a free lock's version is not 0.
    let t = acquire(http, "other", "x");
    release(http, "other", "x", t);

    let mut watch = sse(http, "/api/v1/locks/w/watch", &[]).expect("a watch");
    let first = watch.expect();
    assert_eq!(first.data["kind"], "current", "{:?}", first);
    assert_eq!(first.data["held"], false, "{:?}", first);
    let v0 = first.data["version"].as_u64().unwrap();
    assert!(v0 > 0);
    let mut last = v0;

    // A WebSocket watcher sees the same.
    let mut socket = ws(http, "/api/v1/locks/w/ws");
    ws_send(&mut socket, json!({"op": "watch"}));
    let current = ws_next(&mut socket);
    assert_eq!(current["type"], "holder", "{current}");
    assert_eq!(current["held"], false, "{current}");

    let ta = acquire(http, "w", "a");
    let held = until_holder(&mut watch, &mut last, Some("a"));
    assert_eq!(held["fencing_token"], ta);
    let (st, r) = post(
        http,
        "/api/v1/locks/w/renew",
        json!({"client_id": "a", "fencing_token": ta, "ttl_ms": 90000}),
    );
    assert_eq!(st, 200, "{r}");
    // The renewal: same holder, the new expiry.
    loop {
        let e = until_holder(&mut watch, &mut last, Some("a"));
        if e["expires_at_ms"] == r["expires_at_ms"] {
            break;
        }
    }
    release(http, "w", "a", ta);
    until_holder(&mut watch, &mut last, None);
    let tb = acquire(http, "w", "b");
    let b_event = until_holder(&mut watch, &mut last, Some("b"));
    assert!(tb > ta);
    let seen = b_event["version"].as_u64().unwrap();
    // Drain B's stamp, if it comes as its own event, before hanging up.
    assert_eq!(holder(http, "w").map(|h| h.0).as_deref(), Some("b"));
    watch.close();

    // Missed while away: B releases, C takes it.
    release(http, "w", "b", tb);
    let tc = acquire(http, "w", "c");
    // The socket's watch keeps the hub; resuming from B's event replays
    // what came after it, in order.
    let mut resumed = sse(
        http,
        &format!("/api/v1/locks/w/watch?from_version={seen}"),
        &[],
    )
    .expect("a watch");
    let mut last = seen;
    let mut kinds = Vec::new();
    let mut holders = Vec::new();
    loop {
        let e = resumed.expect();
        let v = e.data["version"].as_u64().unwrap();
        assert!(v > last, "replayed version {v} after {last}: {}", e.data);
        last = v;
        kinds.push(e.data["kind"].as_str().unwrap().to_string());
        let h = e.data["label"].as_str().map(named);
        if holders.last() != Some(&h) {
            holders.push(h.clone());
        }
        if e.data["fencing_token"] == tc {
            break;
        }
    }
    // What the hub already had comes replayed, then live changes: a change
    // that reaches the hub after the resumed stream subscribed (the hub
    // hears of the tree's changes a moment after the writer's answer) is
    // live, and no replay may follow a live change.
    let live_from = kinds
        .iter()
        .position(|k| k != "replayed")
        .unwrap_or(kinds.len());
    assert!(
        kinds[live_from..].iter().all(|k| k == "change"),
        "replayed after live, or an unknown kind: {kinds:?}"
    );
    // (B's stamp, if replayed, shows B once more first.)
    let holders: Vec<Option<String>> = holders
        .into_iter()
        .skip_while(|h| h.as_deref() == Some("b"))
        .collect();
    assert_eq!(holders, vec![None, Some("c".to_string())]);

    // The same through Last-Event-ID, as an EventSource reconnects.
    let mut by_id = sse(
        http,
        "/api/v1/locks/w/watch",
        &[("Last-Event-ID", seen.to_string())],
    )
    .expect("a watch");
    assert_eq!(by_id.expect().data["kind"], "replayed");

    // Older than the history, or newer than anything seen: the current
    // state, said to be a reset.
    for from in [1, u64::MAX] {
        let path = format!("/api/v1/locks/w/watch?from_version={from}");
        let e = sse(http, &path, &[]).expect("a watch").expect();
        assert_eq!(e.data["kind"], "reset", "{:?}", e);
        assert_eq!(e.data["label"], label_of(None, "c").as_str(), "{:?}", e);
        assert_eq!(e.data["client_id"], Value::Null, "{:?}", e);
        assert_eq!(e.data["fencing_token"], tc, "{:?}", e);
    }
    ws_close(socket);
}

#[test]
fn bad_input_gets_a_clear_error() {
    let server = Server::start();
    let http = server.http_addr();
    let refused = |path: &str, status: u16, says: &str| {
        let (st, body) = match sse(http, path, &[]) {
            Ok(_) => panic!("{path} was served"),
            Err(e) => e,
        };
        assert_eq!(st, status, "{path}: {body}");
        let body: Value = serde_json::from_str(&body).unwrap();
        let message = body["error"].as_str().unwrap();
        assert!(message.contains(says), "{path}: {message}");
    };
    let events = "/api/v1/locks/jobs/acquire/events";
    refused(&format!("{events}?ttl_ms=1000"), 400, "missing client_id");
    refused(&format!("{events}?client_id=b"), 400, "missing ttl_ms");
    refused(
        &format!("{events}?client_id=b&ttl_ms=x"),
        400,
        "ttl_ms must be a non-negative integer",
    );
    refused(
        &format!("{events}?client_id=b&ttl_ms=0"),
        400,
        "ttl_ms must be between 1000 and",
    );
    refused(
        &format!("{events}?client_id=b&ttl_ms=1000&grace_ms=999999999"),
        400,
        "grace_ms must be at most",
    );
    refused(
        "/api/v1/locks/a$b/acquire/events?client_id=b&ttl_ms=1000",
        400,
        "illegal lock name",
    );
    refused("/api/v1/locks/a$b/watch", 400, "illegal lock name");
    refused(
        "/api/v1/locks/jobs/watch?from_version=-1",
        400,
        "from_version must be a non-negative integer",
    );
    refused("/api/v1/locks/a$b/ws", 400, "illegal lock name");
    let (st, body) = request(http, "GET", "/api/v1/locks/jobs/ws", None);
    assert!(
        st >= 400 && body.contains("not a WebSocket upgrade"),
        "{st} {body}"
    );

    // On a socket: an error message each, and the socket goes on.
    let mut socket = ws(http, "/api/v1/locks/jobs/ws");
    for (message, says) in [
        ("not json", "malformed JSON"),
        ("[1]", "a message must be a JSON object"),
        (r#"{"op": "dance"}"#, "unknown op \"dance\""),
        (r#"{"op": "acquire", "ttl_ms": 1000}"#, "missing client_id"),
        (r#"{"op": "acquire", "client_id": "b"}"#, "missing ttl_ms"),
        (
            r#"{"op": "acquire", "client_id": "b", "ttl_ms": 0}"#,
            "ttl_ms must be between 1000 and",
        ),
        (
            r#"{"op": "acquire", "client_id": "b", "ttl_ms": "x"}"#,
            "ttl_ms must be a non-negative integer",
        ),
        (
            r#"{"op": "release", "fencing_token": 1}"#,
            "missing client_id",
        ),
        (
            r#"{"op": "watch", "from_version": "x"}"#,
            "from_version must be a non-negative integer",
        ),
    ] {
        socket
            .send(tungstenite::Message::Text(message.into()))
            .unwrap();
        let answer = ws_next(&mut socket);
        assert_eq!(answer["type"], "error", "{message}: {answer}");
        assert_eq!(answer["status"], 400, "{message}: {answer}");
        let said = answer["error"].as_str().unwrap();
        assert!(said.contains(says), "{message}: {said}");
    }
    ws_send(&mut socket, json!({"op": "watch"}));
    assert_eq!(ws_next(&mut socket)["type"], "holder");
    ws_close(socket);
    // The server still serves.
    acquire(http, "jobs", "z");
}

/// Holds push messages, (schema name, message), against the served
/// OpenAPI document.
fn hold_against_openapi(http: &str, messages: &[(&str, Value)]) {
    let answers = messages
        .iter()
        .map(|(schema, body)| json!({"schema": schema, "body": body}))
        .collect();
    common::openapi::hold(http, answers);
}

#[test]
fn push_messages_match_the_openapi_document() {
    let server = Server::start();
    let http = server.http_addr();
    let (st, doc) = get_json(http, "/api/v1/openapi.json");
    assert_eq!(st, 200);
    for path in [
        "/api/v1/locks/{name}/acquire/events",
        "/api/v1/locks/{name}/watch",
        "/api/v1/locks/{name}/ws",
    ] {
        let op = &doc["paths"][path]["get"];
        assert!(op.is_object(), "{path} is not documented");
        assert!(op["responses"]["400"].is_object(), "{path}: no 400");
    }

    let mut messages: Vec<(&str, Value)> = Vec::new();
    let mut watch = sse(http, "/api/v1/locks/doc/watch", &[]).expect("a watch");
    let free = watch.expect().data;
    let a = acquire(http, "doc", "a");
    let mut b = sse_wait(http, "doc", "b", "");
    let queued = b.expect().data;
    let mut c = ws_wait(http, "doc", "c", json!({"grace_ms": 300000}));
    messages.push(("PushQueued", ws_next(&mut c)));
    ws_send(&mut c, json!({"op": "cancel"}));
    let cancelled = ws_next(&mut c);
    assert_eq!(cancelled["had_wait"], true, "{cancelled}");
    messages.push(("PushCancelled", cancelled));
    // C's place is given up at once: only B waits.
    wait_until(Duration::from_secs(30), "C's place given up", || {
        holder(http, "doc") == Some(("a".to_string(), 1))
    });
    ws_send(
        &mut c,
        json!({"op": "release", "client_id": "c", "fencing_token": a}),
    );
    messages.push(("PushError", ws_next(&mut c)));
    release(http, "doc", "a", a);
    let granted = b.expect().data;
    let tb = granted["fencing_token"].as_u64().unwrap();
    ws_send(
        &mut c,
        json!({"op": "renew", "client_id": "b", "fencing_token": tb, "ttl_ms": 5000}),
    );
    messages.push(("PushRenewed", ws_next(&mut c)));
    ws_send(
        &mut c,
        json!({"op": "release", "client_id": "b", "fencing_token": tb}),
    );
    messages.push(("PushReleased", ws_next(&mut c)));
    let mut last = free["version"].as_u64().unwrap();
    let held = until_holder(&mut watch, &mut last, Some("b"));
    let freed = until_holder(&mut watch, &mut last, None);
    let mut replay = sse(http, "/api/v1/locks/doc/watch?from_version=1", &[]).expect("a watch");
    messages.push(("HolderEvent", replay.expect().data));
    messages.extend([
        ("HolderEvent", free),
        ("HolderEvent", held),
        ("HolderEvent", freed),
        ("PushQueued", queued),
        ("PushGranted", granted),
    ]);
    ws_close(c);
    hold_against_openapi(http, &messages);
}
