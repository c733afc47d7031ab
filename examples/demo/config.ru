# frozen_string_literal: true

# A plain Rack app for trying Tsubame by hand:
#   /                 hello
#   /slow?seconds=N   answers after N seconds (at most 10), to watch threads
#                     fill up and graceful stop wait for requests in flight
#   /stream           five chunks, a little apart, to watch streaming
require "rack/utils"

# Each chunk is produced only when the server asks for it, which is the point
# of an each-body: nothing is buffered on the Ruby side.
class DemoStream
  CHUNKS = 5
  PAUSE = 0.2

  def each
    CHUNKS.times do |index|
      sleep PAUSE unless index.zero?
      yield "chunk #{index + 1} of #{CHUNKS}\n"
    end
  end
end

# Kept small so the demo is readable; routing is a case on the path.
class DemoApp
  MAX_SLEEP = 10.0
  TEXT = { "content-type" => "text/plain" }.freeze

  def call(env)
    case env["PATH_INFO"]
    when "/", "" then [200, TEXT.dup, ["Hello from Tsubame\n"]]
    when "/slow" then slow(env)
    when "/stream" then [200, TEXT.dup, DemoStream.new]
    else [404, TEXT.dup, ["Not found\n"]]
    end
  end

  private

  def slow(env)
    requested = Rack::Utils.parse_query(env["QUERY_STRING"].to_s)["seconds"]
    seconds = Float(requested || 1, exception: false)
    return [400, TEXT.dup, ["seconds must be a number\n"]] unless seconds&.finite?

    # Capped so a stray request cannot hold a thread for long.
    seconds = seconds.clamp(0.0, MAX_SLEEP)
    sleep seconds
    [200, TEXT.dup, ["Slept #{seconds} seconds\n"]]
  end
end

run DemoApp.new
