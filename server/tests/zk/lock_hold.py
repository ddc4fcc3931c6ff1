"""Holds a kazoo Lock for tests/lock_observability.rs, step by step.

    python lock_hold.py HOSTS PATH

A first client takes kazoo's Lock at PATH as "kazoo-holder" and prints
"held"; a second client's Lock ("kazoo-waiter") then queues behind it in a
thread, and "queued" is printed once both contenders are there. On the
line "release" on stdin the holder releases; "handed" is printed when the
waiter has it. On "exit" (or end of input) everything is released and the
clients stop. Every wait has a deadline; a failure prints "error: ..."
and exits 1.
"""

import sys
import threading
import time

from kazoo.client import KazooClient

WAIT = 30.0


def say(line):
    print(line, flush=True)


def until(what, cond):
    deadline = time.monotonic() + WAIT
    while not cond():
        if time.monotonic() > deadline:
            say(f"error: timed out waiting until {what}")
            sys.exit(1)
        time.sleep(0.02)


def main():
    hosts, path = sys.argv[1], sys.argv[2]
    holder_client = KazooClient(hosts=hosts)
    waiter_client = KazooClient(hosts=hosts)
    holder_client.start(timeout=WAIT)
    waiter_client.start(timeout=WAIT)
    holder = holder_client.Lock(path, "kazoo-holder")
    waiter = waiter_client.Lock(path, "kazoo-waiter")
    if not holder.acquire(timeout=WAIT):
        say("error: the holder was not granted")
        sys.exit(1)
    say("held")
    granted = threading.Event()

    def wait_for_it():
        if waiter.acquire(timeout=2 * WAIT):
            granted.set()

    threading.Thread(target=wait_for_it, daemon=True).start()
    until("the waiter queues", lambda: len(holder.contenders()) == 2)
    say("queued")
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "release":
            holder.release()
            until("the waiter is granted", granted.is_set)
            say("handed")
        elif cmd == "exit":
            break
    if granted.is_set():
        waiter.release()
    holder_client.stop()
    waiter_client.stop()
    say("done")


if __name__ == "__main__":
    main()
