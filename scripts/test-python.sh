#!/usr/bin/env bash
# The Python package (python/): format and lints of its binding crate, then
# `pip install ./python` into a virtualenv, mypy (strict) on the stubs and the
# tests, and pytest against throwaway redis-servers on free loopback ports.
#
# The binding crate is outside the cargo workspace (python/Cargo.toml says
# why); its builds go to the workspace's target dir (with the workspace's dev
# profile, python/Cargo.toml), so that reruns reuse them, and so that cargo
# reuses the workspace's builds of the dependencies whose features agree, most
# of them (ring, rustls, ...; not tokio, redis or dlm). The virtualenv lives in
# target/python-venv (PYTHON picks the interpreter, default python3;
# DLM_PY_FRESH_VENV=1 starts it afresh).
#
# `test-python.sh --setup` stops before pytest (scripts/test-servers.sh then runs pytest on each
# server binary with the virtualenv it left).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export CARGO_TARGET_DIR="$root/target"
venv="$root/target/python-venv"
py=${PYTHON:-python3}

# The build profile of the extension: dev by default here (tests need no optimised build, and it builds
# in about a third of the time); DLM_PY_PROFILE=release tests what users get from a bare `pip install`.
profile=${DLM_PY_PROFILE:-dev}
export MATURIN_PEP517_ARGS="--profile $profile"

(cd python && cargo fmt --check && cargo clippy --locked --profile "$profile" --all-targets -- -D warnings)

if [ "${DLM_PY_FRESH_VENV:-0}" = 1 ] || [ ! -x "$venv/bin/python" ]; then
  rm -rf "$venv"
  "$py" -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip
fi
# msgpack: dlm.tasks' other serializer; fastapi, httpx, django: the recipes (python/recipes).
"$venv/bin/pip" install -q pytest mypy redis msgpack fastapi httpx django
# The command the README gives users; --force-reinstall rebuilds from the sources.
"$venv/bin/pip" install -q --force-reinstall --no-deps ./python

# mypy and pytest run outside python/ so that `import dlm` is the installed package.
"$venv/bin/mypy" --strict --cache-dir "$root/target/python-mypy-cache" python/tests python/dlm
[ "${1:-}" = --setup ] && exit 0
"$venv/bin/pytest" -q -p no:cacheprovider python/tests
