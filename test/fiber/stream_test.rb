# frozen_string_literal: true

require "test_helper"
require "fiber/support"

# A streamed body ahead of a slow client: on a thread the write waits for
# the client; on a fiber it must park only that fiber, not the loop.
class FiberStreamTest < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::FiberSupport

  APP = <<~'RUBY'
    class Pieces
      def each
        200.times { |i| yield(i.to_s.rjust(3, "0") * 21_845 + "\n") }
      end
    end
    run lambda { |env|
      case env["PATH_INFO"]
      when "/big" then [200, { "content-type" => "text/plain" }, Pieces.new]
      when "/calls" then [200, {}, [Fiber.scheduler.calls.fetch(:stream_room, 0).to_s]]
      else [200, {}, ["fast"]]
      end
    }
  RUBY

  PIECE = 21_845 * 3 + 1

  def test_a_stream_to_a_slow_client_parks_its_fiber_not_the_loop
    with_server(APP, args: %w[--fibers]) do |server|
      slow = server.socket
      slow.write("GET /big HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
      sleep 1.0 # the client reads nothing: the engine's channel fills up
      started = now
      assert_equal "fast", server.get("/fast").body
      assert_operator now - started, :<, 2.0, "the loop waited for the slow client (who never reads until the end)"
      assert_operator Integer(server.get("/calls").body), :>=, 1, "the writer never had to wait"
      reply = +""
      Timeout.timeout(30) { loop { reply << slow.readpartial(1 << 20) } }
    rescue EOFError
      body = dechunk(reply.split("\r\n\r\n", 2).last)
      assert_equal 200 * PIECE, body.bytesize
      pieces = body.split("\n")
      assert_equal 200, pieces.size
      pieces.each_with_index { |piece, i| assert_equal i.to_s.rjust(3, "0") * 21_845, piece }
    ensure
      slow&.close
    end
  end

  def dechunk(data)
    out = +""
    until data.empty?
      size_line, rest = data.split("\r\n", 2)
      size = Integer(size_line, 16)
      break if size.zero?

      out << rest.byteslice(0, size)
      data = rest.byteslice(size + 2..)
    end
    out
  end
end
