# frozen_string_literal: true

require "json"
require "tsubame/bench"
require "tsubame/support/clock"
require "tsubame/support/process_info"
require "tsubame/tune/slo"

module Tsubame
  module Tune
    # What one run of tsubame bench measured, from its --json report.
    class Measurement
      attr_reader :offered, :report
      # What the load generator itself cost: CPU seconds (user + system),
      # the run's wall seconds, and the CPUs it was allowed to run on.
      attr_accessor :client_cpu_seconds, :wall_seconds, :client_cpus

      # offered: the open-loop rate asked for, nil for a closed loop.
      def initialize(report, offered: nil)
        @report = report
        @offered = offered
      end

      def requests
        @report.fetch("requests")
      end

      def ok
        @report.fetch("success")
      end

      # Due but never sent: the server fell further behind than the timeout.
      def unsent
        @report.fetch("unsent", 0)
      end

      # 2xx/3xx among everything that was due, in percent.
      def success_percent
        due = requests + unsent
        due.zero? ? 0.0 : ok * 100.0 / due
      end

      def throughput
        @report.fetch("throughput").to_f
      end

      # { "p50" => ms, "p95" => ms, ... } or nil when nothing was answered.
      def latency_ms
        @report["latency_ms"]
      end

      def latency(key)
        latency_ms&.fetch(key, nil)
      end

      def interrupted?
        @report["interrupted"] == true
      end

      # The client's CPU use over the run, in percent of one core.
      def client_cpu_percent
        return nil unless client_cpu_seconds && wall_seconds&.positive?

        client_cpu_seconds * 100.0 / wall_seconds
      end

      # Why requests failed, for the progress lines: "status 404: 12, timeout: 3".
      def failures
        statuses = @report.fetch("status_codes", {}).reject { |code, _| code.to_i.between?(200, 399) }
        parts = statuses.map { |code, n| "status #{code}: #{n}" }
        parts += @report.fetch("errors", {}).map { |kind, n| "#{kind}: #{n}" }
        parts << "unsent: #{unsent}" if unsent.positive?
        parts.join(", ")
      end

    end

    # Runs the tsubame-bench binary against one server, one run at a time,
    # in its own process group so a Ctrl-C at the terminal reaches only
    # `tsubame tune`, which then stops the run itself (interrupt).
    class Load
      include Clock

      # tsubame-bench prefixes its error messages with argv[0].
      PROGRAM_NAME = "tsubame tune"
      # Open loop: how late a response may be before it counts as failed, at
      # least this and at most MAX_TIMEOUT, else a multiple of the SLO.
      MIN_TIMEOUT = 1.0
      MAX_TIMEOUT = 10.0
      TIMEOUT_TIMES_SLO = 2
      MAX_CONNECTIONS = 256
      MIN_CONNECTIONS = 8

      # Raised when the binary fails; the message is its own error line.
      class Failed < Error; end

      def initialize(bench:, url:, paths:, targets:, headers:, dir:)
        @bench = bench
        @url = url
        @headers = headers
        @targets = targets || (paths.size > 1 ? write_targets(paths, dir) : nil)
        @path = paths.size == 1 && !targets ? paths.first : "/"
        @dir = dir
        @pid = nil
        @interrupted = false
      end

      # The user asked to stop: end the current run (it reports what it
      # measured, which is thrown away) and refuse further ones.
      def interrupt!
        @interrupted = true
        Process.kill("INT", @pid) if @pid
      rescue Errno::ESRCH
        nil
      end

      def interrupted?
        @interrupted
      end

      # Closed loop with `connections` in flight, to estimate capacity.
      def closed(connections:, duration:)
        run(["-c", connections.to_s, "-d", seconds(duration)], offered: nil)
      end

      # Open loop at `rate` requests per second.
      def open(rate:, duration:, connections:, timeout:)
        run(["-r", rate.to_s, "-c", connections.to_s, "-d", seconds(duration), "--timeout", seconds(timeout)], offered: rate)
      end

      # Enough connections that the client does not hold requests back
      # before the SLO is missed anyway: Little's law at the latency limit,
      # twice over, and at least two per app thread.
      def self.connections_for(rate, slo_ms, app_threads)
        wanted = (rate * slo_ms / 1000.0 * 2).ceil
        least = [MIN_CONNECTIONS, app_threads * 2].max
        wanted.clamp(least, [MAX_CONNECTIONS, least].max)
      end

      def self.timeout_for(slo_ms)
        (slo_ms * TIMEOUT_TIMES_SLO / 1000.0).clamp(MIN_TIMEOUT, MAX_TIMEOUT)
      end

      # The binary's arguments for a run with `load_args` (rate, duration...):
      # one client thread, to leave the cores to the server.
      def arguments(load_args)
        args = ["-q", "--json", "-t", "1", *load_args]
        @headers.each { |h| args.push("-H", h) }
        args.push("--targets", @targets) if @targets
        args << "#{@url}#{@path}"
      end

      private

      def run(load_args, offered:)
        raise Failed, "interrupted" if @interrupted

        out = File.join(@dir, "bench.json")
        err = File.join(@dir, "bench.err")
        cpu_before = ProcessInfo.waited_children_cpu_seconds
        started = monotonic
        @pid = Process.spawn([@bench, PROGRAM_NAME], *arguments(load_args), out: out, err: err, in: File::NULL, pgroup: true)
        cpus = ProcessInfo.cpus_allowed(@pid)
        status = wait
        raise Failed, error_line(err, status) unless status.success?

        Measurement.new(JSON.parse(File.read(out)), offered: offered).tap do |m|
          cpu_after = ProcessInfo.waited_children_cpu_seconds
          m.client_cpu_seconds = cpu_after - cpu_before if cpu_before && cpu_after
          m.wall_seconds = monotonic - started
          m.client_cpus = cpus
        end
      rescue JSON::ParserError => e
        raise Failed, "#{PROGRAM_NAME}: unreadable report from #{@bench}: #{e.message}"
      end

      # Polls so that a Ctrl-C handler can run and signal the child meanwhile.
      def wait
        loop do
          _, status = Process.wait2(@pid, Process::WNOHANG)
          if status
            @pid = nil
            return status
          end
          sleep 0.02
        end
      end

      def error_line(err, status)
        text = File.read(err).strip
        line = text.lines.last&.strip
        return line if line && !line.empty?

        "#{PROGRAM_NAME}: #{File.basename(@bench)} failed (#{status})"
      end

      def seconds(value)
        format("%.3fs", value)
      end

      def write_targets(paths, dir)
        File.join(dir, "paths.targets").tap do |file|
          File.write(file, paths.map { |path| "GET #{path}\n" }.join)
        end
      end
    end
  end
end
