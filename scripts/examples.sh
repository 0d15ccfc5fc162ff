#!/usr/bin/env bash
# Run every example of the dlm crate (called by scripts/test.sh). Each checks
# its own outcome and exits non-zero when the check fails. DLM_REDIS_URL is
# unset so that each example starts its own private redis-server(s).
# No `-p dlm`: at the workspace root the features are resolved as for the
# workspace's tests, so cargo reuses the examples `cargo test` built (with
# -p dlm it built tokio, redis and dlm again for the same code).
set -euo pipefail
cd "$(dirname "$0")/.."
EXAMPLES=(lock_watchdog_fencing redlock worker flash_sale leader_election)
unset DLM_REDIS_URL
for ex in "${EXAMPLES[@]}"; do
    echo "== example $ex"
    cargo run -q --example "$ex"
done
