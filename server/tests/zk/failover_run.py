"""ZooKeeper clients' writes across a leader kill, with no retry of their
own: every write must succeed (the server they talk to keeps a write until
a new leader is known, and proposes again what may have died with the old
one, applying it once); none may fail with a timeout.

Protocol with server/tests/zk_kazoo.rs: WARDEN_ZK_HOSTS names one follower.
This script prints `ready` once writes go through, waits for `killed` on
stdin, writes on until each writer made 30 more, then prints
`ok writes=N longest_write_ms=M` (exit 0) or fails naming the error."""

import os
import sys
import threading
import time

from kazoo.client import KazooClient

WRITERS = 4
killed = threading.Event()
errors = []
longest = [0.0]
counts = [0] * WRITERS
after_kill = [0] * WRITERS


def writer(i):
    zk = KazooClient(hosts=os.environ["WARDEN_ZK_HOSTS"], timeout=10)
    zk.start(timeout=20)
    path = f"/failover-{i}"
    zk.ensure_path(path)
    n = 0
    while after_kill[i] < 30 and not errors:
        n += 1
        started = time.monotonic()
        try:
            zk.set(path, str(n).encode())
        except Exception as e:
            errors.append(f"writer {i}, write {n}: {e!r}")
            break
        if killed.is_set():
            longest[0] = max(longest[0], time.monotonic() - started)
            after_kill[i] += 1
        counts[i] = n
    if not errors:
        data, _ = zk.get(path)
        if int(data) != counts[i]:
            errors.append(f"writer {i} read {data!r} after its last write {counts[i]}")
    zk.stop()


threads = [threading.Thread(target=writer, args=(i,)) for i in range(WRITERS)]
for t in threads:
    t.start()
while min(counts) < 20 and not errors:
    time.sleep(0.01)
print("ready", flush=True)
assert sys.stdin.readline().strip() == "killed"
killed.set()
for t in threads:
    t.join(60)
assert not any(t.is_alive() for t in threads), "writes stopped after the leader was killed"
assert not errors, f"a write failed across the failover: {errors[0]}"
print(f"ok writes={sum(counts)} longest_write_ms={longest[0] * 1000:.0f}", flush=True)
