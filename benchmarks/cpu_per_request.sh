#!/usr/bin/env bash
# Server CPU time per request (user + system, from /proc) under
# wrk -t1 -c50, for a given Tsubame thread count. Steadier than req/s on a
# shared machine, so it is what the queue's wake-up policy was judged by.
#
#   benchmarks/cpu_per_request.sh 5      # -t 5:5, 3 rounds of 4 s
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${1:-5}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-4}
PORT=${PORT:-19295}
ruby exe/tsubame -q -t "$THREADS:$THREADS" -b "tcp://127.0.0.1:$PORT" benchmarks/apps/hello.ru > /dev/null 2>&1 &
PID=$!
trap 'kill -TERM $PID 2>/dev/null || true; wait $PID 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do curl -fs "http://127.0.0.1:$PORT/" >/dev/null 2>&1 && break; sleep 0.1; done
wrk -t1 -c50 -d1s "http://127.0.0.1:$PORT/" > /dev/null # warm-up
ticks=$(getconf CLK_TCK)
for round in $(seq 1 "$ROUNDS"); do
  before=$(awk '{print $14 + $15}' "/proc/$PID/stat")
  out=$(wrk -t1 -c50 -d"${DURATION}s" "http://127.0.0.1:$PORT/")
  after=$(awk '{print $14 + $15}' "/proc/$PID/stat")
  requests=$(echo "$out" | awk '/requests in/ {print $1}')
  rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
  awk -v a="$after" -v b="$before" -v n="$requests" -v hz="$ticks" -v rps="$rps" -v r="$round" -v t="$THREADS" \
    'BEGIN { printf "threads %s round %s: %s req/s, %.2f us CPU per request\n", t, r, rps, (a - b) / hz * 1e6 / n }'
done
