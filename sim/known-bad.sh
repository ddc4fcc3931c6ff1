#!/usr/bin/env bash
# Shows that the simulator finds each known-bad mode within a stated seed
# budget: runs seeds 0.. of each mode until the first failing seed, and
# fails if a mode goes uncaught within its budget (docs/simulation.md,
# "Proven able to fail"). Run by hand; CI runs smaller budgets
# (sim/tests/known_bad.rs, sim/tests/cores.rs).
#
#   bash sim/known-bad.sh [--budget N] [--debug]
#
#   --budget N   seeds per mode (default 1000)
#   --debug      use a debug build (CI's; slower) instead of release
set -euo pipefail
cd "$(dirname "$0")/.."
budget=1000
profile=release
while [ $# -gt 0 ]; do
  case "$1" in
    --budget) budget=$2; shift 2 ;;
    --debug) profile=debug; shift ;;
    *) echo "unknown option $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
if [ "$profile" = release ]; then
  cargo build -q --release -p warden-sim
else
  cargo build -q -p warden-sim
fi
sim="target/$profile/warden-sim"

# subject options | mode option | simulated ms a seed
modes=(
  "|--skip-fsync|20000"
  "|--vote-not-persisted|20000"
  "|--unchecked-open|20000"
  "--core|--skip-read-index|8000"
  "--core|--bounded-dedup|8000"
  "--core|--skip-fsync|8000"
  "--core|--keep-removals|8000"
)
missed=0
for m in "${modes[@]}"; do
  IFS='|' read -r subject mode ms <<<"$m"
  started=$(date +%s)
  # shellcheck disable=SC2086 # subject is empty or one flag
  out=$("$sim" $subject "$mode" --seeds "$budget" --duration-ms "$ms" --stop --tail 0 | grep -v '^ ' || true)
  took=$(( $(date +%s) - started ))
  caught=$(grep -m1 'FAILED' <<<"$out" || true)
  name="${subject:+$subject }$mode"
  if [ -n "$caught" ]; then
    echo "$name: caught within $budget seeds (${took}s): $caught"
  else
    echo "$name: NOT caught in seeds 0..$((budget - 1)) (${took}s)"
    missed=$((missed + 1))
  fi
done
if [ "$missed" -gt 0 ]; then
  echo "$missed mode(s) not caught within the budget" >&2
  exit 1
fi
