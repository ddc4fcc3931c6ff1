# Warden in a container: `docker build -t warden .` then
# `docker run -p 7000:7000 -v warden-data:/var/lib/warden warden`
# (a single node; packaging/compose.yaml runs three).
#
# Two stages: the toolchain image builds the binaries; the runtime image
# is Debian slim with the two binaries, run as an unprivileged user. No
# protoc, OpenSSL or cmake is needed (protobuf schemas compile in Rust,
# TLS is rustls with ring, which needs only the C compiler the build image
# has).
#
# The base images are build arguments, fully qualified so that Docker and
# Podman resolve them alike. Another registry or a local stand-in goes in
# with `--build-arg BUILD_IMAGE=... --build-arg RUNTIME_IMAGE=...`; the
# build image needs cargo and rustc (the workspace's rust-version or newer)
# on its PATH and a C compiler, the runtime image `useradd`.
# `bash packaging/docker-check.sh --stand-in-bases` builds such stand-ins
# from Debian packages and the host's toolchain where no registry answers.
ARG BUILD_IMAGE=docker.io/library/rust:1-slim-bookworm
ARG RUNTIME_IMAGE=docker.io/library/debian:bookworm-slim

FROM ${BUILD_IMAGE} AS build
WORKDIR /src
# .dockerignore keeps .git out, so the revision comes as a build argument:
# docker build --build-arg WARDEN_GIT_REV="git $(git rev-parse --short=12 HEAD)" .
ARG WARDEN_GIT_REV=
ENV WARDEN_GIT_REV=${WARDEN_GIT_REV}
COPY . .
RUN cargo build --release --locked --bin warden --bin wardenctl --bin warden-fenced \
    && install -m 0755 target/release/warden target/release/wardenctl target/release/warden-fenced /usr/local/bin/

FROM ${RUNTIME_IMAGE}
# A fixed uid above the system range (no clash with the host's system
# users on bind mounts); --no-log-init keeps lastlog/faillog unwritten.
RUN useradd --no-log-init --no-create-home --user-group --uid 10001 \
        --home-dir /var/lib/warden --shell /usr/sbin/nologin warden \
    && mkdir -p /var/lib/warden \
    && chown warden:warden /var/lib/warden
COPY --from=build /usr/local/bin/warden /usr/local/bin/wardenctl /usr/local/bin/warden-fenced /usr/local/bin/
# Numeric, so that runtimes enforcing non-root (Kubernetes' runAsNonRoot)
# can tell without reading /etc/passwd.
USER 10001:10001
WORKDIR /var/lib/warden
# Every flag of `warden serve` has a WARDEN_* variable; these make the
# container's ports reachable from outside it and keep data on the volume.
ENV WARDEN_DATA_DIR=/var/lib/warden/data \
    WARDEN_LISTEN=0.0.0.0:7000 \
    WARDEN_PEER_LISTEN=0.0.0.0:7100 \
    WARDEN_HTTP_LISTEN=0.0.0.0:7200 \
    WARDEN_ZK_LISTEN=0.0.0.0:2181
VOLUME /var/lib/warden
# clients, Raft peers, HTTP (locks, /health, /metrics), ZooKeeper clients
EXPOSE 7000 7100 7200 2181
STOPSIGNAL SIGTERM
ENTRYPOINT ["warden"]
CMD ["serve"]
