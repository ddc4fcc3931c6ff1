"""Differential test: the same seeded random sequence of ZooKeeper
operations (including failing ones) against Apache ZooKeeper and against
Warden's ZooKeeper port, through the same client (kazoo), comparing every
result: return values, error types, children lists, sequential names, and
the Stat fields that do not depend on timing or zxid numbering.

    python differential.py --zookeeper 127.0.0.1:2181 --warden 127.0.0.1:2191 \
        --seed 1 --ops 10000

Exit 0 when every result matched; otherwise prints the first mismatches and
exits 1. Both servers should start empty (the run works under a fresh
random root, so a reused server is fine too).
"""

import argparse
import random
import sys

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

STAT_FIELDS = ("version", "cversion", "aversion", "dataLength", "numChildren")


def norm_stat(stat):
    if stat is None:
        return None
    out = {f: getattr(stat, f) for f in STAT_FIELDS}
    out["ephemeral"] = stat.ephemeralOwner != 0
    return out


def outcome(fn):
    try:
        return ("ok", fn())
    except KazooException as e:
        return ("error", type(e).__name__)


class Side:
    def __init__(self, hosts, root):
        self.zk = KazooClient(hosts=hosts, timeout=10)
        self.zk.start(timeout=30)
        self.root = root
        self.zk.ensure_path(root)

    def rel(self, path):
        return path[len(self.root):] or "/"

    def run(self, op):
        zk, r = self.zk, self.root
        kind = op[0]
        if kind == "create":
            _, path, data, eph, seq = op
            return outcome(lambda: self.rel(zk.create(r + path, data, ephemeral=eph, sequence=seq)))
        if kind == "delete":
            _, path, version = op
            return outcome(lambda: zk.delete(r + path, version=version))
        if kind == "set":
            _, path, data, version = op
            return outcome(lambda: norm_stat(zk.set(r + path, data, version=version)))
        if kind == "get":
            _, path = op
            return outcome(lambda: (lambda d, s: (d, norm_stat(s)))(*zk.get(r + path)))
        if kind == "exists":
            _, path = op
            return outcome(lambda: norm_stat(zk.exists(r + path)))
        if kind == "children":
            _, path = op
            return outcome(lambda: sorted(zk.get_children(r + path)))
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
                    else (self.rel(x) if isinstance(x, str) else (norm_stat(x) if hasattr(x, "version") else x))
                    for x in res
                ]

            return outcome(run_multi)
        raise ValueError(kind)


def random_op(rng):
    names = ["/a", "/b", "/a/x", "/a/y", "/b/z", "/a/x/q", "/c"]
    path = rng.choice(names)
    version = rng.choice([-1, -1, 0, 1, 2])
    data = rng.choice([b"", b"v", b"longer value"])
    k = rng.random()
    if k < 0.3:
        return ("create", path if rng.random() < 0.8 else path + "-", data, rng.random() < 0.2, rng.random() < 0.3)
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
        p = rng.choice(names)
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
    for i in range(args.ops):
        op = random_op(rng)
        a, b = zk.run(op), wd.run(op)
        if a != b:
            mismatches.append((i, op, a, b))
            if len(mismatches) >= 20:
                break
    for side in (zk, wd):
        side.zk.delete(root, recursive=True)
        side.zk.stop()
    if mismatches:
        for i, op, a, b in mismatches:
            print(f"op {i}: {op}\n  zookeeper: {a}\n  warden:    {b}")
        print(f"FAILED: {len(mismatches)} mismatch(es) (stopped at the first 20)")
        sys.exit(1)
    print(f"ok: {args.ops} operations, seed {args.seed}, every result matched")


if __name__ == "__main__":
    main()
