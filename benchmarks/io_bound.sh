#!/usr/bin/env bash
# I/O-bound requests (issue #5): an endpoint sleeping 1 s, one fetching
# from a slow upstream (0.5 s) over Net::HTTP, and an instant one (the
# cost of the burst itself), at concurrency 20, 21, 100 and 1000, one
# request per connection, all sent at once (tsubame-bench -c C -n C).
# Two connection modes:
#   new   each connection opens with its request, so a burst of 1,000 is
#         also 1,000 TCP handshakes at once (client and server share the
#         machine's cores for them)
#   open  the connections are opened first (tsubame-bench --preconnect),
#         as behind a proxy that keeps connections to the app server
# Servers (SERVERS, default all five), one process each, one after the other:
#   floor            crates/tsubame-bench/examples/sleep_floor.rs: no Ruby,
#                    one tokio thread, a timer per /sleep (no /upstream);
#                    what the machine and the client cost (make bench-io
#                    builds it; FLOOR= its path)
#   tsubame-fibers   exe/tsubame --fibers (every request on fibers, 1 loop)
#   tsubame-threads  exe/tsubame -t 5:5
#   puma             puma -t 5:5 (Debian's 5.6)
#   thin             thin --threaded (EventMachine + a pool of 20 threads)
# Prints, per run, the total time (tsubame-bench's duration: the first
# request's start to the last response) and p99, the ideal (the
# endpoint's own wait) and how far over it the total is; runs expected to
# last under 5 s are repeated ROUNDS times (default 3) and the medians
# printed. A thread server needs ceil(C / threads) rounds of the wait;
# runs whose ideal for that server exceeds MAX_EXPECTED seconds (default
# 60) are not run and printed as "skipped (>= N s)": that bound is exact
# for a thread pool, not a measurement.
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=${PORT:-19600}
UPSTREAM_PORT=${UPSTREAM_PORT:-19601}
MAX_EXPECTED=${MAX_EXPECTED:-60}
CONCURRENCY=${CONCURRENCY:-"20 21 100 1000"}
MODES=${MODES:-"new open"}
ENDPOINTS=${ENDPOINTS:-"sleep upstream instant"}
ROUNDS=${ROUNDS:-3}
SERVERS=${SERVERS:-"floor tsubame-fibers tsubame-threads puma thin"}
FLOOR=${FLOOR:-target/release/examples/sleep_floor}
BENCH=lib/tsubame/tsubame-bench
APP=benchmarks/apps/io_bound.ru
export UPSTREAM_URL="http://127.0.0.1:$UPSTREAM_PORT/"
ulimit -n 8192 2>/dev/null || true
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT

[ -x "$BENCH" ] || { echo "run make build first" >&2; exit 1; }

source benchmarks/lib.sh

DELAY=0.5 ruby exe/tsubame -q --fibers -b "tcp://127.0.0.1:$UPSTREAM_PORT" benchmarks/apps/slow_upstream.ru \
  > /tmp/io_bound-upstream.log 2>&1 &
wait_for_url "http://127.0.0.1:$UPSTREAM_PORT/"

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)   cores: $(nproc)   rounds: $ROUNDS"
printf '%-16s %-9s %-5s %5s %8s %8s %8s %7s %s\n' server endpoint conns conc ideal_s total_s p99_s over "status codes"

# One burst, ROUNDS times when short; prints the medians.
measure() { # NAME ENDPOINT MODE CONC IDEAL EXPECTED
  local name=$1 endpoint=$2 mode=$3 c=$4 ideal=$5 expected=$6 rounds=$ROUNDS flags=()
  [ "$mode" = open ] && flags=(--preconnect)
  awk -v e="$expected" 'BEGIN { exit !(e > 5) }' && rounds=1
  local reports=()
  for _ in $(seq 1 "$rounds"); do
    reports+=("$("$BENCH" -q --json "${flags[@]}" -c "$c" -n "$c" -t 2 --timeout 300s "http://127.0.0.1:$PORT/$endpoint")")
  done
  ruby -rjson -e '
    name, endpoint, mode, c, ideal, *reports = ARGV
    rs = reports.map { |r| JSON.parse(r) }
    median = ->(xs) { xs.sort[xs.size / 2] }
    total = median.(rs.map { |r| r["duration_s"] })
    p99 = median.(rs.map { |r| r["latency_ms"] ? r["latency_ms"]["p99"] / 1000.0 : Float::NAN })
    ideal = Float(ideal)
    over = ideal.positive? ? format("%+.1f%%", (total / ideal - 1) * 100) : "-"
    codes = rs.last["status_codes"].merge(rs.last["errors"])
    printf("%-16s %-9s %-5s %5s %8s %8.3f %8.3f %7s %s\n", name, endpoint, mode, c, ideal, total, p99, over, codes.inspect)
  ' "$name" "$endpoint" "$mode" "$c" "$ideal" "${reports[@]}"
}

run() { # NAME PARALLEL_CAPACITY COMMAND...
  local name=$1 capacity=$2; shift 2
  [[ " $SERVERS " == *" $name "* ]] || return 0
  "$@" > "/tmp/io_bound-$name.log" 2>&1 &
  local pid=$!
  wait_for_url "http://127.0.0.1:$PORT/"
  for endpoint in $ENDPOINTS; do
    local wait_s=1
    [ "$endpoint" = upstream ] && wait_s=0.5
    [ "$endpoint" = instant ] && wait_s=0
    # The floor server has no HTTP client in it.
    [ "$name" = floor ] && [ "$endpoint" = upstream ] && continue
    for mode in $MODES; do
      for c in $CONCURRENCY; do
        local rounds=$(( (c + capacity - 1) / capacity ))
        local expected; expected=$(awk -v r="$rounds" -v w="$wait_s" 'BEGIN { print r * w }')
        if awk -v e="$expected" -v m="$MAX_EXPECTED" 'BEGIN { exit !(e > m) }'; then
          printf '%-16s %-9s %-5s %5s %8s %s\n' "$name" "$endpoint" "$mode" "$c" "$wait_s" "skipped (>= ${expected} s)"
          continue
        fi
        measure "$name" "$endpoint" "$mode" "$c" "$wait_s" "$expected"
      done
    done
  done
  kill -TERM "$pid" 2>/dev/null || true
  sleep 0.5
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

if [[ " $SERVERS " == *" floor "* ]] && [ ! -x "$FLOOR" ]; then
  echo "no floor server at $FLOOR: cargo build --release -p tsubame-bench --example sleep_floor, or SERVERS without floor" >&2
  exit 1
fi
run floor 100000 "$FLOOR" "$PORT"
run tsubame-fibers 100000 ruby exe/tsubame -q --fibers -b "tcp://127.0.0.1:$PORT" "$APP"
run tsubame-threads 5 ruby exe/tsubame -q -t 5:5 -b "tcp://127.0.0.1:$PORT" "$APP"
run puma 5 puma -q -t 5:5 -b "tcp://127.0.0.1:$PORT" "$APP"
run thin 20 thin start -q --threaded -a 127.0.0.1 -p "$PORT" -R "$APP"
