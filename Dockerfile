# syntax=docker/dockerfile:1
# The `sessionlog` binary (every command: init, project, ingest, serve-recovery, export-otlp, doctor,
# ...) in a small Debian image; docker-compose.yml runs each service from it.
#
#   docker build -t sessionlog:local .
#   docker run --rm sessionlog:local --help
#
# Builder and runtime are both Debian bookworm, so the binary's glibc is the one it runs on.

# The workspace's rust-version (Cargo.toml): the image proves the declared minimum really builds.
ARG RUST_VERSION=1.88

FROM rust:${RUST_VERSION}-bookworm AS builder
# The rust image already has gcc, make, perl, zlib and OpenSSL headers and pkg-config: enough for
# librdkafka with TLS and SASL/SCRAM (built from source by rdkafka-sys with mklove, linked to the
# system OpenSSL), zstd-sys and mimalloc (cc). cmake is the fallback aws-lc-sys (rustls and sealing)
# uses when its cc build does not cover the target.
RUN apt-get update \
    && apt-get install -y --no-install-recommends cmake \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# Cache mounts keep the registry and the build between image builds; the binary is copied out
# of the cached target directory because cache mounts are not part of the image.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p sessionlog-cli \
    && install -m 0755 target/release/sessionlog /usr/local/bin/sessionlog

FROM debian:bookworm-slim AS runtime
# ca-certificates: for a registry or brokers reached over TLS (rustls and OpenSSL read the system
# roots); libssl3: librdkafka's TLS, linked dynamically; curl: the compose healthchecks ask each
# service's /health/ready with it.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates libssl3 curl \
    && rm -rf /var/lib/apt/lists/*
RUN useradd --system --uid 10001 --home-dir /app --create-home sessionlog
COPY --from=builder /usr/local/bin/sessionlog /usr/local/bin/sessionlog
USER sessionlog
# `sessionlog.toml` here is read if present (mount one); SESSIONLOG_* variables override it.
WORKDIR /app
ENTRYPOINT ["sessionlog"]
CMD ["--help"]
