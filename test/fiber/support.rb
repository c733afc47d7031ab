# frozen_string_literal: true

require "json"
require "socket"
require "tsubame/bench"

module Tsubame
  # Helpers for the fiber mode tests: a load generator able to hold a
  # thousand requests open at once, a slow upstream, and timed requests.
  module FiberSupport
    def now
      Process.clock_gettime(Process::CLOCK_MONOTONIC)
    end

    # Runs tsubame-bench with `connections` connections and as many
    # requests, each connection sending one; returns [report, seconds].
    def burst(server, path, connections)
      binary = Tsubame::Bench.find
      flunk "the tsubame-bench binary is missing: run `make build`" unless binary
      started = now
      out, err, status = Open3.capture3(binary, "-c", connections.to_s, "-n", connections.to_s,
                                        "-t", "2", "--timeout", "20s", "--json", "-q",
                                        "http://127.0.0.1:#{server.port}#{path}")
      elapsed = now - started
      assert status.success?, "tsubame-bench failed: #{err}"
      [JSON.parse(out), elapsed]
    end

    # GETs each path at once on its own connection; returns
    # [[status, body, seconds], ...] in the order given, and the total time.
    def concurrently(server, paths, timeout: 20)
      started = now
      results = paths.map do |path|
        Thread.new do
          t0 = now
          http = Net::HTTP.new("127.0.0.1", server.port)
          http.read_timeout = timeout
          http.max_retries = 0
          response = http.request(Net::HTTP::Get.new(path))
          [response.code.to_i, response.body, now - t0]
        rescue StandardError => e
          [e.class.name, e.message, now - t0]
        end
      end.map(&:value)
      [results, now - started]
    end

    # An HTTP server answering every request after `delay` seconds, one
    # thread per connection so it holds hundreds at once. It runs in its
    # own process: in this one its threads would compete for the GVL with
    # the test's own client and skew what the test measures.
    class SlowUpstream
      SCRIPT = <<~'RUBY'
        require "socket"
        delay = Float(ARGV[0])
        server = TCPServer.new("127.0.0.1", 0)
        served = 0
        lock = Mutex.new
        trap("TERM") { $stdout.puts "served #{served}"; $stdout.flush; exit!(0) }
        $stdout.puts "port #{server.addr[1]}"
        $stdout.flush
        loop do
          Thread.new(server.accept) do |sock|
            head = +""
            head << sock.readpartial(4096) until head.include?("\r\n\r\n")
            sleep delay
            body = "upstream #{head[/\AGET (\S+)/, 1]}"
            sock.write("HTTP/1.1 200 OK\r\ncontent-length: #{body.bytesize}\r\nconnection: close\r\n\r\n#{body}")
            lock.synchronize { served += 1 }
          rescue IOError, SystemCallError
            nil
          ensure
            sock.close
          end
        end
      RUBY

      attr_reader :port

      def initialize(delay)
        @out, @in = IO.pipe
        @pid = Process.spawn(RbConfig.ruby, "-e", SCRIPT, delay.to_s, out: @in, in: File::NULL)
        @in.close
        line = Timeout.timeout(10) { @out.gets }
        @port = Integer(line[/\Aport (\d+)/, 1])
      end

      # Stops the upstream; returns how many requests it answered.
      def close
        Process.kill("TERM", @pid)
        served = Timeout.timeout(10) { @out.read }[/served (\d+)/, 1].to_i
        Process.wait(@pid)
        served
      ensure
        @out.close
      end
    end
  end
end
