"""kazoo against Warden's ZooKeeper port over TLS, as against ZooKeeper's
secure client port: a client with the CA and a certificate works, its
certificate's subject is its x509 identity (a node only CN=alice may read
is refused to CN=bob), a plaintext client gets no session.

Environment: WARDEN_ZK_HOSTS, WARDEN_TLS_CA, WARDEN_TLS_CERT, WARDEN_TLS_KEY
(alice), WARDEN_TLS_CERT2, WARDEN_TLS_KEY2 (bob).
Prints "ok" last on success.
"""

import os
import sys

from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.security import make_acl

hosts = os.environ["WARDEN_ZK_HOSTS"]
ca = os.environ["WARDEN_TLS_CA"]
cert = os.environ["WARDEN_TLS_CERT"]
key = os.environ["WARDEN_TLS_KEY"]

zk = KazooClient(
    hosts=hosts,
    use_ssl=True,
    ca=ca,
    certfile=cert,
    keyfile=key,
    verify_certs=True,
    timeout=10,
)
zk.start(timeout=20)
zk.create("/tls-kazoo", b"secure")
data, stat = zk.get("/tls-kazoo")
assert data == b"secure", data
assert zk.get_children("/") is not None
# The x509 scheme: the certificate's subject is the identity an ACL names.
zk.create("/tls-alice", b"hers", acl=[make_acl("x509", "CN=alice", all=True)])
assert zk.get("/tls-alice")[0] == b"hers"
other = KazooClient(
    hosts=hosts,
    use_ssl=True,
    ca=ca,
    certfile=os.environ["WARDEN_TLS_CERT2"],
    keyfile=os.environ["WARDEN_TLS_KEY2"],
    verify_certs=True,
    timeout=10,
)
other.start(timeout=20)
try:
    other.get("/tls-alice")
    print("bob read a node only CN=alice may read", file=sys.stderr)
    sys.exit(1)
except NoAuthError:
    pass
finally:
    other.stop()
    other.close()
zk.stop()
zk.close()

plain = KazooClient(hosts=hosts, timeout=2)
try:
    plain.start(timeout=5)
    print("a plaintext kazoo got a session on the TLS port", file=sys.stderr)
    sys.exit(1)
except KazooTimeoutError:
    pass
finally:
    plain.stop()
    plain.close()

print("ok")
