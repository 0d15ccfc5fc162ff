#!/usr/bin/env bash
# Issue 22: dlm and rslock on the same axes, distinct keys, C = 1..1024: cycles/s and redis-server's
# CPU per cycle (from /proc, as the peer harness measures it), one private redis-server for the whole
# run, each point a fresh FLUSHALL, the implementations alternating at each concurrency. Writes
# docs/curves/locks-vs-peers.jsonl and draws docs/curve-locks-vs-peers.png (scripts/plot-vs-peers.py,
# matplotlib in the venv bench-curves.sh uses).
#
#   scripts/bench-vs-peers-curve.sh                       # SECS=4 per point, CONCS="1 4 16 64 256 1024"
#   RSLOCK_BIN=/tmp/bench-peers/rslock/target/release/rslock-bench scripts/bench-vs-peers-curve.sh
#   PLOT_ONLY=1 scripts/bench-vs-peers-curve.sh          # redraw from docs/curves/locks-vs-peers.jsonl
#
# rslock's harness binary comes from ../shared/bench-peers (its setup.sh builds it); RSLOCK_BIN names
# another build. dlm runs as the harness runs it (`dlm bench lock`, the CLI's default runtime) and once
# more with `--threads 2`, the runtime rslock's harness has on this 2-core machine.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT=docs/curves/locks-vs-peers.jsonl
VENV=${PLOT_VENV:-"$ROOT/bench-results/.venv"}
if [ -z "${PLOT_ONLY:-}" ]; then
  SECS=${SECS:-4}
  CONCS=${CONCS:-"1 4 16 64 256 1024"}
  RSLOCK_BIN=${RSLOCK_BIN:-"$ROOT/../shared/bench-peers/rslock/target/release/rslock-bench"}
  if [ ! -x "$RSLOCK_BIN" ]; then
    echo "bench-vs-peers-curve: no rslock harness binary at $RSLOCK_BIN (run ../shared/bench-peers/setup.sh, or set RSLOCK_BIN)" >&2
    exit 2
  fi
  cargo build --release -q -p dlm-cli
  DLM="$ROOT/target/release/dlm"
  PORT=${PORT:-6395}
  PIDFILE=$(mktemp -u /tmp/dlm-vs-peers-XXXXXX.pid)
  redis-server --port "$PORT" --save '' --appendonly no --daemonize yes --pidfile "$PIDFILE" \
    --logfile /dev/null
  for _ in $(seq 50); do [ -s "$PIDFILE" ] && redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
  RP=$(cat "$PIDFILE")
  trap 'kill "$RP" 2>/dev/null || true' EXIT
  URL="redis://127.0.0.1:$PORT/"
  mkdir -p docs/curves
  : > "$OUT.tmp"
  run() { # label conc cmd...
    local label=$1 c=$2; shift 2
    redis-cli -p "$PORT" FLUSHALL >/dev/null
    local c0 c1 line
    c0=$(awk '{print $14+$15}' "/proc/$RP/stat")
    line=$("$@" 2>/dev/null | tail -1) || line=""
    c1=$(awk '{print $14+$15}' "/proc/$RP/stat")
    python3 - "$label" "$line" "$((c1 - c0))" "$(getconf CLK_TCK)" "$(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT.tmp" <<'PY'
import json, sys, time
label, line, ticks, hz, load = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
d = json.loads(line)
warm = 1.0
cycles = d["ops"] * (d["secs"] + warm) / d["secs"]  # the harness's count: warmup + window
d["line"] = label
d["redis_cpu_proc_us_per_cycle"] = ticks / hz * 1e6 / cycles if cycles else None
d["stamp"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
d["load"] = load
print(json.dumps(d))
PY
    tail -1 "$OUT.tmp" | python3 -c '
import json, sys
d = json.loads(sys.stdin.read())
print("%14s C=%-5d %9.0f cycles/s  redis %.2f us/cycle  p99 %s us" % (d["line"], d["concurrency"],
      d["ops_per_s"], d["redis_cpu_proc_us_per_cycle"], d["p99_us"]), file=sys.stderr)'
  }
  echo "bench-vs-peers-curve: load $(cut -d' ' -f1-3 /proc/loadavg); $SECS s per point" >&2
  for c in $CONCS; do
    run rslock "$c" "$RSLOCK_BIN" distinct "$c" "$SECS" "$URL" 1
    run dlm "$c" "$DLM" --redis "$URL" --json bench lock --mode distinct --concurrency "$c" --duration "${SECS}s" --warmup 1s
    run dlm-threads2 "$c" "$DLM" --threads 2 --redis "$URL" --json bench lock --mode distinct --concurrency "$c" --duration "${SECS}s" --warmup 1s
  done
  mv "$OUT.tmp" "$OUT"
fi
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import matplotlib' 2>/dev/null; then
  echo "bench-vs-peers-curve: installing matplotlib into $VENV" >&2
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q matplotlib
fi
"$VENV/bin/python" scripts/plot-vs-peers.py "$OUT" docs/curve-locks-vs-peers.png
