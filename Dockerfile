# syntax=docker/dockerfile:1
# The `dlm` binary in a small image: built on the Rust image, copied alone
# (with the CA roots that rediss:// needs) onto Debian slim, run as a non-root
# user. `docker build -t dlm .`; see README "Container image".

FROM rust:1-slim-bookworm AS builder
WORKDIR /src
# .dockerignore leaves .git out: pass the commit for `dlm --version`,
# e.g. --build-arg DLM_GIT_COMMIT="$(git rev-parse --short HEAD)".
ARG DLM_GIT_COMMIT=unknown
ENV DLM_GIT_COMMIT=${DLM_GIT_COMMIT}
COPY . .
# The registry and target caches survive between builds; the binary is
# copied out of the cached target dir in the same step.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p dlm-cli --bin dlm \
    && install -D -m 0755 target/release/dlm /out/dlm

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 dlm \
    && useradd --system --uid 10001 --gid dlm --no-create-home --shell /usr/sbin/nologin dlm
COPY --from=builder /out/dlm /usr/local/bin/dlm
# Numeric, so that Kubernetes' runAsNonRoot can verify it.
USER 10001:10001
# `dlm serve` listens on 127.0.0.1:9464 by default; in a container pass
# --listen 0.0.0.0:9464 (read-only without --admin-token / DLM_ADMIN_TOKEN).
EXPOSE 9464
ENTRYPOINT ["dlm"]
CMD ["--help"]
