#!/usr/bin/env bash
# The wheel without Rust (issue 33): installs one abi3 wheel into a fresh virtualenv per CPython,
# the oldest supported (3.9) and the newest here (3.13), runs them on a PATH without cargo or
# rustc, and runs the Python contract tests against the installed wheel.
#
# The wheel: $DLM_WHEEL, else `scripts/wheel.sh --ci` (dev profile, reusing the builds of
# scripts/test-python.sh; the release wheel is the same code, built by `scripts/wheel.sh`).
# The interpreters: $DLM_WHEEL_PYTHONS (default "3.9 3.13"), each found as pyenv's
# $PYENV_ROOT/versions/X.Y.*/bin/pythonX.Y or pythonX.Y on the PATH; one that is missing is
# skipped with a message saying so (DLM_WHEEL_REQUIRE=1 makes that an error).
# The tests: $DLM_WHEEL_TESTS (default: every test module but the fault and topology ones, 20 s
# more per interpreter, which test the same Rust core whatever the interpreter and run in
# scripts/test-python.sh; the signal tests, which depend on the interpreter, are in).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

wheel=${DLM_WHEEL:-$(bash scripts/wheel.sh --ci)}
[ -f "$wheel" ] || { echo "test-wheel.sh: no wheel at $wheel" >&2; exit 1; }
pythons=${DLM_WHEEL_PYTHONS:-3.9 3.13}
tests=${DLM_WHEEL_TESTS:-python/tests/test_lock.py python/tests/test_queue.py python/tests/test_async.py python/tests/test_more.py python/tests/test_redlock.py python/tests/test_readme.py python/tests/test_interop_cli.py python/tests/test_tasks.py python/tests/test_recipes.py python/tests/test_signals.py}
pyenv_root=${PYENV_ROOT:-$HOME/.pyenv}

find_python() {
  local v=$1 p
  for p in "$pyenv_root"/versions/"$v".*/bin/python"$v"; do
    [ -x "$p" ] && { echo "$p"; return 0; }
  done
  command -v "python$v" 2>/dev/null || return 1
}

# A PATH with the system's tools (redis-server, sh) and none of Rust's.
clean_path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
for tool in cargo rustc rustup maturin; do
  if PATH=$clean_path command -v "$tool" >/dev/null 2>&1; then
    echo "test-wheel.sh: $tool is on the clean PATH ($(PATH=$clean_path command -v "$tool")): cannot test a Rust-free install here" >&2
    exit 1
  fi
done

# A fresh virtualenv per interpreter with the wheel and the test tools; the installs (mostly
# waiting on PyPI) run at once, the tests one interpreter after the other.
found=() skipped=() tested=() pids=()
for v in $pythons; do
  if ! py=$(find_python "$v"); then
    echo "test-wheel.sh: SKIPPED CPython $v: no python$v on this machine (looked in $pyenv_root/versions and on the PATH)" >&2
    if [ "${DLM_WHEEL_REQUIRE:-0}" = 1 ]; then exit 1; fi
    skipped+=("$v")
    continue
  fi
  found+=("$v")
  venv="$root/target/wheel-venv-$v"
  rm -rf "$venv"
  (
    "$py" -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check --no-compile pytest redis msgpack fastapi httpx django
    "$venv/bin/pip" install -q --disable-pip-version-check --no-deps "$wheel"
  ) &
  pids+=($!)
done
for pid in ${pids[@]+"${pids[@]}"}; do
  wait "$pid"
done
bin=${DLM_BIN:-$root/target/debug/dlm}  # the CLI for the interop tests (a binary, no toolchain)
for v in ${found[@]+"${found[@]}"}; do
  venv="$root/target/wheel-venv-$v"
  # The installed wheel, not the sources: run outside python/, with no Rust on the PATH.
  env PATH="$venv/bin:$clean_path" DLM_BIN="$bin" "$venv/bin/python" -c '
import sys, dlm, dlm.tasks, dlm.testing
assert dlm.__file__.startswith(sys.prefix), (dlm.__file__, sys.prefix)
print(f"test-wheel.sh: CPython {sys.version.split()[0]}: dlm {dlm.__version__} from {dlm.__file__}")
'
  # shellcheck disable=SC2086 # the test list is words
  env PATH="$venv/bin:$clean_path" DLM_BIN="$bin" "$venv/bin/python" -m pytest -q -rs -p no:cacheprovider $tests
  tested+=("$v")
done
[ ${#tested[@]} -gt 0 ] || { echo "test-wheel.sh: no interpreter tested (skipped: ${skipped[*]})" >&2; exit 1; }
echo "test-wheel.sh: $(basename "$wheel") passed on CPython ${tested[*]}${skipped:+; skipped (not installed): ${skipped[*]}}" >&2
