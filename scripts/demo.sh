#!/usr/bin/env bash
# The demo: builds dlm and runs `dlm demo seckill` (the flash sale) against private redis-servers that
# it starts on a free port and stops at the end (nothing is left running).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-deps.sh
cargo build --release -q -p dlm-cli
exec target/release/dlm demo seckill "$@"
