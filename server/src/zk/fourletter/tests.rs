//! The words' layout, from a report with known figures: what ZooKeeper
//! 3.8 prints, line for line where Warden has the figure.

use std::time::Duration;

use super::*;
use crate::core::admin::{
    AdminReport, ConnFigures, ConnReport, Digest, Latency, ServerFigures, SessionReport,
};
use crate::core::ServerStats;
use crate::proto::NodeStatus;

fn report(role: &str, members: usize) -> AdminReport {
    let mut latency = Latency::default();
    for ms in [1, 2, 6] {
        latency.observe(Duration::from_millis(ms));
    }
    let mut conn = ConnFigures::new();
    conn.received = 7;
    conn.sent = 8;
    conn.last_cxid = Some(0x21);
    conn.answered("multi", 0x1a, Duration::from_millis(4));
    AdminReport {
        stats: ServerStats {
            status: NodeStatus {
                id: 2,
                role: role.into(),
                applied_index: 0x1a,
                leader_id: 1,
                ..Default::default()
            },
            members,
            nodes: 29,
            connections: 1,
            watches: 3,
            ephemerals: 1,
            sessions: 1,
            read_only: false,
            read_only_sessions: 0,
            leader_changes: 1,
            proposals: 0,
            io: Default::default(),
            last_snapshot_bytes: 0,
            zk_port: 2181,
            zk_tls: false,
            data_dir: "/var/lib/warden".into(),
            max_client_cnxns: 60,
            tick_ms: 100,
            min_session_timeout_ms: 4000,
            max_session_timeout_ms: 40000,
        },
        server: ServerFigures {
            received: 37,
            sent: 38,
            latency,
            ..ServerFigures::new()
        },
        outstanding: 2,
        data_bytes: 439,
        learner: false,
        learners: 2,
        synced_followers: 2,
        synced_non_voting: 0,
        connections: vec![ConnReport {
            peer: "127.0.0.1:35250".parse().unwrap(),
            session_id: 0x1000003142a0000,
            session_timeout_ms: 10000,
            outstanding: 2,
            figures: conn,
        }],
        watches: vec![(0x1000003142a0000, vec!["/a".into(), "/b".into()])],
        sessions: vec![SessionReport {
            session_id: 0x1000003142a0000,
            timeout_ms: 10000,
            ephemerals: vec!["/e".into()],
        }],
        digest: Some(Digest {
            zxid: 0x1a,
            digest: 12345,
        }),
    }
}

fn asker() -> std::net::SocketAddr {
    "127.0.0.1:40326".parse().unwrap()
}

fn say(word: Word, r: &AdminReport) -> String {
    let host = Host {
        data_dir_bytes: 4096,
        open_fds: 41,
        max_fds: 20000,
    };
    render(word, r, &host, Some(&asker()))
}

#[test]
fn every_word_parses_and_has_a_command_name() {
    for (word, text, names) in WORDS {
        assert_eq!(Word::parse(text.as_bytes().try_into().unwrap()), Some(word));
        assert_eq!(Word::from_command(names[0]), Some(word));
        assert_eq!(Word::from_command(text), Some(word), "{text}");
        assert_eq!(word.command(), names[0]);
    }
    assert_eq!(Word::parse(b"xxxx"), None);
    assert_eq!(Word::from_command("nope"), None);
}

#[test]
fn srvr_and_stat_carry_real_figures() {
    let r = report("follower", 3);
    assert_eq!(
        say(Word::Srvr, &r),
        format!(
            "Zookeeper version: {FULL_VERSION}\nLatency min/avg/max: 1/3.0/6\nReceived: 37\nSent: 38\n\
             Connections: 2\nOutstanding: 2\nZxid: 0x1a\nMode: follower\nNode count: 29\n"
        )
    );
    let stat = say(Word::Stat, &r);
    assert!(
        stat.contains(
            "Clients:\n /127.0.0.1:35250[1](queued=2,recved=7,sent=8)\n \
             /127.0.0.1:40326[0](queued=0,recved=1,sent=0)\n\nLatency"
        ),
        "{stat}"
    );
    assert!(say(Word::Srvr, &report("leader", 3)).contains("Mode: leader\n"));
    assert!(say(Word::Srvr, &report("leader", 1)).contains("Mode: standalone\n"));
}

#[test]
fn cons_lists_each_connection_in_full() {
    let cons = say(Word::Cons, &report("leader", 3));
    let first = cons.lines().next().unwrap();
    let est = first
        .split(",est=")
        .nth(1)
        .unwrap()
        .split(',')
        .next()
        .unwrap();
    let lresp = first
        .split(",lresp=")
        .nth(1)
        .unwrap()
        .split(',')
        .next()
        .unwrap();
    assert_eq!(
        first,
        format!(
            " /127.0.0.1:35250[1](queued=2,recved=7,sent=8,sid=0x1000003142a0000,lop=MULT,\
             est={est},to=10000,lcxid=0x21,lzxid=0x1a,lresp={lresp},llat=4,minlat=4,avglat=4,maxlat=4)"
        )
    );
    assert!(est.parse::<i64>().unwrap() > 1_600_000_000_000, "{est}");
    assert!(
        cons.ends_with(" /127.0.0.1:40326[0](queued=0,recved=1,sent=0)\n\n"),
        "{cons}"
    );
}

#[test]
fn mntr_has_the_figures_monitoring_reads() {
    let mntr = say(Word::Mntr, &report("leader", 3));
    for line in [
        format!("zk_version\t{FULL_VERSION}"),
        "zk_server_state\tleader".into(),
        "zk_avg_latency\t3.0".into(),
        "zk_min_latency\t1".into(),
        "zk_max_latency\t6".into(),
        "zk_packets_received\t37".into(),
        "zk_packets_sent\t38".into(),
        "zk_num_alive_connections\t2".into(),
        "zk_outstanding_requests\t2".into(),
        "zk_znode_count\t29".into(),
        "zk_watch_count\t3".into(),
        "zk_ephemerals_count\t1".into(),
        "zk_approximate_data_size\t439".into(),
        "zk_open_file_descriptor_count\t41".into(),
        "zk_max_file_descriptor_count\t20000".into(),
        "zk_peer_state\tleading - broadcast".into(),
        "zk_learners\t2".into(),
        "zk_synced_followers\t2".into(),
        "zk_synced_non_voting_followers\t0".into(),
    ] {
        assert!(mntr.lines().any(|l| l == line), "no {line:?} in\n{mntr}");
    }
    let follower = say(Word::Mntr, &report("follower", 3));
    assert!(follower.contains("zk_server_state\tfollower\n"));
    assert!(!follower.contains("zk_synced_followers"), "{follower}");
}

#[test]
fn watches_sessions_and_digest() {
    let r = report("follower", 3);
    assert_eq!(
        say(Word::Wchs, &r),
        "1 connections watching 2 paths\nTotal watches:3\n"
    );
    assert_eq!(say(Word::Wchc, &r), "0x1000003142a0000\n\t/a\n\t/b\n\n");
    assert_eq!(
        say(Word::Wchp, &r),
        "/a\n\t0x1000003142a0000\n/b\n\t0x1000003142a0000\n\n"
    );
    let dump = say(Word::Dump, &r);
    assert!(
        dump.starts_with(
            "SessionTracker dump:\nGlobal Sessions(1):\n0x1000003142a0000\t10000ms\n\
             ephemeral nodes dump:\nSessions with Ephemerals (1):\n0x1000003142a0000:\n\t/e\n"
        ),
        "{dump}"
    );
    assert!(dump.contains("\tip: /127.0.0.1:35250 sessionId: 0x1000003142a0000\n"));
    assert_eq!(say(Word::Hash, &r), "1a: 12345\n");
}

#[test]
fn simple_words() {
    let r = report("follower", 3);
    assert_eq!(say(Word::Ruok, &r), "imok");
    assert_eq!(say(Word::Isro, &r), "rw");
    assert_eq!(say(Word::Crst, &r), "Connection stats reset.\n");
    assert_eq!(say(Word::Srst, &r), "Server stats reset.\n");
    assert_eq!(
        say(Word::Dirs, &r),
        "datadir_size: 4096\nlogdir_size: 4096\n"
    );
    let conf = say(Word::Conf, &r);
    assert!(
        conf.starts_with(
            "clientPort=2181\nsecureClientPort=-1\ndataDir=/var/lib/warden\ndataDirSize=4096\n"
        ),
        "{conf}"
    );
    assert!(conf.contains(
        "\ntickTime=100\nmaxClientCnxns=60\nminSessionTimeout=4000\nmaxSessionTimeout=40000\n"
    ));
    assert!(conf.ends_with("serverId=2\n"));
    let envi = say(Word::Envi, &r);
    assert!(envi.starts_with(&format!("Environment:\nzookeeper.version={FULL_VERSION}\n")));
    assert!(envi.contains(&format!("\nwarden.version={}\n", env!("CARGO_PKG_VERSION"))));
    // kazoo's server_version(): the leading digits and dots.
    let v = envi
        .lines()
        .nth(1)
        .unwrap()
        .trim_start_matches("zookeeper.version=");
    let digits: String = v
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    assert_eq!(digits, "3.8.0");
}

#[test]
fn without_a_leader_only_ruok_envi_and_isro_answer() {
    let mut r = report("candidate", 3);
    r.stats.status.leader_id = 0;
    for (word, _, _) in WORDS {
        let said = say(word, &r);
        match word {
            Word::Ruok => assert_eq!(said, "imok"),
            Word::Isro => assert_eq!(said, "null"),
            Word::Envi => assert!(said.starts_with("Environment:\n")),
            _ => assert_eq!(said, format!("{NOT_SERVING}\n"), "{word:?}"),
        }
    }
}

#[test]
fn doubles_print_as_java_prints_them() {
    assert_eq!(java_double(0.0), "0.0");
    assert_eq!(java_double(1.0), "1.0");
    assert_eq!(java_double(0.94117647), "0.9412");
    assert_eq!(java_double(12.5), "12.5");
}

/// In read-only mode (no leader, `--zk-read-only`) the server answers as
/// ZooKeeper's read-only server: `isro` is `ro`, its mode `read-only`, and
/// the words that need a running server are answered.
#[test]
fn read_only_mode_says_ro() {
    let mut r = report("candidate", 3);
    r.stats.status.leader_id = 0;
    r.stats.read_only = true;
    r.stats.read_only_sessions = 2;
    assert_eq!(say(Word::Isro, &r), "ro");
    assert!(say(Word::Srvr, &r).contains("Mode: read-only\n"));
    let mntr = say(Word::Mntr, &r);
    assert!(mntr.contains("zk_server_state\tread-only\n"), "{mntr}");
    assert!(mntr.contains("zk_local_sessions\t2\n"), "{mntr}");
    assert_eq!(say(Word::Isro, &report("leader", 3)), "rw");
}
