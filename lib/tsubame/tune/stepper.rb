# frozen_string_literal: true

require "tsubame/tune/load"
require "tsubame/tune/result"
require "tsubame/tune/steady"
require "tsubame/support/clock"

module Tsubame
  module Tune
    # Offers one open-loop rate to one server and judges it: the SLO over
    # the whole run, then steady state (Steady). Used for the search's
    # steps (Runner) and for the confirmation runs (Confirm), so both judge
    # the same way.
    class Stepper
      include Clock

      def initialize(slo)
        @slo = slo
      end

      def timeout
        Load.timeout_for(@slo.max_ms)
      end

      def measure(server, load, rate, duration, extended: false)
        cpu_before = server.cpu_seconds
        started = monotonic
        connections = Load.connections_for(rate, @slo.max_ms, server.setting.concurrency)
        m = load.open(rate: rate, duration: duration, connections: connections, timeout: timeout)
        wall = monotonic - started
        cpu = [server.cpu_seconds - cpu_before, 0].max * 100.0 / wall
        steady = Steady.new(m.report, rate: rate, span: duration, limit_ms: @slo.limits.values.min)
        slo_miss = @slo.miss(success_percent: m.success_percent, latency_ms: m.latency_ms)
        Step.new(measurement: m, cpu_percent: cpu, rss_mb: server.rss_per_worker_mb, miss: slo_miss || steady.problem,
                 steady: steady, doubtful: doubtful?(slo_miss, m, steady), extended: extended)
      end

      private

      # The SLO and steady state disagree: the limits held but the run had
      # not settled (a queue may be building too slowly to break them
      # yet), or a latency limit broke while the server kept up with flat
      # latency (a stall: on a shared machine another process took the
      # cores for a moment). A longer run at the rate tells which.
      def doubtful?(slo_miss, measurement, steady)
        return !steady.steady? if slo_miss.nil?

        measurement.success_percent >= @slo.success && steady.steady? && !steady.trend_ms_per_s.nil?
      end
    end
  end
end
