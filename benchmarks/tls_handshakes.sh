#!/usr/bin/env bash
# New-connection TLS throughput: `openssl s_time -new` (a full handshake per
# connection, no resumption, the client's default: TLS 1.3) against
# Tsubame in cluster mode and Debian's nginx, on the same certificate (an
# RSA 2048 and an EC P-256 one, made here), WORKERS processes each
# (`-w WORKERS` / `worker_processes WORKERS`). The runs are interleaved
# (nginx, Tsubame, nginx, Tsubame...) so a busy spell on a shared machine
# hits both, and the median of ROUNDS is printed with every round's figure.
#
#   benchmarks/tls_handshakes.sh                 # ROUNDS=5 SECONDS_EACH=10 WORKERS=4
#   ROUNDS=3 SECONDS_EACH=5 benchmarks/tls_handshakes.sh
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-5}
SECONDS_EACH=${SECONDS_EACH:-10}
WORKERS=${WORKERS:-4}
PORT_T=${PORT_T:-19543}
PORT_N=${PORT_N:-19544}
WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$WORK"
}
trap cleanup EXIT

for tool in nginx openssl; do
  command -v "$tool" >/dev/null || { echo "$tool is missing: run 'make deps'" >&2; exit 1; }
done

openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost \
  -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" -keyout "$WORK/rsa.key" -out "$WORK/rsa.pem" 2>/dev/null
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=localhost \
  -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" -keyout "$WORK/ecdsa.key" -out "$WORK/ecdsa.pem" 2>/dev/null

wait_port() { # PORT
  for _ in $(seq 1 200); do
    openssl s_client -connect "127.0.0.1:$1" </dev/null >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "nothing answers TLS on port $1" >&2
  exit 1
}

# s_time PORT -> connections per real second
s_time() {
  openssl s_time -connect "127.0.0.1:$1" -new -time "$SECONDS_EACH" 2>/dev/null |
    ruby -e 'text = STDIN.read
             n, secs = text.match(/(\d+) connections in ([\d.]+) real seconds/)&.captures
             abort "s_time printed no result:\n#{text}" unless n
             printf("%.0f\n", n.to_f / secs.to_f)'
}

median() { ruby -e 'v = ARGV.map(&:to_f).sort; m = v.size / 2; puts(v.size.odd? ? v[m].round : ((v[m - 1] + v[m]) / 2).round)' "$@"; }

echo 'run ->(_) { [200, { "content-type" => "text/plain" }, ["ok"]] }' > "$WORK/app.ru"

printf "%-6s | %-22s | %-22s | %s\n" cert "Tsubame conn/s (median)" "nginx conn/s (median)" "rounds (Tsubame / nginx)"
for kind in rsa ecdsa; do
  cat > "$WORK/nginx.conf" <<EOF
worker_processes $WORKERS;
pid $WORK/nginx.pid;
error_log $WORK/nginx.err;
events { worker_connections 1024; }
http {
  access_log off;
  server {
    listen 127.0.0.1:$PORT_N ssl;
    ssl_certificate $WORK/$kind.pem;
    ssl_certificate_key $WORK/$kind.key;
    location / { return 200 "ok"; }
  }
}
EOF
  nginx -c "$WORK/nginx.conf" -p "$WORK" -g 'daemon off;' &
  PIDS+=($!)
  ruby -Ilib exe/tsubame -q -w "$WORKERS" -t 5:5 -e production \
    -b "ssl://127.0.0.1:$PORT_T?cert=$WORK/$kind.pem&key=$WORK/$kind.key" "$WORK/app.ru" \
    > "$WORK/tsubame.log" 2>&1 &
  PIDS+=($!)
  wait_port "$PORT_N"
  wait_port "$PORT_T"
  sleep 2 # every worker booted
  t=()
  n=()
  for _ in $(seq 1 "$ROUNDS"); do
    n+=("$(s_time "$PORT_N")")
    t+=("$(s_time "$PORT_T")")
  done
  printf "%-6s | %-22s | %-22s | %s / %s\n" "$kind" "$(median "${t[@]}")" "$(median "${n[@]}")" "${t[*]}" "${n[*]}"
  for pid in "${PIDS[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  PIDS=()
done
