-- wrk script: every request POSTs the same 1 MiB body (benchmarks/peers.sh SHAPE=upload).
wrk.method = "POST"
wrk.body = string.rep("x", 1024 * 1024)
wrk.headers["Content-Type"] = "application/octet-stream"
