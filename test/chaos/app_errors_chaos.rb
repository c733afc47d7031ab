# frozen_string_literal: true

require_relative "chaos_support"

# The app raising from call, from the body's each and from its close,
# while other clients keep the workers busy: each failure stays with its
# own request, is logged with its backtrace, and counted in app_errors.
class AppErrorsChaos < Minitest::Test
  include Tsubame::ChaosHelpers

  RAISING_APP = <<~RUBY
    class FailingEach
      def each
        yield "first piece\\n"
        raise "boom in each"
      end
    end

    class FailingClose
      def each
        yield "whole body\\n"
      end

      def close
        raise "boom in close"
      end
    end

    run lambda { |env|
      case env["PATH_INFO"]
      when "/raise-call" then raise "boom in call"
      when "/raise-each" then [200, { "content-type" => "text/plain" }, FailingEach.new]
      when "/raise-close" then [200, { "content-type" => "text/plain", "content-length" => "11" }, FailingClose.new]
      else [200, { "content-type" => "text/plain" }, ["ok"]]
      end
    }
  RUBY

  ROUNDS = 30

  def test_app_errors_under_load_stay_with_their_requests
    with_cluster(RAISING_APP, workers: 2, args: %w[-t 4:4]) do |s|
      load = Tsubame::LoadLoop.new(s.port, clients: 3)
      outcomes = Hash.new { |h, k| h[k] = [] }
      ROUNDS.times do
        %w[/raise-call /raise-each /raise-close].each do |path|
          outcomes[path] << fetch(s, path)
        end
      end
      load.stop

      assert_empty load.failures.map(&:detail), "requests that did not raise all succeeded"
      assert_operator load.ok.size, :>, 50
      assert_equal [["500", "Internal Server Error\n"]], outcomes["/raise-call"].uniq
      # The body had started: the connection is cut so the client cannot
      # take the first piece for the whole body.
      outcomes["/raise-each"].each { |outcome| assert_equal :cut, outcome.first, outcome.inspect }
      assert_equal [["200", "whole body\n"]], outcomes["/raise-close"].uniq

      err = s.stderr
      assert_equal ROUNDS, err.scan(%r{error handling GET /raise-call: RuntimeError: boom in call}).size
      assert_equal ROUNDS, err.scan(%r{error handling GET /raise-each: RuntimeError: boom in each}).size
      assert_equal ROUNDS,
                   err.scan(%r{error closing the response body handling GET /raise-close: RuntimeError: boom in close}).size
      assert_total_eventually(3 * ROUNDS, "app_errors over the workers") do
        status_total(s, "app_errors", workers: 2)
      end
      assert_equal 2, s.booted_workers.size, "no worker died"
      assert_equal 0, s.stats["worker_deaths"]
    end
  end

  private

  # [status, body] for a whole response, [:cut, detail] when the server
  # closed the connection before the body's end.
  def fetch(server, path)
    socket = raw_socket(server)
    socket.write("GET #{path} HTTP/1.1\r\nHost: chaos\r\nConnection: close\r\n\r\n")
    response = server.read_all(socket, 10)
    head, body = response.split("\r\n\r\n", 2)
    status = head[%r{\AHTTP/1\.1 (\d{3})}, 1]
    if head.match?(/^transfer-encoding: chunked/i)
      return [:cut, response] unless body.end_with?("0\r\n\r\n")

      body = dechunk(body)
    elsif (length = head[/^content-length: (\d+)/i, 1])
      return [:cut, response] unless body.bytesize == length.to_i
    end
    [status, body]
  ensure
    socket&.close
  end

  def dechunk(body)
    out = +""
    until body.empty?
      size, body = body.split("\r\n", 2)
      size = size.to_i(16)
      break if size.zero?

      out << body.byteslice(0, size)
      body = body.byteslice(size + 2..)
    end
    out
  end
end
