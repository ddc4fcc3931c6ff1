//! TLS against real `warden` processes: native clients, wardenctl and the
//! HTTP door over TLS; what is refused (plaintext, an untrusted server, a
//! missing or foreign client certificate) and how clearly; a TLS cluster
//! that replicates and fails over; and peers without the cluster's
//! certificate that can neither join nor disturb it.
//!
//! Certificates come from `warden certs` (via the testkit).

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use prost::Message as _;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use warden_client::{Client, ConnectOptions, CreateOptions, ErrorCode, TlsOptions};
use warden_server::proto::{peer_frame, PeerFrame};
use warden_testkit::{binary, wait_until, Cluster, Server, ServerOptions, TlsCerts};

fn opts() -> ConnectOptions {
    ConnectOptions {
        session_timeout: Duration::from_secs(10),
        connect_timeout: Duration::from_secs(10),
        request_timeout: Duration::from_secs(10),
    }
}

fn tls(certs: &TlsCerts, client: Option<&str>) -> TlsOptions {
    let cert = client.map(|c| certs.cert(c));
    let key = client.map(|c| certs.key(c));
    TlsOptions::from_files(&certs.ca(), cert.as_deref(), key.as_deref()).expect("TLS options")
}

async fn connect_tls(servers: &str, tls: TlsOptions) -> Client {
    Client::connect_tls(servers, opts(), tls)
        .await
        .expect("TLS connect")
}

fn tls_server(certs: &TlsCerts, extra: &[&str]) -> Server {
    Server::start_with(ServerOptions {
        extra_args: certs.server_args("node", extra),
        ..ServerOptions::default()
    })
}

/// A rustls client configuration trusting `ca`, presenting `identity`.
fn rustls_client(ca: &Path, identity: Option<(&Path, &Path)>) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    Arc::new(match identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => builder
            .with_client_auth_cert(
                CertificateDer::pem_file_iter(cert)
                    .unwrap()
                    .map(Result::unwrap)
                    .collect(),
                PrivateKeyDer::from_pem_file(key).unwrap(),
            )
            .unwrap(),
    })
}

/// A blocking TLS connection to `addr` (`127.0.0.1:port`).
fn tls_stream(
    addr: &str,
    config: Arc<rustls::ClientConfig>,
) -> rustls::StreamOwned<rustls::ClientConnection, TcpStream> {
    let tcp = TcpStream::connect(addr).expect("connect");
    tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let conn = rustls::ClientConnection::new(config, name).unwrap();
    rustls::StreamOwned::new(conn, tcp)
}

/// One HTTPS request (HTTP/1.1, `Connection: close`) from a client with
/// certificate `cert`/`key`: status and body.
fn https(
    addr: &str,
    (ca, cert, key): (&Path, &Path, &Path),
    method: &str,
    path: &str,
    body: &str,
) -> (u16, String) {
    let mut s = tls_stream(addr, rustls_client(ca, Some((cert, key))));
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).expect("send request");
    let mut raw = Vec::new();
    match s.read_to_end(&mut raw) {
        Ok(_) => {}
        // A peer that closes without close_notify: what was read stands.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {}
        Err(e) => panic!("read response: {e}"),
    }
    parse_http(&raw)
}

fn parse_http(raw: &[u8]) -> (u16, String) {
    let text = String::from_utf8_lossy(raw).to_string();
    let (head, body) = text.split_once("\r\n\r\n").expect("a response head");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status code");
    (status, body.to_string())
}

#[tokio::test]
async fn native_clients_over_tls_and_what_is_refused() {
    let certs = TlsCerts::generate(&["node"], &["alice"]);
    let other = TlsCerts::generate(&["node"], &["mallory"]);
    let server = tls_server(&certs, &[]);

    // A client that trusts the CA, without a certificate of its own.
    let c = connect_tls(server.addr(), tls(&certs, None)).await;
    c.create("/a", b"hello", CreateOptions::default())
        .await
        .unwrap();
    assert_eq!(c.get_data("/a").await.unwrap().0, b"hello");

    // With a certificate: its verified subject reaches the core.
    let alice = connect_tls(server.addr(), tls(&certs, Some("alice"))).await;
    assert_eq!(alice.get_data("/a").await.unwrap().0, b"hello");
    wait_until(Duration::from_secs(10), "the subject in the log", || {
        server.log().contains("client certificate verified")
            && server.log().contains("subject=CN=alice")
    });

    // Plaintext on the TLS port: refused at once, in words.
    let err = Client::connect(server.addr(), opts()).await.unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("this port speaks TLS only"), "{msg}");
    assert_eq!(err.code(), ErrorCode::ConnectionLoss, "{msg}");

    // A client that does not trust the server's CA.
    let err = Client::connect_tls(server.addr(), opts(), tls(&other, None))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!("TLS handshake with {} failed", server.addr()))
            && err.contains("UnknownIssuer"),
        "{err}"
    );

    // A client certificate from another CA, presented: refused even
    // though certificates are optional here.
    let foreign = TlsOptions::from_files(
        &certs.ca(),
        Some(&other.cert("mallory")),
        Some(&other.key("mallory")),
    )
    .unwrap();
    let err = Client::connect_tls(server.addr(), opts(), foreign)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("TLS") && err.contains("UnknownCA"), "{err}");

    // Garbage, and a TLS hello that never finishes, on the client port.
    let mut garbage = TcpStream::connect(server.addr()).unwrap();
    garbage.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    let mut half = TcpStream::connect(server.addr()).unwrap();
    half.write_all(&[0x16, 0x03, 0x01, 0x00]).unwrap();

    // Through all that, the server kept serving the clients it had, and
    // new ones.
    wait_until(Duration::from_secs(10), "refusals logged", || {
        let log = server.log();
        log.contains("connection refused: plaintext connection on a TLS-only port")
            && log.contains("UnknownCA")
    });
    c.set_data("/a", b"still", None).await.unwrap();
    assert_eq!(alice.get_data("/a").await.unwrap().0, b"still");
    let late = connect_tls(server.addr(), tls(&certs, None)).await;
    assert_eq!(late.get_data("/a").await.unwrap().0, b"still");
    drop((garbage, half));
}

#[tokio::test]
async fn required_client_certificates_and_the_https_door() {
    let certs = TlsCerts::generate(&["node"], &["alice"]);
    let other = TlsCerts::generate(&["node"], &["mallory"]);
    let server = tls_server(&certs, &["--tls-client-auth", "required"]);

    // No certificate: the server says it wants one.
    let err = Client::connect_tls(server.addr(), opts(), tls(&certs, None))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("CertificateRequired") && err.contains("requires a client certificate"),
        "{err}"
    );
    // A certificate from another CA.
    let foreign = TlsOptions::from_files(
        &certs.ca(),
        Some(&other.cert("mallory")),
        Some(&other.key("mallory")),
    )
    .unwrap();
    let err = Client::connect_tls(server.addr(), opts(), foreign)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("UnknownCA"), "{err}");
    // The CA's own client.
    let alice = connect_tls(server.addr(), tls(&certs, Some("alice"))).await;
    alice
        .create("/x", b"1", CreateOptions::default())
        .await
        .unwrap();

    // HTTPS: health, and the lock API, whose gateway is itself a TLS client
    // of this server (presenting the server's own certificate, which the
    // required client auth accepts).
    let files = (certs.ca(), certs.cert("alice"), certs.key("alice"));
    let http = server.http_addr().to_string();
    let f = files.clone();
    let (status, body) =
        tokio::task::spawn_blocking(move || https(&http, (&f.0, &f.1, &f.2), "GET", "/health", ""))
            .await
            .unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"healthy\":true"), "{body}");
    let http = server.http_addr().to_string();
    let f = files.clone();
    let (status, body) = tokio::task::spawn_blocking(move || {
        https(
            &http,
            (&f.0, &f.1, &f.2),
            "POST",
            "/api/v1/locks/jobs/acquire",
            r#"{"client_id":"w1","ttl_ms":30000,"wait_timeout_ms":0}"#,
        )
    })
    .await
    .unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"acquired\":true"), "{body}");

    // Plain HTTP on the HTTPS port: a 400 that says why.
    let mut plain = TcpStream::connect(server.http_addr()).unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    plain
        .write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut raw = Vec::new();
    plain.read_to_end(&mut raw).unwrap();
    let (status, body) = parse_http(&raw);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("HTTPS only"), "{body}");
}

fn wardenctl(servers: &str, args: &[String], env: &[(&str, String)]) -> (bool, String, String) {
    let out = Command::new(binary("wardenctl"))
        .arg("--servers")
        .arg(servers)
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .expect("run wardenctl");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[test]
fn wardenctl_over_tls() {
    let certs = TlsCerts::generate(&["node"], &["alice"]);
    let other = TlsCerts::generate(&["node"], &[]);
    let server = tls_server(&certs, &["--tls-client-auth", "required"]);
    let with = |more: &[&str]| {
        let mut a = certs.ctl_args(Some("alice"));
        a.extend(more.iter().map(|s| s.to_string()));
        a
    };
    let (ok, out, err) = wardenctl(server.addr(), &with(&["create", "/ctl", "v1"]), &[]);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "/ctl");
    // The same through the environment.
    let env = [
        ("WARDEN_TLS_CA", certs.ca().display().to_string()),
        ("WARDEN_TLS_CERT", certs.cert("alice").display().to_string()),
        ("WARDEN_TLS_KEY", certs.key("alice").display().to_string()),
    ];
    let (ok, out, err) = wardenctl(server.addr(), &["get".into(), "/ctl".into()], &env);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "v1");

    // Plaintext: one clear line.
    let (ok, _, err) = wardenctl(server.addr(), &["get".into(), "/ctl".into()], &[]);
    assert!(!ok);
    assert!(err.contains("this port speaks TLS only"), "{err}");
    // No certificate for a server that requires one.
    let (ok, _, err) = wardenctl(
        server.addr(),
        &[certs.ctl_args(None), vec!["get".into(), "/ctl".into()]].concat(),
        &[],
    );
    assert!(!ok);
    assert!(err.contains("CertificateRequired"), "{err}");
    // A CA that did not sign the server's certificate.
    let mut args = other.ctl_args(None);
    args.extend(["get".into(), "/ctl".into()]);
    let (ok, _, err) = wardenctl(server.addr(), &args, &[]);
    assert!(!ok);
    assert!(
        err.starts_with("error: ") && err.contains("UnknownIssuer"),
        "{err}"
    );
    // A certificate without the CA flag is a usage error, not a silent
    // plaintext connection.
    let (ok, _, err) = wardenctl(
        server.addr(),
        &[
            "--tls-cert".into(),
            certs.cert("alice").display().to_string(),
            "ls".into(),
            "/".into(),
        ],
        &[],
    );
    assert!(!ok);
    assert!(err.contains("need --tls-ca"), "{err}");
}

/// The leader and its term, as the leader reports them.
async fn leader_and_term(cluster: &Cluster, tls: &TlsOptions) -> (u64, u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        for i in cluster.node_ids() {
            let Ok(c) = Client::connect_tls(cluster.addr(i), opts(), tls.clone()).await else {
                continue;
            };
            if let Ok(status) = c.cluster_status().await {
                let leader = status.leader_id;
                if let Some(m) = status.members.iter().find(|m| m.id == leader) {
                    if leader != 0 && m.role == "leader" {
                        return (leader, m.term);
                    }
                }
            }
        }
        assert!(Instant::now() < deadline, "no leader");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_tls_cluster_replicates_and_survives_a_leader_kill() {
    let certs = TlsCerts::generate_cluster(3, &["alice"]);
    let opts_tls = ServerOptions {
        extra_args: certs.cluster_args(&[]),
        ..ServerOptions::default()
    };
    let mut cluster = Cluster::start_with(3, opts_tls);
    let t = tls(&certs, Some("alice"));
    let c = connect_tls(&cluster.servers(), t.clone()).await;
    for i in 0..20 {
        c.create(&format!("/r{i}"), b"x", CreateOptions::default())
            .await
            .unwrap();
    }
    // Every node has every write: replication went over mutual TLS.
    for i in cluster.node_ids() {
        let r = connect_tls(cluster.addr(i), t.clone()).await;
        r.sync("/").await.unwrap();
        assert_eq!(r.get_children("/").await.unwrap().0.len(), 20, "node {i}");
    }
    let (leader, _) = leader_and_term(&cluster, &t).await;
    cluster.kill9(leader as usize);
    let up: Vec<usize> = cluster
        .node_ids()
        .into_iter()
        .filter(|&i| i != leader as usize)
        .collect();
    let survivor = connect_tls(cluster.addr(up[0]), t.clone()).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match survivor
            .create("/after", b"y", CreateOptions::default())
            .await
        {
            Ok(_) => break,
            Err(e) if e.code() == ErrorCode::NodeExists => break,
            Err(e) => {
                assert!(Instant::now() < deadline, "no write after the kill: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    let other = connect_tls(cluster.addr(up[1]), t.clone()).await;
    other.sync("/").await.unwrap();
    assert_eq!(other.get_data("/after").await.unwrap().0, b"y");
    assert_eq!(other.get_children("/").await.unwrap().0.len(), 21);
}

/// A follower too far behind for the leader's log gets the snapshot
/// streamed on a connection of its own: mutual TLS too.
#[tokio::test]
async fn a_tls_cluster_streams_a_snapshot_to_a_far_behind_follower() {
    let certs = TlsCerts::generate_cluster(3, &["alice"]);
    let mut cluster = Cluster::start_with(
        3,
        ServerOptions {
            snapshot_entries: Some(10),
            extra_args: certs.cluster_args(&[
                "--max-log-bytes",
                "0",
                "--snapshot-chunk-bytes",
                "1024",
            ]),
            ..ServerOptions::default()
        },
    );
    let t = tls(&certs, Some("alice"));
    let (leader, _) = leader_and_term(&cluster, &t).await;
    let f = if leader == 3 { 2 } else { 3 };
    cluster.kill9(f);
    let c = connect_tls(cluster.addr(leader as usize), t.clone()).await;
    for i in 0..60 {
        c.create(&format!("/s{i}"), &[b'x'; 100], CreateOptions::default())
            .await
            .unwrap();
    }
    cluster.restart(f);
    wait_until(
        Duration::from_secs(30),
        "the streamed snapshot installed",
        || cluster.log(f).contains("streamed=true"),
    );
    let r = connect_tls(cluster.addr(f), t.clone()).await;
    r.sync("/").await.unwrap();
    assert_eq!(r.get_children("/").await.unwrap().0.len(), 60);
}

/// A raft heartbeat from `from` with a term far ahead: a node that takes
/// it steps down and adopts that term.
fn forged_heartbeat(from: u64, to: u64, term: u64) -> Vec<u8> {
    let mut m = raft::eraftpb::Message::default();
    m.set_msg_type(raft::eraftpb::MessageType::MsgHeartbeat);
    m.from = from;
    m.to = to;
    m.term = term;
    let frame = PeerFrame {
        from,
        kind: Some(peer_frame::Kind::Raft(
            protobuf::Message::write_to_bytes(&m).unwrap(),
        )),
    };
    let body = frame.encode_to_vec();
    let mut out = (body.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(&body);
    out
}

/// Sends forged heartbeats to every peer port over plain TCP.
fn inject_plain(cluster: &Cluster, leader: u64, term: u64) {
    for i in cluster.node_ids() {
        if let Ok(mut s) = TcpStream::connect(cluster.peer_addr(i)) {
            for from in cluster.node_ids() {
                let _ = s.write_all(&forged_heartbeat(from as u64, leader, term + 100));
            }
            let _ = s.flush();
        }
    }
}

#[tokio::test]
async fn forged_raft_frames_do_disturb_a_plaintext_cluster() {
    // The control for the test below: the same injection, without TLS,
    // moves the cluster to the forged term. (So the TLS test's "nothing
    // changed" means TLS stopped it, not that the frames were harmless.)
    let cluster = Cluster::start(3);
    let c = Client::connect(&cluster.servers(), opts()).await.unwrap();
    let term_of_leader = || async {
        let status = c.cluster_status().await.unwrap();
        status
            .members
            .iter()
            .map(|m| m.term)
            .max()
            .unwrap_or_default()
    };
    let before = term_of_leader().await;
    let leader = c.cluster_status().await.unwrap().leader_id;
    inject_plain(&cluster, leader, before);
    let deadline = Instant::now() + Duration::from_secs(20);
    while term_of_leader().await < before + 100 {
        assert!(
            Instant::now() < deadline,
            "forged frames did not reach raft"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Without TLS, frames naming a sender that is not a member, or a raft
/// message whose sender or recipient differs from the frame's, are dropped
/// (hygiene, not authentication: a member's id can still be claimed, as
/// the control above shows).
#[tokio::test]
async fn frames_from_non_members_are_dropped() {
    let cluster = Cluster::start(3);
    let c = Client::connect(&cluster.servers(), opts()).await.unwrap();
    let max_term = || async {
        let status = c.cluster_status().await.unwrap();
        status
            .members
            .iter()
            .map(|m| m.term)
            .max()
            .unwrap_or_default()
    };
    let before = max_term().await;
    for i in cluster.node_ids() {
        let mut s = TcpStream::connect(cluster.peer_addr(i)).unwrap();
        // A stranger (id 99), then a member's frame carrying a raft
        // message of a stranger: both dropped...
        s.write_all(&forged_heartbeat(99, i as u64, before + 100))
            .unwrap();
        let mut spoofed = forged_heartbeat(99, i as u64, before + 100);
        let member = if i == 1 { 2 } else { 1 };
        let body = PeerFrame::decode(&spoofed[4..]).unwrap();
        spoofed = PeerFrame {
            from: member,
            ..body
        }
        .encode_to_vec();
        let mut framed = (spoofed.len() as u32).to_be_bytes().to_vec();
        framed.extend_from_slice(&spoofed);
        s.write_all(&framed).unwrap();
        // ...then a member's own frame, which is heard: once its term
        // shows, everything sent before it on this connection was handled.
        s.write_all(&forged_heartbeat(member, i as u64, before + 50))
            .unwrap();
        s.flush().unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while max_term().await < before + 50 {
        assert!(
            Instant::now() < deadline,
            "the member's frame was not heard"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let after = max_term().await;
    assert!(
        after < before + 100,
        "a non-member's frame moved the term to {after} (from {before})"
    );
}

#[tokio::test]
async fn peers_without_the_cluster_certificate_cannot_join_or_disturb_it() {
    let certs = TlsCerts::generate_cluster(3, &["alice"]);
    let other = TlsCerts::generate(&["n4"], &[]);
    let mut cluster = Cluster::start_with_spares(
        3,
        1,
        ServerOptions {
            extra_args: certs.cluster_args(&[]),
            ..ServerOptions::default()
        },
    );
    let t = tls(&certs, Some("alice"));
    let c = connect_tls(&cluster.servers(), t.clone()).await;
    c.create("/before", b"", CreateOptions::default())
        .await
        .unwrap();
    let (leader, term) = leader_and_term(&cluster, &t).await;

    // 1. Garbage and forged raft frames over plain TCP.
    for i in cluster.node_ids().into_iter().take(3) {
        let mut s = TcpStream::connect(cluster.peer_addr(i)).unwrap();
        let _ = s.write_all(b"\x00\x00\x00\x05hello garbage");
    }
    inject_plain(&cluster, leader, term);
    // 2. The same frames over TLS, by a client whose certificate is from
    // another CA, and by one with no certificate (both trusting the
    // cluster's CA, which is public).
    let foreign = rustls_client(&certs.ca(), Some((&other.cert("n4"), &other.key("n4"))));
    let anonymous = rustls_client(&certs.ca(), None);
    for config in [foreign, anonymous] {
        for i in 1..=3 {
            let addr = cluster.peer_addr(i).to_string();
            let config = config.clone();
            tokio::task::spawn_blocking(move || {
                let mut s = tls_stream(&addr, config);
                for from in 1..=3 {
                    // With TLS 1.3 the client's side may look finished
                    // before the server refuses its certificate; whatever
                    // happens to these writes, no frame may count.
                    let _ = s.write_all(&forged_heartbeat(from, leader, term + 100));
                }
                let _ = s.flush();
                let mut buf = [0u8; 16];
                let _ = s.read(&mut buf);
            })
            .await
            .unwrap();
        }
    }
    // 3. A node with another CA's certificate asks to join.
    cluster.set_extra_args(4, other.server_args("n4", &[]));
    cluster.launch_spare(4);
    let peer4 = cluster.peer_addr(4).to_string();
    c.add_member(4, &peer4, true).await.unwrap();

    // Every node refused every attempt on its peer port (one log line
    // each), and the leader failed to reach the foreign node.
    wait_until(
        Duration::from_secs(30),
        "refusals on every peer port",
        || {
            (1..=3).all(|i| {
                let log = cluster.log(i);
                log.contains(
                    r#"connection refused: plaintext connection on a TLS-only port door="peer""#,
                ) && log.matches(r#"TLS handshake failed"#).count() >= 2
            })
        },
    );
    wait_until(
        Duration::from_secs(30),
        "the leader fails to reach node 4",
        || {
            cluster
                .log(leader as usize)
                .contains("TLS handshake with peer failed")
                && cluster.log(4).contains(r#"door="peer""#)
        },
    );

    // Nothing moved: same leader, same term; writes go on.
    for i in 0..10 {
        c.create(&format!("/after-{i}"), b"", CreateOptions::default())
            .await
            .unwrap();
    }
    assert_eq!(leader_and_term(&cluster, &t).await, (leader, term));
    // Node 4 never became a working member: it never caught up (so never
    // printed its ready line) and the leader has heard nothing from it.
    assert!(!cluster.log(4).contains("warden listening"));
    let status = c.cluster_status().await.unwrap();
    let m4 = status.members.iter().find(|m| m.id == 4).expect("node 4");
    assert_eq!(m4.applied_index, 0, "{m4:?}");
    assert!(!m4.voter);
    assert!(!status.members.iter().any(|m| m.term > term));
}

/// The x509 ACL scheme end to end: a node whose ACL names a certificate
/// subject is open to the client presenting that certificate and to no
/// one else, whatever else they present.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x509_acls_follow_the_client_certificate() {
    use warden_client::{perms, Acl};
    let certs = TlsCerts::generate(&["node"], &["alice", "bob"]);
    let server = tls_server(&certs, &[]);
    let alice = connect_tls(server.addr(), tls(&certs, Some("alice"))).await;
    let bob = connect_tls(server.addr(), tls(&certs, Some("bob"))).await;
    let nobody = connect_tls(server.addr(), tls(&certs, None)).await;

    // `auth` expands to the creator's certificate identity.
    alice
        .create(
            "/alice-only",
            b"secret",
            CreateOptions::persistent().acl(vec![Acl {
                perms: perms::ALL,
                scheme: "auth".into(),
                id: String::new(),
            }]),
        )
        .await
        .unwrap();
    let (acl, _) = alice.get_acl("/alice-only").await.unwrap();
    assert_eq!(
        acl.iter()
            .map(|a| format!("{}:{}", a.scheme, a.id))
            .collect::<Vec<_>>(),
        vec!["x509:CN=alice".to_string()]
    );
    assert_eq!(alice.get_data("/alice-only").await.unwrap().0, b"secret");
    alice.set_data("/alice-only", b"still", None).await.unwrap();

    for (who, c) in [("bob", &bob), ("no certificate", &nobody)] {
        let e = c.get_data("/alice-only").await.unwrap_err();
        assert_eq!(e.code(), ErrorCode::NoAuth, "{who}: {e:?}");
        let warden_client::Error::Api { message, .. } = &e else {
            panic!("{who}: {e:?}");
        };
        assert!(message.contains("READ not granted"), "{who}: {message}");
        let e = c.set_data("/alice-only", b"mine", None).await.unwrap_err();
        assert_eq!(e.code(), ErrorCode::NoAuth, "{who}: {e:?}");
        // A digest identity named like the subject is not the subject.
        c.add_auth("digest", b"CN=alice:pw").await.unwrap();
        let e = c.get_data("/alice-only").await.unwrap_err();
        assert_eq!(e.code(), ErrorCode::NoAuth, "{who}: {e:?}");
    }

    // An explicit x509 entry works the same way, for another subject.
    alice
        .create(
            "/for-bob",
            b"",
            CreateOptions::persistent().acl(vec![Acl {
                perms: perms::READ | perms::WRITE,
                scheme: "x509".into(),
                id: "CN=bob".into(),
            }]),
        )
        .await
        .unwrap();
    bob.set_data("/for-bob", b"bob was here", None)
        .await
        .unwrap();
    let e = alice.get_data("/for-bob").await.unwrap_err();
    assert_eq!(e.code(), ErrorCode::NoAuth, "{e:?}");
    assert_eq!(alice.get_data("/alice-only").await.unwrap().0, b"still");
}
