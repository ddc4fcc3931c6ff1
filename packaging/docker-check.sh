#!/usr/bin/env bash
# Checks the container packaging for real: builds the image from the
# Dockerfile, runs `warden --version` in it, runs one node from it (as a
# non-root user), waits for /health and stops it (exit code 0 on the stop
# signal), then brings up packaging/compose.yaml's 3-node cluster from that
# image, waits until every node is healthy (a leader known, a quorum
# reachable, caught up) and all three name the same leader, writes through
# node 1 and reads back through node 3 and through node 2 after each of
# three restarts; prints the image's size; removes the containers, volumes, network
# and images it made.
#
#   bash packaging/docker-check.sh [--stand-in-bases]
#
# Engine: Docker where its daemon answers, else Podman (compose through
# `podman compose`, else podman-compose); with neither it says so and
# exits 3 (nothing checked). WARDEN_CHECK_ENGINE=docker|podman picks one.
# Ports: the single node and the cluster publish on 127.0.0.1 only, on
# free ports the script picks (compose.yaml's WARDEN*_PORT variables).
#
# --stand-in-bases: where no registry answers (docker.io unreachable), the
#   Dockerfile's base images cannot be pulled. This builds local stand-ins
#   instead and passes them as BUILD_IMAGE and RUNTIME_IMAGE: a Debian
#   bookworm `debootstrap --variant=minbase` root imported as the runtime
#   image, and the same plus gcc, libc6-dev, ca-certificates, this
#   machine's Rust toolchain (`rustc --print sysroot`, without its docs)
#   and the certificate authorities it adds in
#   /usr/local/share/ca-certificates (a TLS-inspecting proxy's) as the
#   build image. Needs root, debootstrap and a reachable Debian mirror
#   (WARDEN_CHECK_DEBIAN_MIRROR); cargo in the build still fetches crates
#   from crates.io. What it then checks is the Dockerfile's own steps, the
#   compose file and the binaries in a Debian bookworm user space, NOT the
#   upstream rust:1-slim-bookworm and debian:bookworm-slim images (the
#   size it prints is that of the stand-in-based image: minbase is larger
#   than debian:bookworm-slim; the layers the Dockerfile adds are printed
#   apart).
#
# Podman only:
#   WARDEN_CHECK_STORE=DIR    keep everything (images, layers, containers,
#                             volumes) in a private store under DIR, e.g.
#                             /var/tmp/warden-podman; deleted at the end if
#                             this run made it (DIR absent or empty), used
#                             and kept if it already holds a store.
#   WARDEN_CHECK_SANDBOX=1    settings for a constrained host (a VM or
#                             container without CAP_SYS_RESOURCE, cgroups v1
#                             or hybrid): cgroupfs, runc, containers'
#                             ulimits within this shell's hard limits,
#                             chroot isolation and the host's network for
#                             the build's RUN steps.
#   WARDEN_CHECK_STORAGE_DRIVER=vfs  where overlay mounts fail.
# Reruns: WARDEN_CHECK_KEEP=1 keeps the images it built (and the store);
# WARDEN_CHECK_IMAGE=IMAGE checks that image instead of building one.
# As run on a sandboxed build machine without Docker or a registry:
#   WARDEN_CHECK_STORE=/var/tmp/warden-podman WARDEN_CHECK_SANDBOX=1 \
#       bash packaging/docker-check.sh --stand-in-bases
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "docker-check: $*" >&2; }

stand_ins=0
for arg in "$@"; do
    case $arg in
    --stand-in-bases) stand_ins=1 ;;
    -h | --help)
        sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
        exit 0
        ;;
    *)
        log "unknown argument $arg (see --help)"
        exit 2
        ;;
    esac
done

engine=${WARDEN_CHECK_ENGINE:-}
store=${WARDEN_CHECK_STORE:-}
work=$(mktemp -d "${TMPDIR:-/var/tmp}/warden-check.XXXXXX")
made_store=0

# Podman's private store and sandbox settings go in through its own
# configuration variables, so podman-compose's podman calls get them too.
podman_setup() {
    if [ -n "$store" ]; then
        if [ ! -e "$store" ] || [ -z "$(ls -A "$store" 2>/dev/null)" ]; then
            made_store=1
        fi
        mkdir -p "$store"
        cat >"$work/storage.conf" <<EOF
[storage]
driver = "${WARDEN_CHECK_STORAGE_DRIVER:-overlay}"
graphroot = "$store/root"
runroot = "$store/run"
EOF
        export CONTAINERS_STORAGE_CONF=$work/storage.conf
    elif [ -n "${WARDEN_CHECK_STORAGE_DRIVER:-}" ]; then
        export STORAGE_DRIVER=$WARDEN_CHECK_STORAGE_DRIVER
    fi
    if [ "${WARDEN_CHECK_SANDBOX:-0}" = 1 ]; then
        # No more processes than pids exist, no more than the hard limits
        # this shell has (raising them needs CAP_SYS_RESOURCE).
        local nofile nproc pid_max
        nofile=$(ulimit -Hn)
        nproc=$(ulimit -Hu)
        pid_max=$(cat /proc/sys/kernel/pid_max 2>/dev/null || echo 32768)
        [ "$nofile" = unlimited ] && nofile=1048576
        if [ "$nproc" = unlimited ] || [ "$nproc" -gt "$pid_max" ]; then nproc=$pid_max; fi
        cat >"$work/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
runtime = "runc"
EOF
        export CONTAINERS_CONF=$work/containers.conf
        export BUILDAH_ISOLATION=chroot
    fi
}

if [ -z "$engine" ]; then
    if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
        engine=docker
    elif command -v podman >/dev/null; then
        podman_setup
        if podman info >/dev/null 2>&1; then engine=podman; fi
    fi
elif [ "$engine" = podman ]; then
    podman_setup
fi
if [ -z "$engine" ]; then
    log "neither a Docker daemon nor Podman answers here; the image and compose file were NOT checked"
    rm -rf "$work"
    [ "$made_store" = 1 ] && rmdir "$store" 2>/dev/null
    exit 3
fi
if [ "$engine" = docker ]; then
    compose=(docker compose)
elif podman compose version >/dev/null 2>&1; then
    compose=(podman compose)
elif command -v podman-compose >/dev/null; then
    compose=(podman-compose)
else
    log "podman answers but neither \`podman compose\` nor podman-compose is installed"
    exit 3
fi
log "engine: $engine; compose: ${compose[*]}"

suffix=$$
image=localhost/warden-check:$suffix
build_base=localhost/warden-check-build-base:$suffix
runtime_base=localhost/warden-check-runtime-base:$suffix
name=warden-check-$suffix
project=warden-check-$suffix
images=()
started=0

cleanup() {
    local rc=$?
    set +e
    "$engine" rm -f -v "$name" >/dev/null 2>&1
    if [ "$started" = 1 ]; then
        "${compose[@]}" -p "$project" -f packaging/compose.yaml down -v >/dev/null 2>&1
        "$engine" volume rm "${project}_warden1" "${project}_warden2" "${project}_warden3" >/dev/null 2>&1
        "$engine" network rm "${project}_default" >/dev/null 2>&1
    fi
    if [ "${WARDEN_CHECK_KEEP:-0}" = 1 ]; then
        log "kept: ${images[*]}${store:+ in $store}"
        made_store=0
    else
        for i in "${images[@]}"; do "$engine" rmi -f "$i" >/dev/null 2>&1; done
    fi
    if [ "$made_store" = 1 ]; then
        # Nothing of this run is left in it; drop the store itself.
        grep -o " $store/[^ ]*" /proc/mounts | sort -r | xargs -r -n1 umount >/dev/null 2>&1
        rm -rf "$store"
    fi
    rm -rf "$work"
    exit "$rc"
}
trap cleanup EXIT

# Polls `url` until it answers 200 with a body matching `pattern`; the body
# is left in $body.
await_http() {
    local url=$1 pattern=$2 what=$3
    for _ in $(seq 1 120); do
        if body=$(curl -fsS --max-time 5 "$url" 2>/dev/null) && grep -q "$pattern" <<<"$body"; then
            return 0
        fi
        sleep 1
    done
    log "$what: no answer matching $pattern from $url (last: ${body:-none})"
    return 1
}

# A port free on 127.0.0.1 now.
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# The local stand-ins for the Dockerfile's base images (see the header).
make_stand_ins() {
    local mirror=${WARDEN_CHECK_DEBIAN_MIRROR:-http://deb.debian.org/debian} sysroot
    if [ "$(id -u)" != 0 ] || ! command -v debootstrap >/dev/null; then
        log "--stand-in-bases needs root and debootstrap"
        exit 2
    fi
    sysroot=$(rustc --print sysroot)
    log "stand-in bases: Debian bookworm minbase from $mirror; toolchain $(rustc --version) from $sysroot"
    mkdir -p "$work/debs"
    debootstrap --variant=minbase --cache-dir="$work/debs" bookworm "$work/runtime" "$mirror" >"$work/debootstrap.log" 2>&1 ||
        { tail -20 "$work/debootstrap.log" >&2; exit 1; }
    debootstrap --variant=minbase --cache-dir="$work/debs" --include=gcc,libc6-dev,ca-certificates \
        bookworm "$work/build" "$mirror" >>"$work/debootstrap.log" 2>&1 ||
        { tail -20 "$work/debootstrap.log" >&2; exit 1; }
    for root in "$work/runtime" "$work/build"; do
        # What debian:bookworm-slim leaves out too: package lists and caches.
        rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb
    done
    # Certificate authorities this machine adds (a TLS-inspecting proxy's,
    # say), so that cargo in the build reaches crates.io as the host does.
    if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
        cp /usr/local/share/ca-certificates/*.crt "$work/build/usr/local/share/ca-certificates/"
        chroot "$work/build" update-ca-certificates >/dev/null
    fi
    mkdir -p "$work/build/usr/local/rust"
    for d in bin lib libexec etc; do
        [ -d "$sysroot/$d" ] && cp -a "$sysroot/$d" "$work/build/usr/local/rust/"
    done
    images+=("$runtime_base" "$build_base")
    tar -C "$work/runtime" -c . | "$engine" import \
        --change 'CMD ["bash"]' - "$runtime_base" >/dev/null
    tar -C "$work/build" -c . | "$engine" import \
        --change 'ENV CARGO_HOME=/usr/local/cargo' \
        --change 'ENV PATH=/usr/local/cargo/bin:/usr/local/rust/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD ["bash"]' - "$build_base" >/dev/null
    rm -rf "$work/runtime" "$work/build" "$work/debs"
}

build_args=(--build-arg "WARDEN_GIT_REV=git $(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)")
if [ "$stand_ins" = 1 ] && [ -z "${WARDEN_CHECK_IMAGE:-}" ]; then
    make_stand_ins
    build_args+=(--build-arg "BUILD_IMAGE=$build_base" --build-arg "RUNTIME_IMAGE=$runtime_base")
fi
if [ "$engine" = podman ]; then
    # No intermediate images left behind (each run builds afresh anyway).
    build_args+=(--layers=false)
    [ "${WARDEN_CHECK_SANDBOX:-0}" = 1 ] && build_args+=(--network host)
fi

if [ -n "${WARDEN_CHECK_IMAGE:-}" ]; then
    image=$WARDEN_CHECK_IMAGE
else
    images+=("$image")
    started_at=$(date +%s)
    "$engine" build "${build_args[@]}" -t "$image" .
    log "image built in $(($(date +%s) - started_at)) s"
fi

version=$("$engine" run --rm "$image" --version)
log "the image's warden --version: $version"
uid=$("$engine" run --rm --entrypoint id "$image" -u)
if [ "$uid" = 0 ]; then
    log "the image runs as root"
    exit 1
fi

http=$(free_port)
"$engine" run -d --name "$name" -p "127.0.0.1:$http:7200" "$image" serve >/dev/null
await_http "http://127.0.0.1:$http/health" '"healthy":true' "one node"
uid=$("$engine" exec "$name" id -u)
if [ "$uid" = 0 ]; then
    log "the node runs as root"
    exit 1
fi
log "one node: $body, running as uid $uid"
# As the container's pid 1 the server gets no default signal action: it
# must handle the engine's stop signal itself and exit 0 (not be killed
# when the stop's grace period runs out, 137).
"$engine" stop -t 30 "$name" >/dev/null
code=$("$engine" inspect --format '{{.State.ExitCode}}' "$name")
if [ "$code" != 0 ]; then
    log "the node stopped with exit code $code, not 0"
    "$engine" logs "$name" 2>&1 | tail -20 >&2
    exit 1
fi
log "one node: stopped cleanly (exit code 0)"
"$engine" rm -f -v "$name" >/dev/null

export WARDEN_IMAGE=$image
for n in 1 2 3; do
    export "WARDEN${n}_PORT=$(free_port)" "WARDEN${n}_ZK_PORT=$(free_port)" "WARDEN${n}_HTTP_PORT=$(free_port)"
done
started=1
"${compose[@]}" -p "$project" -f packaging/compose.yaml up -d --no-build
leaders=()
for n in 1 2 3; do
    var=WARDEN${n}_HTTP_PORT
    await_http "http://127.0.0.1:${!var}/health" '"healthy":true' "compose node $n"
    log "compose node $n: $body"
    leaders+=("$(sed -n 's/.*"leader_id":\([0-9]*\).*/\1/p' <<<"$body")")
done
if [ "${leaders[0]}" != "${leaders[1]}" ] || [ "${leaders[1]}" != "${leaders[2]}" ]; then
    log "the nodes name different leaders: ${leaders[*]}"
    exit 1
fi
# A write through node 1 reads back through node 3; node 2, restarted,
# keeps its data in its volume and reads it too.
# (`$engine exec` on the service's container: podman-compose's own exec
# prints its command line to stdout too.)
ctl() {
    local id
    id=$("$engine" ps -q --filter "label=com.docker.compose.project=$project" \
        --filter "label=com.docker.compose.service=$1")
    shift
    "$engine" exec "$id" "$@"
}
written="written through warden1 at $(date +%s)"
ctl warden1 wardenctl create /docker-check "$written" >/dev/null
read_back=$(ctl warden3 wardenctl get /docker-check)
if [ "$read_back" != "$written" ]; then
    log "node 3 read \"$read_back\", not \"$written\""
    exit 1
fi
# Three times: a restarted container comes back at a new address, and
# whether its peers' links to the old one are refused or go silent is a
# race (a silent one left the node cut off, before the transport redialled
# on the peer's end closing).
for r in 1 2 3; do
    "${compose[@]}" -p "$project" -f packaging/compose.yaml restart warden2 >/dev/null
    await_http "http://127.0.0.1:$WARDEN2_HTTP_PORT/health" '"healthy":true' "compose node 2 after restart $r"
    read_back=$(ctl warden2 wardenctl get /docker-check)
    if [ "$read_back" != "$written" ]; then
        log "node 2 after restart $r read \"$read_back\", not \"$written\""
        exit 1
    fi
done
log "compose: a write through node 1 read back through node 3, and node 2 after each of 3 restarts"

size=$("$engine" image inspect --format '{{.Size}}' "$image")
log "image $image: $((size / 1000000)) MB"
if [ "$stand_ins" = 1 ] && [ -z "${WARDEN_CHECK_IMAGE:-}" ]; then
    base=$("$engine" image inspect --format '{{.Size}}' "$runtime_base")
    log "of which the stand-in runtime base is $((base / 1000000)) MB; the Dockerfile's layers add $(((size - base) / 1000000)) MB"
    log "checked with LOCAL STAND-IN base images, not rust:1-slim-bookworm and debian:bookworm-slim"
fi
log "the image runs a node, and the compose file a 3-node cluster (leader ${leaders[0]})"
