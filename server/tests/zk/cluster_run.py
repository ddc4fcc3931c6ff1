"""Kazoo against a 3-node Warden cluster whose leader is killed mid-run.

Protocol with server/tests/zk_kazoo.rs: this script prints `ready` once
the workers are running, waits for a line `killed` on stdin, lets the
workers go on for a while, then checks and prints `ok` (exit 0) or fails."""

import os
import sys
import threading
import time

from kazoo.client import KazooClient
from kazoo.retry import KazooRetry

HOSTS = os.environ["WARDEN_ZK_HOSTS"]
ROOT = "/cluster-run"


def client():
    retry = KazooRetry(max_tries=-1, delay=0.05, max_delay=0.5)
    zk = KazooClient(hosts=HOSTS, timeout=10, connection_retry=retry, command_retry=retry)
    zk.start(timeout=20)
    return zk


admin = client()
admin.ensure_path(ROOT + "/seq")
stop = threading.Event()
holders = []
overlaps = []
acked = []
errors = []


def locker(name):
    zk = client()
    lock = zk.Lock(ROOT + "/lock", name)
    while not stop.is_set():
        try:
            with lock:
                holders.append(name)
                if len(holders) > 1:
                    overlaps.append(list(holders))
                time.sleep(0.005)
                holders.remove(name)
        except Exception as e:  # connection trouble during failover
            errors.append(repr(e))
            time.sleep(0.05)
    zk.stop()


def creator(i):
    zk = client()
    n = 0
    while not stop.is_set():
        path = f"{ROOT}/seq/c{i}-{n}"
        try:
            zk.retry(zk.create, path, b"x")
            acked.append(path)
        except Exception as e:
            if type(e).__name__ == "NodeExistsError":
                acked.append(path)  # the first attempt was applied
            else:
                errors.append(repr(e))
        n += 1
    zk.stop()


threads = [threading.Thread(target=locker, args=(f"l{i}",)) for i in range(3)]
threads += [threading.Thread(target=creator, args=(i,)) for i in range(3)]
for t in threads:
    t.start()
while len(acked) < 30:
    time.sleep(0.01)
print("ready", flush=True)
assert sys.stdin.readline().strip() == "killed"
before = len(acked)
deadline = time.monotonic() + 30
while len(acked) < before + 60:
    assert time.monotonic() < deadline, "no progress after the leader was killed"
    time.sleep(0.02)
stop.set()
for t in threads:
    t.join(30)

assert not overlaps, f"two lock holders at once: {overlaps[:3]}"
children = set(admin.retry(admin.get_children, ROOT + "/seq"))
lost = [p for p in acked if p.rsplit("/", 1)[1] not in children]
assert not lost, f"acknowledged creates lost: {lost[:5]}"
admin.delete(ROOT, recursive=True)
admin.stop()
print(f"ok acked={len(acked)} transient_errors={len(errors)}", flush=True)
