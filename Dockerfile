# syntax=docker/dockerfile:1
# Multi-stage build: a builder with the Rust toolchain, cargo-leptos, the wasm-bindgen CLI
# and npm's binaryen (wasm-opt); a small Debian runtime with the server, the site and the
# node agent, for sites with a registry. Where there is none, `cargo xtask package` builds the
# same runtime with podman (`deploy/container/Containerfile`, on a debootstrap'd bookworm), and
# `cargo xtask test` builds that image and starts it.

FROM rust:1.95-bookworm AS builder
RUN apt-get update \
 && apt-get install -y --no-install-recommends nodejs npm \
 && rm -rf /var/lib/apt/lists/*
RUN rustup target add wasm32-unknown-unknown \
 && cargo install cargo-leptos@0.3.10 --locked \
 && cargo install wasm-bindgen-cli@0.2.130
WORKDIR /src
# npm tools first (wasm-opt), so this layer is cached across source changes.
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
ENV PATH=/src/node_modules/.bin:$PATH
COPY . .
# Queries are checked against the committed .sqlx/ metadata: no database at build time.
ENV SQLX_OFFLINE=true
RUN cargo leptos build --release \
 && cargo build --release --package node-agent

FROM debian:bookworm-slim AS runtime
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /app portal
WORKDIR /app
COPY --from=builder /src/target/server-release/server /app/server
COPY --from=builder /src/target/release/node-agent /app/node-agent
COPY --from=builder /src/target/site /app/site
USER portal
ENV LEPTOS_SITE_ROOT=/app/site \
    LEPTOS_SITE_ADDR=0.0.0.0:3000 \
    LEPTOS_ENV=prod \
    PORTAL_LOG_FORMAT=json
EXPOSE 3000
HEALTHCHECK --interval=10s --timeout=3s CMD ["/bin/bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/3000 && printf 'GET /healthz HTTP/1.0\\r\\n\\r\\n' >&3 && grep -q ' 200 ' <&3"]
# DATABASE_URL comes from the environment. Run `server migrate` once per release (or pass
# `serve --migrate`; sqlx's advisory lock makes concurrent replicas safe).
ENTRYPOINT ["/app/server"]
CMD ["serve"]
