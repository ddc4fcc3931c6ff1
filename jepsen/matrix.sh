#!/usr/bin/env bash
# The long matrix: every workload under every nemesis set, for a time limit
# each, with several seeds, on release builds. Writes
# STORE/matrix-<timestamp>/summary.md (one row per run: validity, faults,
# operations, anomalies, the run's directory) and exits non-zero if any run
# was invalid or could not run.
#
#   bash jepsen/matrix.sh                       # 600 s each, seeds 1 2 3
#   bash jepsen/matrix.sh --time-limit 60 --seeds "7" \
#        --workloads "lock lease" --nemeses "kill;corrupt"
#
# Nemesis sets are separated by `;`; a set may carry extra flags
# (`kill,pause,partition,client-partition --overlap`). The defaults cover
# every fault alone and the overlapping mix, and for election its leader's
# process killed or paused (kill-client, pause-client) alone and in the
# mix: a full run is 10 workloads x 13 sets (election 15) x 3 seeds x 10
# min, about 66 hours.
set -euo pipefail
cd "$(dirname "$0")/.."

time_limit=600
seeds="1 2 3"
nodes=3
store=store
workloads="lock lease election register sequential ephemeral watch lock-set session-order zk-pipeline"
nemeses="kill;pause;partition;client-partition;membership;restart-all;corrupt;clock;lose-unsynced;one-way-cut;one-way-kill;isolate-after-expiry;kill,pause,partition,client-partition --overlap"
# Faults of client processes, for the election workload only; added to
# the sets unless --nemeses is given.
election_nemeses="kill-client,pause-client;kill,pause,partition,client-partition,kill-client,pause-client --overlap"
while [ $# -gt 0 ]; do
    case "$1" in
        --time-limit) time_limit=$2; shift 2 ;;
        --seeds) seeds=$2; shift 2 ;;
        --nodes) nodes=$2; shift 2 ;;
        --store) store=$2; shift 2 ;;
        --workloads) workloads=$2; shift 2 ;;
        --nemeses) nemeses=$2; election_nemeses=""; shift 2 ;;
        -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
        *) echo "matrix.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
    esac
done

cargo build --release --locked -p warden-server -p warden-jepsen
jepsen=target/release/warden-jepsen
out="$store/matrix-$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$out"
summary="$out/summary.md"
{
    echo "# Jepsen matrix, $(date -u +%Y-%m-%d), git $(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
    echo
    echo "$nodes nodes, ${time_limit} s per run, seeds: $seeds."
    echo
    echo "| workload | nemesis | seed | valid | faults | ops ok / invoked | anomalies | run |"
    echo "|---|---|---|---|---|---|---|---|"
} >"$summary"

bad=0
for workload in $workloads; do
    sets_of=$nemeses
    if [ "$workload" = election ] && [ -n "$election_nemeses" ]; then
        sets_of="$nemeses;$election_nemeses"
    fi
    IFS=';' read -ra sets <<<"$sets_of"
    for set in "${sets[@]}"; do
        read -ra words <<<"$set"
        faults=${words[0]}
        extra=("${words[@]:1}")
        for seed in $seeds; do
            log="$out/$workload-${faults//,/+}-$seed.log"
            set +e
            "$jepsen" test --workload "$workload" --nemesis "$faults" "${extra[@]}" \
                --nodes "$nodes" --time-limit "$time_limit" --seed "$seed" \
                --store "$out/runs" >"$log" 2>&1
            code=$?
            set -e
            results="$out/runs/$workload/latest/results.json"
            row=$(python3 - "$results" "$code" <<'PY'
import json, sys, os
path, code = sys.argv[1], int(sys.argv[2])
try:
    r = json.load(open(path))
except Exception as e:
    print(f"could not run (exit {code}) | | | |")
    sys.exit(0)
kinds = {}
for a in r.get("anomalies", []):
    kinds[a["kind"]] = kinds.get(a["kind"], 0) + 1
by_kind = dict(r["faults"]["by_kind"])
for k, v in (r.get("stats", {}).get("client_faults") or {}).items():
    if v:
        by_kind[k] = v
faults = ", ".join(f"{k} {v}" for k, v in sorted(by_kind.items())) or "none"
anom = ", ".join(f"{k} x{v}" for k, v in sorted(kinds.items())) or "-"
notes = [n["kind"] for n in r.get("notes", [])]
if notes:
    anom += " (notes: " + ", ".join(sorted(set(notes))) + ")"
ops = r["ops"]
print(f'{json.dumps(r["valid"])} | {faults} | {ops["ok"]} / {ops["invoked"]} | {anom} | {os.path.realpath(os.path.dirname(path))}')
PY
)
            echo "| $workload | $set | $seed | $row |" >>"$summary"
            echo "matrix: $workload / $set / seed $seed: exit $code"
            if [ "$code" = 1 ] || ! [ -f "$results" ]; then
                bad=$((bad + 1))
            fi
        done
    done
done
echo "matrix: summary in $summary"
[ "$bad" = 0 ]
