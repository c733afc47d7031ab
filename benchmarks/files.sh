#!/usr/bin/env bash
# Files: a 1 MiB file at -c20 and a 4 KiB file at -c50, served by Tsubame
# through Rack::Files (a to_path body, sent with sendfile) and through
# --public (no Ruby at all), next to Debian's nginx (1 worker, sendfile on)
# and Puma with Rack::Files. All four run at once and each round visits
# them in turn; the median of ROUNDS rounds and each server's ratio to nginx.
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

# run_wrk PORT CONNECTIONS PATH -> req/s
run_wrk() {
  wrk -t1 -c"$2" -d"${DURATION}s" "http://127.0.0.1:$1$3" | awk '/Requests\/sec/ {printf "%.0f\n", $2}'
}

SERVERS=(nginx tsubame-to_path tsubame-public puma)
declare -A SERVER_PORT=([nginx]=$PORT [tsubame-to_path]=$((PORT + 1)) [tsubame-public]=$((PORT + 2)) [puma]=$((PORT + 3)))
sed -i "s/listen 127.0.0.1:$PORT;/listen 127.0.0.1:${SERVER_PORT[nginx]};/" "$WORK/nginx.conf"

# All four servers up at once, so every round measures each of them within
# a few seconds of the others: a neighbour's burst lands on all alike.
"$NGINX" -c "$WORK/nginx.conf" -g "daemon off;" &
ruby exe/tsubame -q -t "$THREADS:$THREADS" -b "tcp://127.0.0.1:${SERVER_PORT[tsubame-to_path]}" "$WORK/files.ru" > "$WORK/t.log" 2>&1 &
ruby exe/tsubame -q -t "$THREADS:$THREADS" --public "$WORK/public" \
  -b "tcp://127.0.0.1:${SERVER_PORT[tsubame-public]}" "$WORK/files.ru" > "$WORK/p.log" 2>&1 &
puma -q -t "$THREADS:$THREADS" -b "tcp://127.0.0.1:${SERVER_PORT[puma]}" "$WORK/files.ru" > "$WORK/puma.log" 2>&1 &
for name in "${SERVERS[@]}"; do
  wait_for_url "http://127.0.0.1:${SERVER_PORT[$name]}/4k.bin"
  wrk -t1 -c20 -d2s "http://127.0.0.1:${SERVER_PORT[$name]}/1m.bin" >/dev/null # warm-up
done

# Each round visits the servers in a rotated order (round 1 starts with
# nginx, round 2 with tsubame-to_path, ...), so none always goes first.
declare -A RUNS
for r in $(seq 1 "$ROUNDS"); do
  for i in "${!SERVERS[@]}"; do
    name=${SERVERS[$(((i + r - 1) % ${#SERVERS[@]}))]}
    RUNS["$name,1m"]+="$(run_wrk "${SERVER_PORT[$name]}" 20 /1m.bin) "
    RUNS["$name,4k"]+="$(run_wrk "${SERVER_PORT[$name]}" 50 /4k.bin) "
  done
  echo "  round $r done" >&2
done

declare -A RPS
for name in "${SERVERS[@]}"; do
  for size in 1m 4k; do
    echo "  $name $size: ${RUNS[$name,$size]}req/s" >&2
    RPS["$name,$size"]=$(tr ' ' '\n' <<<"${RUNS[$name,$size]}" | grep . | median)
  done
done

echo "files, threads $THREADS, wrk -t1 -d${DURATION}s, median of $ROUNDS interleaved rounds"
echo "$(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), commit $(git rev-parse --short HEAD)"
printf '%-18s %12s %8s %12s %8s\n' server "1MiB -c20" "x nginx" "4KiB -c50" "x nginx"
for name in "${SERVERS[@]}"; do
  printf '%-18s %12s %8.2f %12s %8.2f\n' "$name" "${RPS[$name,1m]}" \
    "$(echo "${RPS[$name,1m]} / ${RPS[nginx,1m]}" | bc -l)" "${RPS[$name,4k]}" \
    "$(echo "${RPS[$name,4k]} / ${RPS[nginx,4k]}" | bc -l)"
done
