"""SASL DIGEST-MD5 through Warden's ZooKeeper port, driven by kazoo with
pure-sasl (as Kafka/HBase deployments configure their clients). Run by
server/tests/zk_sasl.rs against a server started with --zk-sasl-jaas
listing bob:secret and alice:alice-pw; its ZooKeeper connect string is in
WARDEN_ZK_HOSTS."""

import os
import time

import pytest
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NoAuthError
from kazoo.security import make_acl, make_digest_acl

HOSTS = os.environ["WARDEN_ZK_HOSTS"]
DEADLINE_S = 20


def sasl(user, password):
    return {"mechanism": "DIGEST-MD5", "username": user, "password": password}


def client(**kw):
    zk = KazooClient(hosts=HOSTS, timeout=10, **kw)
    zk.start(timeout=DEADLINE_S)
    return zk


def wait_for(what, cond):
    deadline = time.monotonic() + DEADLINE_S
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.fixture(scope="module")
def bob():
    c = client(sasl_options=sasl("bob", "secret"))
    # Nodes only bob may read: by his SASL identity, and by the digest
    # identity of the same user and password.
    c.ensure_path("/sasl")
    c.create("/sasl/bob-only", b"for bob", acl=[make_acl("sasl", "bob", all=True)])
    c.create(
        "/sasl/bob-digest",
        b"digest of bob",
        acl=[make_digest_acl("bob", "secret", all=True)],
    )
    yield c
    c.stop()
    c.close()


def test_the_sasl_user_reads_its_nodes(bob):
    assert bob.get("/sasl/bob-only")[0] == b"for bob"
    assert bob.get("/sasl/bob-digest")[0] == b"digest of bob"
    acl, _ = bob.get_acls("/sasl/bob-only")
    assert [(a.id.scheme, a.id.id) for a in acl] == [("sasl", "bob")]
    # An `auth` ACL stands for bob's authenticated identities.
    bob.create("/sasl/bob-auth", b"x", acl=[make_acl("auth", "", all=True)])
    schemes = sorted(a.id.scheme for a in bob.get_acls("/sasl/bob-auth")[0])
    assert schemes == ["digest", "sasl"], schemes
    assert bob.get("/sasl/bob-auth")[0] == b"x"


def test_without_sasl_the_node_is_no_auth(bob):
    anon = client()
    try:
        with pytest.raises(NoAuthError):
            anon.get("/sasl/bob-only")
        with pytest.raises(NoAuthError):
            anon.get("/sasl/bob-digest")
    finally:
        anon.stop()
        anon.close()


def test_another_sasl_user_is_no_auth(bob):
    alice = client(sasl_options=sasl("alice", "alice-pw"))
    try:
        with pytest.raises(NoAuthError):
            alice.get("/sasl/bob-only")
        alice.create("/sasl/alice", b"a", acl=[make_acl("sasl", "alice", all=True)])
        assert alice.get("/sasl/alice")[0] == b"a"
        with pytest.raises(NoAuthError):
            bob.get("/sasl/alice")
    finally:
        alice.stop()
        alice.close()


@pytest.mark.parametrize("user,password", [("bob", "guess"), ("mallory", "secret")])
def test_a_wrong_password_or_user_is_refused(bob, user, password):
    # ZooKeeper answers AuthFailed and closes the connection; kazoo then
    # gives up on the session (AUTH_FAILED: the client is LOST).
    states = []
    zk = KazooClient(hosts=HOSTS, timeout=10, sasl_options=sasl(user, password))
    zk.add_listener(states.append)
    try:
        try:
            zk.start(timeout=5)
        except Exception:
            pass
        wait_for("the client to give up", lambda: KazooState.LOST in states)
        assert not zk.connected
    finally:
        zk.stop()
        zk.close()
    # The server kept serving everyone else.
    assert bob.get("/sasl/bob-only")[0] == b"for bob"
