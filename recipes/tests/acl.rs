//! Recipes with ACLs against a real `warden`: the nodes a recipe creates
//! carry the ACL its caller gave, and an operation the ACLs refuse fails
//! at once with a clear NoAuth naming the node, never a hang or a silent
//! success.

use std::time::Duration;

use tokio::time::timeout;
use warden_client::{perms, Acl, Client, ConnectOptions, CreateOptions, ErrorCode};
use warden_protocol::auth::digest_id;
use warden_recipes::{DoubleBarrier, LeaderElection, LeaseLock, Mutex, ReadWriteLock, Semaphore};
use warden_testkit::Server;

/// A refusal must come well within this (the recipe must not retry it).
const ANSWER_WITHIN: Duration = Duration::from_secs(10);

async fn connect(server: &Server, credentials: Option<&str>) -> Client {
    let c = Client::connect(server.addr(), ConnectOptions::default())
        .await
        .unwrap();
    if let Some(cred) = credentials {
        c.add_auth("digest", cred.as_bytes()).await.unwrap();
    }
    c
}

/// All for bob, READ for everyone.
fn bobs() -> Vec<Acl> {
    vec![
        Acl {
            perms: perms::ALL,
            scheme: "digest".into(),
            id: digest_id("bob:pw").unwrap(),
        },
        Acl {
            perms: perms::READ,
            scheme: "world".into(),
            id: "anyone".into(),
        },
    ]
}

/// All for bob; everything but ADMIN for alice; READ for everyone.
fn shared_with_alice() -> Vec<Acl> {
    vec![
        Acl {
            perms: perms::ALL,
            scheme: "digest".into(),
            id: digest_id("bob:pw").unwrap(),
        },
        Acl {
            perms: perms::READ | perms::WRITE | perms::CREATE | perms::DELETE,
            scheme: "digest".into(),
            id: digest_id("alice:pw").unwrap(),
        },
        Acl {
            perms: perms::READ,
            scheme: "world".into(),
            id: "anyone".into(),
        },
    ]
}

/// What a node made without `with_acl` carries.
fn open_acl() -> Vec<Acl> {
    vec![Acl {
        perms: perms::ALL,
        scheme: "world".into(),
        id: "anyone".into(),
    }]
}

/// `what` must answer within [`ANSWER_WITHIN`].
async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    timeout(ANSWER_WITHIN, future)
        .await
        .unwrap_or_else(|_| panic!("{what} did not answer within {ANSWER_WITHIN:?}"))
}

async fn assert_acl(client: &Client, nodes: &[&str], expected: &[Acl]) {
    for node in nodes {
        let (acl, _) = client.get_acl(node).await.unwrap();
        assert_eq!(acl, expected, "{node}");
    }
}

fn assert_no_auth(e: warden_recipes::Error, path_prefix: &str) {
    assert_eq!(e.code(), ErrorCode::NoAuth, "{e:?}");
    let line = e.to_string();
    assert!(
        line.starts_with(&format!("NoAuth: {path_prefix}")),
        "{line}"
    );
}

#[tokio::test]
async fn mutex_nodes_carry_the_acl_and_refusals_are_no_auth() {
    let server = Server::start();
    let bob = connect(&server, Some("bob:pw")).await;
    let anon = connect(&server, None).await;

    let lock = Mutex::new(bob.clone(), "/locks/db")
        .unwrap()
        .with_acl(bobs());
    let guard = lock.acquire().await.unwrap();
    for node in ["/locks", "/locks/db", guard.node_path()] {
        let (acl, _) = bob.get_acl(node).await.unwrap();
        assert_eq!(acl, bobs(), "{node}");
    }
    guard.release().await.unwrap();

    // Anonymous contenders cannot queue under bob's container.
    let theirs = Mutex::new(anon.clone(), "/locks/db").unwrap();
    bob.create("/locks/db/keep", b"", Default::default())
        .await
        .unwrap(); // keeps the container from being reaped meanwhile
    let e = timeout(ANSWER_WITHIN, theirs.acquire())
        .await
        .expect("a refused acquire must not hang")
        .unwrap_err();
    assert_no_auth(e, "/locks/db/");
}

#[tokio::test]
async fn lease_lock_and_election_refusals_are_no_auth() {
    let server = Server::start();
    let bob = connect(&server, Some("bob:pw")).await;
    let anon = connect(&server, None).await;

    let leases = LeaseLock::new(bob.clone(), "/leases").with_acl(bobs());
    let lease = leases
        .acquire("job", "w1", Duration::from_secs(30), Duration::ZERO)
        .await
        .unwrap()
        .expect("granted");
    let (acl, _) = bob.get_acl("/leases/job").await.unwrap();
    assert_eq!(acl, bobs());

    let anon_leases = LeaseLock::new(anon.clone(), "/leases");
    let e = timeout(
        ANSWER_WITHIN,
        anon_leases.acquire("job", "w2", Duration::from_secs(30), Duration::ZERO),
    )
    .await
    .expect("a refused acquire must not hang")
    .unwrap_err();
    assert_no_auth(e, "/leases/job/");
    // Nor can it release bob's lease, even knowing the token.
    let e = timeout(
        ANSWER_WITHIN,
        anon_leases.release("job", "w1", lease.fencing_token),
    )
    .await
    .expect("a refused release must not hang")
    .unwrap_err();
    assert_no_auth(e, "/leases/job/");
    leases
        .release("job", "w1", lease.fencing_token)
        .await
        .unwrap();

    let election = LeaderElection::new(bob.clone(), "/elect", "bob").with_acl(bobs());
    let leadership = election.campaign().await.unwrap();
    drop(leadership);
    let e = timeout(
        ANSWER_WITHIN,
        LeaderElection::new(anon.clone(), "/elect", "anon").campaign(),
    )
    .await
    .expect("a refused campaign must not hang")
    .unwrap_err();
    assert_no_auth(e, "/elect/");
}

#[tokio::test]
async fn read_write_lock_nodes_carry_the_acl_and_refusals_are_no_auth() {
    let server = Server::start();
    let bob = connect(&server, Some("bob:pw")).await;
    let alice = connect(&server, Some("alice:pw")).await;
    let anon = connect(&server, None).await;

    let lock = ReadWriteLock::new(bob.clone(), "/rw/table").with_acl(shared_with_alice());
    let writer = within("bob's write lock", lock.write_lock().acquire())
        .await
        .unwrap();
    assert_acl(
        &bob,
        &["/rw", "/rw/table", writer.node_path()],
        &shared_with_alice(),
    )
    .await;
    // Keeps the container (and its ACL) from being reaped once empty.
    bob.create("/rw/table/keep", b"", Default::default())
        .await
        .unwrap();
    writer.release().await.unwrap();

    // Alice is granted what a reader needs; her handle gives the same ACL.
    let alices = ReadWriteLock::new(alice.clone(), "/rw/table").with_acl(shared_with_alice());
    let reader = within("alice's read lock", alices.read_lock().acquire())
        .await
        .unwrap();
    // Read by bob: without ADMIN, alice would see digests as `user:x`.
    assert_acl(&bob, &[reader.node_path()], &shared_with_alice()).await;

    // Anonymous readers and writers cannot queue (world has READ only).
    let theirs = ReadWriteLock::new(anon.clone(), "/rw/table");
    for handle in [theirs.read_lock(), theirs.write_lock()] {
        let e = within("a refused acquire", handle.acquire())
            .await
            .unwrap_err();
        assert_no_auth(e, "/rw/table/");
    }
    reader.release().await.unwrap();

    // Without `with_acl` the nodes stay open, as in Curator.
    let open = ReadWriteLock::new(anon.clone(), "/rw-open/table");
    let guard = within("an open write lock", open.write_lock().acquire())
        .await
        .unwrap();
    assert_acl(
        &anon,
        &["/rw-open", "/rw-open/table", guard.node_path()],
        &open_acl(),
    )
    .await;
    guard.release().await.unwrap();
}

#[tokio::test]
async fn semaphore_nodes_carry_the_acl_and_refusals_are_no_auth() {
    let server = Server::start();
    let bob = connect(&server, Some("bob:pw")).await;
    let alice = connect(&server, Some("alice:pw")).await;
    let anon = connect(&server, None).await;

    let sem = Semaphore::new(bob.clone(), "/sem/pool", 2).with_acl(shared_with_alice());
    let bobs_lease = within("bob's lease", sem.acquire()).await.unwrap();
    assert_acl(
        &bob,
        &["/sem", "/sem/pool", bobs_lease.node_path()],
        &shared_with_alice(),
    )
    .await;
    // Alice may hold a lease too (she writes the holder mark into her own
    // node, which needs WRITE).
    let alices = Semaphore::new(alice.clone(), "/sem/pool", 2).with_acl(shared_with_alice());
    let alices_lease = within("alice's lease", alices.acquire()).await.unwrap();
    assert_acl(&bob, &[alices_lease.node_path()], &shared_with_alice()).await;
    alices_lease.release().await.unwrap();

    // Anonymous users can read the lease count but not queue.
    let theirs = Semaphore::new(anon.clone(), "/sem/pool", 2);
    let e = within("a refused acquire", theirs.acquire())
        .await
        .unwrap_err();
    assert_no_auth(e, "/sem/pool/");
    let e = within("a refused try_acquire", theirs.try_acquire())
        .await
        .unwrap_err();
    assert_no_auth(e, "/sem/pool/");
    bobs_lease.release().await.unwrap();

    // Without `with_acl` the nodes stay open.
    let open = Semaphore::new(anon.clone(), "/sem-open/pool", 1);
    let lease = within("an open lease", open.acquire()).await.unwrap();
    assert_acl(
        &anon,
        &["/sem-open", "/sem-open/pool", lease.node_path()],
        &open_acl(),
    )
    .await;
    lease.release().await.unwrap();
}

#[tokio::test]
async fn double_barrier_nodes_carry_the_acl_and_refusals_are_no_auth() {
    let server = Server::start();
    let bob = connect(&server, Some("bob:pw")).await;
    let alice = connect(&server, Some("alice:pw")).await;
    let anon = connect(&server, None).await;

    let bobs =
        DoubleBarrier::new(bob.clone(), "/barriers/job", "bob", 2).with_acl(shared_with_alice());
    let alices = DoubleBarrier::new(alice.clone(), "/barriers/job", "alice", 2)
        .with_acl(shared_with_alice());
    let (b, a) = within("entering", async {
        tokio::join!(bobs.enter(), alices.enter())
    })
    .await;
    b.unwrap();
    a.unwrap();
    assert_acl(
        &bob,
        &[
            "/barriers",
            "/barriers/job",
            "/barriers/job/bob",
            "/barriers/job/alice",
            "/barriers/job/ready",
        ],
        &shared_with_alice(),
    )
    .await;

    // An anonymous member cannot join (world has READ only).
    let theirs = DoubleBarrier::new(anon.clone(), "/barriers/job", "anon", 3);
    let e = within("a refused enter", theirs.enter()).await.unwrap_err();
    assert_no_auth(e, "/barriers/job/anon");

    let (b, a) = within("leaving", async {
        tokio::join!(bobs.leave(), alices.leave())
    })
    .await;
    b.unwrap();
    a.unwrap();

    // Without `with_acl` the nodes stay open.
    let open = DoubleBarrier::new(anon.clone(), "/barriers-open/job", "anon", 1);
    within("an open enter", open.enter()).await.unwrap();
    assert_acl(
        &anon,
        &[
            "/barriers-open",
            "/barriers-open/job",
            "/barriers-open/job/anon",
            "/barriers-open/job/ready",
        ],
        &open_acl(),
    )
    .await;
    within("an open leave", open.leave()).await.unwrap();
}

/// A recipe whose node exists already works for a user it grants, even
/// under a parent that user may not create in (CREATE is checked before
/// existence, so the recipe must not take that NoAuth for a refusal); and
/// a mutex re-creates its reaped container under such a parent.
#[tokio::test]
async fn recipes_use_existing_nodes_under_parents_closed_to_the_user() {
    let server = Server::start();
    let bob = connect(&server, Some("bob:pw")).await;
    let anon = connect(&server, None).await;
    let open = CreateOptions::persistent().acl(open_acl());
    bob.create("/app", b"", CreateOptions::persistent().acl(bobs()))
        .await
        .unwrap();
    for (node, data) in [
        ("/app/sem", &b"1"[..]),
        ("/app/barrier", b""),
        ("/app/locks", b""),
    ] {
        bob.create(node, data, open.clone()).await.unwrap();
    }

    let sem = Semaphore::new(anon.clone(), "/app/sem", 1);
    let lease = within("a lease", sem.acquire()).await.unwrap();
    lease.release().await.unwrap();

    let barrier = DoubleBarrier::new(anon.clone(), "/app/barrier", "anon", 1);
    within("entering", barrier.enter()).await.unwrap();
    within("leaving", barrier.leave()).await.unwrap();

    // /app/locks/db is missing: the mutex walks down from the root and
    // finds /app/locks refusing nothing it needs.
    let lock = Mutex::new(anon.clone(), "/app/locks/db").unwrap();
    let guard = within("a mutex", lock.acquire()).await.unwrap();
    guard.release().await.unwrap();

    // Where the node is missing, the refusal stands, naming it.
    let e = within(
        "a refused semaphore",
        Semaphore::new(anon.clone(), "/app/other", 1).acquire(),
    )
    .await
    .unwrap_err();
    assert_no_auth(e, "/app/other");
}
