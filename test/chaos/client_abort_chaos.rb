# frozen_string_literal: true

require_relative "chaos_support"

# Clients that vanish half way through sending a request or reading a
# response, while other clients keep the workers busy: nobody else
# notices, the worker threads are freed, and each vanished client is
# counted once in client_disconnects.
class ClientAbortChaos < Minitest::Test
  include Tsubame::ChaosHelpers

  BIG_APP = <<~RUBY
    PIECE = ("x" * 65_535 + "\\n").freeze
    WHOLE = (PIECE * 512).freeze # 32 MiB: more than the socket buffers hold

    class Pieces
      def each
        512.times { yield PIECE }
      end
    end

    run lambda { |env|
      case env["PATH_INFO"]
      when "/big-string" then [200, { "content-type" => "text/plain" }, [WHOLE]]
      when "/big-stream" then [200, { "content-type" => "text/plain" }, Pieces.new]
      when "/upload" then [200, { "content-type" => "text/plain" }, [env["rack.input"].read.bytesize.to_s]]
      else [200, { "content-type" => "text/plain" }, ["ok"]]
      end
    }
  RUBY

  ROUNDS = 10

  def test_clients_vanishing_mid_request_and_mid_response
    with_cluster(BIG_APP, workers: 2, args: %w[-t 3:3]) do |s|
      load = Tsubame::LoadLoop.new(s.port, clients: 3)
      vanished = 0
      ROUNDS.times do
        # Half a head, then FIN.
        vanish(s, "GET /partial HTTP/1.1\r\nHost: chaos\r\nX-Half: ")
        # A whole head, part of a declared body.
        vanish(s, "POST /upload HTTP/1.1\r\nHost: chaos\r\nContent-Length: 100000\r\n\r\n#{"a" * 5000}")
        # A chunked body that stops between chunks.
        vanish(s, "POST /upload HTTP/1.1\r\nHost: chaos\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
        # Responses too big for the socket buffers, abandoned after 1 KiB.
        %w[/big-string /big-stream].each { |path| read_a_little_and_reset(s, path) }
        vanished += 5
      end
      # The workers' threads are all free again: as many concurrent
      # requests as threads succeed at once.
      parallel = Array.new(6) { Thread.new { Net::HTTP.get_response(URI("http://127.0.0.1:#{s.port}/")).code } }
      assert_equal ["200"] * 6, parallel.map(&:value)
      load.stop

      assert_empty load.failures.map(&:detail), "the other clients were not disturbed"
      assert_operator load.ok.size, :>, 30
      assert_total_eventually(vanished, "client_disconnects over the workers") do
        engine_total(s, "client_disconnects", workers: 2)
      end
      assert_total_eventually(0, "app_errors") { status_total(s, "app_errors", workers: 2) }
      assert_equal ROUNDS, s.stderr.scan(%r{client disconnected during GET /big-stream}).size,
                   "a streaming body the client abandoned is logged"
      assert_equal 0, s.stats["worker_deaths"]
    end
  end

  private

  def vanish(server, bytes)
    socket = raw_socket(server)
    socket.write(bytes)
    sleep 0.02
    socket.close
  end

  def read_a_little_and_reset(server, path)
    socket = raw_socket(server)
    socket.write("GET #{path} HTTP/1.1\r\nHost: chaos\r\n\r\n")
    got = +""
    got << socket.readpartial(1024) while got.bytesize < 1024
    assert_match(%r{\AHTTP/1\.1 200}, got)
    reset(socket)
  end
end
