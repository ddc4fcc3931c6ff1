//! ACLs and authentication against a real `warden` process, through the
//! native protocol (the client crate): each permission refused and then
//! granted, the schemes (world, digest, ip, auth, super), wrong passwords,
//! auth replayed after a reconnect, and cluster membership kept for the
//! super user.

use std::time::{Duration, Instant};

use warden_client::{
    perms, Acl, Client, ConnectOptions, CreateOptions, Error, ErrorCode, Op, SessionState,
};
use warden_protocol::auth::digest_id;
use warden_testkit::{Server, ServerOptions};

const DEADLINE: Duration = Duration::from_secs(20);

/// A server with a super user (admin:root-pw) and a user list (bob, alice).
fn secured() -> (Server, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    std::fs::write(
        &users,
        format!(
            "# test users\n{}\n{}\n",
            digest_id("bob:bob-pw").unwrap(),
            digest_id("alice:alice-pw").unwrap()
        ),
    )
    .unwrap();
    let server = Server::start_with(ServerOptions {
        extra_args: vec![
            "--super-digest".into(),
            digest_id("admin:root-pw").unwrap(),
            "--auth-users".into(),
            users.display().to_string(),
        ],
        ..Default::default()
    });
    (server, dir)
}

async fn connect(server: &Server) -> Client {
    Client::connect(server.addr(), ConnectOptions::default())
        .await
        .unwrap()
}

async fn as_user(server: &Server, credentials: &str) -> Client {
    let c = connect(server).await;
    c.add_auth("digest", credentials.as_bytes()).await.unwrap();
    c
}

fn acl(scheme: &str, id: &str, perms: u32) -> Acl {
    Acl {
        perms,
        scheme: scheme.into(),
        id: id.into(),
    }
}

fn bob_id() -> String {
    digest_id("bob:bob-pw").unwrap()
}

/// `perm` for bob, READ for everyone.
fn bob_may(perm: u32) -> Vec<Acl> {
    vec![
        acl("digest", &bob_id(), perm),
        acl("world", "anyone", perms::READ),
    ]
}

/// Asserts a NoAuth that names the path and the permission.
fn assert_no_auth(e: Error, path: &str, perm: &str) {
    assert_eq!(e.code(), ErrorCode::NoAuth, "{e:?}");
    let message = match &e {
        Error::Api { message, .. } | Error::Multi { message, .. } => message.clone(),
        other => panic!("{other:?}"),
    };
    assert!(
        message.contains(&format!("{path}: {perm} not granted to")),
        "{message}"
    );
    assert!(message.contains("ip:127.0.0.1"), "{message}");
}

fn with_acl(acl: Vec<Acl>) -> CreateOptions {
    CreateOptions::persistent().acl(acl)
}

#[tokio::test]
async fn each_permission_is_refused_then_granted() {
    let (server, _dir) = secured();
    let anon = connect(&server).await;
    let bob = as_user(&server, "bob:bob-pw").await;
    // alice is authenticated, but not the one the ACLs name.
    let alice = as_user(&server, "alice:alice-pw").await;

    // READ
    let only_bob = vec![acl("digest", &bob_id(), perms::READ)];
    bob.create("/read", b"secret", with_acl(only_bob))
        .await
        .unwrap();
    assert_no_auth(anon.get_data("/read").await.unwrap_err(), "/read", "READ");
    assert_no_auth(alice.get_data("/read").await.unwrap_err(), "/read", "READ");
    assert_no_auth(
        anon.get_children("/read").await.unwrap_err(),
        "/read",
        "READ",
    );
    assert_no_auth(
        anon.get_data_watch("/read").await.unwrap_err(),
        "/read",
        "READ",
    );
    assert_no_auth(
        anon.watch("/read", true).await.unwrap_err(),
        "/read",
        "READ",
    );
    assert_eq!(bob.get_data("/read").await.unwrap().0, b"secret");
    assert!(bob.get_children("/read").await.unwrap().0.is_empty());
    // exists needs nothing, as in ZooKeeper.
    assert!(anon.exists("/read").await.unwrap().is_some());

    // WRITE
    bob.create("/write", b"v0", with_acl(bob_may(perms::WRITE)))
        .await
        .unwrap();
    assert_no_auth(
        anon.set_data("/write", b"x", None).await.unwrap_err(),
        "/write",
        "WRITE",
    );
    assert_eq!(anon.get_data("/write").await.unwrap().0, b"v0");
    bob.set_data("/write", b"v1", None).await.unwrap();
    assert_eq!(anon.get_data("/write").await.unwrap().0, b"v1");

    // CREATE (on the parent)
    bob.create("/create", b"", with_acl(bob_may(perms::CREATE)))
        .await
        .unwrap();
    assert_no_auth(
        anon.create("/create/x", b"", CreateOptions::default())
            .await
            .unwrap_err(),
        "/create/x",
        "CREATE",
    );
    assert!(anon.exists("/create/x").await.unwrap().is_none());
    bob.create("/create/x", b"", CreateOptions::default())
        .await
        .unwrap();

    // DELETE (on the parent)
    bob.create(
        "/delete",
        b"",
        with_acl(bob_may(perms::CREATE | perms::DELETE)),
    )
    .await
    .unwrap();
    bob.create("/delete/x", b"", CreateOptions::default())
        .await
        .unwrap();
    assert_no_auth(
        anon.delete("/delete/x", None).await.unwrap_err(),
        "/delete/x",
        "DELETE",
    );
    assert!(anon.exists("/delete/x").await.unwrap().is_some());
    bob.delete("/delete/x", None).await.unwrap();

    // ADMIN
    bob.create("/admin", b"", with_acl(bob_may(perms::ADMIN)))
        .await
        .unwrap();
    let open = vec![acl("world", "anyone", perms::ALL)];
    assert_no_auth(
        anon.set_acl("/admin", open.clone(), None)
            .await
            .unwrap_err(),
        "/admin",
        "ADMIN",
    );
    // Readers without ADMIN see digest ids with the hash hidden, as in
    // ZooKeeper; bob sees them whole.
    let (seen, _) = anon.get_acl("/admin").await.unwrap();
    assert_eq!(seen[0].id, "bob:x");
    let (seen, stat) = bob.get_acl("/admin").await.unwrap();
    assert_eq!(seen[0].id, bob_id());
    assert_eq!(stat.aversion, 0);
    bob.set_acl("/admin", open, Some(0)).await.unwrap();
    anon.set_data("/admin", b"now anyone may", None)
        .await
        .unwrap();

    // get_acl needs READ or ADMIN.
    assert_no_auth(
        anon.get_acl("/read").await.unwrap_err(),
        "/read",
        "READ or ADMIN",
    );

    // A multi with one refused op applies nothing.
    let err = anon
        .multi(vec![
            Op::create("/admin/a", b"", CreateOptions::default()),
            Op::set_data("/write", b"sneaky", None),
        ])
        .await
        .unwrap_err();
    match &err {
        Error::Multi { index, .. } => assert_eq!(*index, 1),
        other => panic!("{other:?}"),
    }
    assert_no_auth(err, "/write", "WRITE");
    assert!(anon.exists("/admin/a").await.unwrap().is_none());
    assert_eq!(anon.get_data("/write").await.unwrap().0, b"v1");
}

#[tokio::test]
async fn world_ip_auth_and_super_schemes() {
    let (server, _dir) = secured();
    let anon = connect(&server).await;
    // ip: this test's connections come from 127.0.0.1.
    anon.create(
        "/ip-local",
        b"",
        with_acl(vec![acl("ip", "127.0.0.0/8", perms::ALL)]),
    )
    .await
    .unwrap();
    anon.create(
        "/ip-other",
        b"",
        with_acl(vec![acl("ip", "10.9.8.7", perms::ALL)]),
    )
    .await
    .unwrap();
    anon.get_data("/ip-local").await.unwrap();
    assert_no_auth(
        anon.get_data("/ip-other").await.unwrap_err(),
        "/ip-other",
        "READ",
    );

    // auth: the creator's authenticated identities.
    let bob = as_user(&server, "bob:bob-pw").await;
    bob.create(
        "/mine",
        b"",
        with_acl(vec![
            acl("auth", "", perms::ALL),
            acl("world", "anyone", perms::READ),
        ]),
    )
    .await
    .unwrap();
    let (stored, _) = bob.get_acl("/mine").await.unwrap();
    assert_eq!(
        stored,
        vec![
            acl("digest", &bob_id(), perms::ALL),
            acl("world", "anyone", perms::READ)
        ]
    );
    // Without an authenticated identity, auth is InvalidAcl.
    let e = anon
        .create("/nobody", b"", with_acl(vec![acl("auth", "", perms::ALL)]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidAcl);
    // Unknown schemes and malformed ids are InvalidAcl too.
    for bad in [
        acl("kerberos", "bob", perms::ALL),
        acl("world", "someone", perms::ALL),
        acl("digest", "bob", perms::ALL),
        acl("ip", "not-an-ip", perms::ALL),
    ] {
        let e = anon
            .create("/bad", b"", with_acl(vec![bad.clone()]))
            .await
            .unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidAcl, "{bad:?}");
    }
    assert!(anon.exists("/bad").await.unwrap().is_none());

    // super: passes every check, on nodes that grant it nothing.
    let admin = as_user(&server, "admin:root-pw").await;
    bob.create(
        "/locked",
        b"x",
        with_acl(vec![acl("digest", &bob_id(), perms::ALL)]),
    )
    .await
    .unwrap();
    assert_no_auth(
        anon.get_data("/locked").await.unwrap_err(),
        "/locked",
        "READ",
    );
    admin.get_data("/locked").await.unwrap();
    admin.set_data("/locked", b"y", None).await.unwrap();
    admin
        .set_acl("/locked", vec![acl("world", "anyone", perms::READ)], None)
        .await
        .unwrap();
    assert_eq!(anon.get_data("/locked").await.unwrap().0, b"y");

    // world: a node made with no ACL is open to all.
    anon.create("/open", b"", CreateOptions::default())
        .await
        .unwrap();
    let (open, _) = anon.get_acl("/open").await.unwrap();
    assert_eq!(open, vec![acl("world", "anyone", perms::ALL)]);
}

#[tokio::test]
async fn wrong_credentials_are_auth_failed_and_the_session_lives_on() {
    let (server, _dir) = secured();
    let c = connect(&server).await;
    for (scheme, auth, why) in [
        ("digest", "bob:wrong", "wrong password"),
        ("digest", "carol:any", "unknown user"),
        ("digest", "admin:wrong", "super user"),
        ("digest", "no-colon", "no colon"),
        ("digest", ":pw", "no user"),
        ("sasl", "bob:bob-pw", "unknown auth scheme"),
    ] {
        let e = c.add_auth(scheme, auth.as_bytes()).await.unwrap_err();
        assert_eq!(e.code(), ErrorCode::AuthFailed, "{auth}: {e:?}");
        match &e {
            Error::Api { message, .. } => assert!(message.contains(why), "{message}"),
            other => panic!("{other:?}"),
        }
    }
    // The session goes on, with no identity added.
    c.create("/still-here", b"", CreateOptions::default())
        .await
        .unwrap();
    assert_eq!(*c.session_events().borrow(), SessionState::Connected);
    c.create(
        "/bobs",
        b"",
        with_acl(vec![acl("digest", &bob_id(), perms::ALL)]),
    )
    .await
    .unwrap();
    assert_no_auth(c.get_data("/bobs").await.unwrap_err(), "/bobs", "READ");
    // And the right password works on the same session.
    c.add_auth("digest", b"bob:bob-pw").await.unwrap();
    c.get_data("/bobs").await.unwrap();
}

#[tokio::test]
async fn auth_is_replayed_after_a_reconnect() {
    let (mut server, _dir) = secured();
    let bob = Client::connect(
        server.addr(),
        ConnectOptions {
            session_timeout: Duration::from_secs(30),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    bob.add_auth("digest", b"bob:bob-pw").await.unwrap();
    bob.create(
        "/bob-only",
        b"v0",
        with_acl(vec![acl("digest", &bob_id(), perms::ALL)]),
    )
    .await
    .unwrap();
    // A new server process: the connection breaks, identities with it.
    server.stop();
    server.restart();
    let deadline = Instant::now() + DEADLINE;
    loop {
        match bob.set_data("/bob-only", b"v1", None).await {
            Ok(_) => break,
            Err(e) if e.is_retryable() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            // NoAuth here would mean the reconnect forgot who bob is.
            Err(e) => panic!("after the reconnect: {e:?}\n{}", server.log()),
        }
    }
    assert_eq!(bob.get_data("/bob-only").await.unwrap().0, b"v1");
}

/// Membership is the super user's (`server/src/authority.rs`), whatever
/// the root's ACL grants: ADMIN on `/` is not enough.
#[tokio::test]
async fn membership_changes_need_the_super_user() {
    let (server, _dir) = secured();
    let bob = as_user(&server, "bob:bob-pw").await;
    let admin = as_user(&server, "admin:root-pw").await;
    admin
        .set_acl("/", vec![acl("digest", &bob_id(), perms::ALL)], None)
        .await
        .unwrap();
    let anon = connect(&server).await;
    for c in [&anon, &bob] {
        for e in [
            c.remove_member(42).await.unwrap_err(),
            c.add_member(42, "127.0.0.1:1", true).await.unwrap_err(),
        ] {
            assert_eq!(e.code(), ErrorCode::NoAuth, "{e:?}");
            assert!(format!("{e:?}").contains("super user"), "{e:?}");
        }
    }
    // Bob still does everything else on the root.
    bob.create("/fine", b"", CreateOptions::default())
        .await
        .unwrap();
}

/// A recursive watch does not reveal nodes its client may not read
/// (ZooKeeper 3.8.4): a change to a node reaches a recursive watch on an
/// ancestor only if its client may read the node (a deleted node: under
/// the ACL it had).
#[tokio::test]
async fn recursive_watches_hear_only_what_their_client_may_read() {
    let (server, _dir) = secured();
    let admin = as_user(&server, "admin:root-pw").await;
    let alice = as_user(&server, "alice:alice-pw").await;
    let bob = as_user(&server, "bob:bob-pw").await;
    admin
        .create("/app", b"", CreateOptions::persistent())
        .await
        .unwrap();
    let mut alice_events = alice.watch("/app", true).await.unwrap();
    let mut bob_events = bob.watch("/app", true).await.unwrap();

    // Only bob may read /app/secret; everyone may read /app/public.
    admin
        .create(
            "/app/secret",
            b"s",
            with_acl(vec![acl("digest", &bob_id(), perms::ALL)]),
        )
        .await
        .unwrap();
    admin.set_data("/app/secret", b"t", None).await.unwrap();
    admin.delete("/app/secret", None).await.unwrap();
    admin
        .create("/app/public", b"p", CreateOptions::persistent())
        .await
        .unwrap();

    use warden_client::EventType::*;
    // Bob hears all of it, in order.
    for expected in [
        (NodeCreated, "/app/secret"),
        (NodeDataChanged, "/app/secret"),
        (NodeDeleted, "/app/secret"),
        (NodeCreated, "/app/public"),
    ] {
        let got = next_event(&mut bob_events).await;
        assert_eq!((got.0, got.1.as_str()), expected);
    }
    // Alice hears nothing of the secret node, not even its deletion:
    // her first event is the public node.
    let got = next_event(&mut alice_events).await;
    assert_eq!((got.0, got.1.as_str()), (NodeCreated, "/app/public"));
}

async fn next_event(w: &mut warden_client::PersistentWatch) -> (warden_client::EventType, String) {
    use futures::StreamExt;
    let e = tokio::time::timeout(DEADLINE, w.next())
        .await
        .expect("an event within the deadline")
        .expect("watch open")
        .expect("watch event");
    (e.event_type, e.path)
}
