#!/usr/bin/env bash
# Apache ZooKeeper 3.8 and Warden, side by side, 3 nodes each on loopback,
# driven through their ZooKeeper ports by the same load generator
# (warden-zkbench, on the zookeeper-client crate), plus `wardenctl bench` on
# Warden's native port, a leader kill -9, and (with --memory) a million
# znodes: RSS after a restart and the data dir's size.
#
#   bash bench/compare.sh [--seconds S] [--warmup S] [--memory] [--znodes N]
#                         [--out FILE] [--keep]
#
#   --seconds S   measured seconds per row (default 10)
#   --warmup S    warm-up seconds per row, not counted (default 2)
#   --memory      also the memory rows (populate, restart, RSS, du): slow
#   --znodes N    znodes for the memory rows (default 1000000)
#   --out FILE    where the markdown goes (default bench/results.md)
#   --keep        keep the work dir (data, logs, raw JSON) at the end
#
# Needs Java 17 and Debian's `zookeeper` package (installed here with
# apt-get if missing: that needs root), python3, and a Rust toolchain (it
# builds the release binaries). Loopback ports used: ZooKeeper 22181-22183
# (clients), 22888-22890 (quorum), 23888-23890 (election); Warden 27000-27302
# (`--base-port 27000`: clients 27000+, raft 27100+, HTTP 27200+, ZooKeeper
# 27300+). Every process it starts is stopped on exit.
set -euo pipefail

seconds=10
warmup=2
memory=0
znodes=1000000
keep=0
top=$(cd "$(dirname "$0")/.." && pwd)
out="$top/bench/results.md"
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --memory) memory=1; shift ;;
    --znodes) znodes=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    *) echo "compare.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
done

say() { echo "compare.sh: $*" >&2; }

# --- what it needs -------------------------------------------------------
if [ ! -f /usr/share/java/zookeeper.jar ]; then
  if [ "$(id -u)" != 0 ]; then
    say "Debian's zookeeper package is missing; run as root to install it (apt-get install -y zookeeper)"
    exit 2
  fi
  apt-get update -qq && apt-get install -y -qq zookeeper
fi
command -v java >/dev/null || { say "java is missing (Java 17: apt-get install -y openjdk-17-jre-headless)"; exit 2; }
command -v python3 >/dev/null || { say "python3 is missing"; exit 2; }
zk_version=$(dpkg-query -W -f='${Version}' zookeeper 2>/dev/null || echo "?")

say "building the release binaries"
(cd "$top" && cargo build --release -q -p warden-server -p warden-ctl -p warden-zkbench)
bin="$top/target/release"

work=$(mktemp -d /tmp/warden-compare.XXXXXX)
results="$work/results.jsonl"
: > "$results"
started_pids=()
# The Warden cluster, its rows and run_child/kill_ours: shared with
# before_after.sh.
server_bin=$bin
w_base=27000
. "$top/bench/lib.sh"
cleanup() {
  for p in "${started_pids[@]}"; do kill_ours "$p" QuorumPeerMain; done
  warden_cleanup
  if [ "$keep" = 1 ]; then say "work dir kept: $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

zk_port() { echo $((22180 + $1)); }
zk_hosts="127.0.0.1:$(zk_port 1),127.0.0.1:$(zk_port 2),127.0.0.1:$(zk_port 3)"
warden_hosts

for port in $(seq 22181 22183) $(seq 22888 22890) $(seq 23888 23890) \
            $(warden_ports); do
  if (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null; then
    say "port $port is in use; stop what listens there first"; exit 2
  fi
done

# A four-letter word's answer, or nothing (bounded).
fourletter() { timeout 3 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1; printf $2 >&3; cat <&3" 2>/dev/null || true; }
mode_of() { fourletter "$1" srvr | sed -n 's/^Mode: //p'; }
node_count_of() { fourletter "$1" srvr | sed -n 's/^Node count: //p'; }
rss_kb() { sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$1/status" 2>/dev/null || echo 0; }

# --- Apache ZooKeeper ------------------------------------------------------
zk_heap=${ZK_HEAP:-2g}
zk_cp=/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-nop.jar:/etc/zookeeper/conf
zk_write_config() {
  rm -rf "$work/zk"
  for i in 1 2 3; do
    mkdir -p "$work/zk/$i/data"
    echo "$i" > "$work/zk/$i/data/myid"
    {
      echo "tickTime=2000"
      echo "initLimit=10"
      echo "syncLimit=5"
      echo "dataDir=$work/zk/$i/data"
      echo "clientPort=$(zk_port "$i")"
      echo "admin.enableServer=false"
      echo "4lw.commands.whitelist=*"
      for j in 1 2 3; do echo "server.$j=127.0.0.1:$((22887 + j)):$((23887 + j))"; done
    } > "$work/zk/$i/zoo.cfg"
  done
}
zk_start() {
  for i in 1 2 3; do
    java -Xmx"$zk_heap" -cp "$zk_cp" org.apache.zookeeper.server.quorum.QuorumPeerMain \
      "$work/zk/$i/zoo.cfg" >> "$work/zk/$i/zk.log" 2>&1 &
    echo $! > "$work/zk/$i/pid"
    started_pids+=("$!")
  done
  local t0=$SECONDS
  while [ $((SECONDS - t0)) -lt 300 ]; do
    local modes=""
    for i in 1 2 3; do modes="$modes $(mode_of "$(zk_port "$i")")"; done
    if [ "$(echo "$modes" | grep -o leader | wc -l)" = 1 ] && [ "$(echo "$modes" | grep -o follower | wc -l)" = 2 ]; then
      say "ZooKeeper ready (modes:$modes) in $((SECONDS - t0)) s"
      zk_ready_s=$((SECONDS - t0))
      return 0
    fi
    sleep 0.5
  done
  say "ZooKeeper did not elect a leader in 300 s; logs in $work/zk/*/zk.log"
  exit 1
}
zk_stop() {
  local p
  for i in 1 2 3; do
    p=$(cat "$work/zk/$i/pid")
    grep -qa QuorumPeerMain "/proc/$p/cmdline" 2>/dev/null && kill -TERM "$p" 2>/dev/null || true
  done
  for i in 1 2 3; do
    local p; p=$(cat "$work/zk/$i/pid")
    for _ in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill_ours "$p" QuorumPeerMain
    wait "$p" 2>/dev/null || true
  done
  started_pids=()
}
zk_leader_pid() {
  for i in 1 2 3; do
    if [ "$(mode_of "$(zk_port "$i")")" = leader ]; then cat "$work/zk/$i/pid"; return; fi
  done
}

# --- the runs ----------------------------------------------------------------
zk_write_config
zk_start
warm_up zookeeper "$zk_hosts"
for r in "${rows[@]}"; do set -- $r; zkbench zookeeper "$zk_hosts" "$1" "$2"; done
failover zookeeper "$zk_hosts" "$(zk_leader_pid)"
zk_stop

warden_start
warden_rows
warden_stop

# --- memory ------------------------------------------------------------------
if [ "$memory" = 1 ]; then
  zk_write_config
  zk_start
  say "zookeeper: populate $znodes znodes"
  run_child "$bin/warden-zkbench" --servers "$zk_hosts" --label zookeeper --workload populate \
    --znodes "$znodes" --value-size 32 --clients 16 --json >> "$results"
  zk_stop
  zk_start
  sleep 5
  pids="$(cat "$work"/zk/{1,2,3}/pid)"
  python3 - "$results" zookeeper "$zk_ready_s" "$(node_count_of "$(zk_port 1)")" \
    "$(for p in $pids; do rss_kb "$p"; done | paste -sd,)" \
    "$(for i in 1 2 3; do du -sb "$work/zk/$i/data" | cut -f1; done | paste -sd,)" <<'PY'
import json, sys
path, system, ready, count, rss, du = sys.argv[1:]
with open(path, "a") as f:
    f.write(json.dumps({"system": system, "workload": "memory", "ready_s": int(ready),
        "node_count": int(count or 0), "rss_kb": [int(x) for x in rss.split(",")],
        "data_bytes": [int(x) for x in du.split(",")]}) + "\n")
PY
  zk_stop

  rm -rf "$work/warden"
  warden_start
  say "warden: populate $znodes znodes"
  run_child "$bin/warden-zkbench" --servers "$w_zk_hosts" --label warden --workload populate \
    --znodes "$znodes" --value-size 32 --clients 16 --json >> "$results"
  warden_stop
  warden_start
  sleep 5
  python3 - "$results" warden "$w_ready_s" "$(node_count_of "$(w_zk_port 1)")" \
    "$(for i in 1 2 3; do rss_kb "$(cat "$work/warden/node-$i.pid")"; done | paste -sd,)" \
    "$(for i in 1 2 3; do du -sb "$work/warden/node-$i" | cut -f1; done | paste -sd,)" <<'PY'
import json, sys
path, system, ready, count, rss, du = sys.argv[1:]
with open(path, "a") as f:
    f.write(json.dumps({"system": system, "workload": "memory", "ready_s": int(ready),
        "node_count": int(count or 0), "rss_kb": [int(x) for x in rss.split(",")],
        "data_bytes": [int(x) for x in du.split(",")]}) + "\n")
PY
  warden_stop
fi

# --- the table -------------------------------------------------------------
python3 "$top/bench/table.py" "$results" --seconds "$seconds" --warmup "$warmup" \
  --zookeeper-version "$zk_version" --machine "$(nproc) cores, $(uname -m), $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)" \
  > "$out"
cp "$results" "${out%.md}.jsonl"
cat "$out"
say "written to $out (raw results: ${out%.md}.jsonl)"
