#!/usr/bin/env bash
# The nemesis soak (issue 32): `bash scripts/soak.sh DURATION [dlm soak flags...]`, e.g.
#   bash scripts/soak.sh 2m
#   bash scripts/soak.sh 65m --json
#   bash scripts/soak.sh 3m --break no-persistence
# Builds dlm if needed (debug; DLM_SOAK_PROFILE=release for a release build), or takes the binary
# DLM_SOAK_BIN names (scripts/test.sh: the one its test run built), and runs
# `dlm soak --duration DURATION` on throwaway servers on free loopback ports. Exit 0: no
# violation where the assumptions hold; 1: a violation (or a broken assumption not caught);
# 2: bad usage; 3: the servers could not be started.
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-2m}
shift || true
bash scripts/ensure-deps.sh
if [ -n "${DLM_SOAK_BIN:-}" ]; then
  bin=$DLM_SOAK_BIN
  [ -x "$bin" ] || { echo "soak.sh: DLM_SOAK_BIN=$bin is not an executable" >&2; exit 2; }
elif [ "${DLM_SOAK_PROFILE:-debug}" = release ]; then
  cargo build -q --release -p dlm-cli
  bin=target/release/dlm
else
  cargo build -q -p dlm-cli
  bin=target/debug/dlm
fi
# The Python clients use the virtualenv scripts/test-python.sh makes, when there is one.
if [ -z "${DLM_SOAK_PYTHON:-}" ] && [ -x target/python-venv/bin/python ]; then
  export DLM_SOAK_PYTHON=$PWD/target/python-venv/bin/python
fi
# The library's and redis-rs' warnings under faults (reconnects, slot refreshes) are expected here.
export DLM_LOG=${DLM_LOG:-error}
exec "$bin" --threads 2 soak --duration "$duration" "$@"
