#!/usr/bin/env bash
# Hello-world throughput and latency, Tsubame vs Puma (Debian's), one
# process each, same thread count, run one after the other in one go.
# Prints the median of ROUNDS runs for each load and the Tsubame/Puma ratio.
#
#   benchmarks/hello.sh            # 3 rounds of 10 s
#   ROUNDS=5 DURATION=5 THREADS=5 benchmarks/hello.sh
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
THREADS=${THREADS:-5}
APP=benchmarks/apps/hello.ru
PORT_T=${PORT_T:-19292}
PORT_P=${PORT_P:-19293}
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT

command -v wrk >/dev/null || { echo "wrk is missing: run 'make deps'" >&2; exit 1; }
command -v puma >/dev/null || { echo "puma is missing: run 'make deps'" >&2; exit 1; }

source benchmarks/lib.sh

# run_wrk CONNECTIONS PORT -> "rps p50_us p99_us"
run_wrk() {
  wrk -t1 -c"$1" -d"${DURATION}s" --latency "http://127.0.0.1:$2/" > "$WORK/wrk.out"
  ruby -e '
    text = File.read(ARGV[0])
    us = ->(label) {
      v = text[/^\s+#{label}\s+([\d.]+)(us|ms|s)\b/, 1].to_f
      { "us" => 1, "ms" => 1000, "s" => 1_000_000 }.fetch(text[/^\s+#{label}\s+[\d.]+(us|ms|s)\b/, 1]) * v
    }
    rps = text[/Requests\/sec:\s+([\d.]+)/, 1].to_f
    errors = text[/Non-2xx.*?(\d+)/, 1].to_i + text[/Socket errors:.*?(\d+)/, 1].to_i
    printf("%.0f %.0f %.0f %d\n", rps, us.("50%"), us.("99%"), errors)
  ' "$WORK/wrk.out"
}

declare -A RESULTS
bench_server() { # NAME PORT
  for c in 1 50; do
    for r in $(seq 1 "$ROUNDS"); do
      RESULTS["$1,$c,$r"]=$(run_wrk "$c" "$2")
      echo "  $1 -c$c round $r: ${RESULTS["$1,$c,$r"]} (req/s p50_us p99_us errors)" >&2
    done
  done
}

echo "Tsubame: exe/tsubame -t $THREADS:$THREADS" >&2
ruby exe/tsubame -q -t "$THREADS:$THREADS" -b "tcp://127.0.0.1:$PORT_T" "$APP" > "$WORK/tsubame.log" 2>&1 &
TS=$!
wait_for_url "http://127.0.0.1:$PORT_T/"
wrk -t1 -c50 -d2s "http://127.0.0.1:$PORT_T/" >/dev/null # warm-up
bench_server tsubame "$PORT_T"
kill -TERM "$TS"; wait "$TS" || true

echo "Puma $(puma --version 2>/dev/null | head -1): puma -t $THREADS:$THREADS" >&2
puma -q -t "$THREADS:$THREADS" -b "tcp://127.0.0.1:$PORT_P" "$APP" > "$WORK/puma.log" 2>&1 &
PS=$!
wait_for_url "http://127.0.0.1:$PORT_P/"
wrk -t1 -c50 -d2s "http://127.0.0.1:$PORT_P/" >/dev/null
bench_server puma "$PORT_P"
kill -TERM "$PS"; wait "$PS" || true

col() { # NAME C FIELD
  for r in $(seq 1 "$ROUNDS"); do echo "${RESULTS["$1,$2,$r"]}" | cut -d' ' -f"$3"; done | median
}

echo
echo "hello world, wrk -t1 -d${DURATION}s, threads $THREADS, median of $ROUNDS rounds ($(nproc) cores)"
printf "%-6s %-8s %10s %10s %10s %8s\n" load server "req/s" "p50 (us)" "p99 (us)" errors
for c in 1 50; do
  for s in tsubame puma; do
    printf "%-6s %-8s %10s %10s %10s %8s\n" "-c$c" "$s" "$(col $s $c 1)" "$(col $s $c 2)" "$(col $s $c 3)" "$(col $s $c 4)"
  done
  awk -v t="$(col tsubame $c 1)" -v p="$(col puma $c 1)" -v tl="$(col tsubame $c 3)" -v pl="$(col puma $c 3)" -v c="$c" \
    'BEGIN { printf "-c%s    tsubame/puma req/s ratio: %.2fx   p99 ratio: %.2f\n", c, t / p, tl / pl }'
done
