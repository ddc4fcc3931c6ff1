//! Lease locks against a real server: grants, FIFO waiting, expiry at the
//! TTL unless renewed, refusals of stale tokens, wait timeouts, and
//! acquires that are idempotent per client id (a holder's re-acquire gets
//! its grant back, a waiter's rejoins its place, a retry after a lost
//! answer gets the same grant).
//!
//! Waits are on conditions with deadlines; nothing asserts how long
//! anything took.

mod common;

use std::time::Duration;

use common::lossy::LossyProxy;

use tokio::time::timeout;
use warden_client::{Client, ConnectOptions};
use warden_recipes::{Error, Lease, LeaseLock};
use warden_testkit::Server;

/// Longest wait for anything the test expects to happen.
const DEADLINE: Duration = Duration::from_secs(30);
/// A TTL long enough never to lapse during a test.
const TTL_LONG: Duration = Duration::from_secs(60);
/// A TTL short enough to lapse within a test.
const TTL_SHORT: Duration = Duration::from_secs(2);
/// Renewal interval for `TTL_SHORT` leases: well inside the TTL.
const RENEW_INTERVAL: Duration = Duration::from_millis(300);
/// How many renewals keep a `TTL_SHORT` lease alive past its first expiry.
const RENEWALS: u32 = 10;
const ROOT: &str = "/leases";

async fn connect(server: &Server) -> Client {
    Client::connect(server.addr(), ConnectOptions::default())
        .await
        .expect("connect")
}

/// Waits until `dir` has `n` children.
async fn wait_for_children(client: &Client, dir: &str, n: usize) {
    timeout(DEADLINE, async {
        loop {
            if let Ok((children, _)) = client.get_children(dir).await {
                if children.len() == n {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{dir} never had {n} children"));
}

#[tokio::test]
async fn acquire_renew_release() {
    let server = Server::start();
    let leases = LeaseLock::new(connect(&server).await, ROOT);
    let lease = leases
        .acquire("jobs", "worker-1", TTL_LONG, Duration::ZERO)
        .await
        .expect("acquire")
        .expect("free lease is granted at once");
    assert_eq!(lease.name, "jobs");
    assert_eq!(lease.client_id, "worker-1");
    assert!(lease.fencing_token > 0);
    assert!(lease.expires_at_ms > 0);

    let renewed = leases
        .renew("jobs", "worker-1", lease.fencing_token, TTL_LONG)
        .await
        .expect("renew");
    assert_eq!(renewed.fencing_token, lease.fencing_token);
    assert!(renewed.expires_at_ms >= lease.expires_at_ms);

    // Held: a try-lock by someone else fails.
    assert_eq!(
        leases
            .acquire("jobs", "worker-2", TTL_LONG, Duration::ZERO)
            .await
            .expect("try"),
        None
    );
    leases
        .release("jobs", "worker-1", lease.fencing_token)
        .await
        .expect("release");

    let next = leases
        .acquire("jobs", "worker-2", TTL_LONG, Duration::ZERO)
        .await
        .expect("acquire")
        .expect("released lease is free");
    assert!(next.fencing_token > lease.fencing_token);
}

#[tokio::test]
async fn waiters_get_the_lease_in_fifo_order() {
    let server = Server::start();
    let observer = connect(&server).await;
    let leases = LeaseLock::new(connect(&server).await, ROOT);
    let first = leases
        .acquire("q", "w1", TTL_LONG, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();

    let spawn_waiter = |id: &'static str| {
        let leases = leases.clone();
        tokio::spawn(async move { leases.acquire("q", id, TTL_LONG, DEADLINE).await })
    };
    let w2 = spawn_waiter("w2");
    wait_for_children(&observer, "/leases/q", 2).await;
    let w3 = spawn_waiter("w3");
    wait_for_children(&observer, "/leases/q", 3).await;

    leases
        .release("q", "w1", first.fencing_token)
        .await
        .unwrap();
    let second: Lease = timeout(DEADLINE, w2)
        .await
        .unwrap()
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(second.client_id, "w2");
    assert!(second.fencing_token > first.fencing_token);
    // w3 queued after w2, so it cannot hold while w2 does.
    assert!(!w3.is_finished());

    leases
        .release("q", "w2", second.fencing_token)
        .await
        .unwrap();
    let third = timeout(DEADLINE, w3)
        .await
        .unwrap()
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(third.client_id, "w3");
    assert!(third.fencing_token > second.fencing_token);
}

#[tokio::test]
async fn lease_expires_at_its_ttl_unless_renewed() {
    let server = Server::start();
    let holder = LeaseLock::new(connect(&server).await, ROOT);
    // The waiter has its own client, as another process would.
    let waiter = LeaseLock::new(connect(&server).await, ROOT);
    let lease = holder
        .acquire("exp", "holder", TTL_SHORT, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    let waiting =
        tokio::spawn(async move { waiter.acquire("exp", "waiter", TTL_SHORT, DEADLINE).await });

    // Renew well past the first expiry: the lease stays ours.
    let mut latest = lease.clone();
    for _ in 0..RENEWALS {
        tokio::time::sleep(RENEW_INTERVAL).await;
        latest = holder
            .renew("exp", "holder", lease.fencing_token, TTL_SHORT)
            .await
            .expect("renewal of a live lease");
    }
    let ttl_ms = i64::try_from(TTL_SHORT.as_millis()).unwrap();
    assert!(
        latest.expires_at_ms > lease.expires_at_ms + ttl_ms / 2,
        "renewals moved the expiry: {lease:?} -> {latest:?}"
    );
    assert!(!waiting.is_finished(), "the waiter got a lease still held");

    // Stop renewing: the server removes it at its TTL and the waiter gets it.
    let got = timeout(DEADLINE, waiting)
        .await
        .expect("the waiter got the lapsed lease")
        .unwrap()
        .unwrap()
        .expect("granted before its wait timeout");
    assert_eq!(got.client_id, "waiter");
    assert!(got.fencing_token > lease.fencing_token);

    let err = holder
        .renew("exp", "holder", lease.fencing_token, TTL_SHORT)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotHolder(_)), "{err}");
}

#[tokio::test]
async fn stale_renew_and_release_are_refused() {
    let server = Server::start();
    let leases = LeaseLock::new(connect(&server).await, ROOT);
    let lease = leases
        .acquire("s", "w1", TTL_LONG, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    let token = lease.fencing_token;

    let not_holder = |r: Result<(), Error>| {
        let err = r.unwrap_err();
        assert!(matches!(err, Error::NotHolder(_)), "{err}");
    };
    not_holder(leases.renew("s", "w1", token + 1, TTL_LONG).await.map(drop));
    not_holder(leases.renew("s", "w2", token, TTL_LONG).await.map(drop));
    not_holder(leases.release("s", "w2", token).await);
    not_holder(leases.release("s", "w1", token - 1).await);
    not_holder(
        leases
            .renew("nosuch", "w1", token, TTL_LONG)
            .await
            .map(drop),
    );

    // Still held by w1 after all that.
    leases.renew("s", "w1", token, TTL_LONG).await.unwrap();
    leases.release("s", "w1", token).await.unwrap();
    // Once released, the old token is stale too.
    not_holder(leases.release("s", "w1", token).await);
    not_holder(leases.renew("s", "w1", token, TTL_LONG).await.map(drop));

    // And a newer grant's holder is not fooled by the old token.
    let newer = leases
        .acquire("s", "w1", TTL_LONG, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    assert!(newer.fencing_token > token);
    not_holder(leases.renew("s", "w1", token, TTL_LONG).await.map(drop));
}

#[tokio::test]
async fn wait_timeout_gives_none_and_removes_the_waiter() {
    let server = Server::start();
    let observer = connect(&server).await;
    let leases = LeaseLock::new(connect(&server).await, ROOT);
    let lease = leases
        .acquire("t", "w1", TTL_LONG, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    let got = leases
        .acquire("t", "w2", TTL_LONG, Duration::from_millis(300))
        .await
        .unwrap();
    assert_eq!(got, None);
    let (children, _) = observer.get_children("/leases/t").await.unwrap();
    assert_eq!(
        children.len(),
        1,
        "only the holder's node is left: {children:?}"
    );
    leases
        .release("t", "w1", lease.fencing_token)
        .await
        .unwrap();
}

#[tokio::test]
async fn bad_arguments_are_refused_without_a_round_trip() {
    let server = Server::start();
    let leases = LeaseLock::new(connect(&server).await, ROOT);
    for (name, ttl) in [("", TTL_LONG), ("a/b", TTL_LONG), ("a", Duration::ZERO)] {
        let err = leases
            .acquire(name, "w", ttl, Duration::ZERO)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::BadArguments(_)), "{err}");
    }
}

#[tokio::test]
async fn a_dropped_acquire_removes_its_waiter_node() {
    let server = Server::start();
    let observer = connect(&server).await;
    let leases = LeaseLock::new(connect(&server).await, ROOT);
    let lease = leases
        .acquire("d", "w1", TTL_LONG, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    let waiting = {
        let leases = leases.clone();
        tokio::spawn(async move { leases.acquire("d", "w2", TTL_LONG, DEADLINE).await })
    };
    wait_for_children(&observer, "/leases/d", 2).await;
    waiting.abort();
    // Long before its TTL, the waiter's node is gone.
    wait_for_children(&observer, "/leases/d", 1).await;
    leases
        .release("d", "w1", lease.fencing_token)
        .await
        .unwrap();
}

/// The children of `dir` now (none if it is missing).
async fn children(client: &Client, dir: &str) -> Vec<String> {
    match client.get_children(dir).await {
        Ok((c, _)) => c,
        Err(e) if e.code() == warden_client::ErrorCode::NoNode => Vec::new(),
        Err(e) => panic!("get_children {dir}: {e}"),
    }
}

#[tokio::test]
async fn a_holders_re_acquire_returns_its_grant_renewed() {
    let server = Server::start();
    let leases = LeaseLock::new(connect(&server).await, ROOT);
    let first = leases
        .acquire("again", "w1", TTL_LONG, Duration::ZERO)
        .await
        .unwrap()
        .expect("granted");
    // Let the server's clock move on, so a renewal shows in the expiry.
    let admin = connect(&server).await;
    admin
        .create("/probe", b"", warden_client::CreateOptions::persistent())
        .await
        .unwrap();
    let granted_at = first.expires_at_ms - TTL_LONG.as_millis() as i64;
    common::wait_for("the server's clock moves on", || async {
        let stat = admin.set_data("/probe", b"", None).await.unwrap();
        stat.mtime_ms > granted_at
    })
    .await;
    // Another handle, another session: the client id is what counts.
    let again = LeaseLock::new(connect(&server).await, ROOT)
        .acquire("again", "w1", TTL_LONG, Duration::ZERO)
        .await
        .unwrap()
        .expect("the holder's re-acquire is granted");
    assert_eq!(again.fencing_token, first.fencing_token, "the same grant");
    assert!(again.expires_at_ms > first.expires_at_ms, "renewed");
    let state = leases.state("again").await.unwrap().expect("held");
    assert_eq!(state.holder, again);
    assert_eq!(state.waiters, 0);
    assert_eq!(children(&admin, "/leases/again").await.len(), 1);
    // A renewal by the token keeps working, and one release frees it.
    leases
        .renew("again", "w1", first.fencing_token, TTL_LONG)
        .await
        .unwrap();
    leases
        .release("again", "w1", first.fencing_token)
        .await
        .unwrap();
    assert_eq!(leases.state("again").await.unwrap(), None);
}

/// Waits until lease `name` is free: the server removed it at its TTL.
async fn wait_lapsed(leases: &LeaseLock, name: &str) {
    common::wait_for("the lease lapses at its new TTL", || async {
        leases.state(name).await.unwrap().is_none()
    })
    .await;
}

/// A renewal sets the lease's TTL to what it asks for (seed 004's
/// `extend_time_ms: 5000` on a 10 s lease): the server removes it at the
/// new TTL, not the acquire's; the expiry read back agrees.
#[tokio::test]
async fn a_renewal_sets_the_ttl_it_asks_for() {
    let server = Server::start();
    let leases = LeaseLock::new(connect(&server).await, ROOT);
    let lease = leases
        .acquire("renew-ttl", "w1", TTL_LONG, Duration::ZERO)
        .await
        .unwrap()
        .expect("granted");
    let renewed = leases
        .renew("renew-ttl", "w1", lease.fencing_token, TTL_SHORT)
        .await
        .unwrap();
    assert_eq!(renewed.fencing_token, lease.fencing_token);
    assert!(
        renewed.expires_at_ms < lease.expires_at_ms,
        "a shorter TTL from now: {lease:?} -> {renewed:?}"
    );
    let state = leases.state("renew-ttl").await.unwrap().expect("held");
    assert_eq!(state.holder, renewed, "the expiry as read back");
    // Longer again, then shorter: the last renewal's TTL is the one.
    let longer = leases
        .renew("renew-ttl", "w1", lease.fencing_token, TTL_LONG)
        .await
        .unwrap();
    assert!(longer.expires_at_ms > renewed.expires_at_ms);
    leases
        .renew("renew-ttl", "w1", lease.fencing_token, TTL_SHORT)
        .await
        .unwrap();
    // Within DEADLINE (half of TTL_LONG): only the new TTL frees it.
    wait_lapsed(&leases, "renew-ttl").await;
}

/// A holder's re-acquire with another TTL is its grant, with that TTL.
#[tokio::test]
async fn a_re_acquire_with_another_ttl_takes_that_ttl() {
    let server = Server::start();
    let leases = LeaseLock::new(connect(&server).await, ROOT);
    let lease = leases
        .acquire("ttl", "w1", TTL_LONG, Duration::ZERO)
        .await
        .unwrap()
        .expect("granted");
    let again = leases
        .acquire("ttl", "w1", TTL_SHORT, Duration::ZERO)
        .await
        .unwrap()
        .expect("the holder's re-acquire is granted");
    assert_eq!(again.fencing_token, lease.fencing_token, "the same grant");
    assert!(
        again.expires_at_ms < lease.expires_at_ms,
        "{lease:?} -> {again:?}"
    );
    // Still one node, the same holder, with the new expiry.
    let state = leases.state("ttl").await.unwrap().expect("held");
    assert_eq!(state.holder, again);
    assert_eq!(state.waiters, 0);
    wait_lapsed(&leases, "ttl").await;
}

/// A waiter's retry with another TTL keeps its place, and its node takes
/// that TTL (data and TTL together) while it waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiters_retry_with_another_ttl_keeps_its_place() {
    let server = Server::start();
    let admin = connect(&server).await;
    let leases = LeaseLock::new(connect(&server).await, ROOT);
    let first = leases
        .acquire("wttl", "w1", TTL_LONG, Duration::ZERO)
        .await
        .unwrap()
        .expect("granted");
    let waiting = {
        let leases = leases.clone();
        tokio::spawn(async move { leases.acquire("wttl", "w2", TTL_LONG, DEADLINE).await })
    };
    wait_for_children(&admin, "/leases/wttl", 2).await;
    let retry = {
        let leases = leases.clone();
        tokio::spawn(async move { leases.acquire("wttl", "w2", TTL_SHORT, DEADLINE).await })
    };
    let mut line = children(&admin, "/leases/wttl").await;
    line.sort_by_key(|n| n[n.len() - 10..].to_string());
    let w2_node = format!("/leases/wttl/{}", line[1]);
    let short = format!("{}\nw2", TTL_SHORT.as_millis());
    common::wait_for("the waiter's node takes the retry's TTL", || async {
        admin.get_data(&w2_node).await.unwrap().0 == short.as_bytes()
    })
    .await;
    assert_eq!(
        children(&admin, "/leases/wttl").await.len(),
        2,
        "no second place"
    );
    leases
        .release("wttl", "w1", first.fencing_token)
        .await
        .unwrap();
    let a = timeout(DEADLINE, waiting).await.unwrap().unwrap().unwrap();
    let b = timeout(DEADLINE, retry).await.unwrap().unwrap().unwrap();
    let (a, b) = (a.expect("granted"), b.expect("granted"));
    assert_eq!(a.fencing_token, b.fencing_token, "one place, one grant");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiters_re_acquire_rejoins_its_place() {
    let server = Server::start();
    let admin = connect(&server).await;
    let leases = LeaseLock::new(connect(&server).await, ROOT);
    let first = leases
        .acquire("line", "w1", TTL_LONG, Duration::ZERO)
        .await
        .unwrap()
        .expect("granted");
    // w2 waits through a session that then goes away mid-wait (a gateway
    // that died): its node stays in line, nobody waiting on it.
    let gone = connect(&server).await;
    let w2_first = {
        let leases = LeaseLock::new(gone.clone(), ROOT);
        tokio::spawn(async move { leases.acquire("line", "w2", TTL_LONG, DEADLINE).await })
    };
    wait_for_children(&admin, "/leases/line", 2).await;
    let w3 = {
        let leases = leases.clone();
        tokio::spawn(async move { leases.acquire("line", "w3", TTL_LONG, DEADLINE).await })
    };
    wait_for_children(&admin, "/leases/line", 3).await;
    gone.close().await.unwrap();
    let ended = timeout(DEADLINE, w2_first).await.unwrap().unwrap();
    assert!(ended.is_err(), "its session closed: {ended:?}");
    let mut line = children(&admin, "/leases/line").await;
    assert_eq!(line.len(), 3, "w2's node is still in line: {line:?}");
    line.sort_by_key(|n| n[n.len() - 10..].to_string());
    let w2_node = format!("/leases/line/{}", line[1]);
    let w2_token = admin
        .exists(&w2_node)
        .await
        .unwrap()
        .expect("w2's node")
        .czxid;

    // w2 retries: it takes up that place, before w3, adding no node.
    let w2_again = {
        let leases = leases.clone();
        tokio::spawn(async move { leases.acquire("line", "w2", TTL_LONG, DEADLINE).await })
    };
    leases
        .release("line", "w1", first.fencing_token)
        .await
        .unwrap();
    let granted = timeout(DEADLINE, w2_again)
        .await
        .unwrap()
        .unwrap()
        .unwrap()
        .expect("w2 granted in its place");
    assert_eq!(granted.fencing_token, w2_token, "its own node's grant");
    let state = leases.state("line").await.unwrap().expect("held");
    assert_eq!(state.holder.client_id, "w2");
    assert_eq!(state.waiters, 1, "w3 still waits behind");
    assert_eq!(children(&admin, "/leases/line").await.len(), 2);
    leases
        .release("line", "w2", granted.fencing_token)
        .await
        .unwrap();
    let third = timeout(DEADLINE, w3).await.unwrap().unwrap().unwrap();
    assert_eq!(third.expect("w3 granted").client_id, "w3");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_a_lost_answer_gets_the_same_grant() {
    let server = Server::start();
    let admin = connect(&server).await;
    let proxy = LossyProxy::start(server.addr()).await;
    let options = ConnectOptions {
        // Long, so that no heartbeat is the request that loses its answer.
        session_timeout: Duration::from_secs(30),
        ..ConnectOptions::default()
    };
    let leases = LeaseLock::new(Client::connect(&proxy.addr, options).await.unwrap(), ROOT);
    // The create's answer is lost: the acquire finds its node and goes on.
    proxy.lose_the_answer_to_the_next_request_with("/leases/lost/lease-");
    let lease = timeout(
        DEADLINE,
        leases.acquire("lost", "w1", TTL_LONG, Duration::ZERO),
    )
    .await
    .expect("the acquire ends")
    .expect("the acquire survives the lost answer")
    .expect("granted");
    assert_eq!(proxy.cuts(), 1, "an answer was lost");
    assert_eq!(children(&admin, "/leases/lost").await.len(), 1);
    // The caller never saw that answer (its own connection broke, say)
    // and retries: the same grant, still one node. Here the retry's own
    // stamp loses its answer too, and is retried inside.
    let node = children(&admin, "/leases/lost").await.remove(0);
    proxy.lose_the_answer_to_the_next_request_with(&node);
    let retry = timeout(
        DEADLINE,
        leases.acquire("lost", "w1", TTL_LONG, Duration::ZERO),
    )
    .await
    .expect("the retry ends")
    .expect("the retry survives the lost answer")
    .expect("the retry is granted");
    assert_eq!(proxy.cuts(), 2, "the retry's answer was lost too");
    assert_eq!(retry.fencing_token, lease.fencing_token);
    assert_eq!(children(&admin, "/leases/lost").await, vec![node]);
    let other = LeaseLock::new(admin, ROOT);
    assert!(other
        .acquire("lost", "w2", TTL_LONG, Duration::ZERO)
        .await
        .unwrap()
        .is_none());
}
