//! Backup and restore with real processes: a 3-node cluster with data and
//! ACLs is backed up with `wardenctl snapshot save`, written to after the
//! backup, stopped and wiped; node 1 is restored from the file with
//! `warden restore` and started: the data and ACLs are there, the later
//! write is not; nodes 2 and 3 then join it empty (docs/operations.md: "Backup,
//! restore, inspect"). A damaged backup file is refused naming it.

#[allow(dead_code)]
mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{ok_stdout, wardenctl};
use warden_protocol::auth::digest_id;
use warden_testkit::{Cluster, ServerOptions};

const SUPER: &str = "admin:root-pw";

fn warden(args: &[&str]) -> Output {
    Command::new(warden_testkit::binary("warden"))
        .args(args)
        .env_remove("WARDEN_LOG")
        .env_remove("WARDEN_LOG_LEVEL")
        .stdin(Stdio::null())
        .output()
        .expect("run warden")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `warden inspect`'s lines, by path.
fn inspect(data: &Path) -> BTreeMap<String, serde_json::Value> {
    let out = warden(&["inspect", "--data-dir", data.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (v["path"].as_str().unwrap().to_string(), v)
        })
        .collect()
}

fn save(cluster: &Cluster, node: usize, file: &Path, auth: Option<&str>) -> Output {
    let mut args = vec!["snapshot", "save", file.to_str().unwrap()];
    let http = cluster.http_addr(node).to_string();
    args.extend(["--http", &http]);
    if let Some(a) = auth {
        args.extend(["--auth", a]);
    }
    wardenctl(&cluster.servers(), &args)
}

#[test]
fn a_cluster_is_backed_up_wiped_and_restored_from_one_file() {
    let super_args = vec!["--super-digest".to_string(), digest_id(SUPER).unwrap()];
    let mut cluster = Cluster::start_with(
        3,
        ServerOptions {
            extra_args: super_args.clone(),
            ..Default::default()
        },
    );
    let servers = cluster.servers();
    let bob = digest_id("bob:bob-pw").unwrap();
    let as_super = |args: &[&str]| {
        let mut a = vec!["--auth", SUPER];
        a.extend_from_slice(args);
        wardenctl(&servers, &a)
    };
    ok_stdout(&as_super(&["create", "/app", "v1"]));
    ok_stdout(&as_super(&["create", "/app/config", "port=80"]));
    let bob_only = format!("digest:{bob}:cdrwa");
    ok_stdout(&as_super(&[
        "create", "--acl", &bob_only, "/secret", "bob's",
    ]));

    let dir = tempfile::tempdir().unwrap();
    let backup = dir.path().join("cluster.snap");
    // Only the super user may take one.
    let refused = save(&cluster, 2, &backup, None);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("HTTP 401"),
        "{}",
        stderr(&refused)
    );
    let refused = save(&cluster, 2, &backup, Some("bob:bob-pw"));
    assert!(
        stderr(&refused).contains("HTTP 403"),
        "{}",
        stderr(&refused)
    );
    assert!(!backup.exists());
    // From a follower or the leader alike: node 2.
    let saved = ok_stdout(&save(&cluster, 2, &backup, Some(SUPER)));
    assert!(saved.starts_with("saved "), "{saved}");

    // After the backup: not in it.
    ok_stdout(&as_super(&["create", "/later", "x"]));

    // A running server's data dir is not read behind its back.
    let data3 = cluster.node_dir(3).join("data");
    let busy = warden(&["inspect", "--data-dir", data3.to_str().unwrap()]);
    assert!(stderr(&busy).contains("in use"), "{}", stderr(&busy));

    for i in cluster.node_ids() {
        cluster.stop(i);
    }
    // Offline: the snapshot (none yet at this size) and the committed log
    // after it, so the write after the backup is there, with the ACL.
    let live = inspect(&data3);
    assert_eq!(live["/later"]["data"], "x", "{live:?}");
    assert_eq!(live["/secret"]["acl"][0]["id"], bob.as_str(), "{live:?}");
    assert_eq!(live["/secret"]["data"], "bob's");
    for i in cluster.node_ids() {
        std::fs::remove_dir_all(cluster.node_dir(i).join("data")).unwrap();
    }

    let data1 = cluster.node_dir(1).join("data");
    let restored = warden(&[
        "restore",
        "--snapshot",
        backup.to_str().unwrap(),
        "--data-dir",
        data1.to_str().unwrap(),
        "--id",
        "1",
    ]);
    assert!(restored.status.success(), "{}", stderr(&restored));
    assert!(data1.join("FORMAT").exists());
    // Restoring over it again is refused.
    let again = warden(&[
        "restore",
        "--snapshot",
        backup.to_str().unwrap(),
        "--data-dir",
        data1.to_str().unwrap(),
    ]);
    assert!(
        stderr(&again).contains("is not empty"),
        "{}",
        stderr(&again)
    );

    // Offline, the restored dir reads back as JSON lines.
    let restored = inspect(&data1);
    assert_eq!(restored["/app/config"]["data"], "port=80");
    assert!(!restored.contains_key("/later"), "{restored:?}");

    // Node 1 alone: a group of one.
    cluster.restart(1);
    let one = cluster.addr(1).to_string();
    let get = |servers: &str, auth: Option<&str>, path: &str| {
        let mut a = Vec::new();
        if let Some(x) = auth {
            a.extend(["--auth", x]);
        }
        a.extend(["get", path]);
        wardenctl(servers, &a)
    };
    assert_eq!(ok_stdout(&get(&one, None, "/app")).trim(), "v1");
    assert_eq!(ok_stdout(&get(&one, None, "/app/config")).trim(), "port=80");
    let later = get(&one, Some(SUPER), "/later");
    assert!(stderr(&later).contains("NoNode"), "{}", stderr(&later));
    // The ACL came back with the data.
    let anon = get(&one, None, "/secret");
    assert!(stderr(&anon).contains("NoAuth"), "{}", stderr(&anon));
    assert_eq!(
        ok_stdout(&get(&one, Some("bob:bob-pw"), "/secret")).trim(),
        "bob's"
    );
    let acl = ok_stdout(&wardenctl(&one, &["--auth", SUPER, "getacl", "/secret"]));
    assert!(acl.contains(&bob), "{acl}");

    // Nodes 2 and 3 join it empty and catch up from node 1.
    for i in [2, 3] {
        let mut args = super_args.clone();
        args.push("--join".into());
        cluster.set_extra_args(i, args);
        cluster.launch_spare(i);
        let id = i.to_string();
        let peer = cluster.peer_addr(i).to_string();
        // Membership is the super user's once there is one.
        ok_stdout(&wardenctl(
            &one,
            &["--auth", SUPER, "cluster", "add", &id, &peer],
        ));
        cluster.await_ready(i);
        let node = cluster.addr(i).to_string();
        warden_testkit::wait_until(Duration::from_secs(30), "node catches up", || {
            get(&node, None, "/app/config").status.success()
        });
        assert_eq!(ok_stdout(&get(&node, None, "/app")).trim(), "v1");
    }
    // All three members, as each reports itself (a new member's first
    // report takes a moment).
    let servers = cluster.servers();
    warden_testkit::wait_until(Duration::from_secs(30), "three members", || {
        let status = ok_stdout(&wardenctl(&servers, &["cluster", "status"]));
        status
            .lines()
            .filter(|l| l.contains(" leader ") || l.contains(" follower "))
            .count()
            == 3
    });
}

#[test]
fn a_damaged_backup_is_refused_naming_it() {
    let cluster = Cluster::start(1);
    ok_stdout(&wardenctl(&cluster.servers(), &["create", "/a", "1"]));
    let dir = tempfile::tempdir().unwrap();
    let backup = dir.path().join("b.snap");
    ok_stdout(&save(&cluster, 1, &backup, None));
    let mut bytes = std::fs::read(&backup).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    let damaged = dir.path().join("damaged.snap");
    std::fs::write(&damaged, &bytes).unwrap();
    let target = dir.path().join("restored");
    let out = warden(&[
        "restore",
        "--snapshot",
        damaged.to_str().unwrap(),
        "--data-dir",
        target.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains(damaged.to_str().unwrap()) && err.contains("checksum mismatch"),
        "{err}"
    );
    assert!(!target.exists(), "nothing is written from a damaged file");
    // wardenctl checks the download as it arrives: a damaged or cut-short
    // answer leaves no FILE (an older one as it was) and no FILE.tmp.
    let kept = dir.path().join("kept.snap");
    std::fs::write(&kept, "an older backup").unwrap();
    let good = std::fs::read(&backup).unwrap();
    let cut = good[..good.len() - 100].to_vec();
    for (body, announced, why) in [
        (bytes.clone(), bytes.len(), "checksum mismatch"),
        (
            cut,
            good.len(),
            &*format!("closed after {} of {} bytes", good.len() - 100, good.len()),
        ),
    ] {
        let (http, server) = serve_once(body, announced);
        let out = wardenctl(
            &cluster.servers(),
            &["snapshot", "save", kept.to_str().unwrap(), "--http", &http],
        );
        server.join().unwrap();
        assert!(!out.status.success());
        assert!(stderr(&out).contains(why), "{}", stderr(&out));
        assert_eq!(std::fs::read_to_string(&kept).unwrap(), "an older backup");
        assert!(!dir.path().join("kept.snap.tmp").exists());
    }
    // The good file restores.
    let out = warden(&[
        "restore",
        "--snapshot",
        backup.to_str().unwrap(),
        "--data-dir",
        target.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// A one-answer HTTP server on 127.0.0.1: `200` with a `Content-Length`
/// of `announced` bytes, then `body`, then the connection closes.
fn serve_once(body: Vec<u8>, announced: usize) -> (String, std::thread::JoinHandle<()>) {
    use std::io::{Read as _, Write as _};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut head = Vec::new();
        let mut buf = [0u8; 4096];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = s.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            head.extend_from_slice(&buf[..n]);
        }
        let _ = write!(
            s,
            "HTTP/1.1 200 OK\r\nContent-Length: {announced}\r\nConnection: close\r\n\r\n"
        );
        let _ = s.write_all(&body);
    });
    (addr, server)
}

#[test]
fn a_data_dir_of_a_newer_format_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("FORMAT"), "99\n").unwrap();
    let out = warden(&[
        "serve",
        "--data-dir",
        data.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--zk-listen",
        "127.0.0.1:0",
        "--http-listen",
        "127.0.0.1:0",
        "--peer-listen",
        "127.0.0.1:0",
    ]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("data dir format 99 is newer") && err.contains("FORMAT"),
        "{err}"
    );
}

#[test]
fn a_backup_is_saved_over_https() {
    let certs = warden_testkit::tls::TlsCerts::generate(&["node"], &[]);
    let cluster = Cluster::start_with(
        1,
        ServerOptions {
            extra_args: certs.server_args("node", &[]),
            ..Default::default()
        },
    );
    let tls = certs.ctl_args(None);
    let tls: Vec<&str> = tls.iter().map(String::as_str).collect();
    let mut create = tls.clone();
    create.extend(["create", "/over-tls", "yes"]);
    ok_stdout(&wardenctl(&cluster.servers(), &create));
    let dir = tempfile::tempdir().unwrap();
    let backup = dir.path().join("tls.snap");
    let http = cluster.http_addr(1).to_string();
    let file = backup.to_str().unwrap();
    // Plain HTTP to an HTTPS port gets no snapshot.
    let plain = wardenctl(
        &cluster.servers(),
        &["snapshot", "save", file, "--http", &http],
    );
    assert!(!plain.status.success());
    assert!(!backup.exists());
    let mut save = tls.clone();
    save.extend(["snapshot", "save", file, "--http", &http]);
    ok_stdout(&wardenctl(&cluster.servers(), &save));
    let target = dir.path().join("restored");
    let out = warden(&[
        "restore",
        "--snapshot",
        file,
        "--data-dir",
        target.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(inspect(&target)["/over-tls"]["data"], "yes");
}

/// A client that goes away mid-backup stops the server's encoding (its log
/// says so) and the server goes on serving: the next backup is whole.
#[test]
fn a_backup_abandoned_midway_stops_and_the_next_is_whole() {
    use std::io::{Read as _, Write as _};
    let server = warden_testkit::Server::start();
    // About 25 MB of tree: more than the socket buffers and the chunks the
    // server encodes ahead hold, so the server is still sending when the
    // client goes.
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let c = warden_client::Client::connect(server.addr(), Default::default())
            .await
            .unwrap();
        let data = vec![b'x'; 900 * 1024];
        for i in 0..28 {
            c.create(&format!("/big{i}"), &data, Default::default())
                .await
                .unwrap();
        }
        let _ = c.close().await;
    });
    // A small receive buffer, set before connecting: Linux would otherwise
    // grow it as the client reads (tcp_rmem allows 32 MiB here), and the
    // whole backup could sit in kernel buffers before the client goes.
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.set_recv_buffer_size(64 * 1024).unwrap();
    let addr: std::net::SocketAddr = server.http_addr().parse().unwrap();
    socket.connect(&addr.into()).unwrap();
    let mut s: std::net::TcpStream = socket.into();
    write!(
        s,
        "GET /api/v1/snapshot HTTP/1.1\r\nHost: warden\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut buf = vec![0u8; 64 * 1024];
    let mut got = 0;
    while got < 256 * 1024 {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "the server closed after {got} bytes");
        got += n;
    }
    drop(s);
    warden_testkit::wait_until(
        Duration::from_secs(30),
        "the abandoned backup stops",
        || server.log().contains("backup snapshot not sent whole"),
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("whole.snap");
    let saved = ok_stdout(&wardenctl(
        server.addr(),
        &[
            "snapshot",
            "save",
            file.to_str().unwrap(),
            "--http",
            server.http_addr(),
        ],
    ));
    assert!(saved.contains("znodes"), "{saved}");
    let restored = dir.path().join("restored");
    let out = warden(&[
        "restore",
        "--snapshot",
        file.to_str().unwrap(),
        "--data-dir",
        restored.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let tree = inspect(&restored);
    assert_eq!(tree["/big27"]["stat"]["data_length"], 900 * 1024, "{saved}");
}
