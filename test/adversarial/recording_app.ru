# frozen_string_literal: true

# The corpus's application: it appends one JSON line per request it is
# called with to $ADV_LOG (what a request looked like once it reached Rack),
# so the runner can prove a refused request never got here and an accepted
# one arrived exactly as intended. Strings are written as Latin-1 code
# points, which keeps any byte JSON-safe and compares directly with the
# corpus's own escapes.
require "json"

log_path = ENV.fetch("ADV_LOG")
lock = Mutex.new
latin1 = ->(s) { s.nil? ? nil : s.b.force_encoding(Encoding::ISO_8859_1).encode(Encoding::UTF_8) }

run(lambda do |env|
  headers = env.select { |key, _| key.start_with?("HTTP_") && key != "HTTP_VERSION" }
  record = {
    "method" => env["REQUEST_METHOD"],
    "path" => env["PATH_INFO"],
    "query" => env["QUERY_STRING"],
    "uri" => env["REQUEST_URI"],
    "protocol" => env["SERVER_PROTOCOL"],
    "server_name" => env["SERVER_NAME"],
    "server_port" => env["SERVER_PORT"],
    "content_length" => env["CONTENT_LENGTH"],
    "body" => env["rack.input"].read,
    "headers" => headers.sort.to_h
  }
  line = JSON.generate(record.transform_values { |v| v.is_a?(Hash) ? v.transform_values(&latin1) : latin1.call(v) })
  lock.synchronize { File.open(log_path, "a") { |f| f.write("#{line}\n") } }
  body = "#{env["REQUEST_METHOD"]} #{env["PATH_INFO"]}"
  [200, { "content-type" => "text/plain", "content-length" => body.bytesize.to_s }, [body]]
end)
