# Shared by bench/compare.sh and bench/before_after.sh (sourced, not run):
# how a 3-node Warden local-cluster is started and stopped on loopback, and
# the rows measured on it (warden-zkbench through the ZooKeeper port,
# `wardenctl bench` on the native port, a leader kill -9). One copy, so
# that a before/after figure measures exactly what compare.sh measures.
#
# The sourcing script sets, before calling anything here:
#   work      a scratch dir (data dirs, logs)
#   results   the JSON-lines file the rows append to
#   seconds   measured seconds per row; warmup: warm-up seconds per row
#   bin       the dir of warden-zkbench and wardenctl (the load generators)
#   server_bin  the dir of the `warden` server binary (default: $bin), so
#             that two builds of the server can be driven by one generator
#   w_base    local-cluster's --base-port (default 27000: clients w_base+,
#             raft +100, HTTP +200, ZooKeeper port +300)
# and defines say(). Each start takes a fresh or existing "$work/warden".

w_base=${w_base:-27000}
warden_pid=""
child=""

w_zk_port() { echo $((w_base + 299 + $1)); }
w_port() { echo $((w_base - 1 + $1)); }
# Sets w_zk_hosts and w_hosts from w_base.
warden_hosts() {
  w_zk_hosts="127.0.0.1:$(w_zk_port 1),127.0.0.1:$(w_zk_port 2),127.0.0.1:$(w_zk_port 3)"
  w_hosts="127.0.0.1:$(w_port 1),127.0.0.1:$(w_port 2),127.0.0.1:$(w_port 3)"
}
# The loopback ports a local-cluster at w_base listens on.
warden_ports() {
  local i
  for i in 0 100 200 300; do seq $((w_base + i)) $((w_base + i + 2)); done
}

# Runs a command in the background and waits for it, so that a signal to
# the script is handled at once (bash defers traps until a foreground
# child exits); warden_cleanup stops the child.
run_child() {
  "$@" &
  child=$!
  local rc=0
  wait "$child" || rc=$?
  child=""
  return "$rc"
}
# Kills pid $1 only if it is still the process we started (its command line
# holds $2): a pid file or list can outlive its process.
kill_ours() { grep -qa -- "$2" "/proc/$1/cmdline" 2>/dev/null && kill -9 "$1" 2>/dev/null || true; }

# The Warden half of an EXIT trap: the running row, the local-cluster, and
# any node the local-cluster could not stop.
warden_cleanup() {
  [ -n "$child" ] && kill_ours "$child" warden
  if [ -n "$warden_pid" ]; then
    kill -TERM "$warden_pid" 2>/dev/null || true
    for _ in $(seq 1 150); do kill -0 "$warden_pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$warden_pid" 2>/dev/null || true
  fi
  for f in "$work"/warden/node-*.pid; do
    [ -f "$f" ] && kill_ours "$(cat "$f")" "warden"
  done
  # A false last test above must not become the trap's status (set -e
  # would end the caller's cleanup before it removes the work dir).
  return 0
}

warden_start() {
  : > "$work/warden.out"
  "${server_bin:-$bin}/warden" local-cluster --nodes 3 --base-port "$w_base" --data-dir "$work/warden" \
    > "$work/warden.out" 2>> "$work/warden.err" &
  warden_pid=$!
  local t0=$SECONDS
  while [ $((SECONDS - t0)) -lt 300 ]; do
    if grep -q '^ZOOKEEPER_SERVERS=' "$work/warden.out"; then
      say "Warden ready in $((SECONDS - t0)) s"
      w_ready_s=$((SECONDS - t0))
      return 0
    fi
    kill -0 "$warden_pid" 2>/dev/null || { say "warden local-cluster exited; see $work/warden.err"; exit 1; }
    sleep 0.5
  done
  say "Warden was not ready in 300 s; see $work/warden.err"
  exit 1
}
warden_stop() {
  [ -n "$warden_pid" ] || return 0
  kill -TERM "$warden_pid" 2>/dev/null || true
  for _ in $(seq 1 200); do kill -0 "$warden_pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$warden_pid" 2>/dev/null || true
  wait "$warden_pid" 2>/dev/null || true
  warden_pid=""
}
warden_leader_pid() {
  local id
  id=$("$bin/wardenctl" --servers "$w_hosts" --json cluster status 2>/dev/null |
       python3 -c 'import json,sys
for line in sys.stdin:
    line=line.strip()
    if not line: continue
    o=json.loads(line)
    for m in (o if isinstance(o,list) else o.get("members",[o])):
        if m.get("leader"): print(m["id"]); raise SystemExit' || true)
  [ -n "$id" ] && cat "$work/warden/node-$id.pid"
}

# --- the rows ------------------------------------------------------------------
# Through the ZooKeeper port (both systems), and wardenctl bench's matching
# workloads on Warden's native port.
rows=("set 16" "set 64" "get 16" "create-delete 16" "lock 16" "lock 64" "lock 1" "handoff 16")
native_rows=("write 16" "write 64" "read 16" "create-delete 16" "lock 16" "lock 64" "lock 1" "lock-contended 16")
# CPU seconds (user + system) the three servers of `system` used so far.
server_pids() {
  if [ "$1" = zookeeper ]; then cat "$work"/zk/{1,2,3}/pid; else cat "$work"/warden/node-{1,2,3}.pid; fi
}
server_cpu_s() {
  local hz; hz=$(getconf CLK_TCK)
  for p in $(server_pids "$1"); do awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0; done |
    awk -v hz="$hz" '{t += $1} END {printf "%.2f", t / hz}'
}
zkbench() { # system hosts workload clients
  say "$1: $3 ($4 clients)"
  local cpu0 t0; cpu0=$(server_cpu_s "$1"); t0=$(date +%s.%N)
  run_child "$bin/warden-zkbench" --servers "$2" --label "$1" --workload "$3" --clients "$4" \
    --seconds "$seconds" --warmup-seconds "$warmup" --json >> "$results" \
    || { say "$1 $3 $4 failed"; echo "{\"system\":\"$1\",\"workload\":\"$3\",\"clients\":$4,\"failed\":true}" >> "$results"; }
  # The servers' CPU over the row (warm-up included), for the CPU-per-op table.
  echo "{\"system\":\"$1\",\"workload\":\"$3\",\"clients\":$4,\"server_cpu_s\":$(server_cpu_s "$1" | awk -v a="$cpu0" '{printf "%.2f", $1 - a}'),\"wall_s\":$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.2f", b - a}')}" >> "$results"
}
failover() { # system hosts pid
  say "$1: failover, kill -9 $3"
  run_child "$bin/warden-zkbench" --servers "$2" --label "$1" --workload failover --clients 4 \
    --warmup-seconds "$warmup" --kill-after-seconds 3 --seconds 13 --kill-pid "$3" --json >> "$results" \
    || say "$1 failover failed"
}
warm_up() { # system hosts: an untimed pass first (the JVM's JIT, caches)
  say "$1: warm-up pass (set, 16 clients, 5 s, not reported)"
  run_child "$bin/warden-zkbench" --servers "$2" --label "$1" --workload set --clients 16 \
    --seconds 5 --warmup-seconds 0 > /dev/null || say "$1 warm-up pass failed"
}
native() { # workload clients
  say "warden native: $1 ($2 clients)"
  "$bin/wardenctl" --servers "$w_hosts" --json bench --workload "$1" --clients "$2" \
    --seconds "$seconds" --warmup-seconds "$warmup" 2>/dev/null |
    python3 -c 'import json,sys; o=json.loads(sys.stdin.read()); o["system"]="warden-native"; print(json.dumps(o))' >> "$results" \
    || say "wardenctl bench $1 $2 failed"
}

# Every Warden row on a started local-cluster, in compare.sh's order: the
# warm-up pass, the ZooKeeper-port rows, the native rows, then the leader
# kill (last: it leaves the cluster a node short).
warden_rows() {
  local r leader
  warm_up warden "$w_zk_hosts"
  for r in "${rows[@]}"; do set -- $r; zkbench warden "$w_zk_hosts" "$1" "$2"; done
  for r in "${native_rows[@]}"; do set -- $r; native "$1" "$2"; done
  leader=$(warden_leader_pid || true)
  [ -n "$leader" ] || { say "no Warden leader found"; exit 1; }
  failover warden "$w_zk_hosts" "$leader"
}
