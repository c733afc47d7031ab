# frozen_string_literal: true

module Tsubame
  module Tune
    # Chooses the next offered rate for one setting from the outcomes so
    # far: ramp up geometrically from `start` while the SLO is met, halve
    # down while it is missed and nothing has met it yet, then bisect
    # (geometrically, since latency grows with the ratio to capacity, not
    # the difference) between the highest rate that met it and the lowest
    # that missed, until they are within `precision` of each other. The
    # caller stops asking when its time is up; `best` is then the answer.
    #
    # A noisy machine can make a rate pass above one that failed; the
    # search then stops with the highest passing rate rather than chase
    # the noise.
    class Search
      DEFAULT_FACTOR = 2.0
      DEFAULT_PRECISION = 0.05
      # Rates under this many requests per second are not tried.
      FLOOR = 1.0

      attr_reader :best, :lowest_failure

      def initialize(start:, factor: DEFAULT_FACTOR, precision: DEFAULT_PRECISION, floor: FLOOR)
        raise ArgumentError, "factor must be above 1" unless factor > 1

        @start = [start.to_f, floor].max
        @factor = factor
        @precision = precision
        @floor = floor
        @best = nil
        @lowest_failure = nil
        @last = nil
      end

      # The next rate to try, or nil when the search is over.
      def next_rate
        return round(@start) if @last.nil?
        return round(@best * @factor) if @lowest_failure.nil?

        if @best.nil?
          down = @lowest_failure / 2
          return down >= @floor ? round(down) : nil
        end
        return nil if @best >= @lowest_failure || @lowest_failure <= @best * (1 + @precision)

        mid = round(Math.sqrt(@best * @lowest_failure))
        mid > @best && mid < @lowest_failure ? mid : nil
      end

      def record(rate, met)
        @last = rate
        if met
          @best = [@best, rate].compact.max
        else
          @lowest_failure = [@lowest_failure, rate].compact.min
        end
      end

      def done?
        next_rate.nil?
      end

      private

      # Three significant digits: 1234.5 -> 1230, 87.25 -> 87.3.
      def round(rate)
        return rate.round(1) if rate < 100

        digits = Math.log10(rate).floor - 2
        (rate / 10**digits).round * 10**digits
      end
    end
  end
end
