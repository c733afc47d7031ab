#!/usr/bin/env bash
# Tsubame, Puma, Thin and WEBrick (Debian's) side by side on the body apps
# of benchmarks/apps/ (string, array, chunked, file) at 1, 10 and 100 KiB,
# over tcp and unix sockets. One server process at a time, never two:
#
#   Tsubame  exe/tsubame -t THREADS:THREADS
#   Puma     puma -t THREADS:THREADS (single mode)
#   Thin     thin start (its default: one EventMachine thread runs the app;
#            THIN_THREADED=1 adds --threaded --threadpool-size THREADS)
#   WEBrick  ruby benchmarks/webrick.rb (Rack's WEBrick handler, no access
#            log; one thread per connection; TCP only, so no unix cells)
#
# all with RACK_ENV=production. The load is `tsubame bench` (wrk cannot
# use unix sockets, and one client measures every cell): CONNECTIONS
# keep-alive connections on CLIENT_THREADS client threads for DURATION
# seconds, the body size chosen by the X-Body-KiB request header. For
# each app and socket, every round starts each server in turn (the order
# rotates each round so drift favours no one), warms it up for WARMUP
# seconds and runs every size. Prints the median req/s (2xx responses per
# second) and p99 of ROUNDS rounds per cell and the ratio to Puma, and
# writes into OUT:
#   compare.md   the same as Markdown tables, one per app
#   compare.svg  a bar chart of req/s (self-contained SVG)
#   runs.tsv     every round of every cell; runs/*.json the raw reports
#
#   benchmarks/compare.sh                  # 3 rounds of 5 s, the whole matrix (about 25 min)
#   ROUNDS=1 DURATION=1 APPS=string SIZES=1 benchmarks/compare.sh
#
# Other settings: SERVERS="tsubame puma thin webrick" SOCKETS="tcp unix"
# SIZES="1 10 100" (KiB) APPS="string array chunked file" THREADS=5
# CONNECTIONS=10 CLIENT_THREADS=1 WARMUP=1 PORT=19400 OUT=/tmp/compare
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
WARMUP=${WARMUP:-1}
THREADS=${THREADS:-5}
CONNECTIONS=${CONNECTIONS:-10}
CLIENT_THREADS=${CLIENT_THREADS:-1}
APPS=${APPS:-string array chunked file}
SIZES=${SIZES:-1 10 100}
SOCKETS=${SOCKETS:-tcp unix}
SERVERS=${SERVERS:-tsubame puma thin webrick}
THIN_THREADED=${THIN_THREADED:-0}
PORT=${PORT:-19400}
OUT=${OUT:-/tmp/compare}
BENCH=${TSUBAME_BENCH:-lib/tsubame/tsubame-bench}
[ -x "$BENCH" ] || BENCH=${CARGO_TARGET_DIR:-target}/release/tsubame-bench
REPORT="ruby benchmarks/compare_report.rb"

WORK=$(mktemp -d)
SERVER_PID=""
URL=""

# A process that has exited but not been waited for is still listed; it
# does not count as alive.
alive() {
  local stat
  stat=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
  [[ $stat != Z* ]]
}

stop_server() {
  local pid=$1
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do alive "$pid" || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

cleanup() {
  if [ -n "$SERVER_PID" ]; then stop_server "$SERVER_PID"; fi
  local left
  left=$(jobs -p)
  if [ -n "$left" ]; then kill -KILL $left 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

fail() { echo "compare.sh: $*" >&2; exit 1; }

[ -x "$BENCH" ] || fail "tsubame-bench is missing: run 'make build'"
for word in $SERVERS; do
  case $word in
    tsubame) ;;
    puma) command -v puma >/dev/null || fail "puma is missing: run 'make deps'" ;;
    thin) command -v thin >/dev/null || fail "thin is missing: run 'make deps'" ;;
    webrick) ruby -e 'require "webrick"' 2>/dev/null || fail "webrick is missing: run 'make deps'" ;;
    *) fail "unknown server '$word' in SERVERS (tsubame puma thin webrick)" ;;
  esac
done
for word in $APPS; do [ -f "benchmarks/apps/$word.ru" ] || fail "no benchmarks/apps/$word.ru (APPS: string array chunked file)"; done
for word in $SOCKETS; do [[ $word == tcp || $word == unix ]] || fail "unknown socket '$word' in SOCKETS (tcp unix)"; done
for word in $SIZES; do [[ $word =~ ^[0-9]+$ ]] || fail "SIZES must be KiB counts (got '$word')"; done
for word in "$ROUNDS" "$DURATION" "$WARMUP" "$THREADS" "$CONNECTIONS" "$CLIENT_THREADS"; do
  [[ $word =~ ^[0-9]+$ ]] || fail "ROUNDS, DURATION, WARMUP, THREADS, CONNECTIONS and CLIENT_THREADS must be whole numbers (got '$word')"
done
(( ROUNDS > 0 && DURATION > 0 )) || fail "ROUNDS and DURATION must be at least 1"

# The machine may be shared: the load average is recorded at both ends.
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
mkdir -p "$OUT/runs" "$OUT/logs"
rm -f "$OUT"/runs/*.json "$OUT"/logs/*.log "$OUT/runs.tsv"
printf "app\tsize_kib\tsocket\tserver\tround\treq_s\tp99_ms\tfailed\n" > "$OUT/runs.tsv"

# start_server SERVER APP SOCKET: starts it in the background (SERVER_PID)
# and sets URL to load it with.
start_server() {
  local server=$1 app=$ROOT/benchmarks/apps/$2.ru socket=$3 bind sock=$WORK/$1.sock log=$OUT/logs/$1-$2-$3.log
  local -a cmd
  if [ "$socket" = tcp ]; then
    bind="tcp://127.0.0.1:$PORT"; URL="http://127.0.0.1:$PORT/"
  else
    rm -f "$sock"; bind="unix://$sock"; URL="unix://$sock/"
  fi
  if probe "$socket" "$sock"; then fail "something already answers on ${bind}; set PORT"; fi
  case $server in
    tsubame) cmd=(ruby exe/tsubame -q -e production -t "$THREADS:$THREADS" -b "$bind" "$app") ;;
    puma) cmd=(puma -q -e production -t "$THREADS:$THREADS" -b "$bind" "$app") ;;
    thin)
      cmd=(thin start -q -e production -R "$app")
      if [ "$socket" = tcp ]; then cmd+=(-a 127.0.0.1 -p "$PORT"); else cmd+=(-S "$sock"); fi
      if [ "$THIN_THREADED" = 1 ]; then cmd+=(--threaded --threadpool-size "$THREADS"); fi
      ;;
    webrick) cmd=(ruby benchmarks/webrick.rb "$app" 127.0.0.1 "$PORT") ;;
  esac
  RACK_ENV=production "${cmd[@]}" >> "$log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 150); do
    if probe "$socket" "$sock"; then return 0; fi
    alive "$SERVER_PID" || break
    sleep 0.1
  done
  fail "$server did not start on $bind: $(tail -5 "$log")"
}

probe() { # SOCKET SOCK_PATH
  if [ "$1" = tcp ]; then
    curl -fs -o /dev/null "http://127.0.0.1:$PORT/"
  else
    [ -S "$2" ] && curl -fs -o /dev/null --unix-socket "$2" http://localhost/
  fi
}

# load URL KIB SECONDS JSON_FILE
load() {
  "$BENCH" -q --json -t "$CLIENT_THREADS" -c "$CONNECTIONS" -d "${3}s" -H "X-Body-KiB: $2" "$1" > "$4" ||
    fail "tsubame bench failed against $1 (X-Body-KiB: $2); server logs are in $OUT/logs"
}

rotate() { # N WORDS... -> the words rotated left by N
  local n=$1; shift
  local -a words=("$@")
  local i
  for ((i = 0; i < ${#words[@]}; i++)); do printf "%s " "${words[(i + n) % ${#words[@]}]}"; done
}

read -ra SERVER_LIST <<< "$SERVERS"
runs=0
for app in $APPS; do for socket in $SOCKETS; do for server in $SERVERS; do
  [[ $server == webrick && $socket == unix ]] || runs=$((runs + 1))
done; done; done
nsizes=$(wc -w <<< "$SIZES")
echo "compare: $runs server runs x $ROUNDS rounds x ($nsizes sizes x ${DURATION}s + ${WARMUP}s warm-up + start), about $((runs * ROUNDS * (nsizes * DURATION + WARMUP + 2) / 60 + 1)) min; results in $OUT" >&2
if [[ " $SERVERS " == *" webrick "* && " $SOCKETS " == *" unix "* ]]; then
  echo "compare: WEBrick has no unix socket listener: its unix cells are skipped (n/a)" >&2
fi

first_size=${SIZES%% *}
for app in $APPS; do
  for socket in $SOCKETS; do
    for round in $(seq 1 "$ROUNDS"); do
      for server in $(rotate $((round - 1)) "${SERVER_LIST[@]}"); do
        [[ $server == webrick && $socket == unix ]] && continue
        start_server "$server" "$app" "$socket"
        if (( WARMUP > 0 )); then load "$URL" "$first_size" "$WARMUP" "$WORK/warmup.json"; fi
        for kib in $SIZES; do
          json=$OUT/runs/$app-${kib}k-$socket-$server-r$round.json
          load "$URL" "$kib" "$DURATION" "$json"
          summary=$($REPORT summary "$json")
          read -r rps p99 failed <<< "$summary"
          printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n" "$app" "$kib" "$socket" "$server" "$round" "$rps" "$p99" "$failed" >> "$OUT/runs.tsv"
          printf "  %-7s %4s KiB %-4s %-7s round %s: %8.0f req/s  p99 %8.2f ms  failed %s\n" "$app" "$kib" "$socket" "$server" "$round" "$rps" "$p99" "$failed" >&2
        done
        stop_server "$SERVER_PID"
        SERVER_PID=""
      done
    done
  done
done

{
  echo "date=$(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "rounds=$ROUNDS"
  echo "duration=$DURATION"
  echo "connections=$CONNECTIONS"
  echo "client_threads=$CLIENT_THREADS"
  echo "threads=$THREADS"
  echo "thin_threaded=$THIN_THREADED"
  echo "cores=$(nproc)"
  echo "cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
  echo "load_start=$LOAD_START"
  echo "load=$(cut -d' ' -f1-3 /proc/loadavg)"
  echo "puma=$(puma --version 2>/dev/null | head -1 || true)"
  echo "thin=$(thin --version 2>/dev/null | head -1 || true)"
  echo "ruby=$(ruby -e 'print RUBY_VERSION')"
  echo "webrick=$(ruby -rwebrick -e 'print WEBrick::VERSION' 2>/dev/null || true)"
} > "$OUT/meta.txt"

echo
$REPORT report "$OUT"
