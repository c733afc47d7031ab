# Helpers the benchmark scripts share; sourced, not run.

# wait_for_url URL [TRIES]: polls every 0.1 s until URL answers with a 2xx
# (a self-signed certificate is accepted); after TRIES polls (default 150)
# says what did not answer and returns 1, which ends a `set -e` script.
wait_for_url() {
  local url=$1 tries=${2:-150}
  for _ in $(seq 1 "$tries"); do
    curl -kfs "$url" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "nothing answered at $url after $tries tries" >&2
  return 1
}

# cpu_seconds PID: the CPU seconds (user + system) the process has used so
# far, from /proc.
cpu_seconds() { awk -v hz="$(getconf CLK_TCK)" '{printf "%.3f", ($14 + $15) / hz}' "/proc/$1/stat"; }

# median: the median of the numbers on standard input, one a line.
median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

# stop_server: TERMs the server whose pid is in SERVER_PID (if any) and
# waits for it; scripts that run one server at a time call it between
# servers and in their EXIT trap.
stop_server() {
  if [ -n "$SERVER_PID" ]; then
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=
  fi
}
