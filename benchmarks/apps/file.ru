# frozen_string_literal: true

# Benchmark app: a `to_path` body: the server sends a file, with 25 response headers.
# Body size: request header X-Body-KiB or env BODY_KIB (default 1 KiB);
# delay: request header X-Delay-Ms. See bench_app.rb.
require_relative "bench_app"

run BenchApp.file
