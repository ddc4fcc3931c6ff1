"""ZooKeeper's read-only mode on Warden (`--zk-read-only`), driven by
kazoo. Run by server/tests/zk_read_only.rs against a 3-node cluster
(connect string in WARDEN_ZK_HOSTS), in steps told on stdin:

  (start)              write /ro/data through the cluster; print `ready`
  `cut HOST:PORT`      two nodes are down, HOST:PORT is alone: a read-only
                       client reads, its writes get NotReadOnly, `isro` is
                       `ro`, a client that did not ask for read-only is not
                       served; print `read-only ok`
  `healed`             the others are back: a new connection gets a
                       read-write session and writes; print `ok`

Any failure prints `FAIL ...` and exits non-zero."""

import os
import sys
import time
import traceback

from kazoo.client import KazooClient
from kazoo.exceptions import NotReadOnlyCallError
from kazoo.protocol.states import KeeperState

HOSTS = os.environ["WARDEN_ZK_HOSTS"]
DEADLINE_S = 30


def say(line):
    print(line, flush=True)


def expect(word):
    line = sys.stdin.readline().strip()
    if not line.startswith(word):
        raise AssertionError(f"expected {word!r} on stdin, got {line!r}")
    return line[len(word):].strip()


def wait_for(what, cond):
    deadline = time.monotonic() + DEADLINE_S
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def main():
    rw = KazooClient(hosts=HOSTS, timeout=10)
    rw.start(timeout=DEADLINE_S)
    rw.ensure_path("/ro")
    rw.create("/ro/data", b"before")
    rw.stop()
    rw.close()
    say("ready")

    alone = expect("cut")
    ro = KazooClient(hosts=alone, timeout=10, read_only=True)
    ro.start(timeout=DEADLINE_S)
    assert ro.client_state == KeeperState.CONNECTED_RO, ro.client_state
    # Reads are served from the lone server's tree.
    assert ro.get("/ro/data")[0] == b"before"
    assert ro.get_children("/ro") == ["data"]
    assert ro.exists("/ro/missing") is None
    # Every write is refused NotReadOnly, at once.
    for write in (
        lambda: ro.create("/ro/new", b"x"),
        lambda: ro.set("/ro/data", b"after"),
        lambda: ro.delete("/ro/data"),
    ):
        try:
            write()
        except NotReadOnlyCallError:
            pass
        else:
            raise AssertionError("a write on a read-only session succeeded")
    tx = ro.transaction()
    tx.create("/ro/in-tx", b"x")
    try:
        tx.commit()
    except NotReadOnlyCallError:
        pass
    else:
        raise AssertionError("a multi on a read-only session succeeded")
    # The server says so.
    assert ro.command(b"isro").strip() == "ro", ro.command(b"isro")
    assert ro.get("/ro/data")[0] == b"before"
    # A client that did not ask for read-only gets no session there.
    plain = KazooClient(hosts=alone, timeout=4)
    try:
        plain.start(timeout=4)
    except Exception:
        pass
    else:
        raise AssertionError("a read-write session was given without a quorum")
    finally:
        plain.stop()
        plain.close()
    say("read-only ok")

    expect("healed")
    # Its read-only connection was closed when the leader came back.
    wait_for("the read-only session to end", lambda: ro.client_state != KeeperState.CONNECTED_RO)
    ro.stop()
    ro.close()
    fresh = KazooClient(hosts=alone, timeout=10, read_only=True)
    fresh.start(timeout=DEADLINE_S)
    try:
        assert fresh.client_state == KeeperState.CONNECTED, fresh.client_state
        assert fresh.command(b"isro").strip() == "rw"
        # Nothing the read-only client tried was applied.
        assert fresh.exists("/ro/in-tx") is None
        assert fresh.get("/ro/data")[0] == b"before"
        fresh.set("/ro/data", b"after")
        fresh.create("/ro/new", b"x")
        assert fresh.get("/ro/data")[0] == b"after"
    finally:
        fresh.stop()
        fresh.close()
    say("ok")


if __name__ == "__main__":
    try:
        main()
    except Exception:
        say("FAIL " + traceback.format_exc().replace("\n", " | "))
        sys.exit(1)
