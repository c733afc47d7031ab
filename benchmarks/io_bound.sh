#!/usr/bin/env bash
# I/O-bound requests (issue #5): an endpoint sleeping 1 s and one fetching
# from a slow upstream (0.5 s) over Net::HTTP, at concurrency 20, 21, 100
# and 1000, one request per connection, all sent at once (tsubame-bench
# -c C -n C). Servers, one process each, run one after the other:
#   tsubame-fibers   exe/tsubame --fibers (every request on fibers, 1 loop)
#   tsubame-threads  exe/tsubame -t 5:5
#   puma             puma -t 5:5 (Debian's 5.6)
#   thin             thin --threaded (EventMachine + a pool of 20 threads)
# Prints total wall time and p99 per run, and the ideal (the endpoint's
# own wait). A thread server needs ceil(C / threads) rounds of the wait;
# runs whose ideal for that server exceeds MAX_EXPECTED seconds (default
# 60) are not run and printed as "skipped (>= N s)" so the script stays
# short: that bound is exact for a thread pool, not a measurement.
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=${PORT:-19600}
UPSTREAM_PORT=${UPSTREAM_PORT:-19601}
MAX_EXPECTED=${MAX_EXPECTED:-60}
CONCURRENCY=${CONCURRENCY:-"20 21 100 1000"}
BENCH=lib/tsubame/tsubame-bench
APP=benchmarks/apps/io_bound.ru
export UPSTREAM_URL="http://127.0.0.1:$UPSTREAM_PORT/"
ulimit -n 8192 2>/dev/null || true
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT

[ -x "$BENCH" ] || { echo "run make build first" >&2; exit 1; }

wait_port() { # PORT PATH
  for _ in $(seq 1 150); do curl -fs "http://127.0.0.1:$1$2" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "server on port $1 did not start" >&2; exit 1
}

DELAY=0.5 ruby exe/tsubame -q --fibers -b "tcp://127.0.0.1:$UPSTREAM_PORT" benchmarks/apps/slow_upstream.ru \
  > /tmp/io_bound-upstream.log 2>&1 &
wait_port "$UPSTREAM_PORT" /

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)   cores: $(nproc)"
printf '%-16s %-9s %6s %9s %9s %9s %s\n' server endpoint conc ideal_s total_s p99_s "status codes"

run() { # NAME PARALLEL_CAPACITY COMMAND...
  local name=$1 capacity=$2; shift 2
  "$@" > "/tmp/io_bound-$name.log" 2>&1 &
  local pid=$!
  wait_port "$PORT" /
  for endpoint in sleep upstream; do
    local wait_s=1; [ "$endpoint" = upstream ] && wait_s=0.5
    for c in $CONCURRENCY; do
      local rounds=$(( (c + capacity - 1) / capacity ))
      local expected; expected=$(awk -v r="$rounds" -v w="$wait_s" 'BEGIN { print r * w }')
      if awk -v e="$expected" -v m="$MAX_EXPECTED" 'BEGIN { exit !(e > m) }'; then
        printf '%-16s %-9s %6s %9s %9s %9s %s\n' "$name" "$endpoint" "$c" "$wait_s" "skipped (>= ${expected} s)" "" ""
        continue
      fi
      local started ended json
      started=$(date +%s.%N)
      json=$("$BENCH" -q --json -c "$c" -n "$c" -t 2 --timeout 300s "http://127.0.0.1:$PORT/$endpoint")
      ended=$(date +%s.%N)
      ruby -rjson -e '
        r = JSON.parse(ARGV[0]); total = Float(ARGV[2]) - Float(ARGV[1])
        printf("%-16s %-9s %6s %9s %9.2f %9.2f %s\n", ARGV[3], ARGV[4], ARGV[5], ARGV[6], total,
               r["latency_ms"]["p99"] / 1000.0, r["status_codes"].merge(r["errors"]).inspect)
      ' "$json" "$started" "$ended" "$name" "$endpoint" "$c" "$wait_s"
    done
  done
  kill -TERM "$pid" 2>/dev/null || true
  sleep 0.5
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

run tsubame-fibers 100000 ruby exe/tsubame -q --fibers -b "tcp://127.0.0.1:$PORT" "$APP"
run tsubame-threads 5 ruby exe/tsubame -q -t 5:5 -b "tcp://127.0.0.1:$PORT" "$APP"
run puma 5 puma -q -t 5:5 -b "tcp://127.0.0.1:$PORT" "$APP"
run thin 20 thin start -q --threaded -a 127.0.0.1 -p "$PORT" -R "$APP"
