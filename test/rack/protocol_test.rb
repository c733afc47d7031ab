# frozen_string_literal: true

require "test_helper"
require "socket"

# rack.protocol (Rack 3.1): the env lists what the client's Upgrade header
# offers; a `rack.protocol` response header switches the connection (101)
# and the streaming body gets the raw socket both ways.
class RackProtocolTest < Minitest::Test
  include Tsubame::TestHelpers

  APP = <<~'RUBY'
    run lambda { |env|
      offered = env["rack.protocol"]
      if env["PATH_INFO"] == "/echo" && offered&.include?("line-echo")
        # Only the SPEC's stream methods (Rack 3's Lint allows no more):
        # six-byte lines, echoed in capitals.
        body = lambda do |io|
          while (line = io.read(6))
            io.write(line.upcase)
          end
          io.close
        end
        [200, { "rack.protocol" => "line-echo", "x-echo" => "ready" }, body]
      elsif env["PATH_INFO"] == "/wrong"
        [200, { "rack.protocol" => "not-offered" }, ->(io) { io.close }]
      else
        [200, { "content-type" => "text/plain" }, ["offered #{offered.inspect}"]]
      end
    }
  RUBY

  def test_the_connection_switches_and_the_body_gets_both_directions
    # Rack 2's SPEC has no streaming (callable) body.
    with_server(APP, lint: !RACK2) do |server|
      assert_equal "offered nil", server.get("/").body
      assert_equal 'offered ["line-echo", "h2c"]', server.get("/", "Upgrade" => "line-echo, h2c").body
      sock = server.socket
      sock.write("GET /echo HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: line-echo\r\n\r\n")
      head = +""
      head << sock.readpartial(1024) until head.include?("\r\n\r\n")
      assert_match(%r{\AHTTP/1.1 101 Switching Protocols\r\n}, head)
      assert_match(/^upgrade: line-echo\r$/, head)
      assert_match(/^x-echo: ready\r$/, head)
      refute_match(/rack\.protocol/, head)
      sock.write("hello\n")
      assert_equal "HELLO\n", sock.readpartial(100)
      sock.write("again\n")
      assert_equal "AGAIN\n", sock.readpartial(100)
      sock.close_write
      assert_nil sock.read(1), "the app closed its end"
      sock.close

      response = server.get("/wrong", "Upgrade" => "line-echo")
      assert_equal "500", response.code, "a protocol the client did not offer is the app's error"
      # Rack 3's Lint finds it first; without Lint the server does.
      assert_match(/is not one the client offered|rack\.protocol/, server.stderr)
    end
  end
end
