# Warden in a container: `docker build -t warden .` then
# `docker run -p 7000:7000 -v warden-data:/var/lib/warden warden`
# (a single node; packaging/compose.yaml runs three).
#
# Two stages: the toolchain image builds the binaries; the runtime image
# is Debian slim with the two binaries, run as an unprivileged user. No
# protoc, OpenSSL or cmake is needed (protobuf schemas compile in Rust,
# TLS is rustls with ring, which needs only the C compiler the build image
# has).

FROM rust:1-slim-bookworm AS build
WORKDIR /src
# .dockerignore keeps .git out, so the revision comes as a build argument:
# docker build --build-arg WARDEN_GIT_REV="git $(git rev-parse --short=12 HEAD)" .
ARG WARDEN_GIT_REV=
ENV WARDEN_GIT_REV=${WARDEN_GIT_REV}
COPY . .
RUN cargo build --release --locked --bin warden --bin wardenctl --bin warden-fenced \
    && install -m 0755 target/release/warden target/release/wardenctl target/release/warden-fenced /usr/local/bin/

FROM debian:bookworm-slim
RUN useradd --system --user-group --uid 10001 --home-dir /var/lib/warden --shell /usr/sbin/nologin warden \
    && mkdir -p /var/lib/warden \
    && chown warden:warden /var/lib/warden
COPY --from=build /usr/local/bin/warden /usr/local/bin/wardenctl /usr/local/bin/warden-fenced /usr/local/bin/
USER warden:warden
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
