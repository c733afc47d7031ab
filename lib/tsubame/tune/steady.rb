# frozen_string_literal: true

module Tsubame
  module Tune
    # Whether an open-loop run reached steady state, from the per-window
    # timeline of tsubame bench's report: the server kept up with the
    # offered rate (its throughput within THROUGHPUT_TOLERANCE of it) and
    # latency was not trending up across the windows. A rate a little over
    # capacity passes a short step's SLO while its queue is still short; it
    # shows here first, as throughput under the rate and a rising trend.
    class Steady
      # "Within a few percent": a server that answers 95% of the offered
      # rate falls further behind by 5% of the rate every second.
      THROUGHPUT_TOLERANCE = 0.05
      # Requests that may sit across the run's edges (in flight when the
      # last counted window closed) without counting as falling behind.
      EDGE_REQUESTS = 3
      # Latency rising by more than this share of the tightest SLO limit
      # from the first third of the run to the last is a trend.
      RISE_SHARE = 0.1
      # The windows' p90: the closest the timeline has to the usual p95
      # limit, and steadier per window than p99 or max.
      KEY = "p90_ms"
      # Fewer windows than this say nothing about a trend.
      MIN_WINDOWS = 6

      attr_reader :throughput_ratio, :trend_ms_per_s, :rise_ms

      # report: tsubame bench's JSON; rate: what was offered; span: seconds
      # it was offered; limit_ms: the tightest latency limit of the SLO.
      def initialize(report, rate:, span:, limit_ms:)
        @limit_ms = limit_ms
        @rate = rate.to_f
        window = report.fetch("window_s", 0).to_f
        all = window.positive? ? report.fetch("timeline", []).select { |w| w["t"] + window <= span + 1e-9 } : []
        # The first window includes opening the connections.
        @windows = all.drop(1)
        @window = window
        measure
      end

      def steady?
        keeping_up? && !rising?
      end

      def keeping_up?
        return true if @expected.nil?

        @answered >= @expected - [@expected * THROUGHPUT_TOLERANCE, EDGE_REQUESTS].max
      end

      def rising?
        !@rise_ms.nil? && @rise_ms > @limit_ms * RISE_SHARE
      end

      # Why the run was not steady, or nil.
      def problem
        unless keeping_up?
          return format("throughput %.1f%% of the offered rate (the server fell behind)", @throughput_ratio * 100)
        end
        return format("latency still rising (%+.1f ms/s, a queue building up)", @trend_ms_per_s) if rising?

        nil
      end

      def to_h
        { "throughput_ratio" => @throughput_ratio&.round(4), "trend_ms_per_s" => @trend_ms_per_s&.round(2), "steady" => steady? }
      end

      private

      def measure
        if @windows.empty?
          @expected = nil
          @throughput_ratio = nil
        else
          @answered = @windows.sum { |w| w["responses"] }
          @expected = @rate * @windows.size * @window
          @throughput_ratio = @expected.positive? ? @answered / @expected : nil
        end
        trend
      end

      # The median p90 of the last third of the windows against that of
      # the first third: a median shrugs off one stalled window (a GC,
      # another process taking the core) that a regression would follow.
      def trend
        answered = @windows.select { |w| w["responses"].positive? && w[KEY] }
        if answered.size < MIN_WINDOWS
          @rise_ms = nil
          @trend_ms_per_s = nil
          return
        end
        third = answered.size / 3
        first = answered.first(third)
        last = answered.last(third)
        @rise_ms = median(last.map { |w| w[KEY] }) - median(first.map { |w| w[KEY] })
        between = median(last.map { |w| w["t"] }) - median(first.map { |w| w["t"] })
        @trend_ms_per_s = between.positive? ? @rise_ms / between : 0.0
      end

      def median(values)
        sorted = values.sort
        mid = sorted.size / 2
        sorted.size.odd? ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2.0
      end
    end
  end
end
