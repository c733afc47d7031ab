# frozen_string_literal: true

module Tsubame
  module Tune
    # One offered rate and what came of it: the bench measurement, the
    # server's CPU use and memory over the step, whether it reached steady
    # state (Steady) and whether the SLO held. `doubtful` when the two
    # disagree (see Stepper); `extended` when a first, shorter run at the
    # rate was doubtful and this longer one decided.
    Step = Struct.new(:measurement, :cpu_percent, :rss_mb, :miss, :steady, :doubtful, :extended, keyword_init: true) do
      def rate
        measurement.offered
      end

      def met?
        miss.nil?
      end


      def duration
        measurement.report["duration_s"]
      end

      # "+1.2 ms/s", the trend of latency across the step's windows.
      def trend
        value = steady&.trend_ms_per_s
        value.nil? ? "-" : format("%+.1f ms/s", value)
      end

      def to_h
        m = measurement
        { "rate" => rate, "throughput" => m.throughput.round(1), "requests" => m.requests, "unsent" => m.unsent,
          "success_percent" => m.success_percent.round(3), "p50_ms" => m.latency("p50"), "p95_ms" => m.latency("p95"),
          "p99_ms" => m.latency("p99"), "cpu_percent" => cpu_percent&.round(1), "rss_mb" => rss_mb, "met_slo" => met?,
          "miss" => miss, "extended" => extended == true, "client_cpu_percent" => m.client_cpu_percent&.round(1) }
          .merge(steady ? steady.to_h : {})
      end
    end

    # Everything measured for one setting. `note` says why it stopped early
    # (boot failure, no successful response, not enough memory).
    class SettingResult
      attr_reader :setting, :steps
      attr_accessor :calibration, :note, :boot_seconds

      def initialize(setting)
        @setting = setting
        @steps = []
        @calibration = nil
        @note = nil
        @boot_seconds = nil
      end

      # The step at the highest rate that met the SLO, or nil.
      def best
        @steps.select(&:met?).max_by(&:rate)
      end

      def max_rate
        best&.rate
      end

      # Whether a higher rate than max_rate was tried and missed; if not,
      # the time ran out first and max_rate is only a lower bound.
      def bounded?
        top = max_rate
        top.nil? || @steps.any? { |step| !step.met? && step.rate > top }
      end

      def to_h
        best_step = best
        { "setting" => @setting.to_h.transform_keys(&:to_s), "label" => @setting.label, "max_rate" => max_rate,
          "max_rate_is_lower_bound" => !bounded?, "at_max_rate" => best_step&.to_h, "config" => @setting.config_lines,
          "calibration_throughput" => @calibration&.throughput&.round(1), "boot_seconds" => @boot_seconds&.round(2),
          "note" => @note, "steps" => @steps.map(&:to_h) }
      end
    end

    # The results of a whole run and the setting to recommend: among the
    # settings within NEAR of the best max rate (closer than a noisy
    # machine can tell apart), the one with the fewest processes, then the
    # fewest threads — the cheapest in memory and in database connections.
    class Results
      NEAR = 0.05

      attr_reader :settings, :skipped
      # The Confirmation of the recommended setting, once run.
      attr_accessor :interrupted, :confirmation

      def initialize
        @settings = []
        @skipped = []
        @interrupted = false
      end

      def <<(setting_result)
        @settings << setting_result
        self
      end

      # Settings left out before measuring, as [setting, reason].
      def skip(setting, reason)
        @skipped << [setting, reason]
      end

      def recommended
        measured = @settings.select(&:max_rate)
        return nil if measured.empty?

        top = measured.map(&:max_rate).max
        near = measured.select { |r| r.max_rate >= top * (1 - NEAR) }
        near.min_by { |r| [r.setting.processes, r.setting.threads, -r.max_rate] }
      end
    end
  end
end
