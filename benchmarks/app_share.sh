#!/usr/bin/env bash
# How much of a Rails request's CPU is the app's and how much the server's:
# Tsubame and Debian's Puma serve benchmarks/apps/rails_app_cpu.ru (the
# Rails 6.1 JSON action of peers.sh's rails shape, timed on its own thread)
# with 5 threads; wrk -t1 drives GET /items in interleaved rounds. For each
# server and load it prints the process's CPU per request (from /proc,
# user + system), the app's (Rails and the GCs inside its calls), and the
# server's own share, the difference, with medians over the rounds.
#
# Why it exists: the issue's floor of "process CPU per request <= 0.8x
# Puma's" for the Rails action is out of reach when the app alone takes
# more than 0.8x of Puma's whole request; this prints both.
#
#   ROUNDS=5 benchmarks/app_share.sh
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
LOADS=${LOADS:-"1 20"}
BASE_PORT=${BASE_PORT:-19560}
APP=benchmarks/apps/rails_app_cpu.ru
export RAILS_ENV=production
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT

source benchmarks/lib.sh
command -v wrk >/dev/null || { echo "wrk is missing: run 'make deps'" >&2; exit 1; }
command -v puma >/dev/null || { echo "puma is missing: run 'make deps'" >&2; exit 1; }

ruby exe/tsubame -q -t 5:5 -b "tcp://127.0.0.1:$BASE_PORT" "$APP" > "$WORK/tsubame.log" 2>&1 &
TSUBAME=$!
puma -q -t 5:5 -b "tcp://127.0.0.1:$((BASE_PORT + 1))" "$APP" > "$WORK/puma.log" 2>&1 &
PUMA=$!
declare -A PIDS=([tsubame]=$TSUBAME [puma]=$PUMA) PORTS=([tsubame]=$BASE_PORT [puma]=$((BASE_PORT + 1)))
for s in tsubame puma; do
  wait_for_url "http://127.0.0.1:${PORTS[$s]}/items" 300
  wrk -t1 -c20 -d2s "http://127.0.0.1:${PORTS[$s]}/items" >/dev/null # warm-up
done


# measure NAME CONNECTIONS -> "rps process_us app_us own_us"
measure() {
  local url="http://127.0.0.1:${PORTS[$1]}" before after out requests app
  curl -fs "$url/app-cpu" >/dev/null # starts the app's sums afresh
  before=$(cpu_seconds "${PIDS[$1]}")
  out=$(wrk -t1 -c"$2" -d"${DURATION}s" "$url/items")
  after=$(cpu_seconds "${PIDS[$1]}")
  app=$(curl -fs "$url/app-cpu" | cut -d' ' -f1)
  requests=$(echo "$out" | awk '/requests in/ {print $1}')
  awk -v rps="$(echo "$out" | awk '/Requests\/sec/ {print $2}')" -v b="$before" -v a="$after" -v n="$requests" -v app="$app" \
    'BEGIN { cpu = (a - b) * 1000000 / (n > 0 ? n : 1); printf "%.0f %.1f %.1f %.1f\n", rps, cpu, app, cpu - app }'
}

declare -A RESULTS
for r in $(seq 1 "$ROUNDS"); do
  for c in $LOADS; do
    for s in tsubame puma; do
      RESULTS["$s,$c,$r"]=$(measure "$s" "$c")
      echo "  round $r -c$c $s: ${RESULTS["$s,$c,$r"]} (req/s, CPU us/req: process app own)" >&2
    done
  done
done

col() { for r in $(seq 1 "$ROUNDS"); do echo "${RESULTS["$1,$2,$r"]}" | cut -d' ' -f"$3"; done | median; }

echo
echo "rails (benchmarks/apps/rails_app_cpu.ru), 1 process, 5 threads, wrk -t1 -d${DURATION}s, median of $ROUNDS interleaved rounds"
echo "2 cores, load average $(cut -d' ' -f1-3 /proc/loadavg), commit $(git rev-parse --short HEAD)"
for c in $LOADS; do
  printf "%-10s %8s %12s %12s %12s\n" "-c$c" "req/s" "process us" "app us" "server us"
  for s in tsubame puma; do
    printf "%-10s %8s %12s %12s %12s\n" "$s" "$(col "$s" "$c" 1)" "$(col "$s" "$c" 2)" "$(col "$s" "$c" 3)" "$(col "$s" "$c" 4)"
  done
  awk -v tp="$(col tsubame "$c" 2)" -v pp="$(col puma "$c" 2)" -v ta="$(col tsubame "$c" 3)" \
    'BEGIN { printf "  tsubame / puma  process CPU %.2fx; the app alone under Tsubame is %.2fx of Puma'"'"'s whole request\n", tp / pp, ta / pp }'
done
