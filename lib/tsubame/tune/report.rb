# frozen_string_literal: true

require "json"
require "tsubame/tune/format"
require "tsubame/tune/result"
require "tsubame/tune/slo"

module Tsubame
  module Tune
    # The outcome of `tsubame tune` for people (a table, the recommendation
    # and the config lines to paste) and for programs (JSON, the same
    # numbers). Also the data the HTML report is drawn from.
    class Report
      # A load average above this many runnable tasks per core before the
      # run is worth a warning.
      BUSY_LOAD = 0.5
      COLUMNS = ["setting", "max rate", "p50", "p95", "p99", "trend", "CPU %", "RSS/worker", "steps"].freeze

      # context: { app:, requests:, step:, budget:, cores:, memory_mb:, elapsed: }
      def initialize(results, slo, context)
        @results = results
        @slo = slo
        @context = context
      end

      # The setting the search found best, before its confirmation.
      def recommended
        @results.recommended
      end

      def confirmation
        @results.confirmation
      end

      # The confirmed try (a Step), or nil: no recommendation without it.
      def confirmed
        confirmation&.confirmed
      end

      def text
        lines = ["", "tsubame tune: #{@context[:app]}, #{@context[:requests]}; SLO #{@slo}; " \
                     "#{format("%g", @context[:step])} s steps; #{format("%.0f", @context[:elapsed])} s of a " \
                     "#{format("%g", @context[:budget])} s budget; #{@context[:cores]} cores", ""]
        lines.concat(table)
        busy = busy_note
        lines << busy if busy
        lines << "max rate: the highest offered rate (open loop) that met the SLO in steady state; latencies, the " \
                 "latency trend across the step, CPU (100% = one core, all processes) and the largest worker RSS are at that rate."
        if @results.settings.any? { |r| !r.bounded? }
          lines << "+: the SLO still held at the highest rate tried; the setting's share of the budget ran out first, " \
                   "so its max rate is higher (give it a larger --budget)."
        end
        @results.skipped.each { |setting, reason| lines << "not measured: #{setting.label}: #{reason}" }
        lines << "" << "Interrupted: partial results, from the steps completed before Ctrl-C." if @results.interrupted
        lines << ""
        lines.concat(recommendation_lines)
        "#{lines.join("\n")}\n"
      end

      # The load generator and the servers share the machine with whatever
      # else runs: a machine already busy before the run gives lower rates
      # and noisier latencies, which the reader should know.
      def busy_note
        before = @context[:load_before]
        return nil unless before && before.first > @context[:cores] * BUSY_LOAD

        format("The machine was busy: load average %.2f on %d cores before the run (%.2f after); " \
               "the rates are lower and noisier than on an idle machine.",
               before.first, @context[:cores], @context[:load_after]&.first || 0)
      end

      def table
        rows = @results.settings.map { |r| row(r) }
        widths = COLUMNS.each_index.map { |i| ([COLUMNS[i]] + rows.map { |row| row[i].to_s }).map(&:size).max }
        line = lambda do |cells|
          cells.each_with_index.map { |cell, i| i.zero? ? cell.to_s.ljust(widths[i]) : cell.to_s.rjust(widths[i]) }.join("  ").rstrip
        end
        [line.call(COLUMNS)] + rows.map do |cells|
          cells.size == 2 ? "#{cells[0].ljust(widths[0])}  #{cells[1]}" : line.call(cells)
        end
      end

      def row(result)
        step = result.best
        return [result.setting.label, unmeasured(result)] unless step

        m = step.measurement
        [result.setting.label, "#{Format.rate(step.rate)}#{"+" unless result.bounded?} req/s", Format.ms(m.latency("p50")), Format.ms(m.latency("p95")),
         Format.ms(m.latency("p99")), step.trend, step.cpu_percent.round.to_s, step.rss_mb ? format("%.1f MiB", step.rss_mb) : "-",
         result.steps.size.to_s]
      end

      def unmeasured(result)
        return result.note if result.note
        return "interrupted before a step was measured" if result.steps.empty? && @results.interrupted
        return "no time left for a step (the settings before it used the budget)" if result.steps.empty?

        lowest = result.steps.min_by(&:rate)
        "no rate met the SLO (lowest tried #{Format.rate(lowest.rate)} req/s: #{lowest.miss})"
      end

      def recommendation_lines
        best = recommended
        return no_recommendation unless best
        return not_confirmed(best) unless confirmed

        why = if @results.settings.count(&:max_rate) > 1
                " (the fewest processes, then threads, among the settings within " \
                  "#{(Results::NEAR * 100).round}% of the highest max rate)"
              else
                ""
              end
        ["Recommended: #{best.setting.label}#{why}.", confirmed_line, operating_line, *client_lines,
         "Paste into config/puma.rb:", "", *best.setting.config_lines.map { |l| "    #{l}" }]
      end

      def confirmed_line
        step = confirmed
        m = step.measurement
        missed = confirmation.tries.reject(&:met?).map { |t| "#{Format.rate(t.rate)} req/s (#{t.miss})" }
        format("Confirmed: %s req/s held the SLO for %.0f s when replayed (p95 %s, trend %s, %.1f%% of the offered " \
               "rate answered)%s.", Format.rate(step.rate), step.duration || confirmation.duration,
               Format.ms(m.latency("p95")), step.trend, (step.steady&.throughput_ratio || 0) * 100,
               missed.empty? ? "" : "; missed at #{missed.join("; ")}")
      end

      def operating_line
        headroom = @context[:headroom]
        "Operating rate: #{Format.rate(confirmation.operating_rate(headroom))} req/s " \
          "(#{format("%g", headroom)}% of the confirmed max rate, to leave headroom for bursts and slow requests)."
      end

      # The load generator ran beside the server: what it took from it.
      def client_lines
        return [] unless confirmation.shares_cores?

        cpu = confirmation.client_cpu_percent
        cpus = confirmation.server_cpus ? " (CPUs #{confirmation.server_cpus.join(",")})" : ""
        used = cpu ? format("used %.0f%% of one core (%.0f%% of the %d cores)", cpu, cpu / @context[:cores], @context[:cores]) : "ran"
        ["Warning: the load generator shared the cores with the server#{cpus} and #{used} at the confirmed rate; " \
         "a server with the cores to itself would do more than these figures."]
      end

      def not_confirmed(best)
        tries = confirmation ? confirmation.tries : []
        missed = tries.map { |t| "#{Format.rate(t.rate)} req/s (#{t.miss})" }
        why = missed.empty? ? "" : ": it missed at #{missed.join(", ")}"
        note = confirmation&.note ? "; #{confirmation.note}" : ""
        ["No recommendation: the best setting, #{best.setting.label} (max #{Format.rate(best.max_rate)} req/s), was not " \
         "confirmed by a #{format("%g", @context[:confirm])} s replay#{why}#{note}.",
         "Give it a larger --budget (longer steps: --step-duration) so the search settles on a rate that holds."]
      end

      def no_recommendation
        if @results.settings.empty? || (@results.interrupted && @results.settings.none? { |r| r.steps.any? })
          return ["No recommendation: nothing was measured."]
        end

        ["No setting met the SLO (#{@slo}) at any rate tried, so there is no recommendation.",
         "Relax --slo or --success, check that the requests succeed (--path, --targets), or give it a larger --budget."]
      end

      def to_h
        best = recommended
        { "app" => @context[:app], "requests" => @context[:requests], "slo" => @slo.to_h,
          "step_duration_s" => @context[:step], "confirm_duration_s" => @context[:confirm], "budget_s" => @context[:budget], "elapsed_s" => @context[:elapsed].round(1),
          "machine" => { "cores" => @context[:cores], "memory_mb" => @context[:memory_mb],
                         "load_average_before" => @context[:load_before], "load_average_after" => @context[:load_after] },
          "interrupted" => @results.interrupted, "settings" => @results.settings.map(&:to_h),
          "skipped" => @results.skipped.map { |setting, reason| { "label" => setting.label, "reason" => reason } },
          "confirmation" => confirmation&.to_h(@context[:headroom]),
          "recommended" => best && confirmed && { "label" => best.setting.label, "max_rate" => best.max_rate,
                                                  "confirmed_rate" => confirmation.rate,
                                                  "confirmed_for_s" => confirmed.duration&.round(1),
                                                  "operating_rate" => confirmation.operating_rate(@context[:headroom]).round(1),
                                                  "headroom_percent" => @context[:headroom],
                                                  "config" => best.setting.config_lines } }
      end

      def json
        "#{JSON.generate(to_h)}\n"
      end
    end
  end
end
