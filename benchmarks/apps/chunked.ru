# frozen_string_literal: true

# Benchmark app: an `each` body without content-length, sent chunked, with 25 response headers.
# Body size: request header X-Body-KiB or env BODY_KIB (default 1 KiB);
# delay: request header X-Delay-Ms. See bench_app.rb.
require_relative "bench_app"

run BenchApp.chunked
