"""ACLs and authentication through Warden's ZooKeeper port, driven by kazoo.
Run by server/tests/zk_kazoo.rs against a server started with
--super-digest admin:root-pw and --auth-users listing bob:bob-pw; its
ZooKeeper connect string is in WARDEN_ZK_HOSTS."""

import os
import socket
import time

import pytest
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import AuthFailedError, InvalidACLError, NoAuthError
from kazoo.security import make_acl, make_digest_acl

HOSTS = os.environ["WARDEN_ZK_HOSTS"]
DEADLINE_S = 20


def client(**kw):
    zk = KazooClient(hosts=HOSTS, timeout=10, **kw)
    zk.start(timeout=DEADLINE_S)
    return zk


def wait_for(what, cond):
    deadline = time.monotonic() + DEADLINE_S
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.fixture
def anon():
    c = client()
    yield c
    c.stop()
    c.close()


@pytest.fixture
def bob():
    c = client(auth_data=[("digest", "bob:bob-pw")])
    yield c
    c.stop()
    c.close()


def bob_may(**perms):
    # kazoo computes the digest itself: Warden must store it the same way.
    return [make_digest_acl("bob", "bob-pw", **perms), make_acl("world", "anyone", read=True)]


def test_read(anon, bob):
    bob.create("/zk-read", b"secret", acl=[make_digest_acl("bob", "bob-pw", read=True)])
    with pytest.raises(NoAuthError):
        anon.get("/zk-read")
    with pytest.raises(NoAuthError):
        anon.get_children("/zk-read")
    assert bob.get("/zk-read")[0] == b"secret"
    assert anon.exists("/zk-read") is not None


def test_write(anon, bob):
    bob.create("/zk-write", b"v0", acl=bob_may(write=True))
    with pytest.raises(NoAuthError):
        anon.set("/zk-write", b"x")
    bob.set("/zk-write", b"v1")
    assert anon.get("/zk-write")[0] == b"v1"


def test_create(anon, bob):
    bob.create("/zk-create", acl=bob_may(create=True))
    with pytest.raises(NoAuthError):
        anon.create("/zk-create/x")
    assert anon.exists("/zk-create/x") is None
    bob.create("/zk-create/x")


def test_delete(anon, bob):
    bob.create("/zk-delete", acl=bob_may(create=True, delete=True))
    bob.create("/zk-delete/x")
    with pytest.raises(NoAuthError):
        anon.delete("/zk-delete/x")
    bob.delete("/zk-delete/x")
    assert anon.exists("/zk-delete/x") is None


def test_admin(anon, bob):
    bob.create("/zk-admin", acl=bob_may(admin=True))
    with pytest.raises(NoAuthError):
        anon.set_acls("/zk-admin", [make_acl("world", "anyone", all=True)])
    # Without ADMIN the digest's hash is hidden, as ZooKeeper does.
    acls, _ = anon.get_acls("/zk-admin")
    assert acls[0].id.id == "bob:x"
    acls, _ = bob.get_acls("/zk-admin")
    assert acls[0] == make_digest_acl("bob", "bob-pw", admin=True)
    bob.set_acls("/zk-admin", [make_acl("world", "anyone", all=True)])
    anon.set("/zk-admin", b"open now")


def test_ip_auth_and_super_schemes(anon, bob):
    anon.create("/zk-ip-local", acl=[make_acl("ip", "127.0.0.1", all=True)])
    anon.create("/zk-ip-other", acl=[make_acl("ip", "10.9.8.7", all=True)])
    anon.get("/zk-ip-local")
    with pytest.raises(NoAuthError):
        anon.get("/zk-ip-other")
    # auth: the creator's authenticated identities; none is InvalidACL.
    bob.create("/zk-auth", acl=[make_acl("auth", "", all=True)])
    acls, _ = bob.get_acls("/zk-auth")
    assert acls == [make_digest_acl("bob", "bob-pw", all=True)]
    with pytest.raises(InvalidACLError):
        anon.create("/zk-auth-anon", acl=[make_acl("auth", "", all=True)])
    with pytest.raises(NoAuthError):
        anon.get("/zk-auth")
    admin = client(auth_data=[("digest", "admin:root-pw")])
    try:
        admin.get("/zk-auth")
        admin.set("/zk-ip-other", b"super")
    finally:
        admin.stop()
        admin.close()


def test_multi_with_a_refused_op_applies_nothing(anon, bob):
    bob.create("/zk-multi", acl=bob_may(create=True))
    anon.create("/zk-open")
    t = anon.transaction()
    t.create("/zk-open/a")
    t.create("/zk-multi/b")
    results = t.commit()
    assert isinstance(results[1], NoAuthError), results
    assert anon.exists("/zk-open/a") is None


def test_wrong_password_is_auth_failed_and_closes_the_connection(anon):
    states = []
    anon.add_listener(lambda s: states.append(s))
    with pytest.raises(AuthFailedError):
        anon.add_auth("digest", "bob:wrong")
    # As with ZooKeeper, the server closes the connection after AuthFailed.
    wait_for("the connection to close", lambda: anon.state != KazooState.CONNECTED or states)


def test_wrong_password_at_start_loses_the_client():
    # kazoo reports "connected" before its auth_data is answered; the
    # AuthFailed that follows makes it give up (as against ZooKeeper).
    c = KazooClient(hosts=HOSTS, timeout=10, auth_data=[("digest", "bob:wrong")])
    states = []
    c.add_listener(lambda s: states.append(s))
    try:
        c.start(timeout=5)
    except Exception:  # noqa: BLE001 - a start that fails outright is fine too
        pass
    wait_for("the client to be lost", lambda: not c.connected and (KazooState.LOST in states or not states))
    assert not c.connected
    c.stop()
    c.close()


def test_auth_survives_a_reconnect(bob):
    bob.create("/zk-reconnect", b"v0", acl=[make_digest_acl("bob", "bob-pw", all=True)])
    states = []
    bob.add_listener(lambda s: states.append(s))
    bob._connection._socket.shutdown(socket.SHUT_RDWR)  # noqa: SLF001
    wait_for("reconnected", lambda: KazooState.SUSPENDED in states and bob.state == KazooState.CONNECTED)
    bob.set("/zk-reconnect", b"v1")
    assert bob.get("/zk-reconnect")[0] == b"v1"


def test_watch_events_need_read(anon, bob):
    """exists needs no permission, so anon may watch a node it cannot read;
    as in ZooKeeper 3.8.4 it hears nothing of that node, and the watch is
    used up all the same (no event after the ACL opens either)."""
    bob.create("/zk-hidden", b"x", acl=[make_digest_acl("bob", "bob-pw", all=True)])
    bob.create("/zk-shown", b"x", acl=[make_acl("world", "anyone", all=True)])
    hidden = []
    assert anon.exists("/zk-hidden", watch=hidden.append) is not None
    bob.set("/zk-hidden", b"y")
    bob.set_acls("/zk-hidden", [make_acl("world", "anyone", all=True)])
    bob.set("/zk-hidden", b"z")
    # Events reach a connection in order and kazoo runs its callbacks in
    # order: once a later watch on another node has fired, an event of the
    # first would have run already.
    shown = []
    anon.get("/zk-shown", watch=shown.append)
    bob.set("/zk-shown", b"y")
    wait_for("the readable node's watch", lambda: shown)
    assert hidden == [], hidden
    assert shown[0].type == "CHANGED"
