//! The gRPC lock API (`warden.lock.v1.LockService`, docs/grpc.md) against
//! a real `warden` started with `--grpc-listen`, through a tonic client:
//! the HTTP lock API's contract cases (tests/http.rs, http_auth.rs,
//! http_push.rs) asked through gRPC, with the status codes gRPC maps the
//! HTTP answers to.
//!
//! Every wait is for a condition or a message with a deadline: no sleeps
//! for synchronisation, no timing asserted.

mod common;

use std::future::Future;
use std::time::Duration;

use tonic::metadata::MetadataValue;
use tonic::transport::Channel;
use tonic::{Code, Request, Status, Streaming};
use warden_protocol::auth::digest_id;
use warden_protocol::lock::lock_service_client::LockServiceClient;
use warden_protocol::lock::{
    AcquireRequest, GetRequest, HolderEvent, ListRequest, ReleaseRequest, RenewRequest,
    WatchRequest,
};
use warden_server::http::holder::label_of;
use warden_testkit::{Server, ServerOptions, TlsCerts};

/// Longest wait for any one answer or event.
const DEADLINE: Duration = Duration::from_secs(20);

fn grpc_server(extra: &[&str]) -> Server {
    let mut extra_args = vec!["--grpc-listen".to_string(), "127.0.0.1:0".to_string()];
    extra_args.extend(extra.iter().map(|s| s.to_string()));
    Server::start_with(ServerOptions {
        extra_args,
        ..Default::default()
    })
}

async fn client(server: &Server) -> LockServiceClient<Channel> {
    let addr = server
        .grpc_addr()
        .expect("the ready line names the gRPC port");
    LockServiceClient::connect(format!("http://{addr}"))
        .await
        .expect("connect to the gRPC port")
}

/// `f` within [`DEADLINE`].
async fn soon<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(DEADLINE, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: nothing within {DEADLINE:?}"))
}

/// Polls `cond` until it holds, failing past [`DEADLINE`].
async fn until<F: Future<Output = bool>>(what: &str, mut cond: impl FnMut() -> F) {
    soon(what, async {
        while !cond().await {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
}

fn acquire(lock: &str, client: &str, ttl_ms: u64, wait_timeout_ms: u64) -> AcquireRequest {
    AcquireRequest {
        lock_key: lock.into(),
        client_id: client.into(),
        ttl_ms,
        wait_timeout_ms,
    }
}

fn renew(lock: &str, client: &str, fencing_token: u64, ttl_ms: u64) -> RenewRequest {
    RenewRequest {
        lock_key: lock.into(),
        client_id: client.into(),
        fencing_token,
        ttl_ms,
    }
}

fn release(lock: &str, client: &str, fencing_token: u64) -> ReleaseRequest {
    ReleaseRequest {
        lock_key: lock.into(),
        client_id: client.into(),
        fencing_token,
    }
}

fn get(lock: &str) -> GetRequest {
    GetRequest {
        lock_key: lock.into(),
    }
}

#[track_caller]
fn refused<T: std::fmt::Debug>(r: Result<T, Status>, code: Code, says: &str) -> Status {
    let s = r.expect_err("refused");
    assert_eq!(s.code(), code, "{s:?}");
    assert!(
        s.message().contains(says),
        "{:?} lacks {says:?}",
        s.message()
    );
    s
}

#[tokio::test]
async fn acquire_renew_release_reentry_and_stale_tokens() {
    let server = grpc_server(&[]);
    let mut c = client(&server).await;

    // Grant, with the fields of the HTTP contract.
    let a = c
        .acquire(acquire("jobs", "worker-7", 30_000, 0))
        .await
        .unwrap()
        .into_inner();
    assert!(a.acquired);
    let lease = a.lease.expect("a lease");
    assert_eq!(
        (lease.lock_key.as_str(), lease.client_id.as_str()),
        ("jobs", "worker-7")
    );
    let token = lease.fencing_token;
    assert!(token > 0 && lease.expires_at_ms > 0, "{lease:?}");
    assert!(lease.expires_at.ends_with('Z'), "{lease:?}");

    // The holder as others see it (linearizable).
    let s = c.get(get("jobs")).await.unwrap().into_inner();
    let holder = s.holder.expect("held");
    // Its label, never its client id (the holder's secret).
    assert_eq!(holder.client_id, "");
    assert_eq!(
        (holder.label.as_str(), holder.fencing_token),
        (label_of(None, "worker-7").as_str(), token)
    );
    assert_eq!(s.waiters, 0);

    // Re-entry by the same client_id: the grant it holds, same token.
    let again = c
        .acquire(acquire("jobs", "worker-7", 30_000, 0))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(again.lease.unwrap().fencing_token, token);

    // Another client: not granted (ABORTED), the holder in the metadata;
    // also with a wait that runs out.
    let s = refused(
        c.acquire(acquire("jobs", "worker-8", 30_000, 0)).await,
        Code::Aborted,
        "jobs is held; not granted within 0 ms",
    );
    let m = s.metadata();
    assert!(m.get("warden-holder-client-id").is_none());
    assert_eq!(
        m.get("warden-holder-label").unwrap(),
        label_of(None, "worker-7").as_str()
    );
    assert_eq!(
        m.get("warden-holder-fencing-token").unwrap(),
        token.to_string().as_str()
    );
    refused(
        c.acquire(acquire("jobs", "worker-8", 30_000, 300)).await,
        Code::Aborted,
        "not granted within 300 ms",
    );

    // Renew; a stale token and a wrong client are refused.
    let r = c
        .renew(renew("jobs", "worker-7", token, 60_000))
        .await
        .unwrap()
        .into_inner();
    assert!(r.renewed);
    let renewed = r.lease.unwrap();
    assert_eq!(renewed.fencing_token, token);
    assert!(renewed.expires_at_ms >= lease.expires_at_ms);
    refused(
        c.renew(renew("jobs", "worker-7", token - 1, 30_000)).await,
        Code::FailedPrecondition,
        "does not hold",
    );
    refused(
        c.release(release("jobs", "worker-8", token)).await,
        Code::FailedPrecondition,
        "is not held by client \"worker-8\"",
    );

    // Release; the lock is free; a stale release is refused.
    let r = c
        .release(release("jobs", "worker-7", token))
        .await
        .unwrap()
        .into_inner();
    assert!(r.released);
    assert_eq!((r.client_id.as_str(), r.fencing_token), ("worker-7", token));
    refused(c.get(get("jobs")).await, Code::NotFound, "jobs is free");
    refused(
        c.release(release("jobs", "worker-7", token)).await,
        Code::FailedPrecondition,
        "has lapsed or was released",
    );

    // The calls are counted with the HTTP door's requests, by gRPC path
    // and the HTTP status each answer stands for.
    let (st, text) = common::http::request(server.http_addr(), "GET", "/metrics", None);
    assert_eq!(st, 200);
    for (method, code, at_least) in [
        ("Acquire", 200, 2),
        ("Acquire", 409, 2),
        ("Renew", 409, 1),
        ("Get", 404, 1),
    ] {
        let series = format!(
            "warden_http_requests_total{{route=\"/warden.lock.v1.LockService/{method}\",code=\"{code}\"}} "
        );
        let n: u64 = text
            .lines()
            .find_map(|l| l.strip_prefix(&series))
            .unwrap_or_else(|| panic!("no {series} in /metrics"))
            .trim()
            .parse()
            .unwrap();
        assert!(n >= at_least, "{series}{n}");
    }
}

/// One lock API behind two doors: a lease taken over gRPC is the HTTP
/// API's (re-entered there with the same token, released there).
#[tokio::test]
async fn grpc_and_http_share_the_locks() {
    use common::http::{get_json, post};
    use serde_json::json;

    let server = grpc_server(&[]);
    let http = server.http_addr();
    let mut c = client(&server).await;
    let lease = c
        .acquire(acquire("shared", "w1", 30_000, 0))
        .await
        .unwrap()
        .into_inner()
        .lease
        .unwrap();
    let (st, s) = get_json(http, "/api/v1/locks/shared");
    assert_eq!(st, 200, "{s}");
    assert_eq!(s["holder"]["label"], label_of(None, "w1").as_str());
    assert_eq!(s["holder"]["fencing_token"], lease.fencing_token);
    assert_eq!(s["holder"]["expires_at_ms"], lease.expires_at_ms);
    let (st, a) = post(
        http,
        "/api/v1/locks/shared/acquire",
        json!({"client_id": "w1", "ttl_ms": 30000}),
    );
    assert_eq!(st, 200, "{a}");
    assert_eq!(a["fencing_token"], lease.fencing_token);
    let (st, r) = post(
        http,
        "/api/v1/locks/shared/release",
        json!({"client_id": "w1", "fencing_token": lease.fencing_token}),
    );
    assert_eq!(st, 200, "{r}");
    refused(c.get(get("shared")).await, Code::NotFound, "shared is free");
}

#[tokio::test]
async fn a_waiter_is_granted_when_the_holder_releases() {
    let server = grpc_server(&[]);
    let mut c = client(&server).await;
    let first = c
        .acquire(acquire("q", "holder", 60_000, 0))
        .await
        .unwrap()
        .into_inner()
        .lease
        .unwrap()
        .fencing_token;
    let mut waiter_client = c.clone();
    let waiter = tokio::spawn(async move {
        waiter_client
            .acquire(acquire("q", "waiter", 60_000, 60_000))
            .await
    });
    until("the waiter queues", || {
        let mut c = c.clone();
        async move {
            c.get(get("q"))
                .await
                .is_ok_and(|s| s.into_inner().waiters == 1)
        }
    })
    .await;
    // A second waiter whose call deadline (grpc-timeout) ends before its
    // wait: queued meanwhile, then the call ends, and so does its
    // acquire, giving its place up.
    let mut impatient = Request::new(acquire("q", "impatient", 60_000, 60_000));
    impatient.set_timeout(Duration::from_secs(3));
    let mut impatient_client = c.clone();
    let impatient = tokio::spawn(async move { impatient_client.acquire(impatient).await });
    let waiters = |n: u64| {
        let c = c.clone();
        move || {
            let mut c = c.clone();
            async move {
                c.get(get("q"))
                    .await
                    .is_ok_and(|s| s.into_inner().waiters == n)
            }
        }
    };
    until("the impatient waiter queues", waiters(2)).await;
    let s = soon("the deadline", impatient)
        .await
        .unwrap()
        .expect_err("past its deadline");
    assert!(
        matches!(s.code(), Code::DeadlineExceeded | Code::Cancelled),
        "{s:?}"
    );
    until("the impatient waiter leaves the queue", waiters(1)).await;
    c.release(release("q", "holder", first)).await.unwrap();
    let granted = soon("the waiter's grant", waiter)
        .await
        .unwrap()
        .expect("granted")
        .into_inner()
        .lease
        .unwrap();
    assert_eq!(granted.client_id, "waiter");
    assert!(granted.fencing_token > first);
    let s = c.get(get("q")).await.unwrap().into_inner();
    assert_eq!(s.holder.unwrap().label, label_of(None, "waiter"));
}

async fn next(events: &mut Streaming<HolderEvent>) -> HolderEvent {
    soon("a holder event", events.message())
        .await
        .expect("the stream goes on")
        .expect("an event")
}

async fn watch(
    c: &mut LockServiceClient<Channel>,
    lock: &str,
    from_version: Option<u64>,
) -> Streaming<HolderEvent> {
    c.watch(WatchRequest {
        lock_key: lock.into(),
        from_version,
    })
    .await
    .expect("watching")
    .into_inner()
}

/// The holder the event names (`None`: free), by its label: one of the
/// anonymous client ids these tests use.
fn who(e: &HolderEvent) -> Option<&'static str> {
    assert_eq!(e.held, e.holder.is_some(), "{e:?}");
    e.holder.as_ref().map(|h| {
        assert_eq!(h.client_id, "", "{e:?}");
        ["a", "b", "c", "d"]
            .into_iter()
            .find(|id| label_of(None, id) == h.label)
            .unwrap_or("someone else")
    })
}

/// The next event naming `want` as the holder, of kind `kind`; versions
/// rise strictly. A grant may show twice (made, then stamped: the same
/// holder), so events of another holder are skipped only when held.
async fn until_holder(
    events: &mut Streaming<HolderEvent>,
    last: &mut u64,
    want: Option<&str>,
    kind: &str,
) -> HolderEvent {
    loop {
        let e = next(events).await;
        assert!(
            e.version > *last,
            "version {} after {last}: {e:?}",
            e.version
        );
        *last = e.version;
        assert_eq!(e.kind, kind, "{e:?}");
        assert_eq!(e.lock_key, "w", "{e:?}");
        if who(&e) == want {
            return e;
        }
        assert!(
            e.held,
            "unexpected holder event {e:?} while waiting for {want:?}"
        );
    }
}

#[tokio::test]
async fn watch_shows_holder_changes_and_resumes_from_a_version() {
    let server = grpc_server(&[]);
    let mut c = client(&server).await;
    let mut events = watch(&mut c, "w", None).await;
    let current = next(&mut events).await;
    assert_eq!((current.kind.as_str(), who(&current)), ("current", None));
    let mut last = current.version;

    let a = c
        .acquire(acquire("w", "a", 60_000, 0))
        .await
        .unwrap()
        .into_inner()
        .lease
        .unwrap();
    let held = until_holder(&mut events, &mut last, Some("a"), "change").await;
    assert_eq!(held.holder.as_ref().unwrap().fencing_token, a.fencing_token);
    let seen = held.version;
    c.release(release("w", "a", a.fencing_token)).await.unwrap();
    let freed = until_holder(&mut events, &mut last, None, "change").await;
    c.acquire(acquire("w", "b", 60_000, 0)).await.unwrap();
    let b = until_holder(&mut events, &mut last, Some("b"), "change").await;
    drop(events);

    // A client that saw A's grant resumes: what came after it, replayed
    // in order, then live changes.
    let mut resumed = watch(&mut c, "w", Some(seen)).await;
    let mut last = seen;
    let r = until_holder(&mut resumed, &mut last, None, "replayed").await;
    assert_eq!(r.version, freed.version);
    let r = until_holder(&mut resumed, &mut last, Some("b"), "replayed").await;
    assert_eq!(r.version, b.version);
    let tb = c.get(get("w")).await.unwrap().into_inner().holder.unwrap();
    c.release(release("w", "b", tb.fencing_token))
        .await
        .unwrap();
    // B's stamp may still come, replayed or live, before the release.
    let live = loop {
        let e = next(&mut resumed).await;
        assert!(e.version > last, "{e:?}");
        last = e.version;
        if !e.held {
            break e;
        }
        assert_eq!(who(&e), Some("b"), "{e:?}");
    };
    assert_eq!(live.kind, "change", "{live:?}");

    // A version newer than anything seen: the current state, as a reset.
    let mut reset = watch(&mut c, "w", Some(live.version + 1_000_000)).await;
    let r = next(&mut reset).await;
    assert_eq!(
        (r.kind.as_str(), r.version, who(&r)),
        ("reset", live.version, None)
    );
}

#[tokio::test]
async fn bad_input_is_invalid_argument_naming_the_field() {
    let server = grpc_server(&[]);
    let mut c = client(&server).await;
    let long = "n".repeat(129);
    for (request, field) in [
        (acquire("", "w", 1000, 0), "lock_key"),
        (acquire("a/b", "w", 1000, 0), "lock_key"),
        (acquire(&long, "w", 1000, 0), "lock_key"),
        (acquire("ok", "", 1000, 0), "client_id"),
        (acquire("ok", "w\n", 1000, 0), "client_id"),
        (acquire("ok", "w", 0, 0), "ttl_ms"),
        (acquire("ok", "w", 86_400_001, 0), "ttl_ms"),
        (acquire("ok", "w", 1000, 300_001), "wait_timeout_ms"),
    ] {
        let what = format!("{request:?}");
        let s = refused(c.acquire(request).await, Code::InvalidArgument, field);
        assert!(!s.message().is_empty(), "{what}");
    }
    refused(
        c.renew(renew("ok", "w", 1, 0)).await,
        Code::InvalidArgument,
        "ttl_ms",
    );
    refused(
        c.renew(renew("..", "w", 1, 1000)).await,
        Code::InvalidArgument,
        "lock_key",
    );
    refused(
        c.release(release("ok", "", 1)).await,
        Code::InvalidArgument,
        "client_id",
    );
    refused(c.get(get("a b")).await, Code::InvalidArgument, "lock_key");
    let w = c
        .watch(WatchRequest {
            lock_key: "".into(),
            from_version: None,
        })
        .await;
    refused(w, Code::InvalidArgument, "lock_key");
    for (request, field) in [
        (
            ListRequest {
                limit: 5000,
                ..Default::default()
            },
            "limit",
        ),
        (
            ListRequest {
                kind: "rwlock".into(),
                ..Default::default()
            },
            "kind",
        ),
        (
            ListRequest {
                after: "no-slash".into(),
                ..Default::default()
            },
            "after",
        ),
    ] {
        refused(c.list(request).await, Code::InvalidArgument, field);
    }
    // The server keeps serving.
    let a = c.acquire(acquire("ok", "w", 1000, 0)).await.unwrap();
    assert!(a.into_inner().acquired);
}

#[tokio::test]
async fn list_pages_through_the_locks() {
    let server = grpc_server(&[]);
    let mut c = client(&server).await;
    for (lock, holder) in [("l1", "h1"), ("l2", "h2"), ("l3", "h3")] {
        c.acquire(acquire(lock, holder, 60_000, 0)).await.unwrap();
    }
    let page = c
        .list(ListRequest {
            kind: "http-lease".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(page.consistency, "linearizable");
    let names: Vec<(&str, String)> = page
        .locks
        .iter()
        .map(|l| (l.name.as_str(), l.holder.as_ref().unwrap().label.clone()))
        .collect();
    let expected: Vec<(&str, String)> = [("l1", "h1"), ("l2", "h2"), ("l3", "h3")]
        .into_iter()
        .map(|(l, h)| (l, label_of(None, h)))
        .collect();
    assert_eq!(names, expected);
    assert!(page.locks.iter().all(|l| l.kind == "http-lease"));
    assert!(page.next.is_empty(), "{page:?}");

    // Two at a time: the second page starts after the first's `next`.
    let first = c
        .list(ListRequest {
            limit: 2,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(first.locks.len(), 2);
    assert!(!first.next.is_empty());
    let second = c
        .list(ListRequest {
            limit: 2,
            after: first.next.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let all: Vec<&str> = first
        .locks
        .iter()
        .chain(&second.locks)
        .map(|l| l.name.as_str())
        .collect();
    assert_eq!(all, ["l1", "l2", "l3"]);
}

fn with_auth<T>(message: T, authorization: &str) -> Request<T> {
    let mut r = Request::new(message);
    r.metadata_mut().insert(
        "authorization",
        MetadataValue::try_from(authorization).unwrap(),
    );
    r
}

fn basic(credentials: &str) -> String {
    use base64::Engine as _;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(credentials)
    )
}

#[tokio::test]
async fn credentials_are_the_http_doors() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    std::fs::write(&users, format!("{}\n", digest_id("bob:bob-pw").unwrap())).unwrap();
    let acl = format!("digest:{}:cdrwa", digest_id("bob:bob-pw").unwrap());
    let server = grpc_server(&[
        "--auth-users",
        users.to_str().unwrap(),
        "--http-token",
        "s3cret-token=bob:bob-pw",
        // Only bob may use the lock API's nodes.
        "--http-lock-acl",
        &acl,
    ]);
    let mut c = client(&server).await;
    let ask = || acquire("jobs", "w1", 30_000, 0);

    // UNAUTHENTICATED: an unknown token, a wrong password, a bad scheme.
    for (authorization, says) in [
        ("Bearer nope", "unknown bearer token"),
        (basic("bob:wrong").as_str(), "AuthFailed"),
        ("Digest x", "unsupported Authorization scheme"),
    ] {
        refused(
            c.acquire(with_auth(ask(), authorization)).await,
            Code::Unauthenticated,
            says,
        );
    }
    // PERMISSION_DENIED without credentials: the lock's nodes grant an
    // anonymous caller nothing; the message names the node.
    refused(
        c.acquire(ask()).await,
        Code::PermissionDenied,
        "NoAuth: /warden/http-locks",
    );

    // bob by token takes it; by Basic renews and releases it.
    let granted = c
        .acquire(with_auth(ask(), "Bearer s3cret-token"))
        .await
        .unwrap()
        .into_inner();
    let token = granted.lease.unwrap().fencing_token;
    refused(
        c.release(release("jobs", "w1", token)).await,
        Code::PermissionDenied,
        "NoAuth",
    );
    let bob = basic("bob:bob-pw");
    c.renew(with_auth(renew("jobs", "w1", token, 30_000), &bob))
        .await
        .unwrap();
    c.release(with_auth(release("jobs", "w1", token), &bob))
        .await
        .unwrap();
}

#[tokio::test]
async fn over_tls_with_the_servers_certificate() {
    let certs = TlsCerts::generate(&["node"], &[]);
    let server = Server::start_with(ServerOptions {
        extra_args: certs.server_args("node", &["--grpc-listen", "127.0.0.1:0"]),
        ..Default::default()
    });
    let addr = server.grpc_addr().expect("a gRPC port");
    let ca = std::fs::read(certs.ca()).unwrap();
    let tls = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(ca))
        .domain_name("localhost");
    let channel = Channel::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await
        .expect("a TLS connection with ALPN h2");
    let mut c = LockServiceClient::new(channel);
    let lease = c
        .acquire(acquire("tls", "w1", 30_000, 0))
        .await
        .expect("a grant over TLS")
        .into_inner()
        .lease
        .unwrap();
    let s = c.get(get("tls")).await.unwrap().into_inner();
    assert_eq!(s.holder.unwrap().fencing_token, lease.fencing_token);

    // Plaintext gRPC to the TLS port gets nowhere.
    let plain = async {
        let mut p = LockServiceClient::connect(format!("http://{addr}"))
            .await
            .map_err(|e| e.to_string())?;
        p.get(get("tls")).await.map_err(|e| e.to_string())
    };
    let refused = soon("plaintext refused", plain).await;
    assert!(refused.is_err(), "{refused:?}");
}

/// Server reflection (what `grpcurl` asks when it has no `.proto`): the
/// service is listed and its file is described.
#[tokio::test]
async fn reflection_lists_and_describes_the_service() {
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    use tonic_reflection::pb::v1::ServerReflectionRequest;

    let server = grpc_server(&[]);
    let addr = server.grpc_addr().unwrap();
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut r = ServerReflectionClient::new(channel);
    let ask = |m: MessageRequest| ServerReflectionRequest {
        host: String::new(),
        message_request: Some(m),
    };
    let asks = vec![
        ask(MessageRequest::ListServices(String::new())),
        ask(MessageRequest::FileContainingSymbol(
            "warden.lock.v1.LockService".into(),
        )),
    ];
    let mut answers = r
        .server_reflection_info(futures::stream::iter(asks))
        .await
        .unwrap()
        .into_inner();
    let listed = soon("the service list", answers.message())
        .await
        .unwrap()
        .unwrap();
    let Some(MessageResponse::ListServicesResponse(list)) = listed.message_response else {
        panic!("{listed:?}");
    };
    let names: Vec<&str> = list.service.iter().map(|s| s.name.as_str()).collect();
    assert!(names.contains(&"warden.lock.v1.LockService"), "{names:?}");
    let described = soon("the file", answers.message()).await.unwrap().unwrap();
    let Some(MessageResponse::FileDescriptorResponse(file)) = described.message_response else {
        panic!("{described:?}");
    };
    use prost::Message as _;
    let proto =
        prost_types::FileDescriptorProto::decode(file.file_descriptor_proto[0].as_slice()).unwrap();
    assert_eq!(proto.package(), "warden.lock.v1");
    let methods: Vec<&str> = proto.service[0].method.iter().map(|m| m.name()).collect();
    assert_eq!(
        methods,
        ["Acquire", "Renew", "Release", "Get", "List", "Watch"]
    );
}
