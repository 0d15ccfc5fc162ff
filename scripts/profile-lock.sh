#!/usr/bin/env bash
# The CPU profile of a lock cycle (distinct keys, 64 tasks, the CLI's default
# runtime: one thread since issue 22, DLM_THREADS=2 for two): top 10 symbols of the dlm
# process and of the private redis-server
# it starts, with `perf` (apt-get install -y linux-perf). Used for the
# before/after tables of BENCHMARKS.md.
#   scripts/profile-lock.sh [DLM_BIN] [SECONDS]
set -euo pipefail
BIN=${1:-target/release/dlm}
SECS=${2:-5}
command -v perf >/dev/null || { echo "profile-lock.sh: needs perf (apt-get install -y linux-perf)" >&2; exit 2; }
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
# perf follows children: the private redis-server the bench starts is profiled too.
perf record -q -F 1999 -g -o "$OUT/perf.data" -- \
  "$BIN" --json bench lock --mode distinct --concurrency 64 --duration "${SECS}s" --warmup 1s >"$OUT/run.json" 2>/dev/null
echo "run: $(cat "$OUT/run.json")"
for comm in tokio-rt-worker redis-server; do
  echo "== $comm: top 10 symbols (self time, % of all samples of the run; tokio-rt-worker = dlm's runtime threads)"
  perf report -q -i "$OUT/perf.data" --comms "$comm" --no-children --sort symbol --stdio -g none 2>/dev/null \
    | grep -E '^ +[0-9]+\.[0-9]+%' | head -10 | sed -E 's/ {3,}-.*//; s/ +$//' || true
done
