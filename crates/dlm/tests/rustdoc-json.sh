#!/bin/sh
# rustdoc with its unstable options allowed (for `--output-format json`),
# used by tests/public_api.rs as cargo's RUSTDOC. Only rustdoc sees
# RUSTC_BOOTSTRAP: set for cargo, it would reach build scripts that probe it
# (thiserror, anyhow) and make every later build recompile their dependents.
RUSTC_BOOTSTRAP=1 exec rustdoc "$@"
