#!/usr/bin/env bash
# HTTP/2 against Tsubame's own HTTP/1.1, both over TLS, same client (h2load),
# same connection count: h2load -cC -mM (HTTP/2) and h2load --h1 -cC
# (HTTP/1.1 with keep-alive, one request at a time per connection). One
# server per build, -t THREADS:THREADS, the app APP (default the 10 KiB
# string.ru with 25 headers). Runs alternate between protocols and builds
# within every round (A-h2 B-h2 A-h1 B-h1, ...), so a busy machine weighs on
# all of them alike; prints the median of ROUNDS runs, the ratio HTTP/2 ÷
# HTTP/1.1, and the server's CPU per request (the I/O thread, and all of
# the process) from /proc, also medians.
#
#   benchmarks/h2_vs_h1.sh                      # this checkout, 5 rounds
#   BUILDS="/tmp/base /tmp/new" benchmarks/h2_vs_h1.sh
#       # each a directory holding copies of a checkout's exe/ and lib/
#       # (cp -r exe lib DIR after `make build`), compared interleaved
#   APP=benchmarks/apps/chunked.ru benchmarks/h2_vs_h1.sh   # a streamed body
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-5}
REQUESTS=${REQUESTS:-50000}
CONNECTIONS=${CONNECTIONS:-10}
STREAMS=${STREAMS:-10}
THREADS=${THREADS:-5}
BODY_KIB=${BODY_KIB:-10}
APP=${APP:-benchmarks/apps/string.ru}
BUILDS=${BUILDS:-.}
PORT=${PORT:-19643}
WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

for tool in h2load openssl curl; do
  command -v "$tool" >/dev/null || { echo "$tool is missing: run 'make deps'" >&2; exit 1; }
done
source benchmarks/lib.sh

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=localhost \
  -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" -keyout "$WORK/key.pem" -out "$WORK/cert.pem" 2>/dev/null

read -r -a BUILD_DIRS <<<"$BUILDS"
declare -A SERVER_PID SERVER_PORT
i=0
for build in "${BUILD_DIRS[@]}"; do
  [ -x "$build/exe/tsubame" ] || { echo "$build/exe/tsubame not found" >&2; exit 1; }
  port=$((PORT + i))
  BODY_KIB=$BODY_KIB ruby "$build/exe/tsubame" -q -t "$THREADS:$THREADS" \
    -b "ssl://127.0.0.1:$port?cert=$WORK/cert.pem&key=$WORK/key.pem" "$APP" >"$WORK/server-$i.log" 2>&1 &
  SERVER_PID[$build]=$!
  SERVER_PORT[$build]=$port
  PIDS+=("$!")
  wait_for_url "https://127.0.0.1:$port/" || { cat "$WORK/server-$i.log" >&2; exit 1; }
  h2load -n 5000 -c"$CONNECTIONS" -m"$STREAMS" "https://127.0.0.1:$port/" >/dev/null 2>&1 # warm-up
  i=$((i + 1))
done

# CPU ticks of a process: "io_thread all_threads".
cpu_ticks() {
  local io=0 all=0 t ticks
  for t in /proc/"$1"/task/*; do
    ticks=$(awk '{print $14 + $15}' "$t/stat" 2>/dev/null) || continue
    all=$((all + ticks))
    [ "$(cat "$t/comm" 2>/dev/null)" = tsubame-io ] && io=$((io + ticks))
  done
  echo "$io $all"
}

# run BUILD h2|h1 -> "rps io_us_per_request all_us_per_request"
run() {
  local build=$1 proto=$2 port=${SERVER_PORT[$1]} pid=${SERVER_PID[$1]} flags
  if [ "$proto" = h2 ]; then flags="-m$STREAMS"; else flags="--h1"; fi
  read -r io0 all0 < <(cpu_ticks "$pid")
  # shellcheck disable=SC2086
  timeout 300 h2load -n "$REQUESTS" -c"$CONNECTIONS" $flags "https://127.0.0.1:$port/" >"$WORK/h2load.out" 2>&1 || true
  read -r io1 all1 < <(cpu_ticks "$pid")
  ruby -e '
    text = File.read(ARGV[0])
    rps = text[/finished in [\d.]+\w*, ([\d.]+) req\/s/, 1]
    ok = text[/requests: .*?(\d+) succeeded/, 1].to_i
    if rps.nil? || ok != Integer(ARGV[1])
      warn "h2load did not finish cleanly:\n#{text.lines.last(6).join}"
      puts "0 0 0"
      exit
    end
    hz = 100.0
    per = ->(ticks) { ticks.to_i / hz / ok * 1e6 }
    printf("%.0f %.1f %.1f\n", rps.to_f, per.(ARGV[2]), per.(ARGV[3]))
  ' "$WORK/h2load.out" "$REQUESTS" "$((io1 - io0))" "$((all1 - all0))"
}

declare -A RESULTS
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq 1 "$ROUNDS"); do
  for proto in h2 h1; do
    for build in "${BUILD_DIRS[@]}"; do
      RESULTS["$build,$proto,$r"]=$(run "$build" "$proto")
      echo "  round $r $build $proto: ${RESULTS["$build,$proto,$r"]} (req/s, µs CPU/request: I/O thread, whole server)" >&2
    done
  done
done
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)

col() { # BUILD PROTO FIELD
  for r in $(seq 1 "$ROUNDS"); do echo "${RESULTS["$1,$2,$r"]}" | cut -d' ' -f"$3"; done | median
}

echo
echo "$APP (BODY_KIB=$BODY_KIB) over TLS, -t $THREADS:$THREADS, h2load -n $REQUESTS -c$CONNECTIONS: HTTP/2 -m$STREAMS vs HTTP/1.1 (--h1)"
echo "median of $ROUNDS interleaved rounds, $(nproc) cores, load average $LOAD_START at the start, $LOAD_END at the end"
printf "%-24s %10s %10s %7s %16s %16s\n" build "h2 r/s" "h1 r/s" "h2/h1" "h2 µs io/all" "h1 µs io/all"
for build in "${BUILD_DIRS[@]}"; do
  h2=$(col "$build" h2 1)
  h1=$(col "$build" h1 1)
  ratio=$(awk -v a="$h2" -v b="$h1" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "n/a" }')
  printf "%-24s %10s %10s %7s %16s %16s\n" "$build" "$h2" "$h1" "$ratio" \
    "$(col "$build" h2 2)/$(col "$build" h2 3)" "$(col "$build" h1 2)/$(col "$build" h1 3)"
done
