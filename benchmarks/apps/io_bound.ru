# frozen_string_literal: true

# I/O-bound endpoints for benchmarks/io_bound.sh: /sleep waits SLEEP
# seconds (default 1); /upstream fetches UPSTREAM_URL over Net::HTTP; any
# other path (/instant) answers at once.
require "net/http"

sleep_for = Float(ENV.fetch("SLEEP", "1"))
upstream = URI(ENV.fetch("UPSTREAM_URL", "http://127.0.0.1:19601/"))

run lambda { |env|
  case env["PATH_INFO"]
  when "/sleep"
    sleep sleep_for
    [200, { "content-type" => "text/plain" }, ["slept\n"]]
  when "/upstream"
    [200, { "content-type" => "text/plain" }, [Net::HTTP.get(upstream)]]
  else
    [200, { "content-type" => "text/plain" }, ["ok\n"]]
  end
}
