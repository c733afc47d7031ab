#!/usr/bin/env bash
# Cluster mode, Tsubame vs Puma (Debian's): WORKERS workers of THREADS
# threads each, wrk -cCONNECTIONS against two apps (hello world, and a
# 10 KiB body with 25 headers), one server at a time. Prints the median of
# ROUNDS runs, the Tsubame/Puma ratio, and each server's RSS per worker
# (from /proc) after its runs.
#
#   benchmarks/cluster.sh                       # 3 rounds of 10 s
#   ROUNDS=1 DURATION=2 benchmarks/cluster.sh   # a quick check of the script
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
WORKERS=${WORKERS:-2}
THREADS=${THREADS:-5}
CONNECTIONS=${CONNECTIONS:-100}
WRK_THREADS=${WRK_THREADS:-2}
PORT_T=${PORT_T:-19392}
PORT_P=${PORT_P:-19393}
WORK=$(mktemp -d)
source benchmarks/lib.sh
SERVER_PID=
trap 'stop_server; rm -rf "$WORK"' EXIT

command -v wrk >/dev/null || { echo "wrk is missing: run 'make deps'" >&2; exit 1; }
command -v puma >/dev/null || { echo "puma is missing: run 'make deps'" >&2; exit 1; }

# name -> "rackup BODY_KIB"
declare -A APPS=([hello]="benchmarks/apps/hello.ru 0" [10KiB]="benchmarks/apps/string.ru 10")
APP_ORDER=(hello 10KiB)

# wait_workers PORT: until the port answers and the master has WORKERS children.
wait_workers() {
  for _ in $(seq 1 200); do
    if curl -fs "http://127.0.0.1:$1/" >/dev/null 2>&1 &&
       [ "$(pgrep -P "$SERVER_PID" | wc -l)" -ge "$WORKERS" ]; then
      return 0
    fi
    sleep 0.1
  done
  echo "server on port $1 did not start; its log:" >&2
  cat "$WORK/server.log" >&2
  exit 1
}

# run_wrk PORT -> "rps p50_us p99_us errors"
run_wrk() {
  wrk -t"$WRK_THREADS" -c"$CONNECTIONS" -d"${DURATION}s" --latency "http://127.0.0.1:$1/" > "$WORK/wrk.out"
  ruby -e '
    text = File.read(ARGV[0])
    us = ->(label) {
      m = text.match(/^\s+#{label}\s+([\d.]+)(us|ms|s)\b/) or next 0
      m[1].to_f * { "us" => 1, "ms" => 1000, "s" => 1_000_000 }.fetch(m[2])
    }
    rps = text[/Requests\/sec:\s+([\d.]+)/, 1].to_f
    errors = text[/Non-2xx or 3xx responses:\s+(\d+)/, 1].to_i +
             text[/Socket errors:.*/].to_s.scan(/\d+/).map(&:to_i).sum
    printf("%.0f %.0f %.0f %d\n", rps, us.("50%"), us.("99%"), errors)
  ' "$WORK/wrk.out"
}

# rss_per_worker -> "avg_mb list_mb", for the current server's workers
rss_per_worker() {
  local list=() total=0 kb
  for pid in $(pgrep -P "$SERVER_PID"); do
    kb=$(awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status" 2>/dev/null || echo 0)
    list+=("$(awk -v k="$kb" 'BEGIN { printf "%.1f", k / 1024 }')")
    total=$((total + kb))
  done
  awk -v t="$total" -v n="${#list[@]}" -v l="${list[*]}" 'BEGIN { printf "%.1f %s\n", (n ? t / n / 1024 : 0), l }'
}

declare -A RESULTS RSS
bench() { # SERVER APP PORT command...
  local server=$1 app=$2 port=$3
  shift 3
  "$@" > "$WORK/server.log" 2>&1 &
  SERVER_PID=$!
  wait_workers "$port"
  wrk -t"$WRK_THREADS" -c"$CONNECTIONS" -d2s "http://127.0.0.1:$port/" >/dev/null # warm-up
  for r in $(seq 1 "$ROUNDS"); do
    RESULTS["$server,$app,$r"]=$(run_wrk "$port")
    echo "  $server $app round $r: ${RESULTS["$server,$app,$r"]} (req/s p50_us p99_us errors)" >&2
  done
  RSS["$server,$app"]=$(rss_per_worker)
  echo "  $server $app RSS per worker after the runs (MiB): ${RSS["$server,$app"]}" >&2
  stop_server
}

for app in "${APP_ORDER[@]}"; do
  read -r rackup kib <<< "${APPS[$app]}"
  echo "$app: tsubame -w $WORKERS -t $THREADS:$THREADS" >&2
  BODY_KIB=$kib bench tsubame "$app" "$PORT_T" \
    ruby exe/tsubame -q -w "$WORKERS" -t "$THREADS:$THREADS" -b "tcp://127.0.0.1:$PORT_T" "$rackup"
  echo "$app: $(puma --version 2>/dev/null | head -1) -w $WORKERS -t $THREADS:$THREADS" >&2
  BODY_KIB=$kib bench puma "$app" "$PORT_P" \
    puma -q -w "$WORKERS" -t "$THREADS:$THREADS" -b "tcp://127.0.0.1:$PORT_P" "$rackup"
done

median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
col() { # SERVER APP FIELD
  for r in $(seq 1 "$ROUNDS"); do echo "${RESULTS["$1,$2,$r"]}" | cut -d' ' -f"$3"; done | median
}

echo
echo "cluster mode: $WORKERS workers x $THREADS threads, wrk -t$WRK_THREADS -c$CONNECTIONS -d${DURATION}s," \
     "median of $ROUNDS rounds ($(nproc) cores)"
printf "%-6s %-8s %10s %10s %10s %8s %14s  %s\n" app server "req/s" "p50 (us)" "p99 (us)" errors \
  "RSS/worker MiB" "(each)"
for app in "${APP_ORDER[@]}"; do
  for s in tsubame puma; do
    read -r avg each <<< "${RSS["$s,$app"]}"
    printf "%-6s %-8s %10s %10s %10s %8s %14s  %s\n" "$app" "$s" "$(col $s "$app" 1)" "$(col $s "$app" 2)" \
      "$(col $s "$app" 3)" "$(col $s "$app" 4)" "$avg" "$each"
  done
  read -r t_rss _ <<< "${RSS["tsubame,$app"]}"
  read -r p_rss _ <<< "${RSS["puma,$app"]}"
  awk -v t="$(col tsubame "$app" 1)" -v p="$(col puma "$app" 1)" -v tr="$t_rss" -v pr="$p_rss" -v a="$app" \
    'BEGIN { printf "%-6s tsubame/puma req/s ratio: %.2fx   RSS per worker: %+.1f MiB vs puma\n", a, t / p, tr - pr }'
done
