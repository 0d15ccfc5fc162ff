#!/usr/bin/env bash
# Issue 16 section 4: scaling curves. Builds dlm, runs `dlm bench curves` (a private redis-server;
# progress on the terminal), keeps the JSON lines in bench-results/curves-<stamp>/ and copies them
# to docs/curves/, then draws docs/curve-*.png with scripts/plot-curves.py (matplotlib, in a venv
# made on first use under bench-results/.venv).
#
#   scripts/bench-curves.sh                         # every curve at its default sizes (~10-15 min)
#   scripts/bench-curves.sh --curves queue,workers  # re-measure the queue curves only
#   scripts/bench-curves.sh --queue-sizes 10k,100k,1M --window 20s
#   PLOT_ONLY=bench-results/curves-<stamp> scripts/bench-curves.sh   # redraw from kept lines
#
# Any arguments go to `dlm bench curves` (see `dlm bench curves --help`). A curve not measured
# keeps its previous lines in docs/curves/ and its figure is redrawn from them.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-1}
VENV=${PLOT_VENV:-"$ROOT/bench-results/.venv"}
if [ -z "${PLOT_ONLY:-}" ]; then
  OUT="$ROOT/bench-results/curves-$(date -u +%Y%m%dT%H%M%SZ)"
  cargo build --release -q -p dlm-cli
  mkdir -p "$OUT"
  { date -u; uptime; nproc; free -g | head -2; redis-server --version; } > "$OUT/machine.txt"
  echo "bench-curves: load $(uptime | sed 's/.*load average: //'); lines in $OUT" >&2
  target/release/dlm bench curves --out "$OUT" "$@"
  echo "after the run: $(uptime)" >> "$OUT/machine.txt"
else
  OUT=$PLOT_ONLY
fi
mkdir -p docs/curves
if [ "$(realpath "$OUT")" != "$(realpath docs/curves)" ]; then
  for f in "$OUT"/*.jsonl; do if [ -s "$f" ]; then cp "$f" docs/curves/; fi; done
  if [ -f "$OUT/machine.txt" ]; then cp "$OUT/machine.txt" docs/curves/; fi
fi
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import matplotlib' 2>/dev/null; then
  echo "bench-curves: installing matplotlib into $VENV" >&2
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q matplotlib
fi
"$VENV/bin/python" scripts/plot-curves.py docs/curves docs
