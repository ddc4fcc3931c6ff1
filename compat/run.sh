#!/usr/bin/env bash
# ZooKeeper clients nobody here wrote, against Warden's ZooKeeper port, as
# Debian ships them: Apache Curator's recipes (curator/*.java,
# on three nodes, across a leader kill -9), ZooKeeper's C client
# (c/zk_basics.c) and zkCli.sh's command set; and the differential test
# against Apache ZooKeeper 3.8 itself. The tests that build and drive them
# are server/tests/zk_clients.rs and zk_kazoo.rs's
# differential_against_zookeeper; this script installs what they need and
# runs them, failing if any recipe or check fails.
#
#   bash compat/run.sh              install what is missing, run the tests
#   bash compat/run.sh --install-only
#   bash compat/run.sh --ci         install what is missing, except Java:
#                                   exit 3 with the reason on stdout when
#                                   Java is missing or what is missing
#                                   cannot be installed (.ci/run then
#                                   skips the tests, saying why)
#
# Installing needs root and apt-get (Debian 12: openjdk-17-jdk-headless,
# libcurator-recipes-java, libslf4j-java, zookeeper, libzookeeper-mt-dev,
# gcc). Needs a Rust toolchain; the tests start their own Warden processes
# on loopback ports and stop them.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
mode=run
case "${1:-}" in
  "") ;;
  --install-only) mode=install ;;
  --ci) mode=ci ;;
  -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
  *) echo "compat/run.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
esac

say() { echo "compat/run.sh: $*" >&2; }

# What the tests need, and the Debian package that brings it.
needs=(
  "javac openjdk-17-jdk-headless"
  "/usr/share/java/curator-recipes.jar libcurator-recipes-java"
  "/usr/share/java/slf4j-simple.jar libslf4j-java"
  "/usr/share/zookeeper/bin/zkCli.sh zookeeper"
  "/usr/include/zookeeper/zookeeper.h libzookeeper-mt-dev"
  "gcc gcc"
)
have() {
  case "$1" in
    /*) [ -e "$1" ] ;;
    *) command -v "$1" >/dev/null ;;
  esac
}

if [ "$mode" = ci ] && ! have javac; then
  echo "javac is missing (Java 17: bash compat/run.sh installs it)"
  exit 3
fi
missing=()
for need in "${needs[@]}"; do
  read -r what package <<<"$need"
  have "$what" || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    why="missing Debian packages ${missing[*]}; installing them needs root and apt-get"
    if [ "$mode" = ci ]; then
      echo "$why"
      exit 3
    fi
    say "$why"
    exit 2
  fi
  say "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }; then
    why="apt-get could not install ${missing[*]}"
    if [ "$mode" = ci ]; then
      echo "$why"
      exit 3
    fi
    say "$why"
    exit 2
  fi
fi
[ "$mode" = run ] || exit 0

cd "$top"
export WARDEN_COMPAT_REQUIRED=1
cargo test --locked -p warden-server --test zk_clients -- --nocapture --test-threads 1
# The differential test against ZooKeeper 3.8 itself (kazoo, from PyPI).
cargo test --locked -p warden-server --test zk_kazoo differential_against_zookeeper -- --nocapture
