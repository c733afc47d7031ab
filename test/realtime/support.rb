# frozen_string_literal: true

require "test_helper"
require "json"
require "net/http"
require "tempfile"
require_relative "../cluster/support"

module Tsubame
  # Support for the real-time tests: the ActionCable app (cable_app.ru),
  # the Python clients (cable_clients.py, under Debian's /usr/bin/python3
  # where python3-websockets lives) and HTTP latency sampling.
  module RealtimeSupport
    DIR = __dir__
    CABLE_APP = File.read(File.join(DIR, "cable_app.ru"))
    CLIENTS = File.join(DIR, "cable_clients.py")
    PYTHON = "/usr/bin/python3"

    # The clients process: one JSON line answers each command.
    class CableClients
      attr_reader :subscribed

      def initialize(url:, http:, clients:, ca: nil, timeout: 40)
        args = [PYTHON, CLIENTS, "--url", url, "--http", http, "--clients", clients.to_s,
                "--timeout", timeout.to_s]
        args += ["--ca", ca] if ca
        @err = Tempfile.new("cable-clients")
        @stdin, @stdout, @thread = Open3.popen2(*args, err: @err.path)
        @subscribed = read_line(timeout + 15)
      end

      # Sends a command line and returns the parsed answer.
      def command(line, timeout: 30)
        @stdin.puts(line)
        @stdin.flush
        read_line(timeout)
      end

      def quit
        @stdin.puts("quit")
        @stdin.close
        read_line(15)
        @thread.join(10)
      ensure
        kill
      end

      def kill
        Process.kill("KILL", @thread.pid) if @thread.alive?
        @thread.join(5)
        @err.close!
      rescue Errno::ESRCH
        nil
      end

      def stderr
        File.read(@err.path)
      end

      private

      def read_line(timeout)
        raise "cable clients: no answer in #{timeout}s\n#{stderr}" unless @stdout.wait_readable(timeout)

        line = @stdout.gets or raise "cable clients exited\n#{stderr}"
        JSON.parse(line)
      end
    end

    def skip_unless_cable_deps
      skip "#{PYTHON} has no websockets module (make deps)" unless system(PYTHON, "-c", "import websockets",
                                                                          err: File::NULL)
      require "action_cable"
    rescue LoadError
      skip "ActionCable is not installed (make deps)"
    end

    def with_clients(**opts)
      clients = CableClients.new(**opts)
      yield clients
    ensure
      clients&.kill
    end

    # Sequential GETs of `path` on one keep-alive connection for `seconds`
    # (after a warm-up of 50, not counted); returns the latencies in
    # seconds. The default spans more than ActionCable's 3 s heartbeat, so
    # a window with clients connected always holds one ping to every
    # client, rather than holding one or none by chance (a window of 1,000
    # requests, about 0.5 s, put a heartbeat's burst in the p99 about one
    # run in four).
    def http_latencies(port, path: "/ping", seconds: 3.5)
      Net::HTTP.start("127.0.0.1", port, read_timeout: 10) do |http|
        50.times { http.get(path) }
        latencies = []
        finish = monotonic + seconds
        while (started = monotonic) < finish
          response = http.get(path)
          raise "#{path}: #{response.code}" unless response.code == "200"

          latencies << (monotonic - started)
        end
        latencies
      end
    end

    def percentile(latencies, fraction)
      sorted = latencies.sort
      sorted[[(sorted.size * fraction).ceil - 1, 0].max]
    end

    def ms(seconds)
      (seconds * 1000).round(2)
    end
  end
end
