#!/usr/bin/env bash
# A lock holder's renewals through the HTTP lock API, alone and under a
# flood (issue 26, attack 6): a single-node server, one anonymous holder
# renewing its lease back to back for SECONDS, measured (p50, p99, max)
#   1. alone;
#   2. while 8 clients (CLIENTS) send acquires with made-up Basic
#      credentials, each never seen before, as fast as they are answered;
#   3. while 8 anonymous clients send try-acquires of another, held lock
#      (for comparison: the same request rate, no credentials).
# Each client keeps one HTTP/1.1 connection open (Python's http.client),
# so the figures are the server's, not process start-ups. Prints one
# line per phase, and the server's gateway counters at the end.
#
#   cargo build --release -p warden-server
#   bash bench/gateway_flood.sh 10            # BIN=./target/release by default
#   FLOOD_NICE=10 bash bench/gateway_flood.sh 10
#
# On one small machine the flooding clients also take the CPU the server
# and the holder need; a real flood comes from other machines. FLOOD_NICE
# runs the flooders at that lower CPU priority (server and holder keep
# theirs), so the figure is the server's handling of the flood rather than
# the load generator's share of the cores. Give both figures.
#
# Port BASE..BASE+3 on 127.0.0.1 (BASE=9460); data in a temp dir, removed after.
set -euo pipefail
SECONDS_PER_PHASE=${1:-10}
CLIENTS=${CLIENTS:-8}
BASE=${BASE:-9460}
cd "$(dirname "$0")/.."
B=${BIN:-./target/release}
D=$(mktemp -d /tmp/warden-gatewayflood.XXXXXX)
"$B/warden" serve --id 1 --data-dir "$D/n1" --listen 127.0.0.1:$BASE \
  --peer-listen 127.0.0.1:$((BASE + 1)) --http-listen 127.0.0.1:$((BASE + 2)) \
  --zk-listen off >"$D/server.log" 2>&1 &
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
python3 - "127.0.0.1:$((BASE + 2))" "$SECONDS_PER_PHASE" "$CLIENTS" <<'EOF'
import base64, http.client, json, multiprocessing as mp, os, sys, time

ADDR, PHASE_S, CLIENTS = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
FLOOD_NICE = int(os.environ.get("FLOOD_NICE", "0"))
HOST, PORT = ADDR.split(":")

def conn():
    return http.client.HTTPConnection(HOST, int(PORT), timeout=30)

def post(c, path, body, headers=None):
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    c.request("POST", path, json.dumps(body), h)
    r = c.getresponse()
    return r.status, r.read()

def flooder(kind, stop, answers):
    if FLOOD_NICE:
        os.nice(FLOOD_NICE)
    c = conn()
    n = 0
    while not stop.is_set():
        if kind == "credentials":
            cred = base64.b64encode(f"u{os.urandom(6).hex()}:{os.urandom(6).hex()}".encode()).decode()
            post(c, "/api/v1/locks/flood/acquire",
                 {"client_id": "f", "ttl_ms": 30000}, {"Authorization": f"Basic {cred}"})
        else:
            post(c, "/api/v1/locks/flood/acquire",
                 {"client_id": f"anon-{os.getpid()}", "ttl_ms": 30000, "wait_timeout_ms": 0})
        n += 1
    with answers.get_lock():
        answers.value += n

def renewals(c, token, seconds):
    took = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.perf_counter()
        st, body = post(c, "/api/v1/locks/bench/renew",
                        {"client_id": "holder", "fencing_token": token, "ttl_ms": 30000})
        took.append((time.perf_counter() - t0) * 1000)
        assert st == 200, (st, body)
    took.sort()
    q = lambda p: took[min(len(took) - 1, int(p * len(took)))]
    return len(took), q(0.50), q(0.99), took[-1]

holder = conn()
st, body = post(holder, "/api/v1/locks/bench/acquire", {"client_id": "holder", "ttl_ms": 30000})
assert st == 200, body
token = json.loads(body)["fencing_token"]
# The anonymous flood's lock is held, so its acquires are refused (409).
st, body = post(conn(), "/api/v1/locks/flood/acquire", {"client_id": "flood-holder", "ttl_ms": 600000})
assert st == 200, body
renewals(holder, token, 1.0)  # warm-up

alone = None
for phase in ["alone", "credentials", "anonymous"]:
    stop, answers = mp.Event(), mp.Value("l", 0)
    procs = [] if phase == "alone" else [
        mp.Process(target=flooder, args=(phase, stop, answers)) for _ in range(CLIENTS)]
    for p in procs:
        p.start()
    time.sleep(0.5 if procs else 0)
    n, p50, p99, worst = renewals(holder, token, PHASE_S)
    stop.set()
    for p in procs:
        p.join()
    if phase == "alone":
        alone = p99
    flood = "" if not procs else f", {CLIENTS} flooding clients got {answers.value / PHASE_S:.0f} answers/s"
    ratio = "" if not procs else f" ({p99 / alone:.2f}x alone)"
    print(f"{phase:12} renewals: {n} ({n / PHASE_S:.0f}/s), p50 {p50:.2f} ms, "
          f"p99 {p99:.2f} ms{ratio}, max {worst:.2f} ms{flood}")

c = conn()
c.request("GET", "/metrics")
for line in c.getresponse().read().decode().splitlines():
    if line.startswith(("warden_gateway_", "warden_sessions ")):
        print(line)
EOF
