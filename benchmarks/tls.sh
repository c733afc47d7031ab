#!/usr/bin/env bash
# TLS, Tsubame ssl:// vs Puma ssl:// (Debian's puma 5.6), one process each,
# THREADS threads, two apps (hello world, and a 10 KiB body with 25
# headers), one server at a time:
#   - wrk over HTTP/1.1 (keep-alive, so the handshake is paid once per
#     connection),
#   - h2load -n REQUESTS over HTTP/2: Tsubame with -m STREAMS streams per
#     connection;
#     Puma has no HTTP/2, so it gets the same h2load run with --h1 (its best
#     over the same client), and the ratio says what a client gains.
# Prints the median of ROUNDS runs and the Tsubame/Puma ratio per line.
# The certificate is made here with openssl (EC P-256).
#
#   benchmarks/tls.sh                          # 3 rounds of 10 s
#   ROUNDS=1 DURATION=2 REQUESTS=5000 benchmarks/tls.sh   # a quick check
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
THREADS=${THREADS:-5}
CONNECTIONS=${CONNECTIONS:-50}
STREAMS=${STREAMS:-10}
REQUESTS=${REQUESTS:-60000}
PORT_T=${PORT_T:-19443}
PORT_P=${PORT_P:-19444}
WORK=$(mktemp -d)
source benchmarks/lib.sh
SERVER_PID=
trap 'stop_server; rm -rf "$WORK"' EXIT

for tool in wrk h2load puma openssl; do
  command -v "$tool" >/dev/null || { echo "$tool is missing: run 'make deps'" >&2; exit 1; }
done

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=localhost \
  -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" -keyout "$WORK/key.pem" -out "$WORK/cert.pem" 2>/dev/null
TLS_QUERY="cert=$WORK/cert.pem&key=$WORK/key.pem"

declare -A APPS=([hello]="benchmarks/apps/hello.ru" [10KiB]="benchmarks/apps/string.ru")
APP_ORDER=(hello 10KiB)


# A TLS server that does not start says why in its log.
wait_for_tls() { # PORT
  wait_for_url "https://127.0.0.1:$1/" 200 || { cat "$WORK/server.log" >&2; exit 1; }
}

# run_wrk PORT -> "rps errors"
run_wrk() {
  wrk -t2 -c"$CONNECTIONS" -d"${DURATION}s" "https://127.0.0.1:$1/" > "$WORK/wrk.out"
  ruby -e '
    text = File.read(ARGV[0])
    errors = text[/Non-2xx.*?(\d+)/, 1].to_i + text.scan(/(?:connect|read|write|timeout) (\d+)/).flatten.sum(&:to_i)
    printf("%.0f %d\n", text[/Requests\/sec:\s+([\d.]+)/, 1].to_f, errors)
  ' "$WORK/wrk.out"
}

# run_h2load PORT FLAGS... -> "rps errors"
run_h2load() {
  local port=$1
  shift
  # A fixed request count (-n), not a duration: h2load -D --h1 against
  # Puma never finishes (it waits on a connection Puma leaves open), while
  # -n does. timeout is the last resort.
  timeout 300 h2load -n "$REQUESTS" -c"$CONNECTIONS" -t2 "$@" "https://127.0.0.1:$port/" \
    > "$WORK/h2load.out" 2>&1 || true
  ruby -e '
    text = File.read(ARGV[0])
    rps = text[/finished in [\d.]+\w*, ([\d.]+) req\/s/, 1]
    unless rps
      warn "h2load did not finish:\n#{text.lines.last(5).join}"
      puts "0 -1"
      exit
    end
    failed = text[/requests: .*?(\d+) failed, (\d+) errored/, 1].to_i + text[/(\d+) errored/, 1].to_i
    printf("%.0f %d\n", rps.to_f, failed)
  ' "$WORK/h2load.out"
}

declare -A RESULTS
bench() { # NAME APP PORT H2FLAGS
  local name=$1 app=$2 port=$3 h2flags=$4
  for r in $(seq 1 "$ROUNDS"); do
    RESULTS["$name,$app,h1,$r"]=$(run_wrk "$port")
    # shellcheck disable=SC2086
    RESULTS["$name,$app,h2,$r"]=$(run_h2load "$port" $h2flags)
    echo "  $name $app round $r: h1 ${RESULTS["$name,$app,h1,$r"]} / h2 ${RESULTS["$name,$app,h2,$r"]} (req/s errors)" >&2
  done
}

for app in "${APP_ORDER[@]}"; do
  rackup=${APPS[$app]}
  echo "Tsubame $app: exe/tsubame -t $THREADS:$THREADS -b ssl://..." >&2
  BODY_KIB=10 ruby exe/tsubame -q -t "$THREADS:$THREADS" -b "ssl://127.0.0.1:$PORT_T?$TLS_QUERY" "$rackup" \
    > "$WORK/server.log" 2>&1 &
  SERVER_PID=$!
  wait_for_tls "$PORT_T"
  wrk -t2 -c"$CONNECTIONS" -d2s "https://127.0.0.1:$PORT_T/" >/dev/null # warm-up
  bench tsubame "$app" "$PORT_T" "-m $STREAMS"
  stop_server

  echo "Puma $app: puma -t $THREADS:$THREADS -b ssl://..." >&2
  BODY_KIB=10 puma -q -t "$THREADS:$THREADS" -b "ssl://127.0.0.1:$PORT_P?$TLS_QUERY&verify_mode=none" "$rackup" \
    > "$WORK/server.log" 2>&1 &
  SERVER_PID=$!
  wait_for_tls "$PORT_P"
  wrk -t2 -c"$CONNECTIONS" -d2s "https://127.0.0.1:$PORT_P/" >/dev/null
  bench puma "$app" "$PORT_P" "--h1"
  stop_server
done

col() { # NAME APP PROTO FIELD
  for r in $(seq 1 "$ROUNDS"); do echo "${RESULTS["$1,$2,$3,$r"]}" | cut -d' ' -f"$4"; done | median
}

echo
echo "TLS, -c$CONNECTIONS, wrk ${DURATION}s, h2load -n $REQUESTS, threads $THREADS, median of $ROUNDS rounds ($(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg))"
printf "%-6s %-28s %12s %12s %8s %s\n" app client "Tsubame r/s" "Puma r/s" ratio "errors (T/P)"
for app in "${APP_ORDER[@]}"; do
  for proto in h1 h2; do
    t=$(col tsubame "$app" "$proto" 1)
    p=$(col puma "$app" "$proto" 1)
    te=$(col tsubame "$app" "$proto" 2)
    pe=$(col puma "$app" "$proto" 2)
    if [ "$proto" = h1 ]; then client="wrk, HTTP/1.1 both"; else client="h2load, h2 (-m $STREAMS) vs Puma h1"; fi
    ratio=$(awk -v t="$t" -v p="$p" 'BEGIN { if (p > 0) printf "%.2fx", t / p; else print "n/a" }')
    printf "%-6s %-28s %12s %12s %8s %s\n" "$app" "$client" "$t" "$p" "$ratio" "$te/$pe"
  done
done
