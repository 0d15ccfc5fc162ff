#!/usr/bin/env bash
# The whole fault matrix of RELIABILITY.md, run longer than in CI, in a
# release build, one row at a time; its table replaces the one between the
# `matrix:begin` and `matrix:end` markers in RELIABILITY.md.
#
#   scripts/faults.sh [SCALE]    # SCALE (default 5): timed rows run SCALE times their CI length
#
# Every row starts its own redis-servers (and proxies) on free loopback ports.
# Exits non-zero, leaving RELIABILITY.md alone, when any row fails.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-deps.sh --tests
scale="${1:-${DLM_FAULTS_SCALE:-5}}"
case "$scale" in '' | *[!0-9]* | 0)
  echo "SCALE must be a positive integer, not '$scale'" >&2
  exit 2
  ;;
esac
export DLM_FAULTS_SCALE="$scale"
log="$(mktemp)"
trap 'rm -f "$log" "$log.table"' EXIT

# Test binary and name filter of each group of rows.
groups=(
  "dlm histories"
  "dlm faults"
  "dlm faults_primitives"
  "dlm faults_shards"
  "dlm redlock a_frozen_node_delays"
  "dlm topologies failover"
  "dlm-cli pause"
  "dlm-cli check jumping"
)
echo "fault matrix at scale $scale: ${#groups[@]} groups of rows (a few minutes)" >&2
n=0
for group in "${groups[@]}"; do
  read -r package binary filter <<<"$group"
  n=$((n + 1))
  echo "[$n/${#groups[@]}] $package --test $binary ${filter:-}" >&2
  cargo test --release -q -p "$package" --test "$binary" -- ${filter:+"$filter"} \
    --nocapture --test-threads=1 2>&1 | tee -a "$log" | grep --line-buffered -oE '(MATRIX\|.*|test .*FAILED|failures:)' >&2 || true
  if grep -qE '^test result: FAILED|error: test failed' "$log"; then
    echo "a row failed: RELIABILITY.md left as it was" >&2
    exit 1
  fi
done

{
  echo "<!-- matrix:begin (written by scripts/faults.sh) -->"
  echo "Run by \`scripts/faults.sh $scale\` on $(date -u +%F) at commit $(git rev-parse --short HEAD), on $(nproc) cores,"
  echo "release build, one row at a time."
  echo
  echo "| row | workload | faults injected | violations | how it behaved |"
  echo "|---|---|---|---|---|"
  # (A row's line may follow the test harness's "test NAME ... " on one line.)
  grep -o 'MATRIX|.*' "$log" | sed -e 's/^MATRIX|//' -e 's/|/ | /g' -e 's/^/| /' -e 's/$/ |/'
  echo "<!-- matrix:end -->"
} >"$log.table"
python3 - "$log.table" <<'PY'
import re, sys
table = open(sys.argv[1]).read()
path = "RELIABILITY.md"
text = open(path).read()
pattern = re.compile(r"<!-- matrix:begin.*?<!-- matrix:end -->\n", re.S)
if not pattern.search(text):
    sys.exit("RELIABILITY.md has no matrix:begin/matrix:end markers")
open(path, "w").write(pattern.sub(lambda _: table, text, count=1))
PY
echo "wrote $(grep -c 'MATRIX|' "$log") rows into RELIABILITY.md" >&2
