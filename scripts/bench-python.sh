#!/usr/bin/env bash
# Issue 25's Python benchmarks, in one run on one machine against a private redis-server:
#   locks : dlm-python (asyncio tasks on dlm.AsyncClient, threads on dlm.Client) against redis-py's
#           asyncio Lock, redis-py's Lock (threads) and python-redis-lock (threads), on the peer
#           harness contract (../shared/bench-peers/README.md), distinct keys and one contended key;
#   queue : 10,000 no-op tasks enqueued then processed from Python by dlm, arq and RQ.
# Prints a markdown table (python/bench/report.py) with the issue's targets checked; progress and the
# raw JSON lines go to stderr; the JSON lines are kept in bench-results/python-<stamp>/.
#
#   scripts/bench-python.sh
#   SECS=5 CONCS="64" MODES=distinct ONLY='dlm|asyncio' QUEUE=0 scripts/bench-python.sh   # subsets
#
# Env knobs: SECS=10 WARMUP=1 CONCS="1 64" MODES="distinct contended" QUEUE=1 QUEUE_N=10000
#            QUEUE_C=64 LOCKS=1 ONLY=<regex on the line's label> RQ_FORK=0 (1: also RQ's forking Worker)
#            VENV=target/pybench-venv  DLM_PY_SRC=python (the package to pip install)
#            DLM_PY_GIT=<checkout> [DLM_PY_REV=HEAD]: instead, install the package as committed at that
#              revision of another checkout (e.g. a branch's worktree before it is merged): its python/ and
#              crates/ are exported with `git archive` into target/pysrc and built from there
#            SKIP_INSTALL=0 (1: use VENV as is)
#            PEER_BENCH=../shared/bench-peers/python/bench.py (redis-py / python-redis-lock lines)
# The redis-server is started on a free loopback port (never 6379) and stopped by its pid.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
SECS=${SECS:-10}
WARMUP=${WARMUP:-1}
CONCS=${CONCS:-"1 64"}
MODES=${MODES:-"distinct contended"}
LOCKS=${LOCKS:-1}
QUEUE=${QUEUE:-1}
QUEUE_N=${QUEUE_N:-10000}
QUEUE_C=${QUEUE_C:-64}
RQ_FORK=${RQ_FORK:-0}
ONLY=${ONLY:-.}
VENV=${VENV:-$ROOT/target/pybench-venv}
DLM_PY_SRC=${DLM_PY_SRC:-$ROOT/python}
DLM_PY_COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')
if [ -n "${DLM_PY_GIT:-}" ]; then
  DLM_PY_COMMIT=$(git -C "$DLM_PY_GIT" rev-parse --short "${DLM_PY_REV:-HEAD}")
  rm -rf "$ROOT/target/pysrc"; mkdir -p "$ROOT/target/pysrc"
  git -C "$DLM_PY_GIT" archive "$DLM_PY_COMMIT" python crates Cargo.toml Cargo.lock | tar -x -C "$ROOT/target/pysrc"
  echo "$DLM_PY_COMMIT" > "$ROOT/target/pysrc/COMMIT"
  DLM_PY_SRC=$ROOT/target/pysrc/python
elif [ -f "$DLM_PY_SRC/../COMMIT" ]; then
  DLM_PY_COMMIT=$(cat "$DLM_PY_SRC/../COMMIT")
fi
PEER_BENCH=${PEER_BENCH:-$ROOT/../shared/bench-peers/python/bench.py}
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
OUTDIR=${OUTDIR:-$ROOT/bench-results/python-$STAMP}
mkdir -p "$OUTDIR"
log() { echo "bench-python: $*" >&2; }

# ---- the virtualenv: the peers from PyPI (pinned; arq 0.28 needs redis-py < 6) and dlm from source
if [ "${SKIP_INSTALL:-0}" != 1 ]; then
  [ -x "$VENV/bin/python" ] || { log "creating $VENV"; python3 -m venv "$VENV"; }
  log "pip install redis, python-redis-lock, arq, rq"
  "$VENV/bin/pip" install -q 'redis[hiredis]==5.3.1' 'python-redis-lock==4.0.1' 'arq==0.28.0' 'rq==3.0.0' >&2
  if [ -f "$DLM_PY_SRC/pyproject.toml" ]; then
    log "pip install $DLM_PY_SRC (a release build of the extension; a few minutes the first time)"
    # Its own cargo target dir, so the build neither needs nor disturbs another checkout's.
    CARGO_TARGET_DIR="$ROOT/target/pybench-ext" "$VENV/bin/pip" install -q --force-reinstall --no-deps "$DLM_PY_SRC" >&2
  else
    log "no package at $DLM_PY_SRC (set DLM_PY_SRC): the dlm-python lines will fail"
  fi
fi
PY="$VENV/bin/python"

# ---- a private redis-server on a free port, stopped by its pid whatever happens
PORT=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
RDIR=$(mktemp -d)
redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$RDIR" --daemonize yes \
  --pidfile "$RDIR/redis.pid" --logfile "$RDIR/redis.log"
for _ in $(seq 100); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && [ -s "$RDIR/redis.pid" ] && break; sleep 0.1; done
REDIS_PID=$(cat "$RDIR/redis.pid")
export REDIS_PID
trap 'kill "$REDIS_PID" 2>/dev/null || true; rm -rf "$RDIR"' EXIT
URL="redis://127.0.0.1:$PORT/0"
log "redis $(redis-server --version | awk '{print $3}') pid $REDIS_PID on port $PORT; results in $OUTDIR"
cpu() { awk '{print $14+$15}' "/proc/$REDIS_PID/stat"; }
{
  echo "date_utc=$STAMP"; uname -a; nproc; grep -m1 'model name' /proc/cpuinfo || true
  redis-server --version; "$PY" --version
  "$PY" -m pip list 2>/dev/null | grep -Ei '^(dlm|redis|python-redis-lock|arq|rq|hiredis) '
  echo "dlm package from: $DLM_PY_SRC (commit $DLM_PY_COMMIT)"
} > "$OUTDIR/machine.txt" 2>&1

# ---- lock lines: label | command (mode conc secs url warmup appended, the peer contract)
BENCH="$ROOT/python/bench"
PEERS=()
if [ -f "$PEER_BENCH" ]; then
  PEERS+=("py-redis-asyncio|$PY $PEER_BENCH redispy-async"
          "py-redis-lock-threads|$PY $PEER_BENCH prl-threads")
  [ "${REDISPY_THREADS:-0}" = 1 ] && PEERS+=("py-redis-threads|$PY $PEER_BENCH redispy-threads")
else
  log "no peer bench at $PEER_BENCH: only the dlm-python lock lines run"
fi
PEERS+=("dlm-python-asyncio|$PY $BENCH/lock_bench.py asyncio"
        "dlm-python-threads|$PY $BENCH/lock_bench.py threads")

if [ "$LOCKS" = 1 ]; then
  for entry in "${PEERS[@]}"; do
    label=${entry%%|*}; cmd=${entry#*|}
    [[ "$label" =~ $ONLY ]] || continue
    for mode in $MODES; do
      for c in $CONCS; do
        redis-cli -p "$PORT" FLUSHALL >/dev/null
        log "== $label $mode C=$c (${SECS}s + ${WARMUP}s warm-up)"
        cpu0=$(cpu); w0=$(date +%s.%N)
        line=$($cmd "$mode" "$c" "$SECS" "$URL" "$WARMUP" 2>>"$OUTDIR/stderr.log" | tail -1) || line=""
        cpu1=$(cpu); w1=$(date +%s.%N)
        dbs=$(redis-cli -p "$PORT" DBSIZE)
        if [ -n "$line" ]; then
          line=$("$PY" - "$line" "$dbs" "$cpu0" "$cpu1" "$w0" "$w1" "$SECS" "$WARMUP" "$(getconf CLK_TCK)" <<'PYEOF'
import json, sys
d = json.loads(sys.argv[1]); dbs, c0, c1, w0, w1, secs, warm, clk = sys.argv[2:]
cpu_s = (float(c1) - float(c0)) / float(clk)
d["dbsize_after"] = int(dbs)  # keys left behind (the bench:warmup lock aside, ~0 once released)
d["redis_cpu_pct"] = round(100 * cpu_s / (float(w1) - float(w0)))  # over the whole line, % of a core
r = d.get("ops_per_s") or 0
d["redis_cpu_us_per_op"] = round(1e6 * cpu_s / (r * (float(secs) + float(warm))), 2) if r else None
print(json.dumps(d))
PYEOF
)
        else
          line="{\"impl\":\"$label\",\"mode\":\"$mode\",\"concurrency\":$c,\"error\":\"run failed, see stderr.log\"}"
        fi
        echo "$line" | tee -a "$OUTDIR/locks.jsonl" >&2
      done
    done
  done
fi

# ---- queue lines: N no-op tasks, enqueue then process (redis CPU per task measured per phase)
if [ "$QUEUE" = 1 ]; then
  QIMPLS="dlm dlm-asyncio arq rq"
  [ "$RQ_FORK" = 1 ] && QIMPLS="$QIMPLS rq-fork"
  for q in $QIMPLS; do
    [[ "queue-$q" =~ $ONLY ]] || [[ "$ONLY" = . ]] || continue
    redis-cli -p "$PORT" FLUSHALL >/dev/null
    log "== queue $q: $QUEUE_N no-op tasks, concurrency $QUEUE_C"
    "$PY" "$BENCH/queue_bench.py" "$q" "$QUEUE_N" "$URL" "$QUEUE_C" 2>>"$OUTDIR/stderr.log" \
      | tee -a "$OUTDIR/queue.jsonl" >&2 || log "queue $q failed, see $OUTDIR/stderr.log"
  done
fi

redis-cli -p "$PORT" FLUSHALL >/dev/null
"$PY" "$BENCH/report.py" "$OUTDIR" | tee "$OUTDIR/report.md"
