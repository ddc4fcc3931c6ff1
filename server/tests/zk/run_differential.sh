#!/usr/bin/env bash
# Runs the differential test (differential.py) against a fresh Apache
# ZooKeeper 3.8 (Debian's `zookeeper` package, installed here if missing)
# and a fresh single-node Warden, both on loopback.
#
#   bash server/tests/zk/run_differential.sh [SEED] [OPS]
#
# Needs: a built `target/debug/warden` (cargo build), Java, python3.
set -euo pipefail
seed=${1:-1}
ops=${2:-10000}
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../../.." && pwd)
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

if [ ! -f /usr/share/java/zookeeper.jar ]; then
  apt-get update -qq && apt-get install -y -qq zookeeper
fi
venv="$top/target/zk-venv"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet kazoo==2.11.0 pytest==9.2.0 pure-sasl==0.6.2
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
zk_port=$(free_port)
cat > "$work/zoo.cfg" <<CFG
tickTime=2000
dataDir=$work/zk-data
clientPort=$zk_port
admin.enableServer=false
4lw.commands.whitelist=*
CFG
java -Xmx512m -Dzookeeper.extendedTypesEnabled=true -cp /usr/share/java/zookeeper.jar:/usr/share/java/slf4j-nop.jar:/etc/zookeeper/conf \
  org.apache.zookeeper.server.quorum.QuorumPeerMain "$work/zoo.cfg" > "$work/zk.log" 2>&1 &
"$top/target/debug/warden" serve --data-dir "$work/warden" --listen 127.0.0.1:0 \
  --peer-listen 127.0.0.1:0 --zk-listen 127.0.0.1:0 > "$work/warden.out" 2> "$work/warden.log" &

for _ in $(seq 1 120); do
  zk_up=$( (exec 3<>/dev/tcp/127.0.0.1/"$zk_port"; printf srvr >&3; cat <&3) 2>/dev/null | grep -c Mode || true)
  warden_zk=$(sed -n 's/.* zk=\([^ ]*\).*/\1/p' "$work/warden.out")
  if [ "$zk_up" = 1 ] && [ -n "$warden_zk" ]; then break; fi
  sleep 0.5
done
[ -n "${warden_zk:-}" ] || { echo "warden did not start"; cat "$work/warden.log"; exit 2; }
"$venv/bin/python" "$here/differential.py" --zookeeper 127.0.0.1:"$zk_port" \
  --warden "$warden_zk" --seed "$seed" --ops "$ops"
