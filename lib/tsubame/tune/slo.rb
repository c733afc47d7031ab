# frozen_string_literal: true

require "tsubame/errors"
require "tsubame/tune/format"

module Tsubame
  module Tune
    # Raised for a bad `tsubame tune` argument; the message is shown as is
    # after "tsubame tune: ".
    class UsageError < Error; end

    # The service level objective a rate must meet: latency percentiles
    # (`--slo p95=200ms,p99=1s`) and the share of requests answered 2xx/3xx
    # (`--success 99.9`).
    class SLO
      DEFAULT_SPEC = "p95=200ms"
      DEFAULT_SUCCESS = 99.9
      # The percentiles tsubame bench reports, as written in --slo, and
      # their keys in its JSON `latency_ms`.
      PERCENTILES = { "p50" => "p50", "p90" => "p90", "p95" => "p95", "p99" => "p99", "p99.9" => "p99_9" }.freeze
      UNITS = { "us" => 0.001, "ms" => 1.0, "s" => 1000.0 }.freeze
      # Below this no HTTP round trip can answer, so the SLO could never be met.
      MIN_MS = 0.01

      # { "p95" => 200.0, ... } in milliseconds, and the success percentage.
      attr_reader :limits, :success

      def self.parse(spec, success: DEFAULT_SUCCESS)
        limits = {}
        spec.to_s.split(",").map(&:strip).each do |part|
          name, value = part.split("=", 2)
          key = name.to_s.strip.downcase
          unless PERCENTILES.key?(key)
            raise UsageError, "invalid --slo #{part.inspect}: expected pNN=TIME with pNN one of " \
                              "#{PERCENTILES.keys.join(", ")}, e.g. p95=200ms"
          end
          raise UsageError, "--slo names #{key} twice" if limits.key?(key)

          limits[key] = parse_ms(value.to_s.strip, part)
        end
        raise UsageError, "invalid --slo #{spec.to_s.inspect}: expected e.g. p95=200ms or p95=200ms,p99=1s" if limits.empty?

        new(limits, parse_success(success))
      end

      def self.parse_ms(text, part)
        match = /\A(\d+(?:\.\d+)?)(us|ms|s)\z/.match(text)
        raise UsageError, "invalid --slo #{part.inspect}: the time needs a unit (us, ms or s), e.g. p95=200ms" unless match

        ms = Float(match[1]) * UNITS.fetch(match[2])
        raise UsageError, "impossible --slo #{part.inspect}: the latency limit must be more than 0" unless ms >= MIN_MS

        ms
      end

      def self.parse_success(value)
        percent = value.is_a?(Numeric) ? value.to_f : Float(value.to_s.delete_suffix("%"), exception: false)
        unless percent&.positive? && percent <= 100
          raise UsageError, "invalid --success #{value.to_s.inspect}: expected a percentage above 0 and at most 100, e.g. 99.9"
        end

        percent
      end

      def initialize(limits, success)
        @limits = limits.freeze
        @success = success
        freeze
      end

      # The longest latency limit, in milliseconds.
      def max_ms
        @limits.values.max
      end

      # Why a step's measurement misses the SLO, or nil when it meets it.
      # measurement: { success_percent:, latency_ms: { "p95" => .. } or nil }.
      def miss(success_percent:, latency_ms:)
        if success_percent < @success
          return format("success %<got>s%% < %<want>s%%", got: percent(success_percent), want: percent(@success))
        end
        return "no response" unless latency_ms

        @limits.each do |name, limit|
          got = latency_ms[PERCENTILES.fetch(name)]
          return "#{name} #{Format.ms(got)} > #{Format.ms(limit)}" if got.nil? || got > limit
        end
        nil
      end

      def to_s
        (@limits.map { |name, limit| "#{name} <= #{Format.ms(limit)}" } + ["success >= #{percent(@success)}%"]).join(", ")
      end

      def to_h
        { "latency_ms" => @limits, "success_percent" => @success }
      end

      private

      def percent(value)
        format("%.3f", value).sub(/\.?0+\z/, "")
      end
    end
  end
end
