#!/usr/bin/env bash
# Tsubame side by side with Debian's Puma, the ceiling server
# (../shared/bench/limit: bare hyper, no Ruby; hello only) and Iodine and
# Itsi when PEERS_DIR holds locally built launchers for them; one process
# each, wrk -t1. All servers run for the whole script; each round measures
# every server once, in turn (interleaved), so a drift of the machine
# touches all of them alike. Prints medians, the process CPU per request
# (from /proc, user + system), ratios, and each server's RSS after the run.
#
#   benchmarks/peers.sh                       # hello, 3 rounds of 5 s
#   SHAPE=rails ROUNDS=5 PEERS_DIR=/work/peers benchmarks/peers.sh
#
# SHAPE  app                          threads  wrk -c
# hello  apps/hello.ru                1        1, 50
# 100k   apps/string.ru, 100 KiB body 5        20
# upload apps/upload.ru, 1 MiB POSTs  5        20     (read in 64 KiB reads)
# rails  apps/rails_json.ru /items    5        1, 20  (Debian's ruby-railties)
#
# PEERS_DIR/<name> (iodine, itsi): an executable that takes PORT APP
# [THREADS] and serves APP on 127.0.0.1:PORT in the foreground with one
# process (docs/BENCHMARKS.md, "Peers built locally").
#
# BASELINE: another built checkout of Tsubame (a `git worktree` at an
# older commit, after `make build` there) that joins the table as
# "baseline", to compare two commits in one run.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
SHAPE=${SHAPE:-hello}
URL_PATH=/
WRK_ARGS=()
case "$SHAPE" in
  hello) APP=benchmarks/apps/hello.ru THREADS=1 LOADS="1 50" ;;
  100k) APP=benchmarks/apps/string.ru THREADS=5 LOADS="20"; export BODY_KIB=100 ;;
  upload) APP=benchmarks/apps/upload.ru THREADS=5 LOADS="20"; WRK_ARGS=(-s benchmarks/post_1mib.lua) ;;
  rails) APP=benchmarks/apps/rails_json.ru THREADS=5 LOADS="1 20" URL_PATH=/items; export RAILS_ENV=production ;;
  *) echo "SHAPE must be hello, 100k, upload or rails" >&2; exit 2 ;;
esac
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
  wait_for_url "http://127.0.0.1:$port$URL_PATH"
  wrk -t1 -c20 -d2s "${WRK_ARGS[@]}" "http://127.0.0.1:$port$URL_PATH" >/dev/null # warm-up
}

tsubame() { exec ruby exe/tsubame -q -t "$THREADS:$THREADS" -b "tcp://127.0.0.1:$1" "$APP"; }
puma_n() { exec puma -q -t "$THREADS:$THREADS" -b "tcp://127.0.0.1:$1" "$APP"; }
ceiling() { exec "$LIMIT_BIN" "127.0.0.1:$1" 1; }
peer() { exec "$PEERS_DIR/$1" "$2" "$(pwd)/$APP" "$THREADS"; }
baseline() { exec ruby "$BASELINE/exe/tsubame" -q -t "$THREADS:$THREADS" -b "tcp://127.0.0.1:$1" "$APP"; }

[ "$SHAPE" = hello ] && start ceiling ceiling
start tsubame tsubame
[ -n "${BASELINE:-}" ] && start baseline baseline
start puma puma_n
for p in iodine itsi; do
  if [ -n "${PEERS_DIR:-}" ] && [ -x "$PEERS_DIR/$p" ]; then
    eval "run_$p() { peer $p \"\$1\"; }"
    start "$p" "run_$p"
  fi
done


# run_wrk CONNECTIONS NAME -> "rps p99_us errors cpu_us_per_request"
run_wrk() {
  local before after
  before=$(cpu_seconds "${PIDS[$2]}")
  wrk -t1 -c"$1" -d"${DURATION}s" --latency "${WRK_ARGS[@]}" "http://127.0.0.1:${PORTS[$2]}$URL_PATH" > "$WORK/wrk.out"
  after=$(cpu_seconds "${PIDS[$2]}")
  ruby -e '
    text = File.read(ARGV[0])
    m = text.match(/^\s+99%\s+([\d.]+)(us|ms|s)\b/)
    p99 = m[1].to_f * { "us" => 1, "ms" => 1000, "s" => 1_000_000 }.fetch(m[2])
    errors = text[/Non-2xx.*?(\d+)/, 1].to_i + text[/Socket errors:.*?(\d+)/, 1].to_i
    requests = text[/(\d+) requests in/, 1].to_f
    cpu = (ARGV[2].to_f - ARGV[1].to_f) * 1_000_000 / [requests, 1].max
    printf("%.0f %.0f %d %.1f\n", text[/Requests\/sec:\s+([\d.]+)/, 1].to_f, p99, errors, cpu)
  ' "$WORK/wrk.out" "$before" "$after"
}

declare -A RESULTS
for r in $(seq 1 "$ROUNDS"); do
  for c in $LOADS; do
    for s in "${SERVERS[@]}"; do
      RESULTS["$s,$c,$r"]=$(run_wrk "$c" "$s")
      echo "  round $r -c$c $s: ${RESULTS["$s,$c,$r"]} (req/s p99_us errors cpu_us/req)" >&2
    done
  done
done

col() { # NAME C FIELD
  for r in $(seq 1 "$ROUNDS"); do echo "${RESULTS["$1,$2,$r"]}" | cut -d' ' -f"$3"; done | median
}
rss_mb() { awk '/VmRSS/ {printf "%.1f", $2 / 1024}' "/proc/$1/status" 2>/dev/null || echo "?"; }

echo
echo "$SHAPE ($APP), 1 process, $THREADS thread(s), wrk -t1 -d${DURATION}s, median of $ROUNDS interleaved rounds"
echo "$(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), commit $(git rev-parse --short HEAD)"
for c in $LOADS; do
  printf "%-8s %10s %9s %12s %7s\n" "-c$c" "req/s" "p99 us" "CPU us/req" errors
  for s in "${SERVERS[@]}"; do
    printf "%-8s %10s %9s %12s %7s\n" "$s" "$(col "$s" "$c" 1)" "$(col "$s" "$c" 2)" "$(col "$s" "$c" 4)" "$(col "$s" "$c" 3)"
  done
  for s in "${SERVERS[@]}"; do
    [ "$s" = tsubame ] && continue
    awk -v s="$s" -v a="$(col tsubame "$c" 1)" -v b="$(col "$s" "$c" 1)" -v p="$(col tsubame "$c" 2)" \
      -v q="$(col "$s" "$c" 2)" -v u="$(col tsubame "$c" 4)" -v v="$(col "$s" "$c" 4)" \
      'BEGIN { printf "  tsubame / %-8s req/s %.2fx  p99 %.2fx  CPU per request %.2fx\n", s, a / b, p / q, u / v }'
  done
done
echo "RSS after the run (MB):$(for s in "${SERVERS[@]}"; do printf " %s %s" "$s" "$(rss_mb "${PIDS[$s]}")"; done)"
