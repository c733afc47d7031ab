#!/usr/bin/env bash
# Hello world side by side: Tsubame, Debian's Puma and the ceiling server
# (../shared/bench/limit: bare hyper, no Ruby), plus Iodine and Itsi when
# PEERS_DIR holds locally built launchers for them. One process, one Ruby
# thread each, wrk -t1 at -c1 and -c50. All servers run for the whole
# script; each round measures every server once, in turn (interleaved), so
# a drift of the machine touches all of them alike. Prints medians, ratios
# to the ceiling and to the best peer, and each server's RSS after the run.
#
#   benchmarks/peers.sh                       # 3 rounds of 5 s
#   ROUNDS=5 DURATION=10 PEERS_DIR=~/peers benchmarks/peers.sh
#
# PEERS_DIR/<name> (iodine, itsi): an executable that takes PORT APP and
# serves APP on 127.0.0.1:PORT in the foreground with one process and one
# thread (docs/BENCHMARKS.md, "Peers built locally", has the recipes).
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
APP=benchmarks/apps/hello.ru
BASE_PORT=${BASE_PORT:-19500}
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT

source benchmarks/lib.sh
command -v wrk >/dev/null || { echo "wrk is missing: run 'make deps'" >&2; exit 1; }
command -v puma >/dev/null || { echo "puma is missing: run 'make deps'" >&2; exit 1; }

LIMIT_TARGET=${LIMIT_TARGET:-${TMPDIR:-/tmp}/tsubame-limit-target}
CARGO_TARGET_DIR=$LIMIT_TARGET cargo build -q --release --manifest-path ../shared/bench/limit/Cargo.toml
LIMIT_BIN=$LIMIT_TARGET/release/limit

declare -A PIDS PORTS
SERVERS=()
start() { # NAME COMMAND...
  local name=$1 port=$((BASE_PORT + ${#SERVERS[@]}))
  shift
  "$@" "$port" > "$WORK/$name.log" 2>&1 &
  PIDS[$name]=$!
  PORTS[$name]=$port
  SERVERS+=("$name")
  wait_for_url "http://127.0.0.1:$port/"
  wrk -t1 -c50 -d2s "http://127.0.0.1:$port/" >/dev/null # warm-up
}

tsubame() { exec ruby exe/tsubame -q -t 1:1 -b "tcp://127.0.0.1:$1" "$APP"; }
puma_1() { exec puma -q -t 1:1 -b "tcp://127.0.0.1:$1" "$APP"; }
ceiling() { exec "$LIMIT_BIN" "127.0.0.1:$1" 1; }
peer() { exec "$PEERS_DIR/$1" "$2" "$(pwd)/$APP"; }

start ceiling ceiling
start tsubame tsubame
start puma puma_1
for p in iodine itsi; do
  if [ -n "${PEERS_DIR:-}" ] && [ -x "$PEERS_DIR/$p" ]; then
    eval "run_$p() { peer $p \"\$1\"; }"
    start "$p" "run_$p"
  fi
done

# run_wrk CONNECTIONS PORT -> "rps p99_us"
run_wrk() {
  wrk -t1 -c"$1" -d"${DURATION}s" --latency "http://127.0.0.1:$2/" > "$WORK/wrk.out"
  ruby -e '
    text = File.read(ARGV[0])
    m = text.match(/^\s+99%\s+([\d.]+)(us|ms|s)\b/)
    p99 = m[1].to_f * { "us" => 1, "ms" => 1000, "s" => 1_000_000 }.fetch(m[2])
    errors = text[/Non-2xx.*?(\d+)/, 1].to_i + text[/Socket errors:.*?(\d+)/, 1].to_i
    printf("%.0f %.0f %d\n", text[/Requests\/sec:\s+([\d.]+)/, 1].to_f, p99, errors)
  ' "$WORK/wrk.out"
}

declare -A RESULTS
for r in $(seq 1 "$ROUNDS"); do
  for c in 1 50; do
    for s in "${SERVERS[@]}"; do
      RESULTS["$s,$c,$r"]=$(run_wrk "$c" "${PORTS[$s]}")
      echo "  round $r -c$c $s: ${RESULTS["$s,$c,$r"]} (req/s p99_us errors)" >&2
    done
  done
done

median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
col() { # NAME C FIELD
  for r in $(seq 1 "$ROUNDS"); do echo "${RESULTS["$1,$2,$r"]}" | cut -d' ' -f"$3"; done | median
}
rss_mb() { awk '/VmRSS/ {printf "%.1f", $2 / 1024}' "/proc/$1/status" 2>/dev/null || echo "?"; }

echo
echo "hello world, 1 process, 1 thread, wrk -t1 -d${DURATION}s, median of $ROUNDS interleaved rounds"
echo "$(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), commit $(git rev-parse --short HEAD)"
printf "%-8s %10s %8s %10s %8s %10s %8s %9s\n" server "-c1 req/s" "p99 us" "-c50 req/s" "p99 us" "/ceiling" "errors" "RSS MB"
for s in "${SERVERS[@]}"; do
  printf "%-8s %10s %8s %10s %8s %10s %8s %9s\n" "$s" "$(col "$s" 1 1)" "$(col "$s" 1 2)" "$(col "$s" 50 1)" \
    "$(col "$s" 50 2)" \
    "$(awk -v a="$(col "$s" 1 1)" -v b="$(col ceiling 1 1)" -v x="$(col "$s" 50 1)" -v y="$(col ceiling 50 1)" \
      'BEGIN { printf "%.2f/%.2f", a / b, x / y }')" \
    "$(( $(col "$s" 1 3) + $(col "$s" 50 3) ))" "$(rss_mb "${PIDS[$s]}")"
done
echo
for s in "${SERVERS[@]}"; do
  [ "$s" = tsubame ] || [ "$s" = ceiling ] && continue
  awk -v s="$s" -v a="$(col tsubame 1 1)" -v b="$(col "$s" 1 1)" -v x="$(col tsubame 50 1)" -v y="$(col "$s" 50 1)" \
    -v p="$(col tsubame 50 2)" -v q="$(col "$s" 50 2)" \
    'BEGIN { printf "tsubame / %-7s req/s -c1 %.2fx  -c50 %.2fx  p99 -c50 %.2fx\n", s, a / b, x / y, p / q }'
done
