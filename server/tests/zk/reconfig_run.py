"""ZooKeeper's reconfig with kazoo against a 3-node Warden cluster and a
spare server started with `--join` (node 4, not yet a member).

Run by server/tests/zk_kazoo.rs, which starts the cluster with
--super-digest for WARDEN_SUPER (user:password) and passes each node's
ZooKeeper and peer address, comma-separated, in node order
(WARDEN_ZK_NODES, WARDEN_PEER_NODES). Prints a PASS line per check and
`ALL PASS` at the end; any failure raises."""

import os
import socket
import threading
import time

from kazoo.client import KazooClient
from kazoo.exceptions import BadArgumentsError, BadVersionError, NoAuthError

ZK = os.environ["WARDEN_ZK_NODES"].split(",")
PEERS = os.environ["WARDEN_PEER_NODES"].split(",")
SUPER = os.environ["WARDEN_SUPER"]
DEADLINE_S = 30


def client(addr, auth=True):
    c = KazooClient(
        hosts=addr,
        timeout=10,
        auth_data=[("digest", SUPER)] if auth else None,
    )
    c.start(timeout=DEADLINE_S)
    return c


def eventually(what, check):
    deadline = time.monotonic() + DEADLINE_S
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"{what}: not within {DEADLINE_S}s"
        time.sleep(0.05)


def word(addr, w):
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(w.encode())
        chunks = []
        while True:
            b = s.recv(65536)
            if not b:
                return b"".join(chunks).decode()
            chunks.append(b)


def parse(data):
    """Config data: ({id: line}, version)."""
    lines = data.decode().splitlines()
    assert lines[-1].startswith("version="), lines
    servers = {}
    for line in lines[:-1]:
        key, _ = line.split("=", 1)
        servers[int(key.removeprefix("server."))] = line
    return servers, int(lines[-1].removeprefix("version="), 16)


def config(c):
    data, _ = c.get("/zookeeper/config")
    return parse(data)


def line(i, role):
    """Node i's server line in ZooKeeper's format (election port, client part)."""
    return f"server.{i}={PEERS[i - 1]}:3888:{role};{ZK[i - 1]}"


def check(name):
    print(f"PASS {name}", flush=True)


admin = client(ZK[0])
plain = client(ZK[0], auth=False)
before, version = config(admin)
assert sorted(before) == [1, 2, 3], before

# Only who holds ADMIN on /zookeeper/config (nobody but the super user).
try:
    plain.reconfig(joining=line(4, "observer"), leaving=None, new_members=None)
    raise AssertionError("reconfig without ADMIN was accepted")
except NoAuthError:
    check("reconfig without ADMIN: NoAuth")

# Bad input: BadArguments, and nothing is changed, not even the valid part.
bad = [
    ("server.4=nohostport", None, None),
    ("server.x=127.0.0.1:7000", None, None),
    (line(4, "observer") + ",server.5=127.0.0.1", None, None),
    (None, "9", None),
    (None, "two", None),
    (line(4, "participant"), "4", None),
    (None, None, " , "),
]
for joining, leaving, members in bad:
    try:
        admin.reconfig(joining=joining, leaving=leaving, new_members=members)
        raise AssertionError(f"bad reconfig accepted: {joining!r} {leaving!r} {members!r}")
    except BadArgumentsError:
        pass
assert config(admin) == (before, version), "a refused reconfig changed the config"
check("bad input: BadArguments, nothing changed")

try:
    admin.reconfig(
        joining=line(4, "observer"), leaving=None, new_members=None, from_config=version ^ 1
    )
    raise AssertionError("reconfig from a stale version was accepted")
except BadVersionError:
    check("wrong version: BadVersion")
assert sorted(config(admin)[0]) == [1, 2, 3]

# Add the spare as an observer, from the current version; the config's
# watch fires.
fired = threading.Event()
admin.get("/zookeeper/config", watch=lambda event: fired.set())
data, stat = admin.reconfig(
    joining=line(4, "observer"), leaving=None, new_members=None, from_config=version
)
after, new_version = parse(data)
assert sorted(after) == [1, 2, 3, 4], after
assert after[4].startswith(f"server.4={PEERS[3]}:0:observer"), after[4]
assert new_version != version
assert stat.dataLength == len(data), stat
assert fired.wait(DEADLINE_S), "the config watch did not fire"
check("add an observer (--join server), watch fired")

# The new member serves: it knows the new membership and takes writes.
node4 = client(ZK[3])
eventually("node 4 sees itself in the config", lambda: 4 in config(node4)[0])
node4.create("/joined-by-reconfig", b"4")
admin.sync("/joined-by-reconfig")
assert admin.get("/joined-by-reconfig")[0] == b"4"
check("the observer serves")

# In one reconfig (two raft changes, one after the other): promote it to
# participant (a raft voter), and remove a member that neither leads nor
# answers this client.
leaders = [i for i in (2, 3) if "Mode: leader" in word(ZK[i - 1], "srvr")]
victim = 3 if leaders != [3] else 2
data, _ = admin.reconfig(joining=line(4, "participant"), leaving=str(victim), new_members=None)
servers, _ = parse(data)
assert ":participant" in servers[4], servers[4]
assert sorted(servers) == sorted({1, 2, 3, 4} - {victim}), servers
check(f"promote the observer and remove server {victim} at once")

# The whole membership at once (non-incremental): node 4 back to observer.
keep = [i for i in (1, 2, 3) if i != victim]
members = ",".join([line(i, "participant") for i in keep] + [line(4, "observer")])
data, _ = admin.reconfig(joining=None, leaving=None, new_members=members)
servers, _ = parse(data)
assert sorted(servers) == sorted(keep + [4]), servers
assert ":observer" in servers[4], servers[4]
check("new_members (non-incremental)")

# Still a working cluster.
admin.set("/joined-by-reconfig", b"after")
node4.sync("/joined-by-reconfig")
assert node4.get("/joined-by-reconfig")[0] == b"after"
check("writes after the reconfigs")

for c in (admin, plain, node4):
    c.stop()
    c.close()
print("ALL PASS", flush=True)
