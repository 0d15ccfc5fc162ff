#!/usr/bin/env bash
# Installs what dlm's demo and tests need on Debian/Ubuntu when it is missing:
# redis-server (tests start their own throwaway servers on free ports; nothing
# is started here), python3 with venv (the redis-py interop test), faketime
# (the clock-jump row of the fault matrix) and Chromium with chromedriver (the
# `dlm serve` browser test).
# Needs root (or sudo) only when something is missing.
set -euo pipefail

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
if [ "${1:-}" = "--tests" ]; then
  command -v python3 >/dev/null 2>&1 || missing+=(python3)
  python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || missing+=(python3-venv)
  # libfaketime: the clock-jump row of the fault matrix.
  command -v faketime >/dev/null 2>&1 || missing+=(faketime)
  [ -x /usr/bin/chromium ] || missing+=(chromium)
  [ -x /usr/bin/chromedriver ] || missing+=(chromium-driver)
fi
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -eq 0 ]; then sudo=""; elif command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
  echo "dlm needs: ${missing[*]}. Install them, e.g.: apt-get install -y ${missing[*]}" >&2
  exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "dlm needs: ${missing[*]} (no apt-get here: install them with your package manager)" >&2
  exit 1
fi
echo "installing ${missing[*]} ..." >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
