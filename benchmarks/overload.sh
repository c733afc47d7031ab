#!/usr/bin/env bash
# Overload behaviour, Tsubame (with its protections) vs Puma (Debian's),
# 5 threads each, one process each, run one after the other:
#  1. Scenario 1 of shared/USER-SCENARIOS.md: 10 clients call an endpoint
#     that sleeps 60 s, with a 3 s client timeout, while a health check
#     polls every 200 ms.
#  2. Mixed open-loop load above capacity: RATE req/s for DURATION s, 10%
#     of them wait 500 ms on I/O, the rest answer at once.
# Prints one JSON line per run.
set -euo pipefail
cd "$(dirname "$0")/.."
RATE=${RATE:-150}
DURATION=${DURATION:-20}
APP=benchmarks/apps/overload.ru
PORT=${PORT:-19500}
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT

source benchmarks/lib.sh

run() { # NAME HEALTH_PATH COMMAND...
  local name=$1 health=$2; shift 2
  for mode in scenario1 mixed; do
    "$@" > /tmp/overload-$name.log 2>&1 &
    local pid=$!
    wait_for_url "http://127.0.0.1:$PORT/fast"
    if [ "$mode" = scenario1 ]; then
      echo "$name scenario1 $(ruby benchmarks/overload_driver.rb scenario1 "$PORT" "$health")"
    else
      echo "$name mixed rate=$RATE/s ${DURATION}s $(ruby benchmarks/overload_driver.rb mixed "$PORT" "$RATE" "$DURATION" "$health")"
    fi
    kill -KILL "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true
  done
}

run tsubame /up ruby exe/tsubame -q -t 5:5 -b "tcp://127.0.0.1:$PORT" \
  --request-timeout 2 --queue-timeout 1 --health-check-path /up "$APP"
run puma /up puma -q -t 5:5 -b "tcp://127.0.0.1:$PORT" "$APP"
