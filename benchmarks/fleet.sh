#!/usr/bin/env bash
# A fleet behind HAProxy: stops, restarts and readiness that a load
# balancer can follow. Three single-mode instances (-t 5:5) of
# benchmarks/apps/overload.ru on loopback, HAProxy in front of them
# (`option httpchk GET <readiness path>`, `inter 500ms fall 2 rise 2`,
# `http-reuse always`, stats socket and log in a temp dir), and
# tsubame-bench's open-loop client through HAProxy on /io?ms=20 (20 ms of
# waiting per request). Per server, per round:
#   steady   LOAD_PCT (50) % of the fleet's capacity for STEADY (60) s;
#            capacity = INSTANCES x THREADS / 20 ms = 750 req/s
#   usr2     the same load while each instance gets USR2 in turn (hot
#            restart), the next only once HAProxy has it UP again (+SETTLE s)
#   term     the same load while each instance gets TERM (drain), is started
#            again once it has exited, and is UP in HAProxy again
#   overload OVERLOAD_PCT (150) % of capacity for OVERLOAD_S (5) s while
#            instance 1's readiness is polled every 50 ms (0.5 s timeout):
#            when it first fails, and how long after the load stops it
#            answers 2xx again. Twice: "direct", 150% of one instance's
#            capacity (375 req/s) sent straight to instance 1, so its queue
#            grows for the whole phase whatever readiness says; and
#            "haproxy", 150% of the fleet's (1125 req/s) through HAProxy,
#            which stops sending to an instance once its checks fail (and
#            answers 503 itself when none is left)
# The load runs without a break across steady, usr2 and term (one client
# process per phase, the next started as the last one stops).
# Prints a table: requests; failures split into non-2xx (and how many of
# those HAProxy made itself) and connection errors; p50/p99 and the p99
# over the steady phase's ("p99/steady"); failed health checks (`chkfail`: only
# checks that failed while the server was UP) and UP->DOWN transitions from
# HAProxy's stats; HAProxy's connection retries; then readiness fail and
# recovery times. HAProxy does not always answer a lost request: when a
# server closes a reused keep-alive connection on which HAProxy had just
# sent a request, HAProxy answers 502 if that was the client's first
# request on its connection (proxy5xx), and otherwise closes the client's
# connection without an answer or a log line, for the client to retry: the
# client counts "connection closed early" (conn-err).
#
# RATE sets the load in req/s directly (instead of LOAD_PCT); OVERLOAD_S=0
# leaves out the overload phases. At the end Tsubame's rolling phases are
# checked against the issue "Production deployment"'s target: no failed
# request (non-2xx or connection error) in steady, usr2 and term, and each
# of usr2's and term's p99 at most MAX_P99_RATIO (3) x steady's p99 (with
# ROUNDS > 1: the median of the rounds' ratios; a failed request in any
# round fails); the figures are printed and the exit status is 1 when one
# is missed (Puma is measured, never checked). `make fleet` runs that target: PEER=tsubame
# RATE=2000 THREADS=32 STEADY=30 OVERLOAD_S=0 (2,000 req/s is 42% of the
# fleet's 4,800 req/s of capacity, 62% of the two instances left while one
# restarts).
#
# Servers: Tsubame with --readiness-check-path /ready (and
# --shutdown-delay SHUTDOWN_DELAY when exe/tsubame has that option), and
# Puma 5.6 (Debian's), whose readiness check is GET / (it has no readiness
# path). Both by default; PEER=tsubame or PEER=puma runs one.
#
#   benchmarks/fleet.sh                                  # both, 1 round
#   ROUNDS=3 benchmarks/fleet.sh                         # medians of 3
#   PEER=puma STEADY=10 OVERLOAD_S=3 benchmarks/fleet.sh # a quick look
#   PEER=tsubame RATE=2000 THREADS=32 OVERLOAD_S=0 benchmarks/fleet.sh  # make fleet
# The files (bench reports, HAProxy stats and logs, server logs) stay in
# OUT (default: a new /tmp/fleet.XXXXXX); the last line names it.
set -euo pipefail
cd "$(dirname "$0")/.."

PEER=${PEER:-}
ROUNDS=${ROUNDS:-1}
INSTANCES=${INSTANCES:-3}
THREADS=${THREADS:-5}
DELAY_MS=${DELAY_MS:-20}
LOAD_PCT=${LOAD_PCT:-50}
OVERLOAD_PCT=${OVERLOAD_PCT:-150}
STEADY=${STEADY:-60}
OVERLOAD_S=${OVERLOAD_S:-5}
SETTLE=${SETTLE:-1}
CONNECTIONS=${CONNECTIONS:-200}
SHUTDOWN_DELAY=${SHUTDOWN_DELAY:-2}
DRAIN_WAIT=${DRAIN_WAIT:-60}
TSUBAME_ARGS=${TSUBAME_ARGS:-}
BASE_PORT=${BASE_PORT:-19800}
OUT=${OUT:-$(mktemp -d /tmp/fleet.XXXXXX)}
APP=benchmarks/apps/overload.ru
BENCH=lib/tsubame/tsubame-bench
HELPER=benchmarks/fleet_helper.rb
LOAD_PATH="/io?ms=$DELAY_MS"
CAPACITY=$((INSTANCES * THREADS * 1000 / DELAY_MS))
RATE=${RATE:-$((CAPACITY * LOAD_PCT / 100))}
MAX_P99_RATIO=${MAX_P99_RATIO:-3}
OVERLOAD_RATE=$((THREADS * 1000 / DELAY_MS * OVERLOAD_PCT / 100))
FLEET_OVERLOAD_RATE=$((CAPACITY * OVERLOAD_PCT / 100))
HAPROXY_PORT=$BASE_PORT
case "$PEER" in
  "") SERVERS="tsubame puma" ;;
  tsubame | puma) SERVERS=$PEER ;;
  *) echo "PEER is tsubame or puma (unset: both)" >&2; exit 2 ;;
esac
ulimit -n 65536 2>/dev/null || ulimit -n 8192 2>/dev/null || true

source benchmarks/lib.sh

command -v haproxy >/dev/null || { echo "haproxy is missing: run 'make deps'" >&2; exit 1; }
[ -x "$BENCH" ] || { echo "$BENCH is missing: run 'make build'" >&2; exit 1; }
if [[ " $SERVERS " == *" puma "* ]]; then
  command -v puma >/dev/null || { echo "puma is missing: run 'make deps'" >&2; exit 1; }
fi

SHUTDOWN_ARGS=()
if [ "$SHUTDOWN_DELAY" != 0 ] && ruby exe/tsubame --help 2>/dev/null | grep -q -- --shutdown-delay; then
  SHUTDOWN_ARGS=(--shutdown-delay "$SHUTDOWN_DELAY")
fi

# State of the current server's run; cleaned up by stop_all (and on exit).
RUN=                # OUT/roundN/SERVER
SERVER=
HAPROXY_PID=
BENCH_PID=
declare -A PIDS=()  # instance number -> the pid this shell started

alive() { # PID: running (a zombie is not)
  [ -n "$1" ] && [ -e "/proc/$1" ] && ! grep -q '^[0-9]* (.*) Z' "/proc/$1/stat" 2>/dev/null
}

# stop_pid PID SECONDS: TERM, then KILL after SECONDS; reaps it if it is ours.
stop_pid() {
  local pid=$1 seconds=$2
  alive "$pid" || { wait "$pid" 2>/dev/null || true; return 0; }
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 $((seconds * 20))); do alive "$pid" || break; sleep 0.05; done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

stop_all() {
  if [ -n "$BENCH_PID" ]; then kill -KILL "$BENCH_PID" 2>/dev/null || true; wait "$BENCH_PID" 2>/dev/null || true; fi
  BENCH_PID=
  local n pid
  for n in "${!PIDS[@]}"; do
    stop_pid "${PIDS[$n]}" 5
    pid=$(cat "$RUN/s$n.pid" 2>/dev/null || true)
    [ -n "$pid" ] && stop_pid "$pid" 5
  done
  PIDS=()
  [ -n "$HAPROXY_PID" ] && stop_pid "$HAPROXY_PID" 5
  HAPROXY_PID=
}
trap 'stop_all; kill $(jobs -p) 2>/dev/null || true' EXIT

port_of() { echo $((BASE_PORT + $1)); }
check_path() { if [ "$SERVER" = tsubame ]; then echo /ready; else echo /; fi; }
banners() { local c; c=$(grep -c "Use Ctrl-C" "$RUN/s$1.log" 2>/dev/null) || true; echo "${c:-0}"; }
instance_pid() { cat "$RUN/s$1.pid" 2>/dev/null || echo "${PIDS[$1]}"; }

# wait_banner N COUNT: until instance N has printed more than COUNT boot banners.
wait_banner() {
  for _ in $(seq 1 600); do
    [ "$(banners "$1")" -gt "$2" ] && return 0
    sleep 0.05
  done
  echo "instance $1 did not boot within 30 s; its log:" >&2
  tail -20 "$RUN/s$1.log" >&2
  exit 1
}

start_instance() { # N
  local n=$1 port; port=$(port_of "$1")
  local before; before=$(banners "$n")
  rm -f "$RUN/s$n.pid"
  if [ "$SERVER" = tsubame ]; then
    # shellcheck disable=SC2086 # TSUBAME_ARGS is a list of words
    ruby exe/tsubame -q -t "$THREADS:$THREADS" -b "tcp://127.0.0.1:$port" --readiness-check-path /ready \
      --pidfile "$RUN/s$n.pid" "${SHUTDOWN_ARGS[@]}" $TSUBAME_ARGS "$APP" >> "$RUN/s$n.log" 2>&1 &
  else
    puma -q -t "$THREADS:$THREADS" -b "tcp://127.0.0.1:$port" --pidfile "$RUN/s$n.pid" "$APP" \
      >> "$RUN/s$n.log" 2>&1 &
  fi
  PIDS[$n]=$!
  wait_banner "$n" "$before"
}

wait_up() { # N: until HAProxy has instance N UP, then SETTLE s
  ruby "$HELPER" wait-up "$RUN/haproxy.sock" "s$1" 60
  sleep "$SETTLE"
}

usr2_instance() { # N: hot restart, back in HAProxy's rotation
  local before; before=$(banners "$1")
  kill -USR2 "$(instance_pid "$1")"
  wait_banner "$1" "$before"
  wait_up "$1"
}

term_instance() { # N: drain and exit, start again, back in rotation
  local pid; pid=$(instance_pid "$1")
  kill -TERM "$pid"
  for _ in $(seq 1 $((DRAIN_WAIT * 20))); do alive "$pid" || break; sleep 0.05; done
  if alive "$pid"; then
    echo "instance $1 ($pid) still running $DRAIN_WAIT s after TERM; killed" >&2
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
  start_instance "$1"
  wait_up "$1"
}

stat_to() { ruby "$HELPER" stat "$RUN/haproxy.sock" > "$1"; }
log_size() { stat -c %s "$RUN/haproxy.log"; }

# phase_begin NAME DURATION: HAProxy counters, then the client in the background.
phase_begin() {
  stat_to "$RUN/$1.stat0.json"
  LOG_START=$(log_size)
  "$BENCH" -q --json -r "$RATE" -d "$2" -c "$CONNECTIONS" "http://127.0.0.1:$HAPROXY_PORT$LOAD_PATH" \
    > "$RUN/$1.bench.json" &
  BENCH_PID=$!
}

# phase_end NAME [interrupt]: Ctrl-C ends the client's run early (it
# stops sending, waits for the responses due and reports).
phase_end() {
  [ "${2:-}" = interrupt ] && kill -INT "$BENCH_PID"
  wait "$BENCH_PID"
  BENCH_PID=
  stat_to "$RUN/$1.stat1.json"
  local end; end=$(log_size)
  tail -c +$((LOG_START + 1)) "$RUN/haproxy.log" | head -c $((end - LOG_START)) > "$RUN/$1.haproxy.log"
}

run_server() { # ROUND SERVER
  SERVER=$2
  RUN="$OUT/round$1/$SERVER"
  mkdir -p "$RUN"
  local n ports=()
  for n in $(seq 1 "$INSTANCES"); do
    start_instance "$n"
    ports+=("$(port_of "$n")")
  done
  ruby "$HELPER" config "$HAPROXY_PORT" "$(check_path)" 500 "$RUN" "${ports[@]}" > "$RUN/haproxy.cfg"
  haproxy -db -f "$RUN/haproxy.cfg" > "$RUN/haproxy.log" 2>&1 &
  HAPROXY_PID=$!
  for _ in $(seq 1 100); do [ -S "$RUN/haproxy.sock" ] && break; sleep 0.05; done
  [ -S "$RUN/haproxy.sock" ] || { echo "haproxy did not start; its log:" >&2; cat "$RUN/haproxy.log" >&2; exit 1; }
  for n in $(seq 1 "$INSTANCES"); do ruby "$HELPER" wait-up "$RUN/haproxy.sock" "s$n" 30; done
  wait_for_url "http://127.0.0.1:$HAPROXY_PORT/"
  "$BENCH" -q -r "$RATE" -d 3s -c "$CONNECTIONS" "http://127.0.0.1:$HAPROXY_PORT$LOAD_PATH" > /dev/null # warm-up

  echo "round $1 $SERVER: steady ${STEADY}s" >&2
  phase_begin steady "${STEADY}s"
  phase_end steady

  echo "round $1 $SERVER: rolling USR2" >&2
  phase_begin usr2 600s
  sleep 0.5
  for n in $(seq 1 "$INSTANCES"); do usr2_instance "$n"; done
  phase_end usr2 interrupt

  echo "round $1 $SERVER: rolling TERM + start" >&2
  phase_begin term 600s
  sleep 0.5
  for n in $(seq 1 "$INSTANCES"); do term_instance "$n"; done
  phase_end term interrupt

  if [ "$OVERLOAD_S" = 0 ]; then stop_all; return 0; fi
  local p1; p1=$(port_of 1)
  echo "round $1 $SERVER: ${OVERLOAD_PCT}% of one instance for ${OVERLOAD_S}s, straight to it" >&2
  ruby "$HELPER" overload "http://127.0.0.1:$p1$LOAD_PATH" "$OVERLOAD_RATE" "$OVERLOAD_S" \
    "http://127.0.0.1:$p1$(check_path)" 1000 "$RUN/overload-direct.json"
  for n in $(seq 1 "$INSTANCES"); do ruby "$HELPER" wait-up "$RUN/haproxy.sock" "s$n" 60; done
  sleep "$SETTLE"
  echo "round $1 $SERVER: ${OVERLOAD_PCT}% of the fleet for ${OVERLOAD_S}s, through HAProxy" >&2
  stat_to "$RUN/overload-haproxy.stat0.json"
  ruby "$HELPER" overload "http://127.0.0.1:$HAPROXY_PORT$LOAD_PATH" "$FLEET_OVERLOAD_RATE" "$OVERLOAD_S" \
    "http://127.0.0.1:$p1$(check_path)" 2000 "$RUN/overload-haproxy.json"
  stat_to "$RUN/overload-haproxy.stat1.json"
  stop_all
}

echo "fleet: $INSTANCES instances x -t $THREADS:$THREADS behind $(haproxy -v | head -1 | cut -d' ' -f1-3)," \
     "load $RATE req/s ($((RATE * 100 / CAPACITY))%) of $CAPACITY on $LOAD_PATH ($CONNECTIONS client connections)," \
     "$(if [ "$OVERLOAD_S" = 0 ]; then echo "no overload phases"; else
          echo "overload $OVERLOAD_RATE req/s on one instance, $FLEET_OVERLOAD_RATE req/s on the fleet"; fi)"
echo "tsubame: $(ruby -Ilib -rtsubame/version -e 'print Tsubame::VERSION') ${SHUTDOWN_ARGS[*]:-(no --shutdown-delay in this build)} $TSUBAME_ARGS;" \
     "puma: $(puma --version 2>/dev/null | head -1 | cut -d' ' -f3)"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)   cores: $(nproc)   rounds: $ROUNDS   files: $OUT"
for round in $(seq 1 "$ROUNDS"); do
  for server in $SERVERS; do run_server "$round" "$server"; done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
ruby "$HELPER" report "$OUT"
echo
echo "files: $OUT"
if [[ " $SERVERS " == *" tsubame "* ]]; then
  echo
  ruby "$HELPER" check "$OUT" tsubame "$MAX_P99_RATIO"
fi
