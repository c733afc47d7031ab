#!/usr/bin/env bash
# Is tsubame-bench ever the bottleneck? It and wrk load the same fast server
# (exe/tsubame serving benchmarks/apps/hello.ru) with the same connections
# and client threads, taking turns, ROUNDS times. Prints the median req/s
# of each, the ratio tsubame-bench / wrk (>= 1.00 means at least as fast),
# and each client's CPU time per request (lower leaves more to the server).
#
#   benchmarks/bench_vs_wrk.sh                  # 3 rounds of 3 s at -c 1 and -c 50, 1 client thread
#   ROUNDS=5 DURATION=10 CONNECTIONS="10 100" CLIENT_THREADS=2 benchmarks/bench_vs_wrk.sh
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-3}
CONNECTIONS=${CONNECTIONS:-1 50}
CLIENT_THREADS=${CLIENT_THREADS:-1}
SERVER_THREADS=${SERVER_THREADS:-5}
PORT=${PORT:-19294}
APP=benchmarks/apps/hello.ru
BENCH=${TSUBAME_BENCH:-${CARGO_TARGET_DIR:-target}/release/tsubame-bench}
URL="http://127.0.0.1:$PORT/"
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT

command -v wrk >/dev/null || { echo "wrk is missing: run 'make deps'" >&2; exit 1; }
[ -x "$BENCH" ] || { echo "$BENCH is missing: run 'make build'" >&2; exit 1; }

ruby exe/tsubame -q -t "$SERVER_THREADS:$SERVER_THREADS" -b "tcp://127.0.0.1:$PORT" "$APP" > "$WORK/server.log" 2>&1 &
for _ in $(seq 1 100); do
  curl -fs "$URL" >/dev/null 2>&1 && break
  sleep 0.1
done
curl -fs "$URL" >/dev/null || { echo "the server did not start: $(cat "$WORK/server.log")" >&2; exit 1; }
wrk -t1 -c50 -d1s "$URL" >/dev/null # warm-up

# Each run prints "REQ/S CPU_US_PER_REQUEST": the client's own CPU time
# (user + system) per request tells how much headroom it leaves, and is
# steadier than req/s on a busy machine.
TIMEFORMAT='%U %S'
run_wrk() { # CONNECTIONS
  { time wrk -t"$CLIENT_THREADS" -c"$1" -d"${DURATION}s" "$URL" > "$WORK/out"; } 2> "$WORK/time"
  awk -v cpu="$(awk '{ print $1 + $2 }' "$WORK/time")" '
    /requests in/ { n = $1 } /^Requests\/sec:/ { rps = $2 }
    END { printf "%.0f %.2f\n", rps, cpu * 1e6 / n }' "$WORK/out"
}

run_bench() { # CONNECTIONS
  { time "$BENCH" -t "$CLIENT_THREADS" -c "$1" -d "${DURATION}s" --json "$URL" > "$WORK/out"; } 2> "$WORK/time"
  ruby -rjson -e '
    r = JSON.parse(File.read(ARGV[0]))
    abort "tsubame-bench errors: #{r["errors"]}" unless r["errors"].empty?
    printf("%.0f %.2f\n", r["rate"], ARGV[1].to_f * 1e6 / r["requests"])
  ' "$WORK/out" "$(awk '{ print $1 + $2 }' "$WORK/time")"
}

median() { sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

declare -A RESULTS
for c in $CONNECTIONS; do
  for r in $(seq 1 "$ROUNDS"); do
    # Alternate who goes first so a drifting server favours neither.
    if (( r % 2 )); then order="wrk bench"; else order="bench wrk"; fi
    for tool in $order; do
      RESULTS["$tool,$c,$r"]=$("run_$tool" "$c")
      echo "  -c$c round $r $tool: ${RESULTS["$tool,$c,$r"]} (req/s, client CPU us/request)" >&2
    done
  done
done

col() { # TOOL CONNECTIONS FIELD -> median
  for r in $(seq 1 "$ROUNDS"); do echo "${RESULTS["$1,$2,$r"]}" | cut -d' ' -f"$3"; done | median
}

echo
echo "hello.ru on exe/tsubame -t $SERVER_THREADS:$SERVER_THREADS; $CLIENT_THREADS client thread(s), ${DURATION}s runs, median of $ROUNDS ($(nproc) cores)"
printf "%-6s %11s %11s %7s   %16s %16s\n" load "wrk req/s" "bench req/s" ratio "wrk CPU us/req" "bench CPU us/req"
for c in $CONNECTIONS; do
  awk -v c="$c" -v w="$(col wrk "$c" 1)" -v b="$(col bench "$c" 1)" -v wc="$(col wrk "$c" 2)" -v bc="$(col bench "$c" 2)" \
    'BEGIN { printf "%-6s %11.0f %11.0f %6.2fx   %16.2f %16.2f\n", "-c" c, w, b, b / w, wc, bc }'
done
