# frozen_string_literal: true

require "rbconfig"
require "tsubame/errors"
require "tsubame/support/process_info"
require "tsubame/support/clock"

module Tsubame
  module Tune
    # One exe/tsubame serving the app at one setting, on an ephemeral
    # loopback port. It runs in its own process group, which its workers
    # share, so stopping it can reach every process it made even if the
    # master dies first: nothing it started outlives `tsubame tune`.
    class ServerProcess
      include Clock

      EXE = File.expand_path("../../../exe/tsubame", __dir__)
      BOOT_TIMEOUT = 60.0
      # TERM, then after this long KILL to the whole process group.
      STOP_TIMEOUT = 5.0
      LISTENING = %r{Listening on http://127\.0\.0\.1:(\d+)}.freeze
      WORKER_BOOTED = /- Worker \d+ \(PID: \d+\) booted/.freeze

      # Raised when the server cannot start; the message says why.
      class BootFailed < Error; end

      attr_reader :setting, :pid, :url, :boot_seconds

      # options: TuneOptions (app, environment, config); dir: a private
      # directory for the server's output.
      def initialize(setting, options, dir:)
        @setting = setting
        @options = options
        @log = File.join(dir, "server-#{setting.slug}.log")
        @err = File.join(dir, "server-#{setting.slug}.err")
        @pid = nil
      end

      # Starts the server and returns once it answers with every worker
      # booted; `interrupted` is polled so a Ctrl-C does not wait for a boot.
      def start(interrupted: -> { false })
        started = monotonic
        @pid = Process.spawn(RbConfig.ruby, EXE, *args, out: @log, err: @err, in: File::NULL, pgroup: true)
        until (port = ready)
          raise BootFailed, "interrupted" if interrupted.call
          raise BootFailed, "the server did not boot: #{exit_reason}" if exited?
          raise BootFailed, "the server did not boot within #{BOOT_TIMEOUT.to_i} s: #{last_lines}" if monotonic - started > BOOT_TIMEOUT

          sleep 0.05
        end
        @url = "http://127.0.0.1:#{port}"
        @boot_seconds = monotonic - started
        self
      end

      def args
        config = @options.config || "-"
        # A short drain: the measurement is over when the server is stopped.
        ["-b", "tcp://127.0.0.1:0", "-C", config, "-e", @options.environment, "--drain-timeout", "2",
         *@setting.server_args, @options.app]
      end

      # The processes running the app: the workers, or the single process.
      def worker_pids
        return [@pid] if @setting.single?

        ProcessInfo.children(@pid)
      end

      # CPU seconds used so far by the server and its workers.
      def cpu_seconds
        ([@pid] + (@setting.single? ? [] : ProcessInfo.children(@pid))).sum { |pid| ProcessInfo.cpu_seconds(pid) || 0.0 }
      end

      # The largest resident set among the app processes, in MiB.
      def rss_per_worker_mb
        worker_pids.filter_map { |pid| ProcessInfo.rss_mb(pid) }.max
      end

      def alive?
        !@pid.nil? && !exited?
      end

      # TERM, wait, then KILL whatever is left in the process group.
      def stop
        return unless @pid

        signal("TERM", @pid)
        deadline = monotonic + STOP_TIMEOUT
        sleep 0.05 until exited? || monotonic > deadline
        signal("KILL", -@pid)
        Process.wait(@pid) unless @status
      rescue Errno::ECHILD
        nil
      ensure
        # Workers of a master that was killed are still in its group.
        signal("KILL", -@pid) if @pid
        @pid = nil
      end

      def stderr_text
        File.exist?(@err) ? File.read(@err) : ""
      end

      private

      def ready
        log = File.exist?(@log) ? File.read(@log) : ""
        port = log[LISTENING, 1]
        return nil unless port && log.include?("Use Ctrl-C")
        return port if @setting.single? || log.scan(WORKER_BOOTED).size >= @setting.workers

        nil
      end

      def exited?
        return true if @status

        _, @status = Process.wait2(@pid, Process::WNOHANG)
        !@status.nil?
      rescue Errno::ECHILD
        true
      end

      def exit_reason
        how = @status&.exitstatus ? "exit status #{@status.exitstatus}" : "killed by signal #{@status&.termsig}"
        "#{how}: #{last_lines}"
      end

      def last_lines
        text = stderr_text.strip
        text = File.read(@log).strip if text.empty? && File.exist?(@log)
        # An exception's backtrace says less than its message.
        lines = text.lines.map(&:strip).reject { |line| line.empty? || line.start_with?("from ") }
        lines.empty? ? "no output" : lines.last(2).join(" / ")
      end

      def signal(name, pid)
        Process.kill(name, pid)
      rescue Errno::ESRCH, Errno::EPERM
        nil
      end
    end
  end
end
