#!/usr/bin/env bash
# The tests: every test of the workspace (unit, property and integration
# tests; the integration tests start real warden processes on free ports),
# run side by side by cargo-nextest, then the examples in the API docs
# (which nextest does not run). Arguments go to nextest: a filter, or
# --no-fail-fast as CI passes.
#
# Side by side is why: `cargo test` runs one test binary after another,
# and most of the integration tests' time is spent waiting on the servers
# they start. Tests that must not overlap share a group of one in
# .config/nextest.toml (the Jepsen-style cases, the docs' fixed ports);
# under plain `cargo test --workspace`, which also works, a lock in each
# binary does the same.
set -euo pipefail
cd "$(dirname "$0")"
if ! cargo nextest --version >/dev/null 2>&1; then
  echo "test.sh: cargo-nextest is not installed; installing it (once, a few minutes)" >&2
  cargo install cargo-nextest --locked
fi
cargo nextest run --workspace --locked "$@"
cargo test --workspace --doc --locked
