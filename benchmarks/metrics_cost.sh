#!/usr/bin/env bash
# What the engine's per-request metrics cost (docs/OBSERVABILITY.md):
#  1. hello world at -c50 with metrics on vs --no-metrics: two servers up
#     at once, each round loading both at the same moment (one wrk each),
#     so a noisy neighbour's burst lands on both alike; the medians and
#     the per-round ratios, for req/s and for the server's CPU time per
#     request (user + system from /proc);
#  2. p99 at -c50: two metrics-on servers loaded at the same moment, one
#     with a scraper GETting its /metrics every second, one without.
#
#   benchmarks/metrics_cost.sh                 # 7 rounds of 5 s each
#   ROUNDS=9 DURATION=10 benchmarks/metrics_cost.sh
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-7}
DURATION=${DURATION:-5}
THREADS=${THREADS:-5}
APP=benchmarks/apps/hello.ru
PORT_ON=${PORT_ON:-19392}
PORT_OFF=${PORT_OFF:-19393}
PORT_CTL=${PORT_CTL:-19394}
PORT_CALM=${PORT_CALM:-19395}
PORT_CALM_CTL=${PORT_CALM_CTL:-19396}
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT

command -v wrk >/dev/null || { echo "wrk is missing: run 'make deps'" >&2; exit 1; }
source benchmarks/lib.sh

TICKS=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# run_wrk PORT PID TAG -> "rps p99_us cpu_us_per_request"
run_wrk() {
  local before after
  before=$(cpu_ticks "$2")
  wrk -t1 -c50 -d"${DURATION}s" --latency "http://127.0.0.1:$1/" > "$WORK/wrk.$3.out"
  after=$(cpu_ticks "$2")
  ruby -e '
    text = File.read(ARGV[0])
    m = text.match(/^\s+99%\s+([\d.]+)(us|ms|s)\b/)
    p99 = m[1].to_f * { "us" => 1, "ms" => 1000, "s" => 1_000_000 }.fetch(m[2])
    requests = text[/(\d+) requests in/, 1].to_f
    cpu = (ARGV[2].to_f - ARGV[1].to_f) / ARGV[3].to_f * 1e6 / requests
    printf("%.0f %.0f %.2f\n", text[/Requests\/sec:\s+([\d.]+)/, 1].to_f, p99, cpu)
  ' "$WORK/wrk.$3.out" "$before" "$after" "$TICKS"
}

ruby exe/tsubame -q -t "$THREADS:$THREADS" -b "tcp://127.0.0.1:$PORT_ON" \
  --metrics-url "tcp://127.0.0.1:$PORT_CTL" "$APP" > "$WORK/on.log" 2>&1 &
PID_ON=$!
ruby exe/tsubame -q -t "$THREADS:$THREADS" -b "tcp://127.0.0.1:$PORT_OFF" --no-metrics "$APP" > "$WORK/off.log" 2>&1 &
PID_OFF=$!
ruby exe/tsubame -q -t "$THREADS:$THREADS" -b "tcp://127.0.0.1:$PORT_CALM" \
  --metrics-url "tcp://127.0.0.1:$PORT_CALM_CTL" "$APP" > "$WORK/calm.log" 2>&1 &
PID_CALM=$!
for port in "$PORT_ON" "$PORT_OFF" "$PORT_CALM"; do
  wait_for_url "http://127.0.0.1:$port/"
  wrk -t1 -c50 -d2s "http://127.0.0.1:$port/" >/dev/null
done

# pair PORT_A PID_A PORT_B PID_B: both loaded at the same moment; prints
# A's line, then B's.
pair() {
  run_wrk "$1" "$2" a > "$WORK/a.line" & local wa=$!
  run_wrk "$3" "$4" b > "$WORK/b.line" & local wb=$!
  wait "$wa" "$wb"
  cat "$WORK/a.line" "$WORK/b.line"
}

declare -a ON OFF CALM SCRAPED
for r in $(seq 1 "$ROUNDS"); do
  mapfile -t lines < <(pair "$PORT_ON" "$PID_ON" "$PORT_OFF" "$PID_OFF")
  ON+=("${lines[0]}"); OFF+=("${lines[1]}")
  echo "  round $r: metrics on ${ON[-1]}, off ${OFF[-1]} (req/s p99_us cpu_us/req)" >&2
done

scraper() {
  while :; do curl -s "http://127.0.0.1:$PORT_CTL/metrics" >/dev/null; sleep 1; done
}
scraper & SCRAPER=$!
for r in $(seq 1 "$ROUNDS"); do
  mapfile -t lines < <(pair "$PORT_ON" "$PID_ON" "$PORT_CALM" "$PID_CALM")
  SCRAPED+=("${lines[0]}"); CALM+=("${lines[1]}")
  echo "  round $r: scraped every 1 s ${SCRAPED[-1]}, no scraper ${CALM[-1]} (req/s p99_us cpu_us/req)" >&2
done
kill "$SCRAPER"; wait "$SCRAPER" 2>/dev/null || true

col() { printf '%s\n' "$@" | cut -d' ' -f"$FIELD" | median; }
FIELD=1; on_rps=$(col "${ON[@]}"); off_rps=$(col "${OFF[@]}"); calm_rps=$(col "${CALM[@]}"); scraped_rps=$(col "${SCRAPED[@]}")
FIELD=2; on_p99=$(col "${ON[@]}"); off_p99=$(col "${OFF[@]}"); calm_p99=$(col "${CALM[@]}"); scraped_p99=$(col "${SCRAPED[@]}")
FIELD=3; on_cpu=$(col "${ON[@]}"); off_cpu=$(col "${OFF[@]}")
# ratio A B FIELD: each round's A/B, then their median.
ratios() {
  for i in "${!ON[@]}"; do
    awk -v a="$(echo "${ON[$i]}" | cut -d' ' -f"$1")" -v b="$(echo "${OFF[$i]}" | cut -d' ' -f"$1")" 'BEGIN { printf "%.3f\n", a / b }'
  done
}
echo
echo "hello world, wrk -t1 -c50 -d${DURATION}s, threads $THREADS, median of $ROUNDS rounds, each pair loaded at once ($(nproc) cores)"
echo "load average $(cut -d' ' -f1-3 /proc/loadavg), commit $(git rev-parse --short HEAD)"
printf "%-30s %10s %10s %14s\n" "" "req/s" "p99 (us)" "CPU us/req"
printf "%-30s %10s %10s %14s\n" "metrics on" "$on_rps" "$on_p99" "$on_cpu" "metrics off" "$off_rps" "$off_p99" "$off_cpu"
echo "on/off req/s, per round: $(ratios 1 | tr '\n' ' ')-> median $(ratios 1 | median)"
echo "on/off CPU per request, per round: $(ratios 3 | tr '\n' ' ')-> median $(ratios 3 | median)"
printf "%-30s %10s %10s\n" "metrics on, no scraper" "$calm_rps" "$calm_p99" "metrics on, scraped every 1s" "$scraped_rps" "$scraped_p99"
awk -v a="$scraped_p99" -v b="$calm_p99" 'BEGIN { printf "p99 scraped/not scraped (medians): %.3f\n", a / b }'
p99_ratios() {
  for i in "${!SCRAPED[@]}"; do
    awk -v a="$(echo "${SCRAPED[$i]}" | cut -d' ' -f2)" -v b="$(echo "${CALM[$i]}" | cut -d' ' -f2)" 'BEGIN { printf "%.3f\n", a / b }'
  done
}
echo "p99 scraped/not scraped, per round: $(p99_ratios | tr '\n' ' ')-> median $(p99_ratios | median)"
