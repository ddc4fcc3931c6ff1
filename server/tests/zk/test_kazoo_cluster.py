"""ZooKeeper compatibility against a 3-node Warden cluster, with kazoo:
server_version(), transactions, LockingQueue, null data, the packet limit
(ConnectionLoss, as ZooKeeper), the four-letter words' figures moving with
load, the AdminServer's /commands JSON, and ZooKeeper's own subtree
(/zookeeper, /zookeeper/config, /zookeeper/quota).

Run by server/tests/zk_kazoo.rs, which starts the cluster and passes
WARDEN_ZK_HOSTS (all three), WARDEN_ZK_NODES and WARDEN_HTTP_NODES (each
node's ZooKeeper and HTTP address, comma-separated, in the same order)."""

import json
import os
import re
import socket
import time
import urllib.error
import urllib.request
import uuid

import pytest
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    QuotaExceededError,
    RolledBackError,
)

HOSTS = os.environ["WARDEN_ZK_HOSTS"]
NODES = os.environ["WARDEN_ZK_NODES"].split(",")
HTTP = os.environ["WARDEN_HTTP_NODES"].split(",")
DEADLINE_S = 20
PACKET_MAX = 0xFFFFF  # --zk-max-packet-bytes' default, ZooKeeper's jute.maxbuffer


def word(addr, w):
    """A four-letter word's whole answer."""
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(w.encode())
        chunks = []
        while True:
            b = s.recv(65536)
            if not b:
                return b"".join(chunks).decode()
            chunks.append(b)


def mntr(addr):
    out = {}
    for line in word(addr, "mntr").splitlines():
        k, v = line.split("\t", 1)
        out[k] = v
    return out


def srvr(addr):
    return dict(line.split(": ", 1) for line in word(addr, "srvr").splitlines() if ": " in line)


def eventually(what, check):
    deadline = time.monotonic() + DEADLINE_S
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {DEADLINE_S}s")
        time.sleep(0.05)


def admin(i, name):
    """GET /commands/NAME on node i: (status, JSON)."""
    try:
        with urllib.request.urlopen(f"http://{HTTP[i]}/commands/{name}", timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def client(hosts=HOSTS):
    zk = KazooClient(hosts=hosts, timeout=10)
    zk.start(timeout=DEADLINE_S)
    return zk


@pytest.fixture
def zk():
    c = client()
    yield c
    c.stop()
    c.close()


@pytest.fixture
def root(zk):
    path = "/compat-" + uuid.uuid4().hex[:8]
    zk.ensure_path(path)
    return path


def test_server_version_is_3_8_on_every_node():
    for node in NODES:
        c = client(node)
        try:
            assert c.server_version() == (3, 8, 0)
        finally:
            c.stop()
            c.close()
        envi = word(node, "envi")
        assert re.search(r"^zookeeper\.version=3\.8\.0-warden-\S+", envi, re.M), envi
        assert re.search(r"^warden\.version=\S+", envi, re.M), envi


def test_transactions_commit_whole_or_not_at_all(zk, root):
    t = zk.transaction()
    t.create(root + "/a", b"1")
    t.create(root + "/b", b"2")
    t.set_data(root, b"x")
    t.check(root + "/a", 0)
    assert t.commit() == [root + "/a", root + "/b", zk.exists(root), True]
    assert zk.get(root + "/a")[0] == b"1"

    t = zk.transaction()
    t.create(root + "/c", b"3")
    t.delete(root + "/b")
    t.check(root + "/a", 99)
    results = t.commit()
    assert isinstance(results[0], RolledBackError), results
    assert isinstance(results[1], RolledBackError), results
    assert isinstance(results[2], BadVersionError), results
    assert zk.exists(root + "/c") is None
    assert zk.exists(root + "/b") is not None


def test_locking_queue_hands_each_item_to_one_consumer(zk, root):
    producer = zk.LockingQueue(root + "/q")
    producer.put(b"first", priority=1)
    producer.put_all([b"second", b"third"], priority=5)
    assert len(producer) == 3

    # Consumers on two different servers.
    c1, c2 = client(NODES[0]), client(NODES[1])
    try:
        q1, q2 = c1.LockingQueue(root + "/q"), c2.LockingQueue(root + "/q")
        assert q1.get(timeout=DEADLINE_S) == b"first"
        assert q1.holds_lock()
        got2 = q2.get(timeout=DEADLINE_S)
        assert got2 == b"second"
        # Released, not consumed: the item goes back for someone else.
        assert q2.release()
        assert q1.consume()
        assert q1.get(timeout=DEADLINE_S) == b"second"
        assert q1.consume()
        assert q2.get(timeout=DEADLINE_S) == b"third"
        assert q2.consume()
        assert len(producer) == 0
    finally:
        for c in (c1, c2):
            c.stop()
            c.close()


def test_null_data_reads_back_as_none(zk, root):
    zk.create(root + "/null", None)
    zk.create(root + "/empty")  # kazoo's default value: b""
    data, stat = zk.get(root + "/null")
    assert data is None and stat.dataLength == 0
    assert zk.get(root + "/empty")[0] == b""

    zk.set(root + "/empty", None)
    assert zk.get(root + "/empty")[0] is None
    zk.set(root + "/null", b"")
    assert zk.get(root + "/null")[0] == b""
    zk.set(root + "/null", None)

    # Replicated as null: every server reads it so.
    for node in NODES:
        c = client(node)
        try:
            c.sync(root)
            assert c.get(root + "/null")[0] is None
            assert c.get(root + "/empty")[0] is None
        finally:
            c.stop()
            c.close()


def test_a_packet_over_the_limit_closes_the_connection(root):
    c = client(NODES[0])
    try:
        session = c.client_id[0]
        # Just under the bound: an ordinary write.
        c.create(root + "/big", b"x" * (PACKET_MAX - 100))
        assert len(c.get(root + "/big")[0]) == PACKET_MAX - 100
        # Over it: ZooKeeper closes the connection, and so does Warden.
        with pytest.raises(ConnectionLoss):
            c.set(root + "/big", b"y" * (PACKET_MAX + 1))
        # The client reconnects to the same session; nothing was written.
        eventually("reconnected", lambda: c.state == KazooState.CONNECTED)
        assert c.client_id[0] == session
        assert c.get(root + "/big")[0][:1] == b"x"
    finally:
        c.stop()
        c.close()
    with urllib.request.urlopen(f"http://{HTTP[0]}/metrics", timeout=10) as r:
        metrics = r.read().decode()
    assert re.search(r'warden_limit_hits_total\{limit="zk_packet_bytes"\} [1-9]', metrics), metrics


def test_words_move_with_load(root):
    node = NODES[1]
    c = client(node)
    try:
        sid = c.client_id[0]
        before = mntr(node)
        before_srvr = srvr(node)
        for i in range(40):
            c.create(f"{root}/n{i}", b"d" * 1000)
            c.get(f"{root}/n{i}")
        c.create(root + "/eph", b"", ephemeral=True)
        c.get(root + "/n0", watch=lambda event: None)
        after = mntr(node)
        after_srvr = srvr(node)

        assert int(after["zk_packets_received"]) >= int(before["zk_packets_received"]) + 82
        assert int(after["zk_packets_sent"]) >= int(before["zk_packets_sent"]) + 82
        assert int(after_srvr["Received"]) > int(before_srvr["Received"])
        assert int(after["zk_approximate_data_size"]) >= int(before["zk_approximate_data_size"]) + 40_000
        assert int(after["zk_znode_count"]) >= int(before["zk_znode_count"]) + 41
        assert float(after["zk_avg_latency"]) > 0
        assert int(after["zk_max_latency"]) >= int(after["zk_min_latency"])
        assert after["zk_server_state"] in ("leader", "follower")
        assert int(after["zk_outstanding_requests"]) >= 0
        assert int(after["zk_num_alive_connections"]) >= 2  # c and this word's own
        assert re.match(r"\d+/\d+(\.\d+)?/\d+$", after_srvr["Latency min/avg/max"])

        # Our connection, in full, in cons; briefly in stat.
        mine = [l for l in word(node, "cons").splitlines() if f"sid=0x{sid:x}," in l]
        assert len(mine) == 1, word(node, "cons")
        received = int(re.search(r"recved=(\d+)", mine[0]).group(1))
        assert received >= 82, mine[0]
        # The last answer: the get, or a heartbeat since.
        assert re.search(r",lop=(GETD|PING),", mine[0]), mine[0]
        assert re.search(r",to=\d+,lcxid=0x[0-9a-f]+,lzxid=0x[0-9a-f]+,", mine[0]), mine[0]
        assert "Clients:\n /127.0.0.1:" in word(node, "stat")

        # Watches, by summary, session and path.
        assert re.match(r"\d+ connections watching \d+ paths\nTotal watches:\d+\n", word(node, "wchs"))
        assert f"0x{sid:x}\n\t{root}/n0\n" in word(node, "wchc")
        assert f"{root}/n0\n\t0x{sid:x}\n" in word(node, "wchp")
        # Sessions and ephemerals (replicated: any node knows them).
        eventually(
            "the ephemeral in another node's dump",
            lambda: f"0x{sid:x}:\n\t{root}/eph\n" in word(NODES[2], "dump"),
        )
        assert word(node, "isro") == "rw"
        assert word(node, "ruok") == "imok"
        assert re.match(r"datadir_size: \d+\nlogdir_size: \d+\n$", word(node, "dirs"))
        assert re.search(r"^clientPort=\d+$", word(node, "conf"), re.M)

        # crst resets the connections' figures, srst the server's.
        assert word(node, "crst") == "Connection stats reset.\n"
        mine = [l for l in word(node, "cons").splitlines() if f"sid=0x{sid:x}," in l]
        assert int(re.search(r"recved=(\d+)", mine[0]).group(1)) < received, mine[0]
        assert word(node, "srst") == "Server stats reset.\n"
        assert int(srvr(node)["Received"]) < int(after_srvr["Received"])
    finally:
        c.stop()
        c.close()


def test_replicas_agree_on_the_digest(zk, root):
    zk.create(root + "/h", b"h")

    def same():
        lines = [word(n, "hash").strip() for n in NODES]
        return len(set(lines)) == 1 and re.match(r"[0-9a-f]+: \d+$", lines[0]) and lines

    eventually("one digest at one zxid on every node", same)


def test_the_leader_reports_its_followers():
    def states():
        s = {n: mntr(n) for n in NODES}
        leaders = [m for m in s.values() if m["zk_server_state"] == "leader"]
        followers = [m for m in s.values() if m["zk_server_state"] == "follower"]
        ok = (
            len(leaders) == 1
            and len(followers) == 2
            and leaders[0].get("zk_synced_followers") == "2"
            and leaders[0].get("zk_learners") == "2"
            and all(f["zk_peer_state"] == "following - broadcast" for f in followers)
        )
        return ok and s

    s = eventually("one leader with two synced followers", states)
    for node in NODES:
        assert srvr(node)["Mode"] == s[node]["zk_server_state"]


def test_unknown_words_get_zookeepers_answer():
    # ZooKeeper reads four bytes that are no word as a packet length, far
    # beyond its bound, and closes the connection without a word.
    assert word(NODES[0], "xyzw") == ""


def test_admin_server_commands(zk, root):
    zk.get(root, watch=lambda event: None)
    sid = zk.client_id[0]
    port = zk._connection._socket.getpeername()[1]
    i = [int(n.rsplit(":", 1)[1]) for n in NODES].index(port)

    status, body = admin(i, "ruok")
    assert (status, body) == (200, {"command": "ruok", "error": None})
    status, body = admin(i, "monitor")
    assert status == 200 and body["command"] == "monitor" and body["error"] is None
    assert body["server_state"] in ("leader", "follower")
    assert body["packets_received"] > 0 and body["znode_count"] > 1
    status, body = admin(i, "srvr")
    assert body["command"] == "server_stats" and body["version"].startswith("3.8.0-warden-")
    assert body["server_stats"]["packets_received"] > 0
    status, body = admin(i, "connections")
    assert any(c.get("session_id") == f"{sid:x}" for c in body["connections"]), body
    status, body = admin(i, "watches")
    assert body["session_id_to_watched_paths"][str(sid)] == [root], body
    status, body = admin(i, "wchp")
    assert body["command"] == "watches_by_path" and body["path_to_session_ids"][root] == [sid]
    status, body = admin(i, "wchs")
    assert body["num_total_watches"] >= 1
    status, body = admin(i, "environment")
    assert body["zookeeper.version"].startswith("3.8.0-warden-")
    status, body = admin(i, "is_read_only")
    assert body == {"command": "is_read_only", "error": None, "read_only": False}
    status, body = admin(i, "conf")
    assert body["command"] == "configuration" and body["client_port"] > 0
    status, body = admin(i, "hash")
    assert len(body["digests"]) == 1
    status, body = admin(i, "dump")
    assert str(sid) in body["session_id_to_timeout_ms"]
    status, body = admin(i, "nope")
    assert status == 404 and body["error"] == "Unknown command: nope"


def config_of(c):
    """/zookeeper/config as ZooKeeper's dynamic-config lines, and its stat."""
    data, stat = c.get("/zookeeper/config")
    assert stat.dataLength == len(data)
    return data.decode().splitlines(), stat


def test_zookeeper_subtree_and_config_on_every_node(zk):
    assert sorted(zk.get_children("/zookeeper")) == ["config", "quota"]
    assert "zookeeper" in zk.get_children("/")
    assert zk.exists("/zookeeper/quota") is not None
    assert zk.get("/zookeeper/quota")[0] == b""
    assert zk.exists("/zookeeper/nothing") is None
    expected = set(NODES)

    def complete(c):
        # Each member's line names its ZooKeeper port once its status
        # has reached the node asked.
        lines, _ = config_of(c)
        clients = {line.split(";", 1)[1] for line in lines if ";" in line}
        return lines if clients == expected else None

    seen = []
    for node in NODES:
        c = client(node)
        try:
            lines = eventually(f"config on {node} lists every member", lambda: complete(c))
        finally:
            c.stop()
            c.close()
        servers = lines[:-1]
        assert len(servers) == 3, lines
        for line in servers:
            assert re.fullmatch(
                r"server\.\d+=127\.0\.0\.1:\d+:0:participant;127\.0\.0\.1:\d+", line
            ), line
        version = lines[-1]
        assert version.startswith("version=")
        int(version.split("=", 1)[1], 16)
        seen.append(lines)
    # Every member computes the same config.
    assert seen[0] == seen[1] == seen[2]

    # Read-only, as ZooKeeper's config node; the others cannot be made.
    with pytest.raises(NoAuthError):
        zk.set("/zookeeper/config", b"server.9=x")
    with pytest.raises(NoAuthError):
        zk.delete("/zookeeper/config")
    with pytest.raises(NoAuthError):
        zk.create("/zookeeper/mine", b"")
    with pytest.raises(NodeExistsError):
        zk.create("/zookeeper", b"")
    acl, _ = zk.get_acls("/zookeeper/config")
    assert [(a.perms, a.id.scheme, a.id.id) for a in acl] == [(1, "world", "anyone")]
    # Still the same, and the connection still serves.
    assert config_of(zk)[0] == seen[0]


def test_quota_hard_limits_hold_on_every_node(zk, root):
    """ZooKeeper 3.8's quota nodes, written as zkCli's setquota writes them:
    the servers keep the stats, and a write past a hard limit is refused
    (QuotaExceeded) through whichever member it is sent to."""
    quota = "/zookeeper/quota" + root
    zk.create(root + "/a", b"12")
    zk.ensure_path(quota)
    zk.create(quota + "/zookeeper_limits", b"count=-1,bytes=-1=;byteHardLimit=10;countHardLimit=3")
    zk.create(quota + "/zookeeper_stats", b"count=0,bytes=0")
    assert zk.get(quota + "/zookeeper_stats")[0] == b"count=2,bytes=2"
    others = [client(node) for node in NODES]
    try:
        others[1].create(root + "/b", b"345")
        with pytest.raises(QuotaExceededError):
            others[2].create(root + "/c")
        with pytest.raises(QuotaExceededError):
            others[0].set(root + "/b", b"too many bytes")
        for c in others:
            c.sync(root)
            assert c.get(quota + "/zookeeper_stats")[0] == b"count=3,bytes=5"
        # Lifting the hard count lets the create through.
        zk.set(quota + "/zookeeper_limits", b"count=-1,bytes=-1=;byteHardLimit=10;countHardLimit=-1")
        others[2].create(root + "/c")
    finally:
        for c in others:
            c.stop()
            c.close()
    zk.delete(quota, recursive=True)
    zk.create(root + "/d", b"no quota, no limit")
