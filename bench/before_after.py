#!/usr/bin/env python3
"""Turns before_after.sh's raw results (one JSON object per line, each
tagged with its build and round) into markdown: each row per round and
the median of the rounds, before and after, the change of the medians and
the round-to-round noise it is to be read against.

    python3 bench/before_after.py all.jsonl --before LABEL --after LABEL
        [--seconds S] [--warmup S] [--machine TEXT]
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from table import NATIVE, ROWS, errors, failover_cell, ms, rate  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("results")
    p.add_argument("--before", required=True)
    p.add_argument("--after", required=True)
    p.add_argument("--seconds", default="?")
    p.add_argument("--warmup", default="?")
    p.add_argument("--machine", default="?")
    a = p.parse_args()
    runs = [json.loads(line) for line in open(a.results) if line.strip()]
    builds = [a.before, a.after]
    rounds = sorted({r["round"] for r in runs})

    def find(build, rnd, system, workload, clients=None, cpu=False):
        for r in runs:
            if r.get("build") == build and r.get("round") == rnd and r.get("system") == system \
                    and r.get("workload") == workload \
                    and (clients is None or r.get("clients") == clients) \
                    and ("server_cpu_s" in r) == cpu:
                return r
        return None

    def ok(r):
        return r is not None and not r.get("failed") and r.get("ops_per_sec")

    def cell(r):
        if r is None:
            return "not run"
        if r.get("failed"):
            return "**failed**"
        e = "" if not r.get("errors") else ", " + errors(r)
        return f"{rate(r['ops_per_sec'])}/s, {ms(r['p50_us'])} / {ms(r['p99_us'])} ms{e}"

    def median_cell(rs):
        rs = [r for r in rs if ok(r)]
        if not rs:
            return None, "–"
        med = {k: statistics.median(r[k] for r in rs) for k in ("ops_per_sec", "p50_us", "p99_us")}
        return med, f"**{rate(med['ops_per_sec'])}/s**, {ms(med['p50_us'])} / {ms(med['p99_us'])} ms"

    def spread(rs):
        """(max - min) / median of the rounds' throughput: the noise of one build."""
        xs = [r["ops_per_sec"] for r in rs if ok(r)]
        if len(xs) < 2:
            return None
        return (max(xs) - min(xs)) / statistics.median(xs)

    def verdict(change, noise):
        if change is None or noise is None:
            return "–"
        if abs(change) <= noise:
            return "within noise"
        return "higher, beyond noise" if change > 0 else "**lower, beyond noise**"

    out = []
    loads = [r for r in runs if r.get("workload") == "load"]
    load_text = ", ".join(
        f"{r['build']} {r['round']}: {r['load1_start']:.1f}→{r['load1_end']:.1f}"
        for r in sorted(loads, key=lambda r: (r["round"], builds.index(r["build"]))))
    out.append(f"Warden, 3 nodes on 127.0.0.1, two server builds measured in one run, interleaved "
               f"({', '.join(f'{b} {n}' for n in rounds for b in builds)}), each on a fresh "
               f"local-cluster, on {a.machine}. The same load generators against both; "
               f"{a.warmup} s warm-up then {a.seconds} s measured per row. "
               f"Load average (1 min) at each cluster's start→end: {load_text}.")
    out.append("")
    out.append("Cells: throughput, p50 / p99 latency. Median of the rounds (of an even number: the mean of the middle two), "
               "each quantity on its own. Change: after's median throughput against "
               "before's. Noise: the larger of the two builds' round-to-round spread of "
               "throughput, (max − min) / median.")
    out.append("")
    head = ["row"] + [f"{b} {n}" for b in builds for n in rounds] + \
        [f"{b}, median" for b in builds] + ["change", "noise", "verdict"]
    out.append("| " + " | ".join(head) + " |")
    out.append("|" + "---|" * len(head))

    def table_row(what, system, workload, clients):
        per = {b: [find(b, n, system, workload, clients) for n in rounds] for b in builds}
        meds = {b: median_cell(per[b]) for b in builds}
        mb, ma = meds[a.before][0], meds[a.after][0]
        change = ma["ops_per_sec"] / mb["ops_per_sec"] - 1 if mb and ma else None
        spreads = [s for s in (spread(per[b]) for b in builds) if s is not None]
        noise = max(spreads) if spreads else None
        cells = [what] + [cell(r) for b in builds for r in per[b]] + \
            [meds[b][1] for b in builds] + \
            ["–" if change is None else f"{change * 100:+.0f}%",
             "–" if noise is None else f"±{noise * 100:.0f}%", verdict(change, noise)]
        out.append("| " + " | ".join(cells) + " |")

    for workload, clients, what in ROWS:
        table_row(f"ZooKeeper port: {what} ({clients})", "warden", workload, clients)
    for workload, clients, _, _ in NATIVE:
        table_row(f"native: {workload} ({clients})", "warden-native", workload, clients)
    out.append("")

    out.append("Leader kill -9 (ZooKeeper port, 4 writers): each writer's time from the kill to "
               "the end of its first successful set_data after it; `*` marks a writer that was on "
               "the killed server.")
    out.append("")
    out.append("| build | " + " | ".join(f"round {n}" for n in rounds) + " |")
    out.append("|---|" + "---|" * len(rounds))
    for b in builds:
        out.append(f"| {b} | " + " | ".join(failover_cell(find(b, n, "warden", "failover"))
                                            for n in rounds) + " |")
    out.append("")

    out.append("The three servers' CPU (user + system, from /proc) per operation of each "
               "ZooKeeper-port row (warm-up included, counted at the row's measured rate): the "
               "figure the machine's load moves least.")
    out.append("")
    head = ["row"] + [f"{b} {n}" for b in builds for n in rounds] + \
        [f"{b}, median" for b in builds] + ["change"]
    out.append("| " + " | ".join(head) + " |")
    out.append("|" + "---|" * len(head))

    def per_op(b, n, workload, clients):
        r = find(b, n, "warden", workload, clients)
        c = find(b, n, "warden", workload, clients, cpu=True)
        if not ok(r) or not c or not c.get("wall_s"):
            return None
        return c["server_cpu_s"] / (r["ops_per_sec"] * c["wall_s"]) * 1e6

    for workload, clients, what in ROWS:
        vals = {b: [per_op(b, n, workload, clients) for n in rounds] for b in builds}
        meds = {b: (statistics.median([v for v in vals[b] if v is not None])
                    if any(v is not None for v in vals[b]) else None) for b in builds}
        mb, ma = meds[a.before], meds[a.after]
        show = lambda v: "–" if v is None else f"{v:.0f} µs"
        cells = [f"{what} ({clients})"] + [show(v) for b in builds for v in vals[b]] + \
            [f"**{show(meds[b])}**" for b in builds] + \
            ["–" if not mb or not ma else f"{(ma / mb - 1) * 100:+.0f}%"]
        out.append("| " + " | ".join(cells) + " |")
    print("\n".join(out))


if __name__ == "__main__":
    main()
