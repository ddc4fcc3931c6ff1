#!/usr/bin/env python3
"""Turns compare.sh's raw results (one JSON object per line) into markdown.

    python3 bench/table.py results.jsonl [--seconds S] [--warmup S]
        [--zookeeper-version V] [--machine TEXT]
"""
import argparse
import json

ROWS = [
    ("set", 16, "set_data, 64 B"),
    ("set", 64, "set_data, 64 B"),
    ("get", 16, "get_data"),
    ("create-delete", 16, "create + delete ephemeral"),
    ("lock", 16, "lock cycle, own lock"),
    ("lock", 64, "lock cycle, own lock"),
    ("lock", 1, "lock cycle, own lock"),
    ("handoff", 16, "hand-offs, all on one lock"),
]
NATIVE = [
    ("write", 16, "set", 16),
    ("write", 64, "set", 64),
    ("read", 16, "get", 16),
    ("create-delete", 16, "create-delete", 16),
    ("lock", 16, "lock", 16),
    ("lock", 64, "lock", 64),
    ("lock", 1, "lock", 1),
    ("lock-contended", 16, "handoff", 16),
]


def rate(x):
    if x >= 10000:
        return f"{x / 1000:.1f}k"
    if x >= 1000:
        return f"{x / 1000:.2f}k"
    return f"{x:.0f}"


def ms(us):
    v = us / 1000
    return f"{v:.2f}" if v < 10 else f"{v:.1f}" if v < 100 else f"{v:.0f}"


def errors(r):
    n = r.get("errors", 0)
    if not n:
        return "0 errors"
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(r.get("error_kinds", {}).items()))
    return f"**{n} errors**" + (f" ({kinds})" if kinds else "")


def cell(r):
    if r is None:
        return "not run"
    if r.get("failed"):
        return "**failed** (see the run's stderr)"
    return (f"{rate(r['ops_per_sec'])}/s, p50 {ms(r['p50_us'])} ms, "
            f"p99 {ms(r['p99_us'])} ms, {errors(r)}")


def ratio(w, z):
    if not w or not z or w.get("failed") or z.get("failed") or not z.get("ops_per_sec"):
        return "–"
    return f"{w['ops_per_sec'] / z['ops_per_sec']:.2f}"


def failover_cell(r):
    if r is None:
        return "not run"
    parts = []
    for t, lost in zip(r["resume_ms"], r["disconnected"]):
        v = "never" if t is None else f"{t / 1000:.2f}"
        parts.append(v + ("*" if lost else ""))
    return f"{' / '.join(parts)} s, {errors(r)}"


def mb(kb):
    return f"{kb / 1024:,.0f}"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("results")
    p.add_argument("--seconds", default="?")
    p.add_argument("--warmup", default="?")
    p.add_argument("--zookeeper-version", default="?")
    p.add_argument("--machine", default="?")
    a = p.parse_args()
    runs = [json.loads(line) for line in open(a.results) if line.strip()]

    def find(system, workload, clients=None, cpu=False):
        for r in runs:
            if r.get("system") == system and r.get("workload") == workload and (
                    clients is None or r.get("clients") == clients) and (
                    ("server_cpu_s" in r) == cpu):
                return r
        return None

    out = []
    out.append(f"Apache ZooKeeper {a.zookeeper_version} (Debian package) and Warden, 3 nodes each "
               f"on 127.0.0.1, one after the other on the same machine ({a.machine}). "
               f"Both driven through their ZooKeeper ports by `warden-zkbench` (the "
               f"`zookeeper-client` crate), clients spread round-robin over the three "
               f"servers, closed loop, {a.warmup} s warm-up then {a.seconds} s measured per row. "
               f"A lock cycle is create ephemeral-sequential + get_children + delete; "
               f"a hand-off adds waiting on the predecessor's exists watch.")
    out.append("")
    out.append("| workload (clients) | ZooKeeper | Warden | Warden / ZooKeeper |")
    out.append("|---|---|---|---|")
    for workload, clients, what in ROWS:
        z, w = find("zookeeper", workload, clients), find("warden", workload, clients)
        out.append(f"| {what} ({clients}) | {cell(z)} | {cell(w)} | {ratio(w, z)} |")
    zf, wf = find("zookeeper", "failover"), find("warden", "failover")
    if zf or wf:
        n = (zf or wf)["writers"]
        out.append(f"| leader kill -9 → each writer's first write after it ({n} writers) "
                   f"| {failover_cell(zf)} | {failover_cell(wf)} | – |")
    zm, wm = find("zookeeper", "memory"), find("warden", "memory")
    if zm or wm:
        zp, wp = find("zookeeper", "populate"), find("warden", "populate")
        count = (zm or wm)["node_count"]

        def rss(m):
            return f"{' / '.join(mb(x) for x in m['rss_kb'])} MB" if m else "not run"

        def du(m):
            return f"{' / '.join(mb(x / 1024) for x in m['data_bytes'])} MB" if m else "not run"

        def avg(xs):
            return sum(xs) / len(xs)

        rr = f"{avg(wm['rss_kb']) / avg(zm['rss_kb']):.2f}" if zm and wm else "–"
        dr = f"{avg(wm['data_bytes']) / avg(zm['data_bytes']):.2f}" if zm and wm else "–"
        out.append(f"| {count:,} znodes (32 B each), RSS per server after restart | {rss(zm)} | {rss(wm)} | {rr} |")
        out.append(f"| same, data dir per server (du -sb) | {du(zm)} | {du(wm)} | {dr} |")
        out.append(f"| same, restart until ready | {zm['ready_s'] if zm else '?'} s | {wm['ready_s'] if wm else '?'} s | – |")
        if zp or wp:
            def pop(r):
                return f"{r['creates_per_sec']:,.0f}/s, {errors(r)}" if r else "not run"
            out.append(f"| populate: pipelined creates of those znodes (16 clients) | {pop(zp)} | {pop(wp)} | – |")
    out.append("")
    out.append("Failover: each writer's time from the kill -9 of the leader to the end of its first "
               "successful set_data sent after the kill; writers connect with the whole server list "
               "and the client picks the server at random; `*` marks a writer whose connection was "
               "lost (it was on the killed server). Errors are those seen after the kill.")
    out.append("")
    if any("server_cpu_s" in r for r in runs):
        out.append("The three servers' CPU (user + system, from /proc) per operation over the same rows "
                   "(warm-up included, counted at the row's measured rate): on this machine the servers "
                   "and the load generator share two cores, so a row is bound by two cores divided by "
                   "the CPU each operation costs all of them.")
        out.append("")
        out.append("| workload (clients) | ZooKeeper, server CPU per op | Warden, server CPU per op | Warden / ZooKeeper |")
        out.append("|---|---|---|---|")

        def per_op(r, c):
            if not r or not c or r.get("failed") or not r.get("ops_per_sec") or not c.get("wall_s"):
                return None
            return c["server_cpu_s"] / (r["ops_per_sec"] * c["wall_s"]) * 1e6

        for workload, clients, what in ROWS:
            z = per_op(find("zookeeper", workload, clients), find("zookeeper", workload, clients, cpu=True))
            w = per_op(find("warden", workload, clients), find("warden", workload, clients, cpu=True))
            show = lambda v: "not measured" if v is None else f"{v:.0f} µs"
            r = f"{w / z:.2f}" if z and w else "–"
            out.append(f"| {what} ({clients}) | {show(z)} | {show(w)} | {r} |")
        out.append("")
    out.append("Warden's native port, `wardenctl bench` (its own client and recipes, same machine, "
               "same seconds), next to the same workload through Warden's ZooKeeper port:")
    out.append("")
    out.append("| wardenctl bench workload (clients) | native port | ZooKeeper port (above) | native / ZooKeeper port |")
    out.append("|---|---|---|---|")
    for workload, clients, zkw, zkc in NATIVE:
        n, w = find("warden-native", workload, clients), find("warden", zkw, zkc)
        out.append(f"| {workload} ({clients}) | {cell(n)} | {cell(w)} | {ratio(n, w)} |")
    print("\n".join(out))


if __name__ == "__main__":
    main()
