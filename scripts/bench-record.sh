#!/usr/bin/env bash
# Issue 16 section 3: every capability measured as lines of the peer harness.
# Runs the peer harness (../shared/bench-peers/run.sh, with dlm), then appends to the same
# locks.jsonl / queue.jsonl one line per dlm variant (cluster vs standalone, with and without
# replicas(1); Redlock over 5; fair lock, RW lock, semaphore; metrics recorder on; queue
# priorities and groups), each labelled by its `impl` (dlm-cluster, dlm-replicas1, dlm-fair,
# dlm-semaphore, dlm-prio10, ...; the plain run stays "dlm"), and prints report.py's markdown.
# Every variant runs on private servers `dlm bench` starts itself (a cluster of 3 masters with a
# replica each for --cluster; a master with one replica for --replicas 1 without --cluster).
#
#   scripts/bench-record.sh                              # the run of record (SECS=10)
#   SECS=1 QUEUE_N=20000 LIMIT=0 scripts/bench-record.sh # a smoke run
#
# Env knobs: SECS=10 WARMUP=1 CONCS="1 64" MODES="distinct contended" QUEUE_N=100000
#   HARNESS=1 (0: skip the peer harness, variants only)  LIMIT=1 QUEUE=1 ONLY=. (passed to run.sh)
#   VARIANTS=<regex on the variant name> (default all)  BUILD=1 (0: use target/release/dlm as is)
#   BENCH_PEERS=<dir of run.sh> (default ../shared/bench-peers next to the repo)
#   OUTDIR=<results dir> (default bench-results/<UTC stamp>, gitignored)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
SECS=${SECS:-10}
WARMUP=${WARMUP:-1}
CONCS=${CONCS:-"1 64"}
MODES=${MODES:-"distinct contended"}
QUEUE_N=${QUEUE_N:-100000}
HARNESS=${HARNESS:-1}
VARIANTS=${VARIANTS:-.}
BENCH_PEERS=${BENCH_PEERS:-"$ROOT/../shared/bench-peers"}
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
OUTDIR=${OUTDIR:-"$ROOT/bench-results/$STAMP"}
mkdir -p "$OUTDIR"
OUTDIR=$(realpath "$OUTDIR")
export CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-1}
if [ "${BUILD:-1}" = 1 ]; then cargo build --release -q -p dlm-cli; fi
DLM="$ROOT/target/release/dlm"
[ -x "$DLM" ] || { echo "bench-record: no $DLM (build it: cargo build --release -p dlm-cli)" >&2; exit 2; }
echo "bench-record: results in $OUTDIR (load: $(uptime | sed 's/.*load average: //'))" >&2

if [ "$HARNESS" = 1 ]; then
  [ -x "$BENCH_PEERS/run.sh" ] || { echo "bench-record: no $BENCH_PEERS/run.sh (set BENCH_PEERS)" >&2; exit 2; }
  DLM_BIN="$DLM" OUTDIR="$OUTDIR" SECS="$SECS" WARMUP="$WARMUP" CONCS="$CONCS" MODES="$MODES" \
    QUEUE_N="$QUEUE_N" "$BENCH_PEERS/run.sh" > "$OUTDIR/harness.md" \
    || echo "bench-record: the peer harness failed (see $OUTDIR/stderr.log); going on with the variants" >&2
fi
uptime >> "$OUTDIR/machine.txt"

# name | bench lock flags | modes (empty: $MODES)
LOCK_VARIANTS=(
  "cluster|--cluster|"
  "replicas1|--replicas 1|"
  "cluster-replicas1|--cluster --replicas 1|"
  "redlock5|--nodes 5|"
  "metrics|--metrics|"
  "fair|--primitive fair|"
  "rw|--primitive rw|"
  "semaphore|--primitive semaphore --permits 4|contended"
)
for entry in "${LOCK_VARIANTS[@]}"; do
  IFS='|' read -r name flags modes <<< "$entry"
  [[ "$name" =~ $VARIANTS ]] || continue
  for mode in ${modes:-$MODES}; do
    [[ " $MODES " == *" $mode "* ]] || continue
    for c in $CONCS; do
      echo "== dlm-$name $mode C=$c" >&2
      # shellcheck disable=SC2086 # flags are words
      line=$("$DLM" --json bench lock $flags --mode "$mode" --concurrency "$c" \
        --duration "${SECS}s" --warmup "${WARMUP}s" 2>>"$OUTDIR/stderr.log" | tail -1) || line=""
      [ -n "$line" ] || line="{\"impl\":\"dlm-$name\",\"mode\":\"$mode\",\"concurrency\":$c,\"error\":\"run failed, see stderr.log\"}"
      echo "$line" | tee -a "$OUTDIR/locks.jsonl" >&2
    done
  done
done

# name | bench queue flags
QUEUE_VARIANTS=(
  "prio10|--priorities 10"
  "groups100|--groups 100"
  "groups100-gc1|--groups 100 --group-concurrency 1"
  "cluster|--cluster"
  "idonly|--payload-bytes 0"
  "payload100|--payload-bytes 100"
  "payload1024|--payload-bytes 1024"
)
if [ "${QUEUE:-1}" = 1 ]; then
  for entry in "${QUEUE_VARIANTS[@]}"; do
    IFS='|' read -r name flags <<< "$entry"
    [[ "q-$name" =~ $VARIANTS || "$name" =~ $VARIANTS ]] || continue
    echo "== dlm-$name queue N=$QUEUE_N" >&2
    # shellcheck disable=SC2086
    "$DLM" --json bench queue $flags --tasks "$QUEUE_N" --concurrency 64 --batch 1000 \
      2>>"$OUTDIR/stderr.log" | tee -a "$OUTDIR/queue.jsonl" >&2 \
      || echo "dlm-$name queue bench failed, see stderr.log" >&2
  done
fi

python3 "$BENCH_PEERS/report.py" "$OUTDIR" | tee "$OUTDIR/report.md"
