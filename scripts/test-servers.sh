#!/usr/bin/env bash
# The test suite on each Redis-compatible server (issue 34):
#
#   bash scripts/test-servers.sh [SERVER...]          # the whole suite
#   bash scripts/test-servers.sh --compat [SERVER...] # the compatibility set (scripts/test.sh's)
#
# (--no-build: the test binaries and target/python-venv are there already, as in scripts/test.sh.)
#
# SERVER is a name scripts/servers.sh prints (redis-6.2, redis-7.0, redis-8.2, valkey-9.1; default:
# all of them), installed by it if needed. For each, the Rust workspace's tests
# (`cargo nextest run --workspace`) and the Python package's (pytest, in the virtualenv
# scripts/test-python.sh makes) run with DLM_REDIS_SERVER set to its binary, and DLM_REDIS_CLI to
# the cli its package ships, if one. A summary table follows: server, version, and passed / failed /
# skipped for each side. A test that skips because the server lacks something (the testkit's
# skip_without, e.g. TLS on a binary built without it) counts as skipped, not passed.
#
# The compatibility set (--compat) is what CI runs on every server besides Debian's 7.0, on which
# it runs everything: locks of every kind, single and Redlock; the queue with dependencies, events
# and results; the Python contract; and on Valkey, Cluster and Sentinel. The filters are below.
#
# Logs: target/test-servers/NAME/{nextest,pytest}.log. Exit status 1 when a test failed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

compat=0
build=1
while [ $# -gt 0 ]; do
  case "$1" in
    --compat) compat=1 ;;
    # The caller (scripts/test.sh) built the test binaries and the Python virtualenv already.
    --no-build) build=0 ;;
    *) break ;;
  esac
  shift
done

# The compatibility set, as nextest filters, measured to about a minute per server on 2 cores: every
# lock kind (mutex, fair, read-write, semaphore, multi-lock, fences), single and Redlock; the queue
# with dependencies, events, results and shards; the CLI's lock, Redlock and queue commands; a least-privilege
# ACL user. Standalone only: Cluster and Sentinel (many seconds each to start) run on Valkey.
compat_rust='(binary(lock_behaviour) | binary(lock_matrix) | binary(redlock) | binary(fair_lock)
  | binary(rwlock) | binary(semaphore) | binary(multi_lock) | binary(fences)
  | (package(dlm) & (binary(queue) | binary(queue_dag) | binary(queue_results) | binary(queue_outcome)
    | binary(queue_shards)))
  | (package(dlm-cli) & (binary(lock_cmds) | binary(redlock_cli) | binary(queue_cmds)))
  | test(/core_cases_as_a_least_privilege_acl_user$/))
  & not test(/cluster|sentinel/)'
# On Valkey also Cluster and Sentinel: the core cases (locks and the queue) on each, every client kind
# on each, and the testkit's own start and failover of both.
compat_rust_valkey='test(/core_cases_on_a_cluster$/) | test(/core_cases_behind_sentinel$/)
  | (package(dlm) & (binary(native_paths) | binary(fast_safe_pairs) | binary(queue_shards)))
  | (binary(lock_matrix) & test(/cluster|sentinel/))
  | (package(dlm-testkit) & (test(/^cluster::tests::cluster_starts_serves_slots_and_fails_over$/)
    | test(/^sentinel::tests::sentinels_start_and_fail_over_when_the_master_dies$/)))'
# The Python contract: the lock, Redlock and queue APIs, and the CLI interop.
compat_python=(python/tests/test_lock.py python/tests/test_redlock.py python/tests/test_queue.py
  python/tests/test_interop_cli.py)

mapfile -t lines < <(bash scripts/servers.sh "$@")
out="$root/target/test-servers"
mkdir -p "$out"

# Build once: the test binaries (with target/debug/dlm, which the Python interop tests run) and the
# Python package in its virtualenv.
if [ "$build" = 1 ]; then
  cargo nextest run --workspace --no-run >&2
  bash scripts/test-python.sh --setup >&2
fi
venv="$root/target/python-venv"

# "N passed", "N failed", "N skipped" out of a summary line; 0 when absent.
count() { grep -oE "[0-9]+ $1" <<<"$2" | head -1 | grep -oE '^[0-9]+' || echo 0; }

rows=()
failed_any=0
for line in "${lines[@]}"; do
  read -r name server cli <<<"$line"
  dir="$out/$name"
  rm -rf "$dir"
  mkdir -p "$dir"
  # "Valkey 9.1.2", "Redis 6.2.14"
  version=$("$server" --version | awk '{for (i = 2; i <= NF; i++) if ($i ~ /^v=/) { print $1, substr($i, 3); exit }}')
  export DLM_REDIS_SERVER=$server DLM_TEST_SKIPS="$dir/skips.txt"
  if [ -n "${cli:-}" ]; then export DLM_REDIS_CLI=$cli; else unset DLM_REDIS_CLI; fi
  echo "test-servers.sh: $name ($version): $server" >&2

  filter=()
  pytest_args=(python/tests)
  if [ "$compat" = 1 ]; then
    expr=$compat_rust
    case "$name" in valkey-*) expr="$expr | $compat_rust_valkey" ;; esac
    filter=(-E "$expr")
    pytest_args=("${compat_python[@]}")
  fi
  started=$SECONDS
  set +e
  cargo nextest run --workspace --no-fail-fast "${filter[@]}" >"$dir/nextest.log" 2>&1
  rust_rc=$?
  "$venv/bin/pytest" -q -p no:cacheprovider -rs "${pytest_args[@]}" >"$dir/pytest.log" 2>&1
  py_rc=$?
  set -e
  took=$((SECONDS - started))

  summary=$(grep -E '^ *Summary \[' "$dir/nextest.log" | tail -1 || true)
  # The testkit's skips ran as passing tests: count them as skipped.
  skips=0
  [ -f "$dir/skips.txt" ] && skips=$(sort -u "$dir/skips.txt" | wc -l)
  rp=$(($(count passed "$summary") - skips))
  rf=$(count failed "$summary")
  rs=$skips
  [ -z "$summary" ] && rf="?"
  py_summary=$(grep -E '^[0-9]+ (passed|failed|skipped|error)' "$dir/pytest.log" | tail -1 || true)
  [ -z "$py_summary" ] && py_summary=$(grep -E '(passed|failed|error).* in [0-9.]+s' "$dir/pytest.log" | tail -1 || true)
  pp=$(count passed "$py_summary")
  pf=$(($(count failed "$py_summary") + $(count error "$py_summary")))
  ps=$(count skipped "$py_summary")
  if [ "$rust_rc" != 0 ] || [ "$py_rc" != 0 ]; then
    failed_any=1
    echo "test-servers.sh: $name: failures (logs in $dir):" >&2
    grep -E '^ +(FAIL|TIMEOUT|SIGSEGV|SIGABRT|SIGKILL) \[' "$dir/nextest.log" | sort -u >&2 || true
    grep -E '^(FAILED|ERROR) ' "$dir/pytest.log" >&2 || true
  fi
  rows+=("$(printf '%-11s %-15s %6s %6s %7s   %6s %6s %7s %6ss' "$name" "$version" \
    "$rp" "$rf" "$rs" "$pp" "$pf" "$ps" "$took")")
done

echo
echo "test-servers.sh: $([ "$compat" = 1 ] && echo "the compatibility set" || echo "the whole suite") per server"
printf '%-11s %-15s %6s %6s %7s   %6s %6s %7s %7s\n' server version "rust:" failed skipped "python:" failed skipped time
printf '%-11s %-15s %6s %6s %7s   %6s %6s %7s\n' "" "" passed "" "" passed "" ""
for row in "${rows[@]}"; do echo "$row"; done
echo "(skipped: the test needs what the server lacks, e.g. TLS; its reason is in target/test-servers/NAME/skips.txt or pytest.log)"
exit "$failed_any"
