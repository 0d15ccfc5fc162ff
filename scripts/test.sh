#!/usr/bin/env bash
# The whole test suite: format, lints, unit, integration and doc tests, then the examples.
# Every integration test starts its own redis-server on a free loopback port.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-deps.sh --tests
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace
bash scripts/examples.sh
