# frozen_string_literal: true

require "tsubame/tune/format"
require "tsubame/tune/load"
require "tsubame/tune/runner"
require "tsubame/tune/server"
require "tsubame/tune/stepper"
require "tsubame/support/clock"
require "tsubame/support/process_info"

module Tsubame
  module Tune
    # What the confirmation runs found: every try (a Step each) and the
    # one that held, if any. `client_cpus` and `server_cpus` are the CPUs
    # the load generator and the server were allowed to run on.
    class Confirmation
      attr_reader :setting, :tries, :duration
      attr_accessor :client_cpus, :server_cpus, :note

      def initialize(setting, duration)
        @setting = setting
        @duration = duration
        @tries = []
        @client_cpus = nil
        @server_cpus = nil
        @note = nil
      end

      # The highest rate that met the SLO in steady state, or nil.
      def confirmed
        @tries.select(&:met?).max_by(&:rate)
      end

      def rate
        confirmed&.rate
      end

      # The recommended operating rate: `percent` of the confirmed rate.
      def operating_rate(percent)
        rate && (rate * percent / 100.0)
      end

      # Whether the load generator could run on a CPU the server could:
      # unknown CPUs (not Linux) count as shared, since both run here.
      def shares_cores?
        return true if @client_cpus.nil? || @server_cpus.nil?

        @client_cpus.intersect?(@server_cpus)
      end

      # The client's CPU use in percent of one core over the confirmed run
      # (or the last try).
      def client_cpu_percent
        (confirmed || @tries.last)&.measurement&.client_cpu_percent
      end

      def to_h(headroom)
        { "setting" => @setting.label, "duration_s" => @duration, "confirmed_rate" => rate,
          "operating_rate" => operating_rate(headroom)&.round(1), "headroom_percent" => headroom,
          "client_cpu_percent" => client_cpu_percent&.round(1), "shares_cores" => shares_cores?,
          "client_cpus" => @client_cpus, "server_cpus" => @server_cpus, "note" => @note,
          "tries" => @tries.map { |step| step.to_h.merge("duration_s" => step.duration&.round(1)) } }
      end
    end

    # The confirmation run: the recommended setting is booted again and its
    # max rate offered for the confirmation period (--confirm-duration),
    # judged like a step (SLO and steady state). After a miss the next
    # lower rate is tried instead, while the budget allows: BACKOFF of the
    # one that missed, or of what the server answered if that was less (a
    # server that fell behind has shown its capacity); CREEP_BACKOFF of it
    # when the try held the SLO all along and only its latency was still
    # creeping up (a rate just over capacity: 10% down would leave the
    # recommendation further below the capacity than it needs to be).
    # When a lower rate holds after a miss and the budget has room for one
    # more try, the rate halfway between the two is tried as well, and the
    # higher that held is the confirmed rate: the backoff's step is coarse,
    # and the capacity usually lies between.
    class Confirm
      include Clock

      BACKOFF = 0.9
      CREEP_BACKOFF = 0.95
      # A halfway rate less than this far above the held one is not tried.
      REFINE_GAP = 0.02
      # Boot, then the server may still be finishing a missed try's queue.
      PAUSE = 2.0
      # How many tries the budget keeps room for when it can: a miss, a
      # lower rate that holds, and the halfway try between them.
      TRIES = 3

      # Seconds one try needs at the most.
      def self.try_seconds(duration, slo)
        Runner::BOOT_ALLOWANCE + PAUSE + duration + Load.timeout_for(slo.max_ms) + Runner::STEP_OVERHEAD
      end

      # Seconds to keep out of the grid's share of `budget` (which needs
      # `grid_minimum`): room for as many tries as fit, from one to TRIES.
      def self.reserve(budget, grid_minimum, duration, slo)
        one = try_seconds(duration, slo)
        one * ((budget - grid_minimum) / one).floor.clamp(1, TRIES)
      end

      def initialize(options, bench:, dir:, progress:, stepper: Stepper.new(options.slo))
        @options = options
        @bench = bench
        @dir = dir
        @progress = progress
        @stepper = stepper
        @interrupted = false
        @load = nil
      end

      def interrupt!
        @interrupted = true
        @load&.interrupt!
      end

      def interrupted?
        @interrupted
      end

      # Confirms result (a SettingResult with a max rate) before deadline.
      def run(result, deadline)
        confirmation = Confirmation.new(result.setting, @options.confirm)
        rate = result.max_rate
        server = ServerProcess.new(result.setting, @options, dir: @dir)
        say "confirming #{result.setting.label} at #{Format.rate(rate)} req/s for #{format("%g", @options.confirm)} s"
        server.start(interrupted: -> { @interrupted })
        confirmation.server_cpus = ProcessInfo.cpus_allowed(server.pid)
        @load = Load.new(bench: @bench, url: server.url, paths: @options.paths, targets: @options.targets,
                         headers: @options.headers, dir: @dir)
        replay(confirmation, server, rate, deadline)
        confirmation
      rescue ServerProcess::BootFailed, Load::Failed => e
        confirmation.note = e.message.delete_prefix("#{Load::PROGRAM_NAME}: ")
        say "  #{confirmation.note}"
        confirmation
      ensure
        @load = nil
        server&.stop
      end

      # Offers `rate` for the confirmation period, then lower rates after
      # each miss, until one holds or the next would not end by deadline;
      # after a hold that followed a miss, once more halfway back up.
      def replay(confirmation, server, rate, deadline)
        refining = false
        until @interrupted
          if monotonic + PAUSE + @options.confirm + @stepper.timeout + Runner::STEP_OVERHEAD > deadline
            return say("  no time left to try #{Format.rate(rate)} req/s") if refining

            confirmation.note = "the budget ran out before a rate was confirmed"
            return say("  #{confirmation.note}")
          end
          sleep PAUSE
          step = @stepper.measure(server, @load, rate, @options.confirm)
          return if @interrupted

          confirmation.tries << step
          confirmation.client_cpus ||= step.measurement.client_cpus
          say line(step)
          return if refining

          if step.met?
            rate = refine_rate(confirmation, step)
            return unless rate

            refining = true
          else
            rate = next_rate(step)
          end
        end
      end

      # Halfway between a rate that held and the lowest that missed above
      # it, or nil when there was no miss or the two are close.
      def refine_rate(confirmation, held)
        missed = confirmation.tries.reject(&:met?).map(&:rate).select { |r| r > held.rate }.min
        return nil unless missed

        halfway = round((held.rate + missed) / 2.0)
        halfway > held.rate * (1 + REFINE_GAP) ? halfway : nil
      end

      def next_rate(step)
        return round(step.rate * CREEP_BACKOFF) if creeping?(step)

        answered = step.steady&.throughput_ratio
        share = answered ? [answered, 1.0].min : 1.0
        round(step.rate * share * BACKOFF)
      end

      private

      # Held the SLO (a doubtful step is one whose SLO and steady-state
      # verdicts disagree) and kept up, with only the latency still rising.
      def creeping?(step)
        steady = step.steady
        step.doubtful && steady && steady.keeping_up? && steady.rising?
      end

      def line(step)
        m = step.measurement
        format("  %s req/s for %.0f s: p50 %s, p95 %s, p99 %s, %s%% ok, trend %s, load generator CPU %s - %s",
               Format.rate(step.rate), step.duration || 0, Format.ms(m.latency("p50")), Format.ms(m.latency("p95")),
               Format.ms(m.latency("p99")), format("%.2f", m.success_percent), step.trend,
               m.client_cpu_percent ? "#{m.client_cpu_percent.round}%" : "-",
               step.met? ? "confirmed" : "misses (#{step.miss})")
      end

      # Three significant digits, like the search's rates.
      def round(rate)
        return rate.round(1) if rate < 100

        digits = Math.log10(rate).floor - 2
        (rate / 10**digits).round * 10**digits
      end

      def say(text)
        @progress.line("[confirm] #{text.strip}") if text
        nil
      end
    end
  end
end
