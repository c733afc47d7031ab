# frozen_string_literal: true

require "json"
require "tsubame/tune/format"

module Tsubame
  module Tune
    # `tsubame tune --html FILE`: the report as one self-contained page: the
    # table and recommendation, and an SVG chart of p95 latency against the
    # offered rate, a line per setting, with the SLO's p95 limit. The
    # report's JSON is embedded in <script type="application/json"
    # id="tune-data">, and the chart's points in id="tune-series".
    class HTML
      COLOURS = %w[#1f77b4 #ff7f0e #2ca02c #d62728 #9467bd #8c564b #e377c2 #7f7f7f #bcbd22 #17becf].freeze
      WIDTH = 860
      HEIGHT = 440
      LEFT = 70
      RIGHT = 220
      TOP = 20
      BOTTOM = 50

      def initialize(report)
        @report = report
        @data = report.to_h
      end

      # [{ "label", "points" => [[rate, p95_ms, met_slo], ...] }] in rate order.
      def series
        @data["settings"].map do |s|
          points = s["steps"].select { |step| step["p95_ms"] }.sort_by { |step| step["rate"] }
          { "label" => s["label"], "points" => points.map { |step| [step["rate"], step["p95_ms"], step["met_slo"]] } }
        end
      end

      def page
        <<~HTML
          <!DOCTYPE html>
          <html lang="en">
          <head>
          <meta charset="utf-8">
          <title>tsubame tune: #{escape(@data["app"])}</title>
          <style>
          body { font-family: Helvetica, Arial, sans-serif; margin: 24px; color: #222; }
          pre { background: #f6f6f6; padding: 12px; overflow-x: auto; }
          svg text { font-size: 11px; }
          </style>
          </head>
          <body>
          <h1>tsubame tune: #{escape(@data["app"])}</h1>
          <p>SLO: #{escape(slo_text)}. Each point is one step: a rate offered in open loop for
          #{escape(format("%g", @data["step_duration_s"]))} s (longer at low rates), and the p95 latency measured;
          filled points met the SLO, hollow ones missed it.</p>
          #{svg}
          <pre>#{escape(@report.text.strip)}</pre>
          <script type="application/json" id="tune-data">#{script_json(@data)}</script>
          <script type="application/json" id="tune-series">#{script_json(series)}</script>
          </body>
          </html>
        HTML
      end

      def write(path)
        File.write(path, page)
      end

      private

      def slo_text
        limits = @data["slo"]["latency_ms"].map { |name, ms| "#{name} <= #{Format.ms(ms)}" }
        (limits + ["success >= #{format("%g", @data["slo"]["success_percent"])}%"]).join(", ")
      end

      def p95_limit
        @data["slo"]["latency_ms"]["p95"]
      end

      def svg
        all = series.flat_map { |s| s["points"] }
        return "<p>No step was measured, so there is nothing to chart.</p>" if all.empty?

        x_max = nice_ceiling(all.map(&:first).max)
        latencies = all.map { |p| p[1] } + [p95_limit].compact
        y_min = 10.0**Math.log10([latencies.min, 0.01].max).floor
        y_max = 10.0**Math.log10(latencies.max).ceil
        y_max *= 10 if y_max <= y_min
        scale = Scale.new(x_max, y_min, y_max, WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM)
        out = [%(<svg xmlns="http://www.w3.org/2000/svg" width="#{WIDTH}" height="#{HEIGHT}" ) +
               %(viewBox="0 0 #{WIDTH} #{HEIGHT}" font-family="Helvetica, Arial, sans-serif">)]
        out << %(<rect width="#{WIDTH}" height="#{HEIGHT}" fill="#ffffff"/>)
        axes(out, scale, x_max, y_min, y_max)
        slo_line(out, scale)
        series.each_with_index { |s, i| line(out, scale, s, COLOURS[i % COLOURS.size], i) }
        out << "</svg>"
        out.join("\n")
      end

      # Maps a rate and a latency to the plot (y on a log scale: latency
      # grows by orders of magnitude near capacity).
      Scale = Struct.new(:x_max, :y_min, :y_max, :width, :height) do
        def x(rate)
          (LEFT + (width * rate / x_max)).round(1)
        end

        def y(ms)
          clamped = ms.clamp(y_min, y_max)
          share = (Math.log10(clamped) - Math.log10(y_min)) / (Math.log10(y_max) - Math.log10(y_min))
          (TOP + height - (height * share)).round(1)
        end
      end

      def axes(out, scale, x_max, y_min, y_max)
        bottom = TOP + scale.height
        right = LEFT + scale.width
        out << %(<line x1="#{LEFT}" y1="#{bottom}" x2="#{right}" y2="#{bottom}" stroke="#333"/>)
        out << %(<line x1="#{LEFT}" y1="#{TOP}" x2="#{LEFT}" y2="#{bottom}" stroke="#333"/>)
        5.times.map { |i| x_max * (i + 1) / 5.0 }.unshift(0).each do |rate|
          x = scale.x(rate)
          out << %(<line x1="#{x}" y1="#{TOP}" x2="#{x}" y2="#{bottom}" stroke="#eee"/>)
          out << %(<text x="#{x}" y="#{bottom + 16}" text-anchor="middle">#{escape(Format.rate(rate))}</text>)
        end
        decade = y_min
        while decade <= y_max
          y = scale.y(decade)
          out << %(<line x1="#{LEFT}" y1="#{y}" x2="#{right}" y2="#{y}" stroke="#eee"/>)
          out << %(<text x="#{LEFT - 6}" y="#{y + 4}" text-anchor="end">#{escape(decade_label(decade))}</text>)
          decade *= 10
        end
        out << %(<text x="#{LEFT + (scale.width / 2)}" y="#{HEIGHT - 10}" text-anchor="middle">offered rate (req/s)</text>)
        out << %(<text x="16" y="#{TOP + (scale.height / 2)}" text-anchor="middle" ) +
               %(transform="rotate(-90 16 #{TOP + (scale.height / 2)})">p95 latency (log scale)</text>)
      end

      def slo_line(out, scale)
        return unless p95_limit

        y = scale.y(p95_limit)
        out << %(<line x1="#{LEFT}" y1="#{y}" x2="#{LEFT + scale.width}" y2="#{y}" stroke="#d62728" stroke-dasharray="6 4"/>)
        out << %(<text x="#{LEFT + 4}" y="#{y - 4}" fill="#d62728">SLO p95 #{escape(Format.ms(p95_limit))}</text>)
      end

      def line(out, scale, series, colour, index)
        points = series["points"]
        legend_y = TOP + 10 + (index * 18)
        legend_x = LEFT + scale.width + 16
        out << %(<rect x="#{legend_x}" y="#{legend_y - 9}" width="12" height="12" fill="#{colour}"/>)
        out << %(<text x="#{legend_x + 18}" y="#{legend_y + 1}">#{escape(series["label"])}</text>)
        return if points.empty?

        coords = points.map { |rate, ms, _| "#{scale.x(rate)},#{scale.y(ms)}" }.join(" ")
        out << %(<polyline points="#{coords}" fill="none" stroke="#{colour}" stroke-width="1.5"/>)
        points.each do |rate, ms, met|
          tip = "#{series["label"]}: #{Format.rate(rate)} req/s, p95 #{Format.ms(ms)}, #{met ? "met" : "missed"} the SLO"
          out << %(<circle cx="#{scale.x(rate)}" cy="#{scale.y(ms)}" r="4" stroke="#{colour}" stroke-width="1.5" ) +
                 %(fill="#{met ? colour : "#ffffff"}"><title>#{escape(tip)}</title></circle>)
        end
      end

      # 0.1 ms, 1 ms, 10 ms, 1 s
      def decade_label(ms)
        ms >= 1000 ? "#{format("%g", ms / 1000.0)} s" : "#{format("%g", ms)} ms"
      end

      # A round number at or above value, at most 25% above it.
      def nice_ceiling(value)
        return 1 unless value.positive?

        power = 10.0**Math.log10(value).floor
        [1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10].map { |m| m * power }.find { |v| v >= value }
      end

      def script_json(value)
        JSON.generate(value).gsub("<", "\\u003c")
      end

      def escape(text)
        text.to_s.gsub("&", "&amp;").gsub("<", "&lt;").gsub(">", "&gt;").gsub('"', "&quot;")
      end
    end
  end
end
