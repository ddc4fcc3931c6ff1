"""Kazoo and its recipes (Lock, Semaphore, Election, Counter, Barrier)
against a 3-node Warden cluster whose leader is killed mid-run.

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


sem_holders = []
sem_overflow = []
elections = []
counted = []


def semaphore_user(name):
    zk = client()
    sem = zk.Semaphore(ROOT + "/sem", identifier=name, max_leases=2)
    while not stop.is_set():
        try:
            if sem.acquire(timeout=5):
                sem_holders.append(name)
                if len(sem_holders) > 2:
                    sem_overflow.append(list(sem_holders))
                time.sleep(0.005)
                sem_holders.remove(name)
                sem.release()
        except Exception as e:
            errors.append(repr(e))
            time.sleep(0.05)
    zk.stop()


def candidate(name):
    zk = client()
    election = zk.Election(ROOT + "/election", name)
    while not stop.is_set():
        try:
            # Lead briefly, then step down so the others get their turn.
            election.run(lambda: (elections.append(name), time.sleep(0.02)))
        except Exception as e:
            errors.append(repr(e))
            time.sleep(0.05)
    zk.stop()


def counter_user():
    zk = client()
    counter = zk.Counter(ROOT + "/counter")
    while not stop.is_set():
        try:
            counter += 1
            counted.append(1)
        except Exception as e:
            errors.append(repr(e))
            time.sleep(0.05)
    zk.stop()


threads = [threading.Thread(target=locker, args=(f"l{i}",)) for i in range(3)]
threads += [threading.Thread(target=creator, args=(i,)) for i in range(3)]
threads += [threading.Thread(target=semaphore_user, args=(f"s{i}",)) for i in range(3)]
threads += [threading.Thread(target=candidate, args=(f"c{i}",)) for i in range(2)]
threads += [threading.Thread(target=counter_user) for _ in range(2)]
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
assert not sem_overflow, f"more than 2 semaphore holders: {sem_overflow[:3]}"
assert len(set(elections)) == 2, f"both candidates should have led: {set(elections)}"
value = admin.retry(admin.Counter(ROOT + "/counter").__getattribute__, "value")
# A retried increment whose first attempt was applied counts twice (kazoo's
# Counter is a read-modify-write loop); it can never count less.
assert value >= len(counted), f"counter {value} < {len(counted)} acknowledged increments"

# Barrier: a waiter passes once the barrier is removed.
barrier = admin.Barrier(ROOT + "/barrier")
barrier.create()
passed = threading.Event()
threading.Thread(target=lambda: (barrier.wait(20), passed.set()), daemon=True).start()
barrier.remove()
assert passed.wait(20), "barrier waiter never released"
children = set(admin.retry(admin.get_children, ROOT + "/seq"))
lost = [p for p in acked if p.rsplit("/", 1)[1] not in children]
assert not lost, f"acknowledged creates lost: {lost[:5]}"
admin.delete(ROOT, recursive=True)
admin.stop()
print(f"ok acked={len(acked)} transient_errors={len(errors)}", flush=True)
