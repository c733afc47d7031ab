# frozen_string_literal: true

# Benchmark app: reads the whole request body in 64 KiB reads, as an app
# that stores an upload does, and answers with the byte count.
CHUNK = 64 * 1024

run lambda { |env|
  input = env["rack.input"]
  buffer = String.new(capacity: CHUNK)
  total = 0
  total += buffer.bytesize while input.read(CHUNK, buffer)
  [200, { "content-type" => "text/plain" }, [total.to_s]]
}
