#!/usr/bin/env bash
# Lints the Dockerfile without a Docker engine: with hadolint when it is
# installed, and always with a check of the properties the image promises:
# a multi-stage build (`FROM ... AS`), a final stage that is not root
# (a `USER` other than root/0), `ENTRYPOINT ["dlm"]`, only the binary copied
# from the builder. Exit 1 with the failed checks listed.
set -euo pipefail
cd "$(dirname "$0")/.."
file="${1:-Dockerfile}"
[ -f "$file" ] || { echo "lint-dockerfile: $file not found" >&2; exit 1; }

if command -v hadolint >/dev/null 2>&1; then
  hadolint "$file"
else
  echo "lint-dockerfile: hadolint not installed, checking the required properties only" >&2
fi

fail=0
problem() { echo "lint-dockerfile: $file: $*" >&2; fail=1; }

# Instructions, without comments and blank lines.
instructions=$(grep -Ev '^[[:space:]]*(#|$)' "$file")
from_lines=$(grep -Ei '^FROM[[:space:]]' <<<"$instructions" || true)
[ "$(grep -c . <<<"$from_lines")" -ge 2 ] || problem "not multi-stage: fewer than two FROM lines"
grep -Eiq '^FROM[[:space:]].*[[:space:]]AS[[:space:]]+[A-Za-z0-9_.-]+[[:space:]]*$' <<<"$from_lines" \
  || problem "no named build stage (FROM ... AS name)"

# The final stage: everything after the last FROM.
final=$(awk 'toupper($1) == "FROM" { stage = "" } { stage = stage $0 "\n" } END { printf "%s", stage }' \
  <<<"$instructions")
user=$( (grep -Ei '^USER[[:space:]]' <<<"$final" || true) | tail -n 1 | awk '{ print $2 }')
if [ -z "$user" ]; then
  problem "the final stage has no USER: the image would run as root"
else
  case "${user%%:*}" in
    root | 0) problem "the final stage runs as root (USER $user)" ;;
  esac
fi
grep -Eq '^ENTRYPOINT[[:space:]]+\[[[:space:]]*"(/usr/local/bin/)?dlm"' <<<"$final" \
  || problem 'the final stage has no exec-form ENTRYPOINT ["dlm"]'
grep -Eiq '^COPY[[:space:]]+--from=' <<<"$final" || problem "the final stage copies nothing from the builder"
if grep -Eiq '^(COPY|ADD)[[:space:]]+[^-]' <<<"$final"; then
  problem "the final stage copies from the build context: only the binary belongs in it"
fi

[ "$fail" -eq 0 ] && echo "lint-dockerfile: $file ok" >&2
exit "$fail"
