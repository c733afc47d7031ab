#!/usr/bin/env bash
# TLS connections per second with `openssl s_time` (the client's default:
# TLS 1.3) against Tsubame in cluster mode and Debian's nginx, on the same
# certificate (an RSA 2048 and an EC P-256 one, made here), WORKERS
# processes each (`-w WORKERS` / `worker_processes WORKERS`). Modes:
#   new      `s_time -new`: a full TLS 1.3 handshake per connection, no
#            request;
#   reuse    `s_time -reuse -www /`: every connection resumes the session
#            of the first with its TLS 1.3 ticket and sends one GET (without
#            a request s_time reads nothing after the handshake, and never
#            saw Tsubame's tickets: 0% resumed);
#   reuse12  `s_time -reuse -tls1_2`: TLS 1.2 resumption, no request.
# For the reuse modes the share of connections that resumed is printed
# (s_time marks each with `r` or `*`). The runs are
# interleaved (nginx, each build, nginx, each build...) so a busy spell on
# a shared machine hits all of them, and the median of ROUNDS is printed
# with every round's figure and the ratio to nginx.
#
#   benchmarks/tls_handshakes.sh                 # ROUNDS=5 SECONDS_EACH=10 WORKERS=4
#   ROUNDS=3 SECONDS_EACH=5 MODES=new benchmarks/tls_handshakes.sh
#   BUILDS=". /tmp/base" benchmarks/tls_handshakes.sh
#       # several builds side by side, each a directory holding copies of
#       # a checkout's exe/ and lib/ (cp -r exe lib DIR after `make build`)
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-5}
SECONDS_EACH=${SECONDS_EACH:-10}
WORKERS=${WORKERS:-4}
MODES=${MODES:-new reuse reuse12}
BUILDS=${BUILDS:-.}
PORT=${PORT:-19543}
WORK=$(mktemp -d)
PIDS=()
stop_all() {
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  PIDS=()
}
trap 'stop_all; rm -rf "$WORK"' EXIT

for tool in nginx openssl; do
  command -v "$tool" >/dev/null || { echo "$tool is missing: run 'make deps'" >&2; exit 1; }
done
read -r -a BUILD_DIRS <<<"$BUILDS"
read -r -a MODE_LIST <<<"$MODES"
for build in "${BUILD_DIRS[@]}"; do
  [ -x "$build/exe/tsubame" ] || { echo "$build/exe/tsubame not found" >&2; exit 1; }
done
for mode in "${MODE_LIST[@]}"; do
  case $mode in new | reuse | reuse12) ;; *) echo "unknown mode $mode (new, reuse, reuse12)" >&2; exit 1 ;; esac
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

# s_time PORT MODE -> "connections-per-real-second resumed-percent"
# (resumed is 0 in mode new). s_time prints an `r` for every connection
# that resumed and a `*` for one that did not.
s_time() {
  local flags
  case $2 in
    new) flags=(-new) ;;
    reuse) flags=(-reuse -www /) ;;
    reuse12) flags=(-reuse -tls1_2) ;;
  esac
  openssl s_time -connect "127.0.0.1:$1" "${flags[@]}" -time "$SECONDS_EACH" 2>/dev/null |
    ruby -e 'text = STDIN.read
             n, secs = text.match(/(\d+) connections in ([\d.]+) real seconds/)&.captures
             abort "s_time printed no result:\n#{text}" unless n
             marks = text[/starting\s*([r*]*)/, 1].to_s
             resumed = marks.empty? ? 0 : 100.0 * marks.count("r") / marks.size
             printf("%.0f %.1f\n", n.to_f / secs.to_f, resumed)'
}

median() { ruby -e 'v = ARGV.map(&:to_f).sort; m = v.size / 2; puts(v.size.odd? ? v[m].round : ((v[m - 1] + v[m]) / 2).round)' "$@"; }

echo 'run ->(_) { [200, { "content-type" => "text/plain" }, ["ok"]] }' > "$WORK/app.ru"

NAMES=(nginx)
for build in "${BUILD_DIRS[@]}"; do NAMES+=("tsubame:$build"); done

echo "openssl s_time, ${SECONDS_EACH}s each, $ROUNDS rounds, $WORKERS workers, $(nproc) cores," \
  "load $(cut -d' ' -f1-3 /proc/loadavg) at $(date -u +%H:%M) UTC"
declare -A RATE RESUMED
for kind in rsa ecdsa; do
  cat > "$WORK/nginx.conf" <<EOF
worker_processes $WORKERS;
pid $WORK/nginx.pid;
error_log $WORK/nginx.err;
events { worker_connections 1024; }
http {
  access_log off;
  server {
    listen 127.0.0.1:$PORT ssl;
    ssl_certificate $WORK/$kind.pem;
    ssl_certificate_key $WORK/$kind.key;
    location / { return 200 "ok"; }
  }
}
EOF
  nginx -c "$WORK/nginx.conf" -p "$WORK" -g 'daemon off;' &
  PIDS+=($!)
  declare -A PORT_OF=([nginx]=$PORT)
  i=1
  for build in "${BUILD_DIRS[@]}"; do
    port=$((PORT + i))
    ruby "$build/exe/tsubame" -q -w "$WORKERS" -t 5:5 -e production \
      -b "ssl://127.0.0.1:$port?cert=$WORK/$kind.pem&key=$WORK/$kind.key" "$WORK/app.ru" \
      > "$WORK/tsubame-$i.log" 2>&1 &
    PIDS+=($!)
    PORT_OF["tsubame:$build"]=$port
    i=$((i + 1))
  done
  for name in "${NAMES[@]}"; do wait_port "${PORT_OF[$name]}"; done
  sleep 2 # every worker booted
  for r in $(seq 1 "$ROUNDS"); do
    for mode in "${MODE_LIST[@]}"; do
      for name in "${NAMES[@]}"; do
        read -r rate resumed <<<"$(s_time "${PORT_OF[$name]}" "$mode")"
        RATE["$kind,$mode,$name,$r"]=$rate
        RESUMED["$kind,$mode,$name,$r"]=$resumed
      done
    done
  done
  stop_all
  unset PORT_OF
done

printf "%-6s %-7s %-22s %9s %9s %9s  %s\n" cert mode server "conn/s" "x nginx" "resumed" "rounds"
for kind in rsa ecdsa; do
  for mode in "${MODE_LIST[@]}"; do
    nginx_median=
    for name in "${NAMES[@]}"; do
      rates=()
      resumed=()
      for r in $(seq 1 "$ROUNDS"); do
        rates+=("${RATE["$kind,$mode,$name,$r"]}")
        resumed+=("${RESUMED["$kind,$mode,$name,$r"]}")
      done
      m=$(median "${rates[@]}")
      [ -n "$nginx_median" ] || nginx_median=$m
      ratio=$(awk -v a="$m" -v b="$nginx_median" 'BEGIN { printf "%.2f", (b > 0) ? a / b : 0 }')
      if [ "$mode" != new ]; then res="$(ruby -e 'puts ARGV.map(&:to_f).min' "${resumed[@]}")%"; else res=-; fi
      printf "%-6s %-7s %-22s %9s %9s %9s  %s\n" "$kind" "$mode" "${name#tsubame:}" "$m" "$ratio" "$res" "${rates[*]}"
    done
  done
done
echo "(resumed: the lowest share of connections that resumed in any round; load $(cut -d' ' -f1-3 /proc/loadavg) at the end)"
