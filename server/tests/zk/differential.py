"""Differential test: the same seeded random sequence of ZooKeeper
operations (including failing ones) against Apache ZooKeeper and against
Warden's ZooKeeper port, through the same client (kazoo), comparing every
result: return values, error types, children lists, sequential names, the
Stat fields that do not depend on timing or zxid numbering, ACLs, and the
watch events each operation caused.

    python differential.py --zookeeper 127.0.0.1:2181 --warden 127.0.0.1:2191 \
        --seed 1 --ops 10000

What the operations cover:
- create (every plain mode, with one of three ACLs), delete, set, get,
  exists, getChildren, with right and wrong versions;
- multi (create, delete, set, check), committed or rolled back;
- containers and TTL nodes (also sequential), at names that never get
  children, so neither server removes them during the run: their create
  results and ephemeralOwner encodings;
- watches: one-shot data, exists and child watches set by the main
  session, persistent and persistent-recursive ones (addWatch) set by the
  bob session (it may read every node: Warden, like ZooKeeper 3.8.4 but
  unlike Debian's 3.8.0 build, refuses addWatch without READ on an
  existing node), removeWatches of 3.8's watcher types; after every
  operation both sides are drained of the notifications it caused to
  either session (as the server sent them: session, type and path, in
  order), and those are part of the result;
- sessions: a second session creates ephemerals and is closed and reopened
  (its ephemerals go, their watches fire);
- ACLs: a session authenticated as digest user bob runs operations too,
  getAcl and setAcl with versions; the main session meets NoAuth.

ZooKeeper must run with `zookeeper.extendedTypesEnabled=true` (TTL nodes).
Exit 0 when every result matched; otherwise prints the first mismatches and
exits 1. Both servers should start empty (the run works under a fresh
random root, so a reused server is fine too).
"""

import argparse
import random
import sys
import threading

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.protocol.serialization import Create2, int_struct, long_struct, write_buffer, write_string
from kazoo.protocol.serialization import Watch
from kazoo.protocol.states import EVENT_TYPE_MAP
from kazoo.security import OPEN_ACL_UNSAFE, make_acl, make_digest_acl

STAT_FIELDS = ("version", "cversion", "aversion", "dataLength", "numChildren")
BOB = ("bob", "bob-pw")
ACLS = {
    "open": OPEN_ACL_UNSAFE,
    "bob": [make_digest_acl(*BOB, all=True)],
    "bob+read": [make_digest_acl(*BOB, all=True), make_acl("world", "anyone", read=True)],
}
# Plain nodes may get children; containers and TTL nodes live at names
# that never do.
NAMES = ["/a", "/b", "/a/x", "/a/y", "/b/z", "/a/x/q", "/c"]
SPECIAL = ["/k", "/a/k", "/t", "/b/t"]
# Where bob's addWatch is persistent-recursive; elsewhere it is persistent.
RECURSIVE = ["/", "/b", "/a/x"]
DEADLINE_S = 30


class CreateTTL:
    """ZooKeeper's createTTL (opcode 21), which kazoo 2.11 does not offer;
    answered like create2."""

    type = 21

    def __init__(self, path, data, acl, flags, ttl):
        self.path, self.data, self.acl, self.flags, self.ttl = path, data, acl, flags, ttl

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


class AddWatch:
    """ZooKeeper's addWatch (opcode 106; mode 0 persistent, 1 persistent
    recursive), which kazoo 2.11 does not offer. The result is the length
    of the reply body (ZooKeeper: an ErrorResponse, 4 bytes)."""

    type = 106

    def __init__(self, path, mode):
        self.path, self.mode = path, mode

    def serialize(self):
        return bytearray(write_string(self.path) + int_struct.pack(self.mode))

    @classmethod
    def deserialize(cls, bytes, offset):
        return len(bytes) - offset


class RemoveWatches:
    """removeWatches (opcode 18): WatcherType 1 children, 2 data, 3 any,
    4 persistent, 5 persistent recursive. No reply body."""

    type = 18

    def __init__(self, path, kind):
        self.path, self.kind = path, kind

    def serialize(self):
        return bytearray(write_string(self.path) + int_struct.pack(self.kind))

    @classmethod
    def deserialize(cls, bytes, offset):
        return len(bytes) - offset


def raw_call(zk, request):
    result = zk.handler.async_result()
    zk._call(request, result)  # noqa: SLF001 - kazoo's own request path
    return result.get(timeout=DEADLINE_S)


def outcome(fn):
    try:
        return ("ok", fn())
    except KazooException as e:
        return ("error", type(e).__name__)


def client(hosts, auth=None):
    zk = KazooClient(hosts=hosts, timeout=10, auth_data=auth)
    zk.start(timeout=DEADLINE_S)
    return zk


class Side:
    def __init__(self, hosts, root):
        self.hosts = hosts
        self.zk = client(hosts)
        self.bob = client(hosts, auth=[("digest", "%s:%s" % BOB)])
        self.other = client(hosts)
        self.root = root
        self.zk.ensure_path(root)
        self.events = []
        self.lock = threading.Lock()
        # Every notification the main and bob sessions receive, as the
        # server sent it (kazoo itself passes on only those it has a
        # one-shot watcher for, and knows no persistent watches).
        for who, c in (("main", self.zk), ("bob", self.bob)):
            self.record(who, c)

    def record(self, who, c):
        connection = c._connection  # noqa: SLF001
        original = connection._read_watch_event  # noqa: SLF001

        def read_watch_event(buffer, offset):
            watch, _ = Watch.deserialize(buffer, offset)
            with self.lock:
                self.events.append((who, EVENT_TYPE_MAP[watch.type], self.rel(watch.path)))
            return original(buffer, offset)

        connection._read_watch_event = read_watch_event  # noqa: SLF001

    def clients(self):
        return {"main": self.zk, "bob": self.bob, "other": self.other}

    def rel(self, path):
        return path[len(self.root):] or "/"

    def abs(self, path):
        return self.root + path if path != "/" else self.root

    def owner(self, o):
        """ephemeralOwner as a name (a session) or ZooKeeper's encoding."""
        if o == 0:
            return "none"
        for name, c in self.clients().items():
            if c.client_id and o == c.client_id[0]:
                return name
        return hex(o & 0xFFFFFFFFFFFFFFFF)

    def stat(self, stat):
        if stat is None:
            return None
        out = {f: getattr(stat, f) for f in STAT_FIELDS}
        out["owner"] = self.owner(stat.ephemeralOwner)
        return out

    def drain(self):
        """The notifications caused so far: a round trip on each recorded
        session first (ZooKeeper sends a notification before any later
        reply, and kazoo's reader records it before it hands over that
        reply)."""
        self.zk.exists(self.root)
        self.bob.exists(self.root)
        with self.lock:
            out, self.events = self.events, []
        # Each session's notifications in the order it got them; the two
        # sessions' connections are not ordered with respect to each other.
        return {who: [e[1:] for e in out if e[0] == who] for who in ("main", "bob") if any(e[0] == who for e in out)}

    def run(self, op):
        result, events = self.apply(op), self.drain()
        if op[0] == "reopen":
            # A closed session's ephemerals go in no particular order
            # (ZooKeeper walks a hash set).
            events = {who: sorted(e) for who, e in events.items()}
        return (result, events)

    def apply(self, op):
        r = self.root
        kind = op[0]
        if kind == "as":
            _, who, inner = op
            return self.plain(self.clients()[who], inner)
        if kind == "watch":
            _, what, path = op

            def w(event):
                pass

            p = self.abs(path)
            if what == "data":
                return outcome(lambda: (lambda d, s: (d, self.stat(s)))(*self.zk.get(p, watch=w)))
            if what == "exists":
                return outcome(lambda: self.stat(self.zk.exists(p, watch=w)))
            return outcome(lambda: sorted(self.zk.get_children(p, watch=w)))
        if kind == "special":
            _, flags, path, who = op
            c = self.clients()[who]
            req = (
                Create2(r + path, b"s", OPEN_ACL_UNSAFE, flags)
                if flags == 4
                else CreateTTL(r + path, b"s", OPEN_ACL_UNSAFE, flags, 3_600_000)
            )

            def create():
                result = c.handler.async_result()
                c._call(req, result)  # noqa: SLF001 - kazoo's own request path
                created, stat = result.get(timeout=DEADLINE_S)
                return (self.rel(created), self.stat(stat))

            return outcome(create)
        if kind == "getacl":
            _, who, path = op

            def get_acl():
                acl, stat = self.clients()[who].get_acls(r + path)
                return (sorted((a.perms, a.id.scheme, a.id.id) for a in acl), stat.aversion)

            return outcome(get_acl)
        if kind == "setacl":
            _, who, path, acl, version = op
            return outcome(lambda: self.stat(self.clients()[who].set_acls(r + path, ACLS[acl], version=version)))
        if kind == "addwatch":
            _, path, mode = op
            return outcome(lambda: raw_call(self.bob, AddWatch(self.abs(path), mode)))
        if kind == "removewatches":
            _, who, path, wtype = op
            c = self.clients()[who]
            return outcome(lambda: raw_call(c, RemoveWatches(self.abs(path), wtype)))
        if kind == "reopen":
            # Close the second session (its ephemerals go) and open another.
            self.other.stop()
            self.other.close()
            self.other = client(self.hosts)
            return ("ok", None)
        return self.plain(self.zk, op)

    def plain(self, zk, op):
        r = self.root
        kind = op[0]
        if kind == "create":
            _, path, data, eph, seq, acl = op
            return outcome(lambda: self.rel(zk.create(r + path, data, acl=ACLS[acl], ephemeral=eph, sequence=seq)))
        if kind == "delete":
            _, path, version = op
            return outcome(lambda: zk.delete(r + path, version=version))
        if kind == "set":
            _, path, data, version = op
            return outcome(lambda: self.stat(zk.set(r + path, data, version=version)))
        if kind == "get":
            _, path = op
            return outcome(lambda: (lambda d, s: (d, self.stat(s)))(*zk.get(r + path)))
        if kind == "exists":
            _, path = op
            return outcome(lambda: self.stat(zk.exists(r + path)))
        if kind == "children":
            _, path = op
            return outcome(lambda: sorted(zk.get_children(self.abs(path))))
        if kind == "multi":
            _, ops = op

            def run_multi():
                t = zk.transaction()
                for o in ops:
                    if o[0] == "create":
                        t.create(r + o[1], o[2])
                    elif o[0] == "delete":
                        t.delete(r + o[1], version=o[2])
                    elif o[0] == "set":
                        t.set_data(r + o[1], o[2], version=o[3])
                    else:
                        t.check(r + o[1], o[2])
                res = t.commit()
                return [
                    type(x).__name__ if isinstance(x, Exception)
                    else (self.rel(x) if isinstance(x, str) else (self.stat(x) if hasattr(x, "version") else x))
                    for x in res
                ]

            return outcome(run_multi)
        raise ValueError(kind)

    def close(self):
        for c in self.clients().values():
            c.stop()
            c.close()


def random_plain(rng):
    path = rng.choice(NAMES)
    version = rng.choice([-1, -1, 0, 1, 2])
    data = rng.choice([b"", b"v", b"longer value"])
    k = rng.random()
    if k < 0.3:
        acl = rng.choice(["open", "open", "open", "bob", "bob+read"])
        name = path if rng.random() < 0.8 else path + "-"
        return ("create", name, data, rng.random() < 0.2, rng.random() < 0.3, acl)
    if k < 0.45:
        return ("delete", path, version)
    if k < 0.6:
        return ("set", path, data, version)
    if k < 0.7:
        return ("get", path)
    if k < 0.8:
        return ("exists", path)
    if k < 0.9:
        return ("children", rng.choice(["/", "/a", "/b", "/a/x"]))
    ops = []
    for _ in range(rng.randint(1, 4)):
        p = rng.choice(NAMES)
        c = rng.random()
        if c < 0.4:
            ops.append(("create", p, data))
        elif c < 0.6:
            ops.append(("delete", p, rng.choice([-1, 0])))
        elif c < 0.8:
            ops.append(("set", p, data, rng.choice([-1, 0, 1])))
        else:
            ops.append(("check", p, rng.choice([-1, 0, 1])))
    return ("multi", ops)


def random_op(rng):
    k = rng.random()
    if k < 0.55:
        return random_plain(rng)
    if k < 0.7:
        return ("watch", rng.choice(["data", "exists", "children"]), rng.choice(NAMES + ["/"]))
    if k < 0.8:
        who = rng.choice(["bob", "other"])
        inner = random_plain(rng)
        if who == "other" and inner[0] == "create":
            # The second session's creates are mostly ephemeral.
            inner = inner[:3] + (rng.random() < 0.8,) + inner[4:]
        return ("as", who, inner)
    if k < 0.85:
        flags = rng.choice([4, 5, 6])
        path = rng.choice(SPECIAL) + ("-" if flags == 6 else "")
        return ("special", flags, path, rng.choice(["main", "other"]))
    if k < 0.9:
        return ("getacl", rng.choice(["main", "bob"]), rng.choice(NAMES))
    if k < 0.95:
        who = rng.choice(["main", "bob"])
        return ("setacl", who, rng.choice(NAMES), rng.choice(list(ACLS)), rng.choice([-1, -1, 0, 1]))
    if k < 0.97:
        # One mode per path: ZooKeeper 3.8.0 keeps only the last mode a
        # session set on a path (3.9 keeps each, as Warden does).
        path = rng.choice(NAMES + ["/"])
        return ("addwatch", path, 1 if path in RECURSIVE else 0)
    if k < 0.98:
        # ZooKeeper 3.8 knows watcher types 1-3 (children, data, any; 4 and
        # 5 are 3.9's). Bob, who holds the persistent watches, removes with
        # Any only: 3.8.0's Children and Data also strip a persistent watch
        # of half its events, 3.9's (and Warden's) leave it alone.
        if rng.random() < 0.5:
            return ("removewatches", "bob", rng.choice(NAMES + ["/"]), 3)
        return ("removewatches", "main", rng.choice(NAMES + ["/"]), rng.choice([1, 2, 3]))
    return ("reopen",)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--zookeeper", required=True)
    ap.add_argument("--warden", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--ops", type=int, default=10000)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    root = f"/diff-{args.seed}-{random.Random().randrange(1 << 30)}"
    zk, wd = Side(args.zookeeper, root), Side(args.warden, root)
    mismatches = []
    kinds = {}
    events = 0
    for i in range(args.ops):
        op = random_op(rng)
        a, b = zk.run(op), wd.run(op)
        kinds[op[0]] = kinds.get(op[0], 0) + 1
        events += sum(len(v) for v in a[1].values())
        if a != b:
            mismatches.append((i, op, a, b))
            if len(mismatches) >= 20:
                break
    for side in (zk, wd):
        side.close()
    # Clean up as bob too: some nodes only bob may delete from.
    for hosts in (args.zookeeper, args.warden):
        c = client(hosts, auth=[("digest", "%s:%s" % BOB)])
        c.add_auth("digest", "%s:%s" % BOB)
        try:
            c.delete(root, recursive=True)
        except KazooException:
            pass
        c.stop()
        c.close()
    if mismatches:
        for i, op, a, b in mismatches:
            print(f"op {i}: {op}\n  zookeeper: {a}\n  warden:    {b}")
        print(f"FAILED: {len(mismatches)} mismatch(es) (stopped at the first 20)")
        sys.exit(1)
    print(
        f"ok: {args.ops} operations, seed {args.seed}, every result matched "
        f"({events} watch events); by kind {sorted(kinds.items())}"
    )


if __name__ == "__main__":
    main()
