//! The peer port (issue 26, attack 3): who may speak as a member.
//!
//! With TLS, chaining to the cluster's CA is not enough: a client's
//! certificate chains too. A peer's certificate names the member id it
//! speaks for (`warden://node/<id>`), the link is bound to it, and a frame
//! claiming another sender is dropped. Without TLS the peer port trusts
//! its network (docs/security.md), but bad bytes on it still cost nothing:
//! oversized and malformed frames close their connection, and a flood of
//! connections leaves the cluster serving.
//!
//! Certificates come from `warden certs` (via the testkit), as
//! docs/security.md makes them.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use prost::Message as _;
use raft::eraftpb::{Entry, Message, MessageType};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use warden_client::{Client, ConnectOptions, CreateOptions, ErrorCode, TlsOptions};
use warden_server::proto::{peer_frame, PeerFrame};
use warden_testkit::{Cluster, ServerOptions, TlsCerts};

/// How long a test waits for what must happen.
const DEADLINE: Duration = Duration::from_secs(30);

fn opts() -> ConnectOptions {
    ConnectOptions {
        session_timeout: Duration::from_secs(10),
        connect_timeout: Duration::from_secs(10),
        request_timeout: Duration::from_secs(10),
    }
}

/// A TLS cluster of three, each node with its own certificate (`n1`..`n3`),
/// and a client certificate `alice` from the same CA.
fn tls_cluster() -> (TlsCerts, Cluster, TlsOptions) {
    let certs = TlsCerts::generate_cluster(3, &["alice"]);
    let cluster = Cluster::start_with(
        3,
        ServerOptions {
            extra_args: certs.cluster_args(&[]),
            ..ServerOptions::default()
        },
    );
    let alice = TlsOptions::from_files(
        &certs.ca(),
        Some(&certs.cert("alice")),
        Some(&certs.key("alice")),
    )
    .expect("TLS options");
    (certs, cluster, alice)
}

/// A rustls client configuration trusting `ca`, presenting `cert`/`key`.
fn rustls_client(ca: &Path, cert: &Path, key: &Path) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let chain = CertificateDer::pem_file_iter(cert)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    Arc::new(
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, PrivateKeyDer::from_pem_file(key).unwrap())
        .unwrap(),
    )
}

/// Writes `bytes` to `addr` over TLS as `config`'s holder, then reads until
/// the server closes (or 5 s pass: a link the server keeps open is not an
/// error here, what reaches raft is what the tests check).
fn send_tls(addr: &str, config: Arc<rustls::ClientConfig>, bytes: &[u8]) {
    let tcp = TcpStream::connect(addr).expect("connect to the peer port");
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let conn = rustls::ClientConnection::new(config, name).unwrap();
    let mut s = rustls::StreamOwned::new(conn, tcp);
    // With TLS 1.3 the client's side may look finished before the server
    // refuses it; whatever happens to these writes, no frame may count.
    let _ = s.write_all(bytes);
    let _ = s.flush();
    let mut buf = [0u8; 64];
    let _ = s.read(&mut buf);
}

/// A peer frame on the wire (u32 big-endian length, then the frame).
fn wire(frame: &PeerFrame) -> Vec<u8> {
    let body = frame.encode_to_vec();
    let mut out = (body.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(&body);
    out
}

/// A frame from `from` carrying raft message `m` (sent by `from` too).
fn raft_frame(from: u64, mut m: Message) -> Vec<u8> {
    m.from = from;
    wire(&PeerFrame {
        from,
        kind: Some(peer_frame::Kind::Raft(
            protobuf::Message::write_to_bytes(&m).unwrap(),
        )),
    })
}

fn message(kind: MessageType, to: u64, term: u64) -> Message {
    let mut m = Message::default();
    m.set_msg_type(kind);
    m.to = to;
    m.term = term;
    m
}

/// What a member speaking as another would send: a heartbeat at a term
/// far ahead with a commit index past any log (raft-rs stops the process
/// on it, on purpose), and an append of an entry no ACL checked.
fn forged_as(from: u64, to: u64, term: u64) -> Vec<u8> {
    let mut heartbeat = message(MessageType::MsgHeartbeat, to, term);
    heartbeat.commit = 1 << 40;
    let mut append = message(MessageType::MsgAppend, to, term);
    append.index = 1 << 30;
    append.log_term = term;
    append.commit = (1 << 30) + 1;
    let entry = Entry {
        index: (1 << 30) + 1,
        term,
        data: b"no ACL checked this".to_vec().into(),
        ..Entry::default()
    };
    append.entries = vec![entry].into();
    let mut out = raft_frame(from, heartbeat);
    out.extend(raft_frame(from, append));
    out
}

async fn connect(addr: &str, tls: Option<&TlsOptions>) -> warden_client::Result<Client> {
    match tls {
        Some(t) => Client::connect_tls(addr, opts(), t.clone()).await,
        None => Client::connect(addr, opts()).await,
    }
}

/// Node `i`'s own term, as it reports it.
async fn term_of(cluster: &Cluster, i: usize, tls: Option<&TlsOptions>) -> Option<u64> {
    let c = connect(cluster.addr(i), tls).await.ok()?;
    let status = c.cluster_status().await.ok()?;
    status
        .members
        .iter()
        .find(|m| m.id == i as u64)
        .map(|m| m.term)
}

/// The highest term any node reports.
async fn max_term(cluster: &Cluster, tls: Option<&TlsOptions>) -> u64 {
    let mut max = 0;
    for i in cluster.node_ids() {
        if let Some(t) = term_of(cluster, i, tls).await {
            max = max.max(t);
        }
    }
    max
}

/// `warden_peer_refused_total{reason="<reason>"}` on node `i`'s
/// `/metrics` (over HTTPS; clients need no certificate there).
fn refused(cluster: &Cluster, i: usize, certs: &TlsCerts, reason: &str) -> u64 {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(certs.ca()).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let addr = cluster.http_addr(i);
    let tcp = TcpStream::connect(addr).expect("connect to the HTTP port");
    tcp.set_read_timeout(Some(DEADLINE)).unwrap();
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let mut s = rustls::StreamOwned::new(conn, tcp);
    s.write_all(
        format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .unwrap();
    let mut raw = Vec::new();
    match s.read_to_end(&mut raw) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {}
        Err(e) => panic!("reading /metrics: {e}"),
    }
    let text = String::from_utf8_lossy(&raw);
    let series = format!("warden_peer_refused_total{{reason=\"{reason}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&series))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series} on node {i}'s /metrics"))
}

/// Every node still takes a write through itself and reads it back.
async fn serves(cluster: &mut Cluster, tls: Option<&TlsOptions>, tag: &str) {
    for i in cluster.node_ids() {
        assert!(cluster.is_running(i), "node {i} died:\n{}", cluster.log(i));
        let c = connect(cluster.addr(i), tls)
            .await
            .unwrap_or_else(|e| panic!("node {i} takes no client: {e}"));
        let path = format!("/{tag}-{i}");
        let deadline = Instant::now() + DEADLINE;
        loop {
            match c.create(&path, b"ok", CreateOptions::default()).await {
                Ok(_) => break,
                Err(e) if e.code() == ErrorCode::NodeExists => break,
                Err(e) => {
                    assert!(Instant::now() < deadline, "node {i} takes no write: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        c.sync("/").await.unwrap();
        assert_eq!(c.get_data(&path).await.unwrap().0, b"ok");
    }
}

/// A client's certificate from the cluster's CA completes a TLS handshake
/// on the peer port (it chains to the CA) but speaks for no member: the
/// link is closed before any frame counts, so forged frames sent on it
/// move no term and stop no node.
#[tokio::test]
async fn a_client_certificate_is_no_peer() {
    let (certs, mut cluster, alice) = tls_cluster();
    let before = max_term(&cluster, Some(&alice)).await;
    let config = rustls_client(&certs.ca(), &certs.cert("alice"), &certs.key("alice"));
    for to in 1..=3u64 {
        let mut forged = Vec::new();
        for from in (1..=3u64).filter(|&f| f != to) {
            forged.extend(forged_as(from, to, before + 100));
        }
        let addr = cluster.peer_addr(to as usize).to_string();
        let config = config.clone();
        tokio::task::spawn_blocking(move || send_tls(&addr, config, &forged))
            .await
            .unwrap();
    }
    // Each node refuses the link (counted), or the forged frames reach raft
    // (the term moves, or the node stops on the commit index).
    let deadline = Instant::now() + DEADLINE;
    loop {
        for i in cluster.node_ids() {
            assert!(
                cluster.is_running(i),
                "node {i} stopped: a client certificate's frames reached raft\n{}",
                cluster.log(i)
            );
        }
        let term = max_term(&cluster, Some(&alice)).await;
        assert!(
            term < before + 100,
            "a client certificate's frames moved the term from {before} to {term}"
        );
        if cluster
            .node_ids()
            .into_iter()
            .all(|i| refused(&cluster, i, &certs, "certificate") >= 1)
        {
            break;
        }
        assert!(Instant::now() < deadline, "no node counted the refusal");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for i in cluster.node_ids() {
        let log = cluster.log(i);
        assert!(
            log.contains("peer refused") && log.contains("names no member id"),
            "node {i} logged no refusal:\n{log}"
        );
    }
    serves(&mut cluster, Some(&alice), "after-client-cert").await;
    assert!(max_term(&cluster, Some(&alice)).await < before + 100);
}

/// Node 2's own certificate, used to speak as node 3 on node 1's peer
/// port: its link is bound to member 2, so the frames claiming member 3 are
/// dropped (the term does not move, node 1 does not stop on the commit
/// index, no append is taken), while a frame from member 2 itself, sent
/// after them on the same link, is heard.
#[tokio::test]
async fn a_member_speaks_for_itself_only() {
    let (certs, mut cluster, alice) = tls_cluster();
    let before = max_term(&cluster, Some(&alice)).await;
    let mut bytes = forged_as(3, 1, before + 100);
    // Then member 2 as itself: heard, at a term of its own. Frames on one
    // link are handled in order, so once node 1 shows this term, the
    // forged ones before it were handled.
    bytes.extend(raft_frame(
        2,
        message(MessageType::MsgHeartbeat, 1, before + 50),
    ));
    let config = rustls_client(&certs.ca(), &certs.cert("n2"), &certs.key("n2"));
    let addr = cluster.peer_addr(1).to_string();
    tokio::task::spawn_blocking(move || send_tls(&addr, config, &bytes))
        .await
        .unwrap();
    let deadline = Instant::now() + DEADLINE;
    loop {
        assert!(
            cluster.is_running(1),
            "node 1 stopped: frames claiming member 3 reached raft\n{}",
            cluster.log(1)
        );
        if let Some(term) = term_of(&cluster, 1, Some(&alice)).await {
            assert!(
                term < before + 100,
                "frames claiming member 3 on member 2's link moved node 1's term from {before} to {term}"
            );
            if term >= before + 50 {
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "member 2's own frame was not heard"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(refused(&cluster, 1, &certs, "sender") >= 2);
    let log = cluster.log(1);
    assert!(
        log.contains("claiming to be from member 3 on a link bound to member 2"),
        "{log}"
    );
    serves(&mut cluster, Some(&alice), "after-forged-from").await;
    assert!(max_term(&cluster, Some(&alice)).await < before + 100);
}

/// Connects to `addr`, writes `bytes`, and tells whether the server closed
/// the connection (within [`DEADLINE`]).
fn closed_after(addr: &str, bytes: &[u8]) -> bool {
    let mut s = TcpStream::connect(addr).expect("connect to the peer port");
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    let _ = s.write_all(bytes);
    let mut buf = [0u8; 64];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

/// Oversized and malformed frames on the peer port close their connection
/// with nothing changed, and a flood of connections (held open, and
/// opened and closed) leaves the cluster serving. (Deeply nested groups
/// in raft bytes: tests/peer_frame_guard.rs; plaintext on a TLS peer
/// port: tests/tls.rs.)
#[tokio::test]
async fn bad_frames_and_a_connection_flood_on_the_peer_port_change_nothing() {
    let mut cluster = Cluster::start(3);
    serves(&mut cluster, None, "before").await;
    let before = max_term(&cluster, None).await;
    for i in cluster.node_ids() {
        let addr = cluster.peer_addr(i).to_string();
        let member = if i == 1 { 2 } else { 1 };
        // A length past the bound (the server must not wait for 4 GB).
        assert!(
            closed_after(&addr, &u32::MAX.to_be_bytes()),
            "oversized, node {i}"
        );
        // A body that is no peer frame.
        let mut garbage = 16u32.to_be_bytes().to_vec();
        garbage.extend([0xff; 16]);
        assert!(closed_after(&addr, &garbage), "malformed, node {i}");
        // A frame cut short by the sender's close.
        let mut cut = wire(&PeerFrame {
            from: member,
            kind: Some(peer_frame::Kind::Raft(vec![8; 64])),
        });
        cut.truncate(20);
        let mut s = TcpStream::connect(&addr).unwrap();
        s.write_all(&cut).unwrap();
        drop(s);
        // A member's frame whose raft bytes are no raft message: dropped.
        let mut s = TcpStream::connect(&addr).unwrap();
        s.write_all(&wire(&PeerFrame {
            from: member,
            kind: Some(peer_frame::Kind::Raft(vec![0xff; 32])),
        }))
        .unwrap();
    }
    for i in cluster.node_ids() {
        warden_testkit::wait_until(DEADLINE, &format!("node {i} logs the bad frames"), || {
            let log = cluster.log(i);
            log.contains("bad frame from peer; dropping the connection")
                && log.contains("undecodable raft message")
        });
    }
    serves(&mut cluster, None, "after-bad-frames").await;

    // The flood: per node, 300 connections held open and 300 more opened
    // and closed at once, all while the cluster takes writes.
    const HELD: usize = 300;
    const CHURNED: usize = 300;
    let mut held = Vec::with_capacity(HELD * 3);
    for i in cluster.node_ids() {
        for _ in 0..HELD {
            held.push(TcpStream::connect(cluster.peer_addr(i)).expect("flood connect"));
        }
        for _ in 0..CHURNED {
            drop(TcpStream::connect(cluster.peer_addr(i)).expect("flood connect"));
        }
    }
    serves(&mut cluster, None, "during-flood").await;
    drop(held);
    serves(&mut cluster, None, "after-flood").await;
    // Nothing sent moved a term on its own (elections may still happen on
    // a loaded machine, but not by 100 terms).
    assert!(max_term(&cluster, None).await < before + 100);
}

/// `--peer-tls-ca`: peers chain to a CA of their own, clients to
/// `--tls-ca`. The cluster forms and replicates; a certificate from the
/// clients' CA is no peer's even when it names a member (here member 2,
/// speaking as itself): its handshake on the peer port fails.
#[tokio::test]
async fn with_a_peer_ca_the_clients_ca_makes_no_peer() {
    let peers = TlsCerts::generate_cluster(3, &[]);
    let clients = TlsCerts::generate(&["n2"], &["alice"]);
    let path = |p: std::path::PathBuf| p.display().to_string();
    let node = format!("n{}", warden_testkit::NODE_ID);
    let mut cluster = Cluster::start_with(
        3,
        ServerOptions {
            extra_args: vec![
                "--tls-cert".into(),
                path(peers.cert(&node)),
                "--tls-key".into(),
                path(peers.key(&node)),
                "--tls-ca".into(),
                path(clients.ca()),
                "--peer-tls-ca".into(),
                path(peers.ca()),
            ],
            ..ServerOptions::default()
        },
    );
    // Clients trust the servers' (peer) CA and present the clients' CA's.
    let alice = TlsOptions::from_files(
        &peers.ca(),
        Some(&clients.cert("alice")),
        Some(&clients.key("alice")),
    )
    .expect("TLS options");
    serves(&mut cluster, Some(&alice), "peer-ca").await;
    let before = max_term(&cluster, Some(&alice)).await;
    let mut bytes = raft_frame(2, message(MessageType::MsgHeartbeat, 1, before + 100));
    bytes.extend(forged_as(2, 1, before + 100));
    // It trusts the peers' CA, to get as far as presenting its certificate.
    let config = rustls_client(&peers.ca(), &clients.cert("n2"), &clients.key("n2"));
    let addr = cluster.peer_addr(1).to_string();
    tokio::task::spawn_blocking(move || send_tls(&addr, config, &bytes))
        .await
        .unwrap();
    warden_testkit::wait_until(DEADLINE, "node 1 refuses the handshake", || {
        let log = cluster.log(1);
        log.contains(r#"door="peer""#) && log.contains("TLS handshake failed")
    });
    assert!(cluster.is_running(1), "{}", cluster.log(1));
    assert!(max_term(&cluster, Some(&alice)).await < before + 100);
    serves(&mut cluster, Some(&alice), "peer-ca-after").await;
}
