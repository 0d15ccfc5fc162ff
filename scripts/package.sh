#!/usr/bin/env bash
# The crates would package: `cargo package` for the workspace (no verify
# build: the workspace build already covers that), with no warning other than
# the expected "ignoring test": integration tests stay out of the packages,
# as they need the repository (README.md, redis-server, the CLI's binary).
# Then the `dlm` package is checked to carry every Lua script its sources
# `include_str!` and the guide's chapters.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(cargo package --workspace --no-verify --allow-dirty 2>&1) || { echo "$out" >&2; exit 1; }
# "no documentation, homepage or repository" is expected too: there is no
# public repository yet, and no URL is invented (issue 17).
if unexpected=$(echo "$out" | grep -i '^warning' | grep -v -e '^warning: ignoring test `' \
  -e '^warning: manifest has no documentation, homepage or repository$'); then
  echo "$out" >&2
  echo "package.sh: unexpected warnings from cargo package:" >&2
  echo "$unexpected" >&2
  exit 1
fi
listed=$(cargo package --list --allow-dirty -p dlm 2>/dev/null)
missing=0
for f in $(cd crates/dlm && git ls-files 'src/*.lua' 'guide/*.md'); do
  if ! grep -qxF "$f" <<<"$listed"; then
    echo "package.sh: crates/dlm/$f is not in the dlm package" >&2
    missing=1
  fi
done
grep -qxF README.md <<<"$listed" || { echo "package.sh: README.md is not in the dlm package" >&2; missing=1; }
exit "$missing"
