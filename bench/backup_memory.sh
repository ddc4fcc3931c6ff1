#!/usr/bin/env bash
# Memory of a backup: a single-node server populated with N znodes of
# VALUE bytes through the ZooKeeper port, then `wardenctl snapshot save`
# from its HTTP port. Prints the backup's size, wardenctl's peak RSS
# (/usr/bin/time's maximum resident set) and the server's peak RSS during
# the backup (VmHWM from /proc/PID/status, reset with clear_refs just
# before the backup), against its RSS before it.
#
#   cargo build -p warden-server -p warden-ctl -p warden-zkbench
#   bash bench/backup_memory.sh 250000 256          # BIN=./target/debug by default
#
# Ports BASE..BASE+4 on 127.0.0.1 (BASE=9400); data in a temp dir, removed after.
set -euo pipefail
N=${1:-250000}
VALUE=${2:-256}
BASE=${BASE:-9400}
cd "$(dirname "$0")/.."
B=${BIN:-./target/debug}
D=$(mktemp -d /tmp/warden-backupmem.XXXXXX)
$B/warden serve --id 1 --data-dir "$D/n1" --listen 127.0.0.1:$BASE \
  --peer-listen 127.0.0.1:$((BASE + 1)) --http-listen 127.0.0.1:$((BASE + 2)) \
  --zk-listen 127.0.0.1:$((BASE + 3)) --max-connections-per-ip 1000 >"$D/server.log" 2>&1 &
PID=$!
cleanup() {
  kill "$PID" 2>/dev/null || true
  wait "$PID" 2>/dev/null || true
  rm -rf "$D"
}
trap cleanup EXIT
for _ in $(seq 240); do
  curl -fsS "http://127.0.0.1:$((BASE + 2))/health" >/dev/null 2>&1 && break
  sleep 0.5
done
$B/warden-zkbench --servers "127.0.0.1:$((BASE + 3))" --workload populate --znodes "$N" \
  --value-size "$VALUE" --clients 16 | tail -1
kb() { awk -v k="$1:" '$1 == k { print $2 }' "/proc/$PID/status"; }
echo "server before the backup: VmRSS $(kb VmRSS) kB, VmHWM $(kb VmHWM) kB"
echo 5 >"/proc/$PID/clear_refs"
/usr/bin/time -f "wardenctl: max RSS %M kB, %e s" \
  $B/wardenctl --servers 127.0.0.1:$BASE snapshot save "$D/backup.snap" --http 127.0.0.1:$((BASE + 2))
echo "server during the backup: VmHWM $(kb VmHWM) kB (VmRSS now $(kb VmRSS) kB)"
ls -l "$D/backup.snap" | awk '{ print "backup file: " $5 " bytes" }'
