#!/usr/bin/env bash
# Runs Warden's fuzz targets locally: ./run.sh [TARGET|all] [SECONDS]
#
# Needs the nightly toolchain (`rustup toolchain install nightly`); installs
# cargo-fuzz if it is missing. Each target starts from the committed seeds in
# corpus/TARGET and grows its corpus in corpus-grown/TARGET (not committed);
# crashes land in artifacts/TARGET, logs in logs/TARGET.log. Targets run one
# after another, at low priority. Exits non-zero if any target failed.
#
# Not part of .ci/run: a nightly sanitizer build plus minutes per target is
# more than CI's budget on two cores. The committed seeds are replayed on
# stable by `cargo test -p warden-server --test fuzz_corpus`.
set -euo pipefail
cd "$(dirname "$0")"

TARGETS=(native_frame zk_jute peer_frame snapshot http_json)
target="${1:-all}"
seconds="${2:-600}"
# No single allocation may exceed this: every input is at most a few KiB,
# so a larger one means a decoder trusted a length it was sent.
MALLOC_LIMIT_MB=64

if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi

if [[ "$target" == all ]]; then
    selected=("${TARGETS[@]}")
else
    selected=("$target")
fi

mkdir -p logs
failed=0
for t in "${selected[@]}"; do
    mkdir -p "corpus-grown/$t"
    echo "== $t for ${seconds}s (log: fuzz/logs/$t.log)"
    # --debug-assertions: overflow checks and the tree's debug_assert!s on.
    if nice -n 10 cargo +nightly fuzz run --debug-assertions "$t" \
        "corpus-grown/$t" "corpus/$t" -- \
        -max_total_time="$seconds" -malloc_limit_mb="$MALLOC_LIMIT_MB" \
        -timeout=10 -print_final_stats=1 >"logs/$t.log" 2>&1; then
        grep -E '^(Done|#[0-9]+[[:space:]]+DONE)|stat::number_of_executed_units|stat::peak_rss_mb' "logs/$t.log" || true
    else
        echo "!! $t failed; see fuzz/logs/$t.log and fuzz/artifacts/$t/"
        tail -n 30 "logs/$t.log"
        failed=1
    fi
done
exit "$failed"
