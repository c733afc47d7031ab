# frozen_string_literal: true

require "tmpdir"
require "fileutils"
require "tsubame/bench"
require "tsubame/tune/confirm"
require "tsubame/tune/grid"
require "tsubame/tune/html"
require "tsubame/tune/machine"
require "tsubame/tune/options"
require "tsubame/tune/progress"
require "tsubame/tune/report"
require "tsubame/tune/runner"
require "tsubame/support/clock"

module Tsubame
  # `tsubame tune [options] APP.ru`: runs the app under Tsubame at a grid
  # of workers x threads, finds each setting's highest rate within the SLO
  # and recommends one (README.md, "tsubame tune").
  module Tune
    # Exit statuses besides 0 (a recommendation) and 1 (an error).
    NO_SETTING_MET = 2
    INTERRUPTED = 130

    # The command: checks the arguments, measures, prints the report.
    class Command
      include Clock

      PREFIX = "tsubame tune: "

      def initialize(argv, stdout: $stdout, stderr: $stderr, env: ENV)
        @argv = argv
        @stdout = stdout
        @stderr = stderr
        @env = env
      end

      # Returns the exit status.
      def run
        options = TuneOptions.new(@argv)
        return help(options) if options.help?

        bench = find_bench
        grid = grid_for(options)
        check_budget(options, grid)
        measure(options, grid, bench)
      rescue Error => e
        @stderr.puts "#{PREFIX}#{e.message}"
        1
      end

      private

      def help(options)
        @stdout.puts options.help
        0
      end

      def find_bench
        path = Bench.find(env: @env)
        return path if path

        explicit = @env["TSUBAME_BENCH"].to_s
        raise UsageError, "the #{Bench::BINARY} binary was not found; " +
                          (explicit.empty? ? "build it with `make build`" : "TSUBAME_BENCH=#{explicit} is not an executable file")
      end

      def grid_for(options)
        @memory_mb = Machine.memory_mb
        Grid.size(cores: Machine.cores, memory_mb: @memory_mb, workers: options.workers, threads: options.threads,
                  fibers: options.fibers)
      end

      # The grid's steps and one confirmation run must fit.
      def check_budget(options, grid)
        @grid_minimum = Runner.minimum_budget(grid.size, options.step)
        need = @grid_minimum + Confirm.try_seconds(options.confirm, options.slo)
        return if options.budget >= need

        raise UsageError, "--budget #{format("%g", options.budget)}s is too short for #{grid.size} settings " \
                          "(#{grid.describe}) with #{format("%g", options.step)} s steps and a " \
                          "#{format("%g", options.confirm)} s confirmation: it needs at least #{need.ceil} s; raise " \
                          "--budget, shorten --step-duration or --confirm-duration, or narrow --workers/--threads"
      end

      def measure(options, grid, bench)
        started = monotonic
        dir = Dir.mktmpdir("tsubame-tune")
        progress = Progress.new(@stderr, quiet: options.quiet)
        @load_before = Machine.load_average
        progress.line("#{PREFIX}#{grid.size} settings (#{grid.describe}), budget #{format("%g", options.budget)} s, " \
                      "#{format("%g", options.step)} s steps, SLO #{options.slo}")
        runner = Runner.new(options, grid, bench: bench, memory_mb: @memory_mb, dir: dir, progress: progress)
        reserve = Confirm.reserve(options.budget, @grid_minimum, options.confirm, options.slo)
        results = with_interrupt(runner, progress) { runner.run(options.budget - reserve) }
        confirm(options, results, bench, dir, progress, started + options.budget)
        progress.release
        report = Report.new(results, options.slo, context(options, started))
        output(options, report)
        status(results, report)
      ensure
        FileUtils.rm_rf(dir) if dir
      end

      # The recommended setting's max rate replayed for the confirmation
      # period, lower rates after a miss, until one holds or time is up.
      def confirm(options, results, bench, dir, progress, deadline)
        best = results.recommended
        return if best.nil? || results.interrupted

        confirm = Confirm.new(options, bench: bench, dir: dir, progress: progress)
        results.confirmation = with_interrupt(confirm, progress) { confirm.run(best, deadline) }
        results.interrupted = true if confirm.interrupted?
      end

      # The first Ctrl-C (or TERM) stops the measurement, which then reports
      # what it has; the servers are stopped by the runner either way.
      def with_interrupt(measurer, progress)
        handler = lambda do |_signo|
          progress.line("#{PREFIX}interrupted: stopping the server and reporting what was measured") unless measurer.interrupted?
          measurer.interrupt!
        end
        previous = { "INT" => trap("INT", &handler), "TERM" => trap("TERM", &handler) }
        yield
      ensure
        previous&.each { |signal, action| trap(signal, action || "DEFAULT") }
      end

      def context(options, started)
        requests = options.targets ? "requests from #{options.targets}" : options.paths.map { |p| "GET #{p}" }.join(" + ")
        { app: options.app, requests: requests, step: options.step, budget: options.budget, cores: Machine.cores,
          confirm: options.confirm, headroom: options.headroom,
          memory_mb: @memory_mb, elapsed: monotonic - started, load_before: @load_before, load_after: Machine.load_average }
      end

      def output(options, report)
        @stdout.write(options.json ? report.json : report.text)
        @stdout.flush
        return unless options.html

        HTML.new(report).write(options.html)
        @stderr.puts "#{PREFIX}wrote #{options.html}" unless options.quiet
      rescue SystemCallError => e
        raise UsageError, "cannot write #{options.html}: #{e.message}"
      end

      def status(results, report)
        return INTERRUPTED if results.interrupted

        report.confirmed ? 0 : NO_SETTING_MET
      end
    end
  end
end
