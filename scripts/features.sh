#!/usr/bin/env bash
# The library's feature flags: every combination that makes sense is linted
# (clippy = check + lints, in the workspace's target dir, -D warnings):
# none, each feature alone, all (the default, linted by scripts/test.sh), and the
# default with the test-only `seeded-defects`.
# With no features, the tests are compiled too (they must build; those that
# need a feature are skipped via `required-features` or fail at connect with
# "built without its `X` feature").
# Run the unit tests without features by hand with:
#   cargo test -p dlm --no-default-features --lib
set -euo pipefail
cd "$(dirname "$0")/.."
lint() {
  echo "features.sh: cargo clippy -p dlm $*" >&2
  cargo clippy -q -p dlm "$@" -- -D warnings
}
lint --no-default-features --all-targets
for feature in tls cluster sentinel metrics; do
  lint --no-default-features --features "$feature"
done
# The test-only switch of the checker tests (tests/seeded_defects_caught.rs), with its tests.
lint --all-targets --features seeded-defects
