//! Hostile clients against real `warden` processes, and each resource
//! limit hit on purpose: the offender gets a clear error (or is cut off),
//! a well-behaved client keeps being served throughout, and the server's
//! memory stays bounded (its RSS is sampled from /proc and printed).
//!
//! Run with `--nocapture` to see the RSS figures.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use warden_protocol::pb::{self, request::Op, server_frame, ErrorCode};
use warden_server::zk::jute::{Reader, Writer};
use warden_testkit::raw::RawConn;
use warden_testkit::{wait_until, Cluster, Server, ServerOptions};

/// Generous bound on a server's resident memory in these tests. A server
/// that allocated per announced frame, or queued replies for a client that
/// does not read, would pass it by far.
const RSS_BOUND_KIB: u64 = 512 * 1024;

fn server_with(args: &[&str]) -> Server {
    Server::start_with(ServerOptions {
        extra_args: args.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    })
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS line")
}

/// Samples the server's RSS, prints it, and checks the bound.
fn check_rss(server_pid: u32, when: &str) -> u64 {
    let rss = rss_kib(server_pid);
    println!("RSS {when}: {} MiB ({rss} KiB)", rss / 1024);
    assert!(
        rss < RSS_BOUND_KIB,
        "server RSS {rss} KiB {when} exceeds {RSS_BOUND_KIB} KiB"
    );
    rss
}

fn code(r: &pb::Response) -> ErrorCode {
    ErrorCode::try_from(r.error).expect("known code")
}

fn create(path: &str, data: &[u8]) -> Op {
    Op::Create(pb::CreateRequest {
        path: path.into(),
        data: data.to_vec(),
        ..Default::default()
    })
}

fn get(path: &str, watch: bool) -> Op {
    Op::GetData(pb::GetDataRequest {
        path: path.into(),
        watch,
        ..Default::default()
    })
}

fn exists_watch(path: &str) -> Op {
    Op::Exists(pb::ExistsRequest {
        path: path.into(),
        watch: true,
        ..Default::default()
    })
}

fn add_watch(path: &str, recursive: bool) -> Op {
    let mode = if recursive {
        pb::AddWatchMode::PersistentRecursive
    } else {
        pb::AddWatchMode::Persistent
    };
    Op::AddWatch(pb::AddWatchRequest {
        path: path.into(),
        mode: mode as i32,
    })
}

fn children(path: &str) -> Op {
    Op::GetChildren(pb::GetChildrenRequest {
        path: path.into(),
        ..Default::default()
    })
}

fn set_data(path: &str, data: &[u8]) -> Op {
    Op::SetData(pb::SetDataRequest {
        path: path.into(),
        data: data.to_vec(),
        version: None,
        ttl_ms: 0,
        data_null: false,
    })
}

fn frame_of(frame: pb::ClientFrame) -> Vec<u8> {
    use prost::Message as _;
    let body = frame.encode_to_vec();
    let mut out = (body.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(&body);
    out
}

fn request_frame(xid: u64, op: Op) -> Vec<u8> {
    frame_of(pb::ClientFrame {
        kind: Some(pb::client_frame::Kind::Request(pb::Request {
            xid,
            op: Some(op),
        })),
    })
}

/// A plain stream with a new session of `timeout_ms` on it, for tests
/// that write bytes the RawConn helper would not.
fn session_stream(addr: &str, timeout_ms: u32) -> TcpStream {
    use prost::Message as _;
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(&frame_of(pb::ClientFrame {
        kind: Some(pb::client_frame::Kind::Connect(pb::ConnectRequest {
            protocol_version: warden_protocol::PROTOCOL_VERSION,
            timeout_ms,
            ..Default::default()
        })),
    }))
    .unwrap();
    let frame = read_frame(&mut s).expect("a ConnectResponse");
    let Some(pb::server_frame::Kind::Connect(c)) =
        pb::ServerFrame::decode(&frame[..]).expect("decodes").kind
    else {
        panic!("expected a ConnectResponse");
    };
    assert_eq!(c.error, ErrorCode::Ok as i32, "{c:?}");
    s
}

fn read_frame(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).ok()?;
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    s.read_exact(&mut body).ok()?;
    Some(body)
}

fn connected(addr: &str) -> (RawConn, pb::ConnectResponse) {
    let mut c = RawConn::connect(addr);
    let r = c.handshake(0, vec![]);
    assert_eq!(r.error, ErrorCode::Ok as i32, "{r:?}");
    (c, r)
}

/// A well-behaved client running beside the attack: it creates, writes
/// and reads its own node in a loop on one connection. Every operation
/// must succeed (RawConn waits up to 20 s for an answer, far beyond normal
/// latency); the slowest is printed, not asserted.
struct Good {
    stop: Arc<AtomicBool>,
    ops: Arc<AtomicU64>,
    thread: Option<JoinHandle<Duration>>,
}

impl Good {
    fn spawn(addr: &str, tag: &str) -> Good {
        let stop = Arc::new(AtomicBool::new(false));
        let ops = Arc::new(AtomicU64::new(0));
        let (mut c, _) = connected(addr);
        let path = format!("/good-{tag}");
        assert_eq!(code(&c.request(1, create(&path, b"0"))), ErrorCode::Ok);
        let thread = {
            let (stop, ops) = (stop.clone(), ops.clone());
            std::thread::spawn(move || {
                let mut slowest = Duration::ZERO;
                let mut xid = 2;
                while !stop.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    let value = xid.to_string();
                    let r = c.request(xid, set_data(&path, value.as_bytes()));
                    assert_eq!(code(&r), ErrorCode::Ok, "good client's write: {r:?}");
                    let r = c.request(xid + 1, get(&path, false));
                    assert_eq!(code(&r), ErrorCode::Ok, "good client's read: {r:?}");
                    match r.result {
                        Some(pb::response::Result::GetData(d)) => {
                            assert_eq!(d.data, value.as_bytes())
                        }
                        other => panic!("good client's read: {other:?}"),
                    }
                    slowest = slowest.max(started.elapsed());
                    ops.fetch_add(1, Ordering::Relaxed);
                    xid += 2;
                }
                slowest
            })
        };
        Good {
            stop,
            ops,
            thread: Some(thread),
        }
    }

    /// Waits until the good client completed `n` more rounds.
    fn progresses(&self, n: u64) {
        let from = self.ops.load(Ordering::Relaxed);
        wait_until(Duration::from_secs(60), "the good client is served", || {
            self.ops.load(Ordering::Relaxed) >= from + n
        });
    }

    fn finish(mut self) {
        self.progresses(3);
        self.stop.store(true, Ordering::Relaxed);
        let slowest = self
            .thread
            .take()
            .expect("joined once")
            .join()
            .expect("the good client's operations all succeeded");
        println!(
            "good client: {} write+read rounds, slowest {slowest:?}",
            self.ops.load(Ordering::Relaxed)
        );
    }
}

/// `/metrics` of the server's HTTP door.
fn metrics(http: &str) -> String {
    let mut s = TcpStream::connect(http).expect("connect to the HTTP door");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {http}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read /metrics");
    out
}

/// `warden_limit_hits_total{limit="..."}`, 0 when absent.
fn limit_hits(http: &str, limit: &str) -> u64 {
    let needle = format!("warden_limit_hits_total{{limit=\"{limit}\"}} ");
    metrics(http)
        .lines()
        .find_map(|l| l.strip_prefix(&needle))
        .map(|v| v.trim().parse().expect("a counter"))
        .unwrap_or(0)
}

/// A raw ZooKeeper client: handshake, then requests as (xid, op, body).
struct Jute(TcpStream);

impl Jute {
    fn open(addr: &str) -> Jute {
        let s = TcpStream::connect(addr).expect("connect to the ZooKeeper port");
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        Jute(s)
    }

    /// Sends a ConnectRequest for a new session; the session id granted
    /// (0: refused), or None if the server closed the connection.
    fn handshake(&mut self) -> Option<i64> {
        let mut w = Writer::default();
        w.int(0)
            .long(0)
            .int(10_000)
            .long(0)
            .buffer(&[0u8; 16])
            .boolean(false);
        self.send(&w.buf);
        let body = self.recv()?;
        let mut r = Reader::new(&body);
        r.int("protocolVersion").unwrap();
        r.int("timeOut").unwrap();
        Some(r.long("sessionId").unwrap())
    }

    fn send(&mut self, body: &[u8]) {
        let mut frame = (body.len() as u32).to_be_bytes().to_vec();
        frame.extend_from_slice(body);
        // The server may have closed already: the read after says so.
        let _ = self.0.write_all(&frame);
    }

    fn recv(&mut self) -> Option<Vec<u8>> {
        let mut len = [0u8; 4];
        self.0.read_exact(&mut len).ok()?;
        let mut body = vec![0; u32::from_be_bytes(len) as usize];
        self.0.read_exact(&mut body).ok()?;
        Some(body)
    }

    /// A request; the reply's error code (skipping watch events, xid -1).
    fn call(&mut self, xid: i32, op: i32, body: &[u8]) -> i32 {
        let mut w = Writer::default();
        w.int(xid).int(op);
        w.buf.extend_from_slice(body);
        self.send(&w.buf);
        loop {
            let reply = self.recv().expect("a reply");
            let mut r = Reader::new(&reply);
            let x = r.int("xid").unwrap();
            let _zxid = r.long("zxid").unwrap();
            let err = r.int("err").unwrap();
            if x == -1 {
                continue;
            }
            assert_eq!(x, xid);
            return err;
        }
    }
}

const ZK_EXISTS: i32 = 3;
const ZK_GET_CHILDREN: i32 = 8;
/// ZooKeeper's QuotaExceeded: what LimitExceeded becomes on its door.
const ZK_QUOTA_EXCEEDED: i32 = -125;

fn zk_path_watch(path: &str, watch: bool) -> Vec<u8> {
    let mut w = Writer::default();
    w.string(path).boolean(watch);
    w.buf.to_vec()
}

/// Raises this process's open-file soft limit to the hard limit (servers
/// started afterwards inherit it).
fn raise_nofile() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct we pass.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        lim.rlim_cur = lim.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
    }
    lim.rlim_cur
}

// ------------------------------------------------------------ hostile

/// One byte a second, never finishing: a handshake that never completes
/// is cut off by the handshake timeout; after a handshake, connections
/// that announce a 16 MiB frame and trickle its body pin only what they
/// sent (no 16 MiB reserved each), and are dropped when their session
/// expires (no complete request, no heartbeat).
#[test]
fn slow_drip_connections_are_bounded_in_memory_and_time() {
    let server = Server::start();
    let pid = server.pid().expect("running");
    let before = check_rss(pid, "at start");
    let good = Good::spawn(server.addr(), "drip");

    // Never finishes the handshake.
    let mut nohello = TcpStream::connect(server.addr()).unwrap();
    nohello.write_all(&[0, 0]).unwrap();

    // Finish the handshake, then announce a frame just under the limit and
    // trickle its body.
    const DRIPPERS: usize = 40;
    let stop = Arc::new(AtomicBool::new(false));
    let mut drip_threads = Vec::new();
    for _ in 0..DRIPPERS {
        let mut s = session_stream(server.addr(), 3_000);
        s.write_all(&((16 * 1024 * 1024 - 1) as u32).to_be_bytes())
            .unwrap();
        let stop = stop.clone();
        drip_threads.push(std::thread::spawn(move || {
            // A byte a second, until the server closes (a write fails) or
            // the test is over.
            let mut reader = s.try_clone().unwrap();
            let mut sent = 0;
            while !stop.load(Ordering::Relaxed) && s.write_all(&[0x0a]).is_ok() {
                sent += 1;
                std::thread::sleep(Duration::from_secs(1));
            }
            // What the server said before it closed: the session expired.
            use prost::Message as _;
            let mut saw_expiry = false;
            while let Some(f) = read_frame(&mut reader) {
                if let Some(server_frame::Kind::SessionEvent(e)) =
                    pb::ServerFrame::decode(&f[..]).unwrap().kind
                {
                    saw_expiry |= e.state == pb::SessionState::Expired as i32;
                }
            }
            (saw_expiry, sent)
        }));
    }
    let dripping = {
        let stop = stop.clone();
        let mut raw = nohello.try_clone().unwrap();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) && raw.write_all(&[0x0a]).is_ok() {
                std::thread::sleep(Duration::from_secs(1));
            }
        })
    };

    good.progresses(5);
    check_rss(
        pid,
        &format!("with {DRIPPERS} half frames of 16 MiB announced"),
    );

    // The handshake dripper is refused with OperationTimeout, then closed.
    nohello
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut buf = Vec::new();
    let _ = nohello.read_to_end(&mut buf);
    assert!(
        String::from_utf8_lossy(&buf).contains("no ConnectRequest within"),
        "the never-finished handshake is refused: {buf:?}"
    );

    // The half-frame drippers' sessions expire and their connections
    // close, while they still drip.
    let mut most_sent = 0;
    for t in drip_threads {
        let (saw_expiry, sent) = t.join().expect("dripper");
        assert!(
            saw_expiry,
            "a half-frame dripper is told its session expired, then closed"
        );
        most_sent = most_sent.max(sent);
    }
    println!("the drippers sent at most {most_sent} bytes of their frames before they were closed");
    stop.store(true, Ordering::Relaxed);
    dripping.join().unwrap();
    let after = check_rss(pid, "after the drippers");
    println!(
        "RSS growth with {DRIPPERS} drippers: {} KiB",
        after.saturating_sub(before)
    );
    good.finish();
}

/// 5,000 connections opened at once: with the default per-IP limit the
/// excess is refused with LimitExceeded naming the limit; with the limit
/// raised by flag, all 5,000 reach the server and get sessions. The good
/// client is served throughout.
#[test]
fn five_thousand_connections_at_once() {
    const CONNS: usize = 5_000;
    let nofile = raise_nofile();
    assert!(
        nofile as usize > CONNS + 200,
        "RLIMIT_NOFILE hard limit {nofile} is too low for {CONNS} connections"
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();

    for (flags, expect_all) in [
        (vec![], false),
        (vec!["--max-connections-per-ip", "6000"], true),
    ] {
        let server = server_with(&flags);
        let pid = server.pid().unwrap();
        check_rss(pid, "at start");
        let good = Good::spawn(server.addr(), "many");
        let addr = server.addr().to_string();
        let (accepted, refused, held) = rt.block_on(open_many(&addr, CONNS));
        println!(
            "{CONNS} connections ({flags:?}): {accepted} sessions, {refused} refused with LimitExceeded"
        );
        check_rss(pid, &format!("holding {accepted} connections"));
        good.progresses(5);
        if expect_all {
            assert_eq!(accepted, CONNS);
        } else {
            // The good client holds one of the 60 places.
            assert_eq!(accepted, warden_server::limits::CONNECTIONS_PER_IP_MAX - 1);
            assert_eq!(refused, CONNS - accepted);
            assert!(
                server.log().contains("--max-connections-per-ip"),
                "the refusal is logged for operators"
            );
            assert_eq!(
                limit_hits(server.http_addr(), "connections_per_ip"),
                refused as u64
            );
        }
        drop(held);
        good.finish();
    }
}

/// Opens `n` connections concurrently and handshakes on each. Returns
/// (sessions granted, refusals with LimitExceeded (or a reset after one),
/// the open streams).
async fn open_many(addr: &str, n: usize) -> (usize, usize, Vec<tokio::net::TcpStream>) {
    use prost::Message as _;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let mut tasks = Vec::new();
    for _ in 0..n {
        let addr = addr.to_string();
        tasks.push(tokio::spawn(async move {
            let mut s = tokio::net::TcpStream::connect(&addr)
                .await
                .expect("connect");
            let body = pb::ClientFrame {
                kind: Some(pb::client_frame::Kind::Connect(pb::ConnectRequest {
                    protocol_version: warden_protocol::PROTOCOL_VERSION,
                    timeout_ms: 60_000,
                    ..Default::default()
                })),
            }
            .encode_to_vec();
            let mut frame = (body.len() as u32).to_be_bytes().to_vec();
            frame.extend_from_slice(&body);
            // A refused connection may be answered before this write.
            let _ = s.write_all(&frame).await;
            let answer = tokio::time::timeout(Duration::from_secs(120), async {
                let mut len = [0u8; 4];
                s.read_exact(&mut len).await?;
                let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
                s.read_exact(&mut body).await?;
                Ok::<_, std::io::Error>(body)
            })
            .await
            .expect("an answer within 120 s");
            let answer = match answer {
                Ok(answer) => answer,
                // A refused connection is closed after a 1 s linger; a
                // client that wrote its request later than that (5,000
                // tasks on two threads) gets a reset in place of the
                // refusal the server had sent. The server did refuse it
                // (and counted the limit hit, checked by the caller).
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return None,
                Err(e) => panic!("an answer, not {e}"),
            };
            let frame = pb::ServerFrame::decode(&answer[..]).expect("a server frame");
            let Some(pb::server_frame::Kind::Connect(c)) = frame.kind else {
                panic!("expected a ConnectResponse, got {frame:?}");
            };
            Some((c, s))
        }));
    }
    let (mut accepted, mut refused, mut held) = (0, 0, Vec::new());
    for t in tasks {
        let Some((c, s)) = t.await.expect("connection task") else {
            refused += 1;
            continue;
        };
        if c.error == ErrorCode::Ok as i32 {
            accepted += 1;
            held.push(s);
        } else {
            assert_eq!(c.error, ErrorCode::LimitExceeded as i32, "{c:?}");
            assert!(
                c.message.contains("--max-connections-per-ip"),
                "{}",
                c.message
            );
            refused += 1;
        }
    }
    (accepted, refused, held)
}

/// A client that pipelines reads of a 1 MiB node and never reads the
/// replies: the server stops reading from it (its writes stall), queues
/// only a bounded number of replies, and serves the good client.
#[test]
fn pipelining_client_that_never_reads() {
    let server = Server::start();
    let pid = server.pid().unwrap();
    check_rss(pid, "at start");
    let good = Good::spawn(server.addr(), "pipeline");
    let (mut setup, _) = connected(server.addr());
    let big = vec![7u8; warden_protocol::DATA_BYTES_MAX];
    assert_eq!(code(&setup.request(1, create("/big", &big))), ErrorCode::Ok);

    let mut hog = session_stream(server.addr(), 30_000);
    hog.set_write_timeout(Some(Duration::from_secs(3))).unwrap();
    // Requests sent back to back until the server stops reading them.
    let request = (1..=64)
        .flat_map(|xid| request_frame(xid, get("/big", false)))
        .collect::<Vec<u8>>();
    let mut sent = 0usize;
    let stalled = loop {
        match hog.write_all(&request) {
            Ok(()) => sent += 64,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break true,
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => break true,
            Err(e) => panic!("hog write failed: {e}"),
        }
        assert!(
            sent < 10_000_000,
            "the server never stopped reading the hog"
        );
    };
    assert!(stalled);
    println!("hog sent {sent} requests before its writes stalled");
    assert!(
        limit_hits(server.http_addr(), "outstanding_requests") > 0,
        "the server stopped reading the hog at --max-outstanding-requests"
    );
    good.progresses(5);
    check_rss(pid, &format!("with {sent} 1 MiB reads pipelined, unread"));
    drop(hog);
    good.finish();
}

/// 100,000 watches on one session: with the default limit all are
/// accepted (the memory per watch is printed) and the next is refused;
/// with a small limit, the refusals start there, for every way of setting
/// a watch, on both doors.
#[test]
fn a_session_setting_100_000_watches() {
    const WATCHES: usize = warden_server::limits::WATCHES_PER_SESSION_MAX;
    let server = Server::start();
    let pid = server.pid().unwrap();
    let (mut c, _) = connected(server.addr());
    let before = check_rss(pid, "before the watches");
    let good = Good::spawn(server.addr(), "watches");
    const BATCH: usize = 500;
    let mut xid = 10u64;
    for batch in 0..WATCHES / BATCH {
        for i in 0..BATCH {
            xid += 1;
            let n = batch * BATCH + i;
            let op = if n.is_multiple_of(2) {
                exists_watch(&format!("/w/{n}"))
            } else {
                add_watch(&format!("/w/{n}"), false)
            };
            c.send_request(xid, op);
        }
        for _ in 0..BATCH {
            let r = c.response();
            assert_eq!(code(&r), ErrorCode::Ok, "{r:?}");
        }
    }
    let after = check_rss(pid, &format!("with {WATCHES} watches"));
    println!(
        "~{} bytes per watch",
        (after.saturating_sub(before) * 1024) / WATCHES as u64
    );
    let r = c.request(xid + 1, exists_watch("/one-more"));
    assert_eq!(code(&r), ErrorCode::LimitExceeded, "{r:?}");
    assert!(
        r.message.contains("--max-watches-per-session") && r.message.contains("/one-more"),
        "{}",
        r.message
    );
    good.finish();
}

// ------------------------------------------------------------ each limit

#[test]
fn watches_per_session_limit() {
    let server = server_with(&["--max-watches-per-session", "10"]);
    let good = Good::spawn(server.addr(), "w");
    let (mut c, _) = connected(server.addr());
    assert_eq!(code(&c.request(1, create("/n", b""))), ErrorCode::Ok);
    for i in 0..10 {
        let r = c.request(10 + i, exists_watch(&format!("/x{i}")));
        assert_eq!(code(&r), ErrorCode::Ok);
    }
    // The same watch again is not a new one.
    assert_eq!(code(&c.request(30, exists_watch("/x0"))), ErrorCode::Ok);
    // Every way of adding one more is refused, naming the limit; the read
    // that would set it fails as a whole.
    for (xid, op) in [
        (31, exists_watch("/n")),
        (32, get("/n", true)),
        (
            33,
            Op::GetChildren(pb::GetChildrenRequest {
                path: "/n".into(),
                watch: true,
                ..Default::default()
            }),
        ),
        (34, add_watch("/n", true)),
    ] {
        let r = c.request(xid, op);
        assert_eq!(code(&r), ErrorCode::LimitExceeded, "{r:?}");
        assert!(
            r.message
                .contains("the limit is 10 (--max-watches-per-session)"),
            "{}",
            r.message
        );
        assert!(r.result.is_none());
    }
    // SetWatches (as after a reconnect) past the limit: none is set.
    let r = c.request(
        40,
        Op::SetWatches(pb::SetWatchesRequest {
            relative_zxid: 0,
            persistent_watches: vec!["/p1".into(), "/p2".into()],
            ..Default::default()
        }),
    );
    assert_eq!(code(&r), ErrorCode::LimitExceeded, "{r:?}");
    assert!(r.message.contains("none was set"), "{}", r.message);
    let r = c.request(
        41,
        Op::CheckWatches(pb::CheckWatchesRequest {
            path: "/p1".into(),
            watcher_type: pb::WatcherType::Any as i32,
        }),
    );
    assert_eq!(code(&r), ErrorCode::NoWatcher);
    // Once a watch fires, its place is free again.
    assert_eq!(code(&c.request(42, create("/x0", b""))), ErrorCode::Ok);
    assert_eq!(code(&c.request(43, exists_watch("/n"))), ErrorCode::Ok);

    // The ZooKeeper door: QuotaExceeded.
    let mut zk = Jute::open(server.zk_addr());
    zk.handshake().expect("a session");
    for i in 0..10 {
        assert_eq!(
            zk.call(i + 1, ZK_EXISTS, &zk_path_watch(&format!("/z{i}"), true)),
            -101
        );
    }
    assert_eq!(
        zk.call(20, ZK_EXISTS, &zk_path_watch("/z-over", true)),
        ZK_QUOTA_EXCEEDED
    );
    assert!(limit_hits(server.http_addr(), "watches_per_session") >= 5);
    good.finish();
}

#[test]
fn children_per_reply_limit() {
    let server = server_with(&["--max-children-per-reply", "10"]);
    let good = Good::spawn(server.addr(), "c");
    let (mut c, _) = connected(server.addr());
    let mut xid = 1;
    for parent in ["/ten", "/eleven"] {
        assert_eq!(code(&c.request(xid, create(parent, b""))), ErrorCode::Ok);
        xid += 1;
        let n = if parent == "/ten" { 10 } else { 11 };
        for i in 0..n {
            let r = c.request(xid, create(&format!("{parent}/c{i}"), b""));
            assert_eq!(code(&r), ErrorCode::Ok);
            xid += 1;
        }
    }
    let r = c.request(100, children("/ten"));
    assert_eq!(code(&r), ErrorCode::Ok);
    let r = c.request(101, children("/eleven"));
    assert_eq!(code(&r), ErrorCode::LimitExceeded, "{r:?}");
    assert!(
        r.message.contains("/eleven has 11 children")
            && r.message.contains("--max-children-per-reply"),
        "{}",
        r.message
    );
    // The connection goes on.
    assert_eq!(code(&c.request(102, get("/ten", false))), ErrorCode::Ok);
    // ZooKeeper door: QuotaExceeded.
    let mut zk = Jute::open(server.zk_addr());
    zk.handshake().expect("a session");
    assert_eq!(
        zk.call(1, ZK_GET_CHILDREN, &zk_path_watch("/ten", false)),
        0
    );
    assert_eq!(
        zk.call(2, ZK_GET_CHILDREN, &zk_path_watch("/eleven", false)),
        ZK_QUOTA_EXCEEDED
    );
    assert_eq!(limit_hits(server.http_addr(), "children_per_reply"), 2);
    good.finish();
}

#[test]
fn connections_per_ip_limit() {
    let server = server_with(&["--max-connections-per-ip", "4"]);
    let good = Good::spawn(server.addr(), "ip");
    let (_a, _) = connected(server.addr());
    let (_b, _) = connected(server.addr());
    let mut zk = Jute::open(server.zk_addr());
    zk.handshake().expect("a session");
    // The fifth, on either door, is refused.
    let mut over = RawConn::connect(server.addr());
    let r = over.handshake(0, vec![]);
    assert_eq!(r.error, ErrorCode::LimitExceeded as i32, "{r:?}");
    assert!(
        r.message.contains("already has 4 connections open")
            && r.message.contains("--max-connections-per-ip"),
        "{}",
        r.message
    );
    assert!(over.recv().is_none(), "closed after the refusal");
    let mut zk_over = Jute::open(server.zk_addr());
    assert_eq!(zk_over.handshake(), None, "ZooKeeper's way: closed");
    // A place freed is a place taken.
    drop(zk);
    wait_until(Duration::from_secs(20), "a freed place is reusable", || {
        RawConn::connect(server.addr()).handshake(0, vec![]).error == ErrorCode::Ok as i32
    });
    assert!(server.log().contains("limit hit"), "logged for operators");
    good.finish();
}

#[test]
fn sessions_limit() {
    let server = server_with(&["--max-sessions", "3"]);
    let good = Good::spawn(server.addr(), "s");
    let (_a, _) = connected(server.addr());
    let (b, b_session) = connected(server.addr());
    let mut over = RawConn::connect(server.addr());
    let r = over.handshake(0, vec![]);
    assert_eq!(r.error, ErrorCode::LimitExceeded as i32, "{r:?}");
    assert!(
        r.message.contains("3 sessions are open") && r.message.contains("--max-sessions"),
        "{}",
        r.message
    );
    // ZooKeeper door: refused like an expired session (timeout 0, id 0).
    assert_eq!(Jute::open(server.zk_addr()).handshake(), Some(0));
    // Resuming a session is always allowed.
    drop(b);
    let mut again = RawConn::connect(server.addr());
    let r = again.handshake(b_session.session_id, b_session.password.clone());
    assert_eq!(r.error, ErrorCode::Ok as i32, "{r:?}");
    assert_eq!(code(&again.request(1, get("/", false))), ErrorCode::Ok);
    // A closed session frees a place.
    assert_eq!(
        code(&again.request(2, Op::Close(pb::CloseRequest {}))),
        ErrorCode::Ok
    );
    wait_until(Duration::from_secs(20), "a freed session place", || {
        RawConn::connect(server.addr()).handshake(0, vec![]).error == ErrorCode::Ok as i32
    });
    good.finish();
}

#[test]
fn request_bytes_limit() {
    let server = server_with(&["--max-request-bytes", "4096"]);
    let good = Good::spawn(server.addr(), "r");
    let (mut c, _) = connected(server.addr());
    // Under the limit: served.
    assert_eq!(
        code(&c.request(1, create("/small", &[1; 3000]))),
        ErrorCode::Ok
    );
    // Over: refused by its announced length, then closed.
    c.send_request(2, create("/large", &[1; 5000]));
    let answers = c.drain_until_closed();
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert_eq!(code(&answers[0]), ErrorCode::LimitExceeded);
    assert!(
        answers[0]
            .message
            .contains("exceeds the limit of 4096 bytes (--max-request-bytes)"),
        "{}",
        answers[0].message
    );
    // ZooKeeper door: closed, as ZooKeeper does past jute.maxbuffer.
    let mut zk = Jute::open(server.zk_addr());
    zk.handshake().expect("a session");
    zk.send(&vec![0u8; 5000]);
    assert!(zk.recv().is_none(), "closed");
    assert_eq!(limit_hits(server.http_addr(), "request_bytes"), 2);
    let (mut d, _) = connected(server.addr());
    assert_eq!(code(&d.request(1, get("/large", false))), ErrorCode::NoNode);
    good.finish();
}

#[test]
fn outstanding_requests_limit_is_back_pressure() {
    let server = server_with(&["--max-outstanding-requests", "8"]);
    let good = Good::spawn(server.addr(), "o");
    let (mut c, _) = connected(server.addr());
    // 500 requests sent before any answer is read: the server reads 8 at
    // a time, yet every one is answered, in order, without an error.
    const N: u64 = 500;
    for xid in 1..=N {
        c.send_request(xid, Op::Ping(pb::PingRequest {}));
    }
    for xid in 1..=N {
        let r = c.response();
        assert_eq!((r.xid, code(&r)), (xid, ErrorCode::Ok));
    }
    assert!(limit_hits(server.http_addr(), "outstanding_requests") > 0);
    good.finish();
}

/// A client that does not read while events pile up for it is dropped once
/// its queue passes --max-queued-bytes-per-connection; its session lives
/// on and can be resumed.
#[test]
fn queued_bytes_limit_drops_a_slow_reader() {
    let server = server_with(&["--max-queued-bytes-per-connection", "1048576"]);
    let good = Good::spawn(server.addr(), "q");
    let (mut slow, session) = connected(server.addr());
    let long = format!("/big/{}", "n".repeat(100 * 1024));
    let (mut writer, _) = connected(server.addr());
    assert_eq!(code(&writer.request(1, create("/big", b""))), ErrorCode::Ok);
    assert_eq!(code(&writer.request(2, create(&long, b""))), ErrorCode::Ok);
    assert_eq!(
        code(&slow.request(1, add_watch("/big", true))),
        ErrorCode::Ok
    );
    // Each change sends the slow client a ~100 KiB event it never reads.
    let mut xid = 3;
    wait_until(
        Duration::from_secs(120),
        "the slow reader is dropped",
        || {
            for _ in 0..20 {
                let r = writer.request(xid, set_data(&long, b"x"));
                assert_eq!(code(&r), ErrorCode::Ok);
                xid += 1;
            }
            limit_hits(server.http_addr(), "queued_bytes_per_connection") > 0
        },
    );
    assert!(server.log().contains("does not read"), "logged");
    // Its connection is closed (after what was queued).
    while slow.recv().is_some() {}
    // The session survives: resumed on a new connection.
    let mut back = RawConn::connect(server.addr());
    let r = back.handshake(session.session_id, session.password.clone());
    assert_eq!(r.error, ErrorCode::Ok as i32, "{r:?}");
    check_rss(server.pid().unwrap(), "after the slow reader");
    good.finish();
}

// ------------------------------------------------------------ peers

/// Garbage on the peer port of every node (random bytes, an oversized
/// length prefix, a valid length with a junk body): the cluster keeps its
/// leader and serves writes.
#[test]
fn garbage_on_the_peer_port() {
    let cluster = Cluster::start(3);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = rt
        .block_on(warden_client::Client::connect(
            &cluster.servers(),
            warden_client::ConnectOptions::default(),
        ))
        .expect("connect");
    let leader = rt.block_on(client.cluster_status()).unwrap().leader_id;
    assert_ne!(leader, 0);
    let write = |i: usize| {
        rt.block_on(client.create(
            &format!("/peer-garbage-{i}"),
            b"v",
            warden_client::CreateOptions::default(),
        ))
        .expect("a write");
    };
    write(0);

    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut random = |n: usize| -> Vec<u8> {
        (0..n)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect()
    };
    for round in 0..5 {
        for id in cluster.node_ids() {
            let peer = cluster.peer_addr(id).to_string();
            let mut payloads = vec![random(64 * 1024), u32::MAX.to_be_bytes().to_vec()];
            let mut junk = 4096u32.to_be_bytes().to_vec();
            junk.extend(random(4096));
            payloads.push(junk);
            for p in payloads {
                if let Ok(mut s) = TcpStream::connect(&peer) {
                    let _ = s.write_all(&p);
                }
            }
        }
        write(round + 1);
    }
    let status = rt.block_on(client.cluster_status()).unwrap();
    assert_eq!(status.leader_id, leader, "the leader is kept");
    for id in cluster.node_ids() {
        let pid = cluster.pid(id).expect("every node still runs");
        check_rss(pid, &format!("node {id} after peer garbage"));
    }
    write(100);
}

/// One HTTP request on a fresh connection; the whole answer (the server
/// closes after it: `Connection: close`).
fn http_exchange(addr: &str, request: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(request).unwrap();
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

const HEALTH: &[u8] = b"GET /health HTTP/1.1\r\nHost: warden\r\nConnection: close\r\n\r\n";

#[test]
fn http_connections_per_ip_and_body_size() {
    let server = server_with(&["--max-connections-per-ip", "3"]);
    let good = Good::spawn(server.addr(), "http");
    // Three idle connections take every HTTP place of this address (the
    // HTTP door counts apart from the client doors, where `good` is).
    let idle: Vec<TcpStream> = (0..3)
        .map(|_| TcpStream::connect(server.http_addr()).unwrap())
        .collect();
    let refused = http_exchange(server.http_addr(), HEALTH);
    assert!(
        refused.starts_with("HTTP/1.1 429")
            && refused.contains("LimitExceeded")
            && refused.contains("--max-connections-per-ip"),
        "{refused}"
    );
    drop(idle);
    wait_until(Duration::from_secs(20), "a freed place is reusable", || {
        http_exchange(server.http_addr(), HEALTH).starts_with("HTTP/1.1 200")
    });

    // A lock API body past the bound is refused before it is read whole.
    let body = format!(
        r#"{{"client_id":"c","ttl_ms":1000,"pad":"{}"}}"#,
        "x".repeat(100_000)
    );
    let request = format!(
        "POST /api/v1/locks/big/acquire HTTP/1.1\r\nHost: warden\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let answer = http_exchange(server.http_addr(), request.as_bytes());
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(
        http_exchange(server.http_addr(), HEALTH).starts_with("HTTP/1.1 200"),
        "the door keeps serving"
    );
    good.finish();
}
