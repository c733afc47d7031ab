# frozen_string_literal: true

require "tsubame/tune/format"
require "tsubame/tune/grid"
require "tsubame/tune/load"
require "tsubame/tune/result"
require "tsubame/tune/search"
require "tsubame/tune/server"
require "tsubame/tune/stepper"
require "tsubame/support/clock"

module Tsubame
  module Tune
    # Measures the grid, one setting at a time, within the budget: each
    # setting gets an equal share of the time left when it starts. For each
    # it boots the server, runs a short closed loop to estimate capacity,
    # then offers open-loop rates chosen by Search until the share is used
    # or the search has converged, and stops the server. A doubtful step
    # (Stepper: the SLO and steady state disagree) is run again EXTEND
    # times as long, which decides it; with no time left for that, its
    # first verdict stands.
    class Runner
      include Clock

      # The closed-loop estimate lasts the step duration, at most this.
      CALIBRATION_MAX = 1.0
      CALIBRATION_CONNECTIONS = 16
      # Time around each step: starting the client, its first connection,
      # reading /proc.
      STEP_OVERHEAD = 0.5
      # Boot time assumed when checking the budget up front.
      BOOT_ALLOWANCE = 2.0
      # A setting's share must hold at least this many steps.
      MIN_STEPS = 3
      # A step lasts long enough for this many requests (a p95 of five
      # requests says little), at most MAX_STRETCH step durations.
      MIN_SAMPLES = 30
      MAX_STRETCH = 3
      # The first open-loop rate, as a share of the closed-loop throughput:
      # a little under capacity, where latency is still flat.
      START_SHARE = 0.6
      # After a missed step the server may still be working off a queue.
      PAUSE_AFTER_MISS = 1.0
      # A doubtful step is offered again for this many step durations.
      EXTEND = 3

      # Raised for what stops the whole run: the app does not boot, or the
      # load cannot be sent (a bad targets file).
      class Fatal < Error; end

      # Seconds the grid needs at the least; a smaller --budget is refused.
      def self.minimum_budget(settings, step)
        settings * (BOOT_ALLOWANCE + [step, CALIBRATION_MAX].min + (MIN_STEPS * (step + STEP_OVERHEAD)))
      end

      def initialize(options, grid, bench:, memory_mb:, dir:, progress:)
        @options = options
        @slo = options.slo
        @grid = grid
        @bench = bench
        @memory_mb = memory_mb
        @dir = dir
        @progress = progress
        @interrupted = false
        @load = nil
        @stepper = Stepper.new(@slo)
        @memory_checked = false
        @answered = false
      end

      # Ctrl-C: stop the step under way; what was measured is kept.
      def interrupt!
        @interrupted = true
        @load&.interrupt!
      end

      def interrupted?
        @interrupted
      end

      # The grid gets `seconds` (the budget less the confirmation's share).
      def run(seconds = @options.budget)
        results = Results.new
        deadline = monotonic + seconds
        queue = @grid.settings.dup
        total = queue.size
        until queue.empty? || @interrupted
          setting = queue.shift
          index = total - queue.size
          share_end = monotonic + ((deadline - monotonic) / (queue.size + 1))
          results << measure(setting, "[#{index}/#{total}]", share_end, deadline)
          queue = trim_for_memory(queue, results)
        end
        results.interrupted = @interrupted
        queue.each { |setting| results.skip(setting, @interrupted ? "interrupted" : "budget used up") }
        results
      end

      private

      def measure(setting, tag, share_end, deadline)
        result = SettingResult.new(setting)
        server = ServerProcess.new(setting, @options, dir: @dir)
        say "#{tag} #{setting.label}: starting"
        server.start(interrupted: -> { @interrupted })
        result.boot_seconds = server.boot_seconds
        say format("%s   booted in %.1f s (pid %d%s)", tag, server.boot_seconds, server.pid, worker_note(server))
        @load = Load.new(bench: @bench, url: server.url, paths: @options.paths, targets: @options.targets,
                         headers: @options.headers, dir: @dir)
        calibrated = calibrate(result, tag)
        # The app boots and the load can be sent: from now on problems are
        # results of a setting, and the progress can be shown.
        @answered = true
        @progress.release
        search(result, server, tag, share_end, deadline) if calibrated
        result
      rescue ServerProcess::BootFailed => e
        return result if @interrupted
        raise Fatal, e.message unless @answered

        result.note = e.message
        say "#{tag}   #{e.message}"
        result
      rescue Load::Failed => e
        return result if @interrupted

        message = e.message.delete_prefix("#{Load::PROGRAM_NAME}: ")
        # Before anything answered, a failing client means bad arguments
        # (a malformed targets file); later, only this setting is lost.
        raise Fatal, message if !@answered && server.alive?

        result.note = server.alive? ? message : "the server exited during the run: #{server.stderr_text.lines.last&.strip}"
        say "#{tag}   #{result.note}"
        result
      ensure
        @load = nil
        server&.stop
      end

      def worker_note(server)
        server.setting.single? ? "" : ", workers #{server.worker_pids.join(" ")}"
      end

      # A closed loop with two requests per app thread, and enough
      # connections that the round trips do not hold it back: its
      # throughput is about the capacity, and the open loop starts under it.
      def calibrate(result, tag)
        duration = [@options.step, CALIBRATION_MAX].min
        connections = [result.setting.concurrency * 2, CALIBRATION_CONNECTIONS].max
        cal = @load.closed(connections: connections, duration: duration)
        return false if @interrupted

        result.calibration = cal
        if cal.ok.zero?
          result.note = "no 2xx/3xx response to the requests (#{cal.failures.empty? ? "no response" : cal.failures})"
          say "#{tag}   #{result.note}"
          return false
        end
        say format("%s   closed loop, %d connections: %s req/s (p95 %s)", tag, connections, Format.rate(cal.throughput),
                   Format.ms(cal.latency("p95")))
        true
      end

      def search(result, server, tag, share_end, deadline)
        search = Search.new(start: result.calibration.throughput * START_SHARE)
        timeout = @stepper.timeout
        pause = 0
        while (rate = search.next_rate)
          duration = step_duration(rate)
          # The setting's share is checked with what a step usually takes,
          # the whole budget with the most it can take (every request
          # waiting for the timeout).
          now = monotonic + pause
          break if now + duration + STEP_OVERHEAD > share_end || now + duration + timeout + STEP_OVERHEAD > deadline

          sleep pause
          step = @stepper.measure(server, @load, rate, duration)
          return if @interrupted

          if step.doubtful
            # Ctrl-C during the longer run (which may end the load
            # generator, and fail the run): the step measured before it
            # stands, and the report shows it.
            begin
              longer = extend_step(server, tag, step, duration, [share_end, deadline - timeout].min)
            rescue Load::Failed
              raise unless @interrupted
            end
            step = longer unless @interrupted
          end
          result.steps << step
          search.record(rate, step.met?)
          say step_line(tag, step)
          return if @interrupted
          unless server.alive?
            result.note = "the server exited at #{Format.rate(rate)} req/s"
            return say("#{tag}   #{result.note}")
          end
          pause = step.met? ? 0 : PAUSE_AFTER_MISS
        end
        say best_line(tag, result)
      end

      def step_duration(rate)
        [[@options.step, MIN_SAMPLES / rate].max, @options.step * MAX_STRETCH].min
      end

      # Offers the rate again for longer, when that fits before `limit`;
      # the longer run's verdict is the step's.
      def extend_step(server, tag, step, duration, limit)
        longer = duration * EXTEND
        return step if monotonic + PAUSE_AFTER_MISS + longer + STEP_OVERHEAD > limit

        say "#{step_line(tag, step)}; extending to #{format("%g", longer.round(1))} s"
        sleep PAUSE_AFTER_MISS
        @stepper.measure(server, @load, step.rate, longer, extended: true)
      end

      def step_line(tag, step)
        m = step.measurement
        verdict = step.met? ? "meets the SLO" : "misses (#{step.miss})"
        extra = step.met? || m.failures.empty? ? "" : " [#{m.failures}]"
        format("%s   %8s req/s%s: p50 %s, p95 %s, p99 %s, %s%% ok, trend %s, CPU %d%% - %s%s", tag, Format.rate(step.rate),
               step.extended ? " (extended)" : "", Format.ms(m.latency("p50")), Format.ms(m.latency("p95")),
               Format.ms(m.latency("p99")), format("%.2f", m.success_percent), step.trend, step.cpu_percent.round, verdict,
               extra)
      end

      def best_line(tag, result)
        return "#{tag}   no rate met the SLO" unless result.max_rate

        "#{tag}   max #{Format.rate(result.max_rate)} req/s within the SLO"
      end

      # After the first setting the app's real RSS is known: settings that
      # would not fit in memory are dropped rather than risk swapping.
      def trim_for_memory(queue, results)
        return queue if @memory_checked || @memory_mb.nil?

        rss = results.settings.flat_map(&:steps).filter_map(&:rss_mb).max
        return queue unless rss

        @memory_checked = true
        kept, dropped = Grid.new(queue).fit(rss_mb: rss, memory_mb: @memory_mb)
        dropped.settings.each do |setting|
          need = (setting.processes * rss * Grid::RSS_GROWTH).round
          reason = "needs about #{need} MiB (#{setting.processes} processes of #{rss.round} MiB, x#{Grid::RSS_GROWTH} to grow), " \
                   "more than #{(Grid::MEMORY_SHARE * 100).round}% of the #{@memory_mb} MiB available"
          results.skip(setting, reason)
          say "skipping #{setting.label}: #{reason}"
        end
        kept.settings.dup
      end

      def say(line)
        @progress.line(line)
        nil
      end
    end
  end
end
