"""Warden's ZooKeeper port, driven by a real third-party ZooKeeper client
(kazoo). Run by server/tests/zk_kazoo.rs, which starts the servers and
passes their ZooKeeper connect string in WARDEN_ZK_HOSTS."""

import os
import socket
import subprocess
import sys
import threading
import time
from collections import namedtuple

import pytest
from kazoo.client import KazooClient, KazooState
from kazoo.protocol.serialization import Create2, int_struct, long_struct, write_buffer, write_string
from kazoo.security import OPEN_ACL_UNSAFE
from kazoo.exceptions import (
    BadVersionError,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
)

HOSTS = os.environ["WARDEN_ZK_HOSTS"]
DEADLINE_S = 20


class CreateTTL(namedtuple("CreateTTL", "path data acl flags ttl")):
    """ZooKeeper's createTTL (opcode 21), which kazoo 2.11 does not offer.
    Answered like create2: the path and the stat."""

    type = 21

    def serialize(self):
        b = bytearray()
        b.extend(write_string(self.path))
        b.extend(write_buffer(self.data))
        b.extend(int_struct.pack(len(self.acl)))
        for acl in self.acl:
            b.extend(int_struct.pack(acl.perms) + write_string(acl.id.scheme) + write_string(acl.id.id))
        b.extend(int_struct.pack(self.flags))
        b.extend(long_struct.pack(self.ttl))
        return b

    @classmethod
    def deserialize(cls, bytes, offset):
        return Create2.deserialize(bytes, offset)


def raw_create(zk, request):
    """Sends a create request kazoo has no keyword for (container, TTL)."""
    result = zk.handler.async_result()
    zk._call(request, result)  # noqa: SLF001 - kazoo's own request path
    return result.get(timeout=DEADLINE_S)


def client(**kw):
    zk = KazooClient(hosts=HOSTS, timeout=kw.pop("timeout", 10), **kw)
    zk.start(timeout=DEADLINE_S)
    return zk


def wait_for(what, cond):
    deadline = time.monotonic() + DEADLINE_S
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.fixture
def zk():
    c = client()
    yield c
    c.stop()
    c.close()


@pytest.fixture
def root(zk, request):
    path = "/t-" + request.node.name
    zk.ensure_path(path)
    yield path
    zk.delete(path, recursive=True)


def test_crud_with_versions(zk, root):
    p = zk.create(root + "/a", b"v0")
    assert p == root + "/a"
    data, stat = zk.get(p)
    assert data == b"v0" and stat.version == 0 and stat.dataLength == 2
    stat = zk.set(p, b"v1", version=0)
    assert stat.version == 1
    with pytest.raises(BadVersionError):
        zk.set(p, b"x", version=0)
    with pytest.raises(BadVersionError):
        zk.delete(p, version=0)
    with pytest.raises(NodeExistsError):
        zk.create(p)
    with pytest.raises(NoNodeError):
        zk.create(root + "/missing/child")
    with pytest.raises(NoNodeError):
        zk.get(root + "/missing")
    assert zk.exists(root + "/missing") is None
    zk.create(p + "/kid")
    with pytest.raises(NotEmptyError):
        zk.delete(p)
    assert zk.get_children(p) == ["kid"]
    children, stat = zk.get_children(p, include_data=True)
    assert children == ["kid"] and stat.numChildren == 1
    zk.delete(p, recursive=True)
    assert zk.exists(p) is None


def test_every_create_mode(zk, root):
    assert zk.create(root + "/p") == root + "/p"
    assert zk.exists(root + "/p").ephemeralOwner == 0
    e = zk.create(root + "/e", ephemeral=True)
    assert zk.exists(e).ephemeralOwner == zk.client_id[0]
    with pytest.raises(NoChildrenForEphemeralsError):
        zk.create(e + "/x")
    s1 = zk.create(root + "/s-", sequence=True)
    s2 = zk.create(root + "/s-", sequence=True)
    assert s1 < s2 and s1.startswith(root + "/s-") and len(s1) == len(root + "/s-") + 10
    es = zk.create(root + "/es-", ephemeral=True, sequence=True)
    assert zk.exists(es).ephemeralOwner == zk.client_id[0]
    # CONTAINER = 4, PERSISTENT_WITH_TTL = 5, PERSISTENT_SEQUENTIAL_WITH_TTL = 6
    c, c_stat = raw_create(zk, Create2(root + "/box", b"", OPEN_ACL_UNSAFE, 4))
    # ZooKeeper 3.8 reports ephemeralOwner 0 for containers and TTL nodes
    # (it keeps its EphemeralType encodings to itself).
    assert c_stat.ephemeralOwner == 0
    assert zk.exists(c).ephemeralOwner == 0
    zk.create(c + "/item")
    zk.delete(c + "/item")
    wait_for("empty container removed", lambda: zk.exists(c) is None)
    t, _ = raw_create(zk, CreateTTL(root + "/ttl", b"", OPEN_ACL_UNSAFE, 5, 300))
    wait_for("TTL node removed", lambda: zk.exists(t) is None)
    ts, ts_stat = raw_create(zk, CreateTTL(root + "/ttl-s-", b"", OPEN_ACL_UNSAFE, 6, 60_000))
    assert ts.startswith(root + "/ttl-s-") and ts[-10:].isdigit()
    assert ts_stat.ephemeralOwner == 0
    assert zk.exists(ts).ephemeralOwner == 0
    assert zk.get(ts)[1].ephemeralOwner == 0


def test_sequential_names_are_unique_and_increasing(zk, root):
    names = [zk.create(root + "/job-", sequence=True) for _ in range(25)]
    assert names == sorted(names) and len(set(names)) == 25
    assert names[0].endswith("0000000000")


def test_ephemeral_goes_on_close_and_on_expiry(zk, root):
    owner = client()
    owner.create(root + "/mine", ephemeral=True)
    gone = threading.Event()
    zk.exists(root + "/mine", watch=lambda e: gone.set())
    owner.stop()
    owner.close()
    assert gone.wait(DEADLINE_S), "ephemeral not removed after close"

    # Expiry: a client process killed with SIGKILL (no close, no more
    # heartbeats) loses its ephemerals after its session timeout.
    doomed = subprocess.Popen(
        [sys.executable, "-c", DOOMED_CLIENT, HOSTS, root + "/doomed"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert doomed.stdout.readline().strip() == "created"
    gone = threading.Event()
    assert zk.exists(root + "/doomed", watch=lambda e: gone.set()) is not None
    doomed.kill()
    doomed.wait()
    assert gone.wait(DEADLINE_S), "ephemeral not removed after expiry"


DOOMED_CLIENT = """
import sys, time
from kazoo.client import KazooClient
zk = KazooClient(hosts=sys.argv[1], timeout=2)
zk.start(timeout=20)
zk.create(sys.argv[2], ephemeral=True)
print("created", flush=True)
time.sleep(600)
"""


def test_oneshot_watch_fires_once(zk, root):
    p = zk.create(root + "/w", b"0")
    events = []
    zk.get(p, watch=lambda e: events.append(e))
    zk.set(p, b"1")
    zk.set(p, b"2")
    wait_for("one-shot watch", lambda: len(events) >= 1)
    # Events arrive in order: once a later watch has fired, a second event
    # of the first watch would already be here.
    later = threading.Event()
    zk.get(p, watch=lambda e: later.set())
    zk.set(p, b"3")
    assert later.wait(DEADLINE_S)
    assert len(events) == 1 and events[0].type == "CHANGED"



def test_multi_is_atomic(zk, root):
    zk.create(root + "/m", b"0")
    t = zk.transaction()
    t.create(root + "/m/a")
    t.check(root + "/m", 42)
    results = t.commit()
    assert isinstance(results[0], RolledBackError)
    assert isinstance(results[1], BadVersionError)
    assert zk.exists(root + "/m/a") is None
    t = zk.transaction()
    t.create(root + "/m/a", b"x")
    t.set_data(root + "/m", b"1", version=0)
    t.check(root + "/m/a", 0)
    t.delete(root + "/m/a")
    results = t.commit()
    assert results[0] == root + "/m/a"
    assert results[1].version == 1
    assert results[2] is True and results[3] is True


def test_sync_and_acls(zk, root):
    zk.sync(root)
    acls, stat = zk.get_acls(root)
    assert acls[0].id.scheme == "world" and acls[0].id.id == "anyone"
    assert stat.aversion == 0


def test_session_resumes_after_a_dropped_connection(root):
    c = client(timeout=10)
    sid = c.client_id[0]
    c.create(root + "/keep", ephemeral=True)
    states = []
    c.add_listener(lambda s: states.append(s))
    # Cut the TCP connection under the client: it must reconnect and
    # resume the same session.
    c._connection._socket.shutdown(socket.SHUT_RDWR)  # noqa: SLF001
    wait_for("reconnected", lambda: KazooState.SUSPENDED in states and c.state == KazooState.CONNECTED)
    assert c.client_id[0] == sid
    assert c.exists(root + "/keep").ephemeralOwner == sid
    c.stop()
    c.close()


def test_kazoo_recipes(zk, root):
    # Lock: two contenders never hold at once.
    holders = []
    overlap = []

    def work(name):
        c = client()
        lock = c.Lock(root + "/lock", name)
        for _ in range(3):
            with lock:
                holders.append(name)
                if len(holders) > 1:
                    overlap.append(list(holders))
                time.sleep(0.01)
                holders.remove(name)
        c.stop()
        c.close()

    threads = [threading.Thread(target=work, args=(f"w{i}",)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE_S)
    assert not overlap

    # Election: the one contender becomes leader.
    elected = threading.Event()
    election = zk.Election(root + "/election", "me")
    threading.Thread(target=election.run, args=(elected.set,), daemon=True).start()
    assert elected.wait(DEADLINE_S)
    election.cancel()

    # Counter.
    counter = zk.Counter(root + "/counter")
    counter += 5
    counter -= 2
    assert counter.value == 3

    # Semaphore with 2 leases.
    sem = zk.Semaphore(root + "/sem", max_leases=2)
    assert sem.acquire(timeout=DEADLINE_S)
    sem.release()

    # Barrier.
    barrier = zk.Barrier(root + "/barrier")
    barrier.create()
    released = threading.Event()
    threading.Thread(target=lambda: (barrier.wait(DEADLINE_S), released.set()), daemon=True).start()
    barrier.remove()
    assert released.wait(DEADLINE_S)
