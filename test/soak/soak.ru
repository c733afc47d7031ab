# frozen_string_literal: true

# The soak run's app: the benchmark bodies (benchmarks/apps/bench_app.rb)
# by path, plus an upload endpoint that reads the whole body.
require_relative "../../benchmarks/apps/bench_app"

SHAPES = {
  "/string" => BenchApp.string,
  "/array" => BenchApp.array,
  "/chunked" => BenchApp.chunked,
  "/file" => BenchApp.file
}.freeze

UPLOAD = lambda do |env|
  input = env["rack.input"]
  size = 0
  while (chunk = input.read(64 * 1024))
    size += chunk.bytesize
  end
  [200, { "content-type" => "text/plain" }, [size.to_s]]
end

run(lambda do |env|
  path = env["PATH_INFO"]
  path == "/upload" ? UPLOAD.call(env) : SHAPES.fetch(path, SHAPES["/string"]).call(env)
end)
