#!/usr/bin/env bash
# Files: a 1 MiB file at -c20 and a 4 KiB file at -c50, served by Tsubame
# through Rack::Files (a to_path body, sent with sendfile) and through
# --public (no Ruby at all), next to Debian's nginx (1 worker, sendfile on)
# and Puma with Rack::Files. One process each, one after the other; the
# median of ROUNDS runs and each server's ratio to nginx.
#
#   benchmarks/files.sh                      # 3 rounds of 5 s
#   ROUNDS=5 DURATION=10 benchmarks/files.sh
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
THREADS=${THREADS:-5}
PORT=${PORT:-19400}
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT

for tool in wrk puma nginx; do
  command -v "$tool" >/dev/null || [ -x "/usr/sbin/$tool" ] || { echo "$tool is missing (nginx: apt-get install nginx)" >&2; exit 1; }
done
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
source benchmarks/lib.sh

# nginx workers run as www-data: the folder must be readable to them.
chmod 755 "$WORK"
mkdir -p "$WORK/public"
head -c 1048576 /dev/urandom > "$WORK/public/1m.bin"
head -c 4096 /dev/urandom > "$WORK/public/4k.bin"
cat > "$WORK/files.ru" <<RUBY
require "rack"
run Rack::Files.new("$WORK/public")
RUBY
cat > "$WORK/nginx.conf" <<CONF
worker_processes 1;
pid $WORK/nginx.pid;
error_log $WORK/nginx.err;
events { worker_connections 1024; }
http {
  access_log off;
  sendfile on;
  tcp_nopush on;
  keepalive_requests 100000;
  server { listen 127.0.0.1:$PORT; root $WORK/public; }
}
CONF

# run_wrk CONNECTIONS PATH -> req/s
run_wrk() {
  wrk -t1 -c"$1" -d"${DURATION}s" "http://127.0.0.1:$PORT$2" | awk '/Requests\/sec/ {printf "%.0f\n", $2}'
}

declare -A RPS
bench() { # NAME PREFIX
  wait_for_url "http://127.0.0.1:$PORT$2/4k.bin"
  wrk -t1 -c20 -d2s "http://127.0.0.1:$PORT$2/1m.bin" >/dev/null # warm-up
  for load in "20 1m" "50 4k"; do
    set -- "$1" "$2" $load
    runs=()
    for _ in $(seq 1 "$ROUNDS"); do runs+=("$(run_wrk "$3" "$2/$4.bin")"); done
    RPS["$1,$4"]=$(printf '%s\n' "${runs[@]}" | median)
    echo "  $1 $4 -c$3: ${runs[*]} req/s" >&2
  done
}

stop() { kill -TERM "$1"; wait "$1" 2>/dev/null || true; }

"$NGINX" -c "$WORK/nginx.conf" -g "daemon off;" &
bench nginx ""
stop $!

ruby exe/tsubame -q -t "$THREADS:$THREADS" -b "tcp://127.0.0.1:$PORT" "$WORK/files.ru" > "$WORK/t.log" 2>&1 &
bench tsubame-to_path ""
stop $!

ruby exe/tsubame -q -t "$THREADS:$THREADS" --public "$WORK/public" -b "tcp://127.0.0.1:$PORT" "$WORK/files.ru" > "$WORK/p.log" 2>&1 &
bench tsubame-public ""
stop $!

puma -q -t "$THREADS:$THREADS" -b "tcp://127.0.0.1:$PORT" "$WORK/files.ru" > "$WORK/puma.log" 2>&1 &
bench puma ""
stop $!

printf '%-18s %12s %8s %12s %8s\n' server "1MiB -c20" "x nginx" "4KiB -c50" "x nginx"
for name in nginx tsubame-to_path tsubame-public puma; do
  printf '%-18s %12s %8.2f %12s %8.2f\n' "$name" "${RPS[$name,1m]}" \
    "$(echo "${RPS[$name,1m]} / ${RPS[nginx,1m]}" | bc -l)" "${RPS[$name,4k]}" \
    "$(echo "${RPS[$name,4k]} / ${RPS[nginx,4k]}" | bc -l)"
done
