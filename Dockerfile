# syntax=docker/dockerfile:1.7
#
# overtime: the collector image (default target) and the simulator image
# (`--target simulator`: the same binary plus nginx, for docker-compose.yml).
#
#   docker build -t overtime .
#   docker run -p 8080:8080 -p 4318:4318 -v overtime-data:/var/lib/overtime overtime
#
# The image's config is deploy/compose/overtime.toml (OTLP in, listeners on
# all interfaces); mount your own over /etc/overtime/overtime.toml.

# ---- build: the release binary, with the cargo registry and target dir in
# BuildKit caches (a rebuild after a source change recompiles only overtime).
FROM rust:1.95-trixie AS build
WORKDIR /src
COPY . .
# librdkafka is built from source by rdkafka-sys (make, a C/C++ compiler,
# zlib headers: all in the rust image); the binary links libz dynamically.
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/usr/local/cargo/git,sharing=locked \
    --mount=type=cache,target=/src/target,sharing=locked \
    cargo build --release --locked -p overtime \
    && install -m 0755 target/release/overtime /usr/local/bin/overtime

# ---- base: what both images share.
FROM debian:trixie-slim AS base
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl zlib1g \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 overtime \
    && useradd --system --uid 10001 --gid overtime --home-dir /var/lib/overtime \
        --shell /usr/sbin/nologin overtime \
    && mkdir -p /var/lib/overtime /etc/overtime /var/log/gateway \
    && chown overtime:overtime /var/lib/overtime /var/log/gateway
COPY --from=build /usr/local/bin/overtime /usr/local/bin/overtime
WORKDIR /var/lib/overtime

# ---- simulator: `overtime simulate` behind a real nginx. The simulator
# starts nginx itself (a conf it generates from the scenario's timeouts, in a
# temp dir, listening on 127.0.0.1), so nginx lives in this container; its
# access log goes to /var/log/gateway (a volume Vector reads).
FROM base AS simulator
RUN apt-get update \
    && apt-get install -y --no-install-recommends nginx \
    && rm -rf /var/lib/apt/lists/* \
    && chown -R overtime:overtime /var/log/nginx /var/lib/nginx
USER overtime
VOLUME ["/var/log/gateway"]
HEALTHCHECK NONE
ENTRYPOINT ["overtime"]
CMD ["simulate", "--duration", "0", "--access-log", "/var/log/gateway/access.log"]

# ---- collector (default target): `overtime serve`.
FROM base AS collector
COPY deploy/compose/overtime.toml /etc/overtime/overtime.toml
USER overtime
VOLUME ["/var/lib/overtime"]
# API, UI and /metrics; OTLP/gRPC; OTLP/HTTP.
EXPOSE 8080 4317 4318
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD ["curl", "-fsS", "-o", "/dev/null", "http://127.0.0.1:8080/healthz"]
ENTRYPOINT ["overtime"]
CMD ["serve", "--config", "/etc/overtime/overtime.toml"]
