#!/usr/bin/env bash
# Reforking and memory (docs/REFORK.md): total PSS of the workers of a
# warm Rails 6.1 app (benchmarks/apps/rails_warm_heap.ru), WORKERS workers,
# after REQUESTS requests (ab, a new connection each, CONCURRENCY at
# once), for Tsubame and Debian's Puma 5.6.5, each without fork_worker,
# with `fork_worker FORK_AFTER` (a refork once worker 0 has served that
# many requests: 200 by default, past the 100 requests that warm a process
# up; worker 0 serves a tenth to a quarter of the 5,000, so Puma's default
# of 1000 would come after the run in some rounds and near its end in
# others) and, for reference, with preload_app!. Each round says how many
# reforks (Puma 5.6.5: phased restarts) the server logged. PSS comes from
# /proc/PID/smaps_rollup, read SETTLE seconds after the last request;
# one server at a time; the median of ROUNDS runs.
#
#   benchmarks/refork_memory.sh                      # 3 rounds
#   ROUNDS=1 REQUESTS=1500 benchmarks/refork_memory.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. benchmarks/lib.sh

ROUNDS=${ROUNDS:-3}
REQUESTS=${REQUESTS:-5000}
WORKERS=${WORKERS:-4}
THREADS=${THREADS:-5}
CONCURRENCY=${CONCURRENCY:-8}
SETTLE=${SETTLE:-5}
FORK_AFTER=${FORK_AFTER:-200}
PORT=${PORT:-19471}
APP=benchmarks/apps/rails_warm_heap.ru
WORK=$(mktemp -d)
SERVER_PID=
trap 'stop_server; rm -rf "$WORK"' EXIT

command -v ab >/dev/null || { echo "ab is missing (apache2-utils): run 'make deps'" >&2; exit 1; }
command -v puma >/dev/null || { echo "puma is missing: run 'make deps'" >&2; exit 1; }

printf 'workers %s\nthreads %s, %s\nenvironment "production"\n' "$WORKERS" "$THREADS" "$THREADS" > "$WORK/base.rb"
cp "$WORK/base.rb" "$WORK/off.rb"
{ cat "$WORK/base.rb"; echo "fork_worker $FORK_AFTER"; } > "$WORK/fork.rb"
{ cat "$WORK/base.rb"; echo "preload_app!"; } > "$WORK/preload.rb"

# worker_pss MASTER_PID: "TOTAL_PSS_MB MASTER_PSS_MB WORKER_COUNT" over
# the processes titled "... cluster worker N: MASTER_PID" (both servers
# name their workers so, forked from worker 0 or not).
worker_pss() {
  local master=$1 total=0 count=0 pid
  for pid in $(ls /proc | grep -E '^[0-9]+$'); do
    if tr '\0' ' ' 2>/dev/null < "/proc/$pid/cmdline" | grep -qE "cluster worker [0-9]+: $master( |\$)"; then
      total=$((total + $(awk '/^Pss:/ {print $2}' 2>/dev/null < "/proc/$pid/smaps_rollup" || echo 0)))
      count=$((count + 1))
    fi
  done
  local own
  own=$(awk '/^Pss:/ {print $2}' "/proc/$master/smaps_rollup")
  echo "$((total / 1024)) $((own / 1024)) $count"
}

# run SERVER MODE: one round; prints "TOTAL_PSS MASTER_PSS WORKERS REFORKS".
run() {
  local server=$1 mode=$2 log="$WORK/$1-$2.log"
  if [ "$server" = tsubame ]; then
    ruby -Ilib exe/tsubame -C "$WORK/$mode.rb" -b "tcp://127.0.0.1:$PORT" "$APP" > "$log" 2>&1 &
  else
    puma -C "$WORK/$mode.rb" -b "tcp://127.0.0.1:$PORT" "$APP" > "$log" 2>&1 &
  fi
  SERVER_PID=$!
  wait_for_url "http://127.0.0.1:$PORT/pages/1" 600 >&2
  # Every worker booted: the first request may have come before some did.
  for _ in $(seq 1 300); do
    [ "$(worker_pss "$SERVER_PID" | cut -d' ' -f3)" -ge "$WORKERS" ] && break
    sleep 0.1
  done
  ab -q -n "$REQUESTS" -c "$CONCURRENCY" "http://127.0.0.1:$PORT/pages/7" > "$WORK/ab.txt" 2>&1
  if ! grep -q "^Failed requests: *0" "$WORK/ab.txt"; then
    echo "failed requests against $server $mode:" >&2
    cat "$WORK/ab.txt" >&2
  fi
  sleep "$SETTLE"
  # A refork under way leaves old workers draining: wait until only the
  # configured count is left.
  for _ in $(seq 1 300); do
    [ "$(worker_pss "$SERVER_PID" | cut -d' ' -f3)" -le "$WORKERS" ] && break
    sleep 0.1
  done
  echo "$(worker_pss "$SERVER_PID") $(grep -cE "Starting worker refork|Starting phased worker restart" "$log" || true)"
  stop_server
}

declare -A RESULT MASTER
for server in tsubame puma; do
  for mode in off fork preload; do
    totals=()
    masters=()
    for round in $(seq 1 "$ROUNDS"); do
      read -r total master count reforks < <(run "$server" "$mode")
      echo "$server $mode round $round: workers' PSS ${total} MB ($count workers), master ${master} MB," \
        "$reforks refork(s)" >&2
      totals+=("$total")
      masters+=("$master")
    done
    RESULT[$server-$mode]=$(printf '%s\n' "${totals[@]}" | median)
    MASTER[$server-$mode]=$(printf '%s\n' "${masters[@]}" | median)
  done
done

echo
echo "Total PSS of $WORKERS workers after $REQUESTS requests (MB, median of $ROUNDS):"
printf '%-9s %-12s %10s %10s %14s %14s\n' server mode workers master "vs same, off" "vs Puma fork"
for server in tsubame puma; do
  for mode in off fork preload; do
    total=${RESULT[$server-$mode]}
    printf '%-9s %-12s %10s %10s %14s %14s\n' "$server" "$mode" "$total" "${MASTER[$server-$mode]}" \
      "$(awk -v a="$total" -v b="${RESULT[$server-off]}" 'BEGIN {printf "%.2f", a / b}')" \
      "$(awk -v a="$total" -v b="${RESULT[puma-fork]}" 'BEGIN {printf "%.2f", a / b}')"
  done
done
