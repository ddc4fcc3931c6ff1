#!/usr/bin/env bash
# How long a follower's core is held while it installs the leader's
# snapshot: a 3-node cluster of release builds, populated with N znodes of
# 32 B through the ZooKeeper port, one follower SIGSTOPped while 8 s of
# writes push the leader past a snapshot and its log past --max-log-bytes,
# then SIGCONTed: it can only catch up by installing the snapshot.
#
#   cargo build --release -p warden-server -p warden-zkbench
#   bash bench/snapshot_install.sh stream 300000   # streamed (default)
#   bash bench/snapshot_install.sh inline 300000   # whole tree in one message, as before
#
# Prints the follower's install lines (core_ms: what the install held the
# core for; received/built off the core), every turn of its core's loop of
# 200 ms or more ("the core was busy"), and the longest answer to
# `GET /health` (served by the core) while it caught up. Ports BASE..BASE+303
# on 127.0.0.1 (BASE=9000 by default); data in a temp dir, removed after.
set -euo pipefail
MODE=${1:?stream or inline}
N=${2:-300000}
BASE=${BASE:-9000}
cd "$(dirname "$0")/.."
B=./target/release
D=$(mktemp -d /tmp/warden-snapinstall.XXXXXX)
EXTRA=(--snapshot-entries 50000 --max-log-bytes 8000000 --max-connections-per-ip 1000)
[ "$MODE" = inline ] && EXTRA+=(--inline-snapshots)
port() { echo $((BASE + $1)); }
PEERS="1=127.0.0.1:$(port 101),2=127.0.0.1:$(port 102),3=127.0.0.1:$(port 103)"
PIDS=()
for i in 1 2 3; do
  $B/warden serve --id $i --data-dir "$D/n$i" --listen 127.0.0.1:$(port $i) \
    --peer-listen 127.0.0.1:$(port $((100 + i))) --http-listen 127.0.0.1:$(port $((200 + i))) \
    --zk-listen 127.0.0.1:$(port $((300 + i))) --peers "$PEERS" "${EXTRA[@]}" >"$D/n$i.log" 2>&1 &
  PIDS+=($!)
done
cleanup() {
  for p in "${PIDS[@]}"; do kill -CONT "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done
  wait || true
  rm -rf "$D"
}
trap cleanup EXIT
for _ in $(seq 120); do
  L=$(grep -l "role=Leader" "$D"/n*.log 2>/dev/null | head -1 | sed 's/.*n\([0-9]\)\.log/\1/') || true
  [ -n "$L" ] && break
  sleep 0.5
done
[ -n "$L" ] || { echo "no leader" >&2; exit 1; }
F=$((L == 3 ? 2 : 3))
O=$((6 - L - F))
ZK="127.0.0.1:$(port $((300 + L))),127.0.0.1:$(port $((300 + O)))"
echo "leader $L, follower $F ($MODE)"
$B/warden-zkbench --servers "$ZK" --workload populate --znodes "$N" --value-size 32 --clients 16 | tail -1
sleep 3
kill -STOP "${PIDS[$((F - 1))]}"
$B/warden-zkbench --servers "$ZK" --workload set --clients 16 --seconds 8 --warmup-seconds 0 --value-size 512 | tail -1
sleep 2
kill -CONT "${PIDS[$((F - 1))]}"
python3 - "$(port $((200 + F)))" 12 <<'EOF'
import http.client, sys, time
port, secs = int(sys.argv[1]), float(sys.argv[2])
start = time.time()
worst, at, n = 0.0, 0.0, 0
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
while time.time() < start + secs:
    t0 = time.time()
    try:
        conn.request("GET", "/health")
        conn.getresponse().read()
    except Exception:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    dt = time.time() - t0
    n += 1
    if dt > worst:
        worst, at = dt, t0 - start
    time.sleep(0.005)
print(f"GET /health on the follower: {n} answers, longest {worst * 1000:.0f} ms at +{at:.2f} s")
EOF
echo "follower $F, from the install on:"
sed -n '/snapshot transfer refused\|received and built\|state machine replaced/,$p' "$D/n$F.log" |
  grep -E "snapshot transfer refused|received and built|state machine replaced|leader snapshot installed|core was busy" |
  sed 's/^[^ ]* *INFO //' || true
echo "leader $L:"
grep -E "snapshot transfer (finished|failed|refused)" "$D/n$L.log" | sed 's/^[^ ]* *[A-Z]* //' | head -3 || true
