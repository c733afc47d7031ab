# frozen_string_literal: true

# Benchmark app: one String holding the whole body, with 25 response headers.
# Body size: request header X-Body-KiB or env BODY_KIB (default 1 KiB);
# delay: request header X-Delay-Ms. See bench_app.rb.
require_relative "bench_app"

run BenchApp.string
