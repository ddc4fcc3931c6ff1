#!/usr/bin/env bash
# Two builds of the Warden server, before and after a change, measured with
# compare.sh's Warden rows (bench/lib.sh: warden-zkbench through the
# ZooKeeper port, `wardenctl bench` on the native port, a leader kill -9),
# interleaved in one run: before, after, before, after, ... each on a fresh
# 3-node local-cluster, so that the machine's drift through the run hits
# both alike and the spread between rounds of one build shows the noise.
# ZooKeeper is not run (it is the same in both).
#
#   bash bench/before_after.sh --before DIR --after DIR [--tools DIR]
#        [--rounds N] [--seconds S] [--warmup S] [--base-port P]
#        [--before-label TEXT] [--after-label TEXT] [--out FILE] [--keep]
#
#   --before DIR, --after DIR  dirs holding each build's `warden` (e.g. a
#                 worktree's target/release); it builds nothing
#   --tools DIR   the dir of warden-zkbench and wardenctl used against both
#                 (default: the --after dir): one load generator for both
#   --rounds N    rounds, each one cluster of each build (default 2)
#   --seconds S   measured seconds per row (default 10)
#   --warmup S    warm-up seconds per row, not counted (default 2)
#   --base-port P local-cluster's base port (default 28000: clients 28000+,
#                 raft 28100+, HTTP 28200+, ZooKeeper 28300+; compare.sh
#                 uses 27000)
#   --out FILE    the markdown table (default bench/before_after.md); the
#                 raw rows go beside it as .jsonl
#   --keep        keep the work dir (data, logs, raw JSON) at the end
#
# Every process it starts is stopped on exit, on failure or interrupt too.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
before_dir=""
after_dir=""
tools=""
rounds=2
seconds=10
warmup=2
w_base=28000
before_label=before
after_label=after
out="$top/bench/before_after.md"
keep=0
while [ $# -gt 0 ]; do
  case "$1" in
    --before) before_dir=$2; shift 2 ;;
    --after) after_dir=$2; shift 2 ;;
    --tools) tools=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --base-port) w_base=$2; shift 2 ;;
    --before-label) before_label=$2; shift 2 ;;
    --after-label) after_label=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    *) echo "before_after.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
done

say() { echo "before_after.sh: $*" >&2; }

[ -n "$before_dir" ] && [ -n "$after_dir" ] || { say "--before and --after are needed (try --help)"; exit 2; }
tools=${tools:-$after_dir}
for f in "$before_dir/warden" "$after_dir/warden" "$tools/warden-zkbench" "$tools/wardenctl"; do
  [ -x "$f" ] || { say "$f is missing (build with cargo build --release -p warden-server -p warden-ctl -p warden-zkbench)"; exit 2; }
done
command -v python3 >/dev/null || { say "python3 is missing"; exit 2; }
before_dir=$(cd "$before_dir" && pwd)
after_dir=$(cd "$after_dir" && pwd)
bin=$(cd "$tools" && pwd)

work=$(mktemp -d /tmp/warden-before-after.XXXXXX)
all="$work/all.jsonl"
: > "$all"
. "$top/bench/lib.sh"
cleanup() {
  warden_cleanup
  if [ "$keep" = 1 ]; then say "work dir kept: $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
warden_hosts

load1() { cut -d' ' -f1 /proc/loadavg; }

# One build's rows on a fresh cluster, appended to $all tagged with the
# build and the round, and the load average before and after.
measure() { # label server-dir round
  local p load0
  for p in $(warden_ports); do
    if (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null; then
      say "port $p is in use; stop what listens there first (or --base-port)"; exit 2
    fi
  done
  say "round $3: $1 ($2/warden)"
  rm -rf "$work/warden"
  server_bin=$2
  results="$work/raw-$1-$3.jsonl"
  : > "$results"
  load0=$(load1)
  warden_start
  warden_rows
  warden_stop
  python3 - "$results" "$all" "$1" "$3" "$load0" "$(load1)" <<'PY'
import json, sys
raw, all_, label, rnd, load0, load1 = sys.argv[1:]
with open(all_, "a") as f:
    for line in open(raw):
        if line.strip():
            o = json.loads(line)
            o.update(build=label, round=int(rnd))
            f.write(json.dumps(o) + "\n")
    f.write(json.dumps({"build": label, "round": int(rnd), "workload": "load",
                        "load1_start": float(load0), "load1_end": float(load1)}) + "\n")
PY
}

for r in $(seq 1 "$rounds"); do
  measure "$before_label" "$before_dir" "$r"
  measure "$after_label" "$after_dir" "$r"
done

python3 "$top/bench/before_after.py" "$all" --before "$before_label" --after "$after_label" \
  --seconds "$seconds" --warmup "$warmup" \
  --machine "$(nproc) cores, $(uname -m), $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)" \
  > "$out"
cp "$all" "${out%.md}.jsonl"
cat "$out"
say "written to $out (raw results: ${out%.md}.jsonl)"
