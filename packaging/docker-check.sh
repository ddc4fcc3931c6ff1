#!/usr/bin/env bash
# Checks the container packaging where Docker runs: builds the image from
# the Dockerfile, runs one node from it and waits for /health, then brings
# up packaging/compose.yaml's 3-node cluster and waits until every node is
# healthy (a leader known, a quorum reachable, caught up); tears
# everything down after.
# Without a Docker daemon it says so and exits 3 (nothing checked).
#
#   bash packaging/docker-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v docker >/dev/null || ! docker info >/dev/null 2>&1; then
    echo "docker-check: no Docker daemon here; the image and compose file were NOT checked" >&2
    exit 3
fi
image=warden:check
name=warden-check-$$
project=warden-check-$$
cleanup() {
    docker rm -f "$name" >/dev/null 2>&1 || true
    docker compose -p "$project" -f packaging/compose.yaml down -v >/dev/null 2>&1 || true
}
trap cleanup EXIT

# Polls `url` until it answers 200 with a body matching `pattern`.
await_http() {
    local url=$1 pattern=$2 what=$3
    for _ in $(seq 1 120); do
        if body=$(curl -fsS "$url" 2>/dev/null) && grep -q "$pattern" <<<"$body"; then
            return 0
        fi
        sleep 1
    done
    echo "docker-check: $what: no answer matching $pattern from $url" >&2
    return 1
}

docker build -t "$image" .
docker run --rm "$image" --version
docker run -d --name "$name" -p 127.0.0.1::7200 \
    -e WARDEN_HTTP_LISTEN=0.0.0.0:7200 -e WARDEN_LISTEN=0.0.0.0:7000 "$image" serve
port=$(docker port "$name" 7200/tcp | head -1 | sed 's/.*://')
await_http "http://127.0.0.1:$port/health" '"healthy":true' "one node"
docker rm -f "$name" >/dev/null

docker compose -p "$project" -f packaging/compose.yaml up -d --build
for p in 7201 7202 7203; do
    await_http "http://127.0.0.1:$p/health" '"healthy":true' "compose node on $p"
done
echo "docker-check: the image runs a node, and the compose file a 3-node cluster"
