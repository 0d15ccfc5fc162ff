#!/usr/bin/env bash
# Builds the Python package's wheel into target/wheels: one abi3 wheel (CPython 3.9 and newer),
# stripped, that installs without Rust.
#
#   scripts/wheel.sh          release profile, manylinux2014 (glibc 2.17+, linked with zig's
#                             linker: the `ziglang` package), what users get. Minutes on 2 cores.
#   scripts/wheel.sh --ci     dev profile, linked on this host and tagged for its glibc: it reuses
#                             the builds of scripts/test-python.sh (in target, the workspace's
#                             target dir), so CI pays seconds, not a release build, to test a wheel
#                             (scripts/test-wheel.sh).
#
# The tools (maturin, ziglang) live in the virtualenv target/wheel-tools. Prints the wheel's path.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
mode=release
case "${1:-}" in
  "") ;;
  --ci) mode=ci ;;
  *) echo "usage: scripts/wheel.sh [--ci]" >&2; exit 2 ;;
esac

tools="$root/target/wheel-tools"
if [ ! -x "$tools/bin/maturin" ] || { [ "$mode" = release ] && ! "$tools/bin/python" -c 'import ziglang' 2>/dev/null; }; then
  "${PYTHON:-python3}" -m venv "$tools"
  "$tools/bin/pip" install -q --upgrade pip
  "$tools/bin/pip" install -q "maturin>=1.7,<2" ziglang
fi
out="$root/target/wheels/$mode"
rm -rf "$out"
mkdir -p "$out"
start=$(date +%s)
if [ "$mode" = release ]; then
  export CARGO_TARGET_DIR="$root/target/python"
  # --zig links against glibc 2.17 whatever this host has (manylinux2014); zig is found on PATH.
  PATH="$tools/bin:$PATH" "$tools/bin/maturin" build -q -m python/Cargo.toml --release --strip \
    --zig --compatibility manylinux2014 --out "$out" >&2
else
  # The target dir, profile and interpreter of `pip install ./python` in scripts/test-python.sh, so
  # that cargo reuses that build (PYO3_PYTHON is part of pyo3's build fingerprint).
  export CARGO_TARGET_DIR="$root/target"
  interp=()
  [ -x "$root/target/python-venv/bin/python3" ] && interp=(-i "$root/target/python-venv/bin/python3")
  "$tools/bin/maturin" build -q -m python/Cargo.toml --profile dev --strip "${interp[@]}" --out "$out" >&2
fi
wheel=$(ls "$out"/dlm-*.whl)
echo "wheel.sh: $(basename "$wheel"): $(du -k "$wheel" | cut -f1) KiB, built in $(( $(date +%s) - start ))s" >&2
echo "$wheel"
