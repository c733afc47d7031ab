# frozen_string_literal: true

# The reporting half of benchmarks/compare.sh, standard library only.
#
#   ruby benchmarks/compare_report.rb summary RUN.json
#     one `tsubame bench --json` report -> "REQ_S P99_MS FAILED": 2xx
#     responses per second, p99 latency, requests that failed or got no 2xx/3xx
#   ruby benchmarks/compare_report.rb report OUT
#     OUT/runs.tsv (+ OUT/meta.txt) -> the medians and ratios to Puma on
#     stdout, OUT/compare.md (Markdown tables) and OUT/compare.svg (a
#     self-contained bar chart)
require "json"

module CompareReport
  SERVERS = {
    "tsubame" => ["Tsubame", "#1f77b4"],
    "puma" => ["Puma", "#ff7f0e"],
    "thin" => ["Thin", "#2ca02c"],
    "webrick" => ["WEBrick", "#9467bd"]
  }.freeze
  APPS = %w[string array chunked file].freeze
  SOCKETS = %w[tcp unix].freeze
  BASELINE = "puma"

  # The median req/s and p99 of one cell, and the failures of all its rounds.
  Cell = Struct.new(:req_s, :p99_ms, :failed, :rounds)

  module_function

  def summary(path)
    report = JSON.parse(File.read(path))
    p99 = report.dig("latency_ms", "p99") || 0
    format("%.1f %.3f %d", report.fetch("throughput"), p99, report.fetch("requests") - report.fetch("success"))
  end

  def median(values)
    sorted = values.sort
    mid = sorted.size / 2
    sorted.size.odd? ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2.0
  end

  def read_cells(tsv)
    rows = File.readlines(tsv, chomp: true).drop(1).map { |line| line.split("\t") }
    rows.group_by { |app, kib, socket, server| [app, Integer(kib, 10), socket, server] }.transform_values do |runs|
      Cell.new(median(runs.map { |r| Float(r[5]) }), median(runs.map { |r| Float(r[6]) }),
               runs.sum { |r| Integer(r[7], 10) }, runs.size)
    end
  end

  def read_meta(path)
    return {} unless File.exist?(path)

    File.readlines(path, chomp: true).to_h { |line| line.split("=", 2) }
  end

  def ordered(present, order)
    order.select { |x| present.include?(x) } + (present - order).sort
  end

  def grouping(number)
    format("%.0f", number).reverse.scan(/\d{1,3}/).join(",").reverse
  end

  def ms(value)
    value >= 100 ? format("%.0f ms", value) : format("%.2f ms", value)
  end

  # 950, 1.2k, 12.5k, 125k: at most three significant digits.
  def compact(number)
    return format("%.0f", number) if number < 1000

    k = number / 1000.0
    text = k >= 100 ? format("%.0f", k) : format("%.#{k >= 10 ? 1 : 2}f", k)
    "#{text.sub(/\.?0+\z/, "")}k"
  end

  def escape(text)
    text.to_s.gsub("&", "&amp;").gsub("<", "&lt;").gsub(">", "&gt;").gsub('"', "&quot;")
  end

  # Builds everything from the runs of one compare.sh run.
  class Report
    def initialize(out)
      @out = out
      @cells = CompareReport.read_cells(File.join(out, "runs.tsv"))
      raise "no runs in #{File.join(out, "runs.tsv")}" if @cells.empty?

      @meta = CompareReport.read_meta(File.join(out, "meta.txt"))
      keys = @cells.keys
      @apps = CompareReport.ordered(keys.map(&:first).uniq, APPS)
      @sizes = keys.map { |k| k[1] }.uniq.sort
      @sockets = CompareReport.ordered(keys.map { |k| k[2] }.uniq, SOCKETS)
      @servers = CompareReport.ordered(keys.map(&:last).uniq, SERVERS.keys)
    end

    def write
      puts text
      File.write(File.join(@out, "compare.md"), markdown)
      File.write(File.join(@out, "compare.svg"), svg)
      puts
      puts "wrote #{File.join(@out, "compare.md")} and #{File.join(@out, "compare.svg")}"
    end

    private

    def name(server)
      SERVERS.fetch(server, [server]).first
    end

    def colour(server)
      SERVERS.fetch(server, [nil, "#7f7f7f"]).last
    end

    def cell(app, kib, socket, server)
      @cells[[app, kib, socket, server]]
    end

    # [req/s ratio, p99 ratio] to Puma in the same app, size and socket, or nil.
    def ratios(app, kib, socket, server)
      mine = cell(app, kib, socket, server)
      base = cell(app, kib, socket, BASELINE)
      return nil unless mine && base && base.req_s.positive?

      [mine.req_s / base.req_s, base.p99_ms.positive? ? mine.p99_ms / base.p99_ms : nil]
    end

    def missing_note(server, socket)
      server == "webrick" && socket == "unix" ? "n/a (WEBrick listens on TCP only)" : "n/a (not run)"
    end

    def rounds
      @cells.values.map(&:rounds).max
    end

    def conditions
      thin = @meta["thin_threaded"] == "1" ? "Thin --threaded --threadpool-size #{@meta["threads"]}" : "Thin default (one app thread)"
      "tsubame bench -c#{@meta["connections"]} -t#{@meta["client_threads"]}, #{@meta["duration"]} s per run, " \
        "median of #{rounds} round(s); Tsubame/Puma -t #{@meta["threads"]}:#{@meta["threads"]}, #{thin}, " \
        "WEBrick one thread per connection; #{machine}, #{load}, #{@meta["date"]}"
    end

    def machine
      cpu = @meta["cpu"].to_s.strip
      "#{@meta["cores"]} cores#{" (#{cpu})" unless cpu.empty?}"
    end

    # Load average (1, 5, 15 min) when the run started and when it ended.
    def load
      start = @meta["load_start"]
      start ? "load #{start} at the start, #{@meta["load"]} at the end" : "load #{@meta["load"]} at the end"
    end

    def text
      lines = ["body apps: #{conditions}"]
      lines << format("%-8s %8s %-6s %-8s %10s %8s %10s %8s %7s", "app", "size", "socket", "server", "req/s", "x Puma",
                      "p99", "x Puma", "failed")
      each_row do |app, kib, socket, server|
        c = cell(app, kib, socket, server)
        label = format("%-8s %8s %-6s %-8s", app, "#{kib} KiB", socket, name(server))
        unless c
          lines << "#{label} #{missing_note(server, socket)}"
          next
        end
        rps_ratio, p99_ratio = ratios(app, kib, socket, server)
        lines << format("%s %10s %8s %10s %8s %7d", label, grouping(c.req_s), rps_ratio ? format("%.2fx", rps_ratio) : "-",
                        ms(c.p99_ms), p99_ratio ? format("%.2fx", p99_ratio) : "-", c.failed)
      end
      lines.join("\n")
    end

    def each_row
      @apps.each do |app|
        @sizes.each do |kib|
          @sockets.each do |socket|
            @servers.each { |server| yield app, kib, socket, server }
          end
        end
      end
    end

    def grouping(number)
      CompareReport.grouping(number)
    end

    def ms(value)
      CompareReport.ms(value)
    end

    def markdown
      md = ["Median req/s (2xx responses per second) and p99 latency; in parentheses the ratio to Puma",
            "in the same cell (req/s: higher is better; p99: lower is better); ⚠ marks a cell with failed requests, listed below the tables.", "",
            "Conditions: #{conditions}.", ""]
      @apps.each do |app|
        md << "#### #{app}.ru" << ""
        header = ["size", "socket"] + @servers.map { |s| "#{name(s)} req/s" } + @servers.map { |s| "#{name(s)} p99" }
        md << "| #{header.join(" | ")} |"
        md << "| --- | --- | #{(["---:"] * (@servers.size * 2)).join(" | ")} |"
        @sizes.each do |kib|
          @sockets.each do |socket|
            md << "| #{(["#{kib} KiB", socket] + markdown_cells(app, kib, socket)).join(" | ")} |"
          end
        end
        md << ""
      end
      failed = @cells.select { |_, c| c.failed.positive? }
      unless failed.empty?
        md << "Failed requests (errors or non-2xx, all rounds): " +
              failed.map { |(app, kib, socket, server), c| "#{name(server)} #{app} #{kib} KiB #{socket}: #{c.failed}" }.join("; ")
        md << ""
      end
      md.join("\n")
    end

    def markdown_cells(app, kib, socket)
      rps = []
      p99 = []
      @servers.each do |server|
        c = cell(app, kib, socket, server)
        unless c
          rps << (server == "webrick" && socket == "unix" ? "n/a (TCP only)" : "n/a")
          p99 << "n/a"
          next
        end
        rps_ratio, p99_ratio = ratios(app, kib, socket, server)
        show = server != BASELINE
        rps << "#{grouping(c.req_s)}#{format(" (%.2f×)", rps_ratio) if show && rps_ratio}#{" ⚠" if c.failed.positive?}"
        p99 << "#{ms(c.p99_ms)}#{format(" (%.2f×)", p99_ratio) if show && p99_ratio}"
      end
      rps + p99
    end

    # Panels in a grid: a row per app, a column per size. In each panel a
    # group of bars per socket, a bar per server (its own y scale), the
    # ratio to Puma written above each bar.
    PANEL_W = 330
    PANEL_H = 210
    PLOT_LEFT = 48
    PLOT_TOP = 26
    PLOT_BOTTOM = 36
    BAR_W = 26
    BAR_GAP = 3
    GROUP_GAP = 28
    TOP = 92

    def svg
      width = [(PANEL_W * @sizes.size) + 20, 780].max
      height = TOP + PANEL_H * @apps.size + 10
      out = []
      out << %(<svg xmlns="http://www.w3.org/2000/svg" width="#{width}" height="#{height}" viewBox="0 0 #{width} #{height}" ) +
             %(font-family="Helvetica, Arial, sans-serif" font-size="11">)
      out << %(<rect width="#{width}" height="#{height}" fill="#ffffff"/>)
      out << %(<text x="10" y="22" font-size="15" font-weight="bold">Requests per second by server (median of #{rounds} round(s)); ratio to Puma above each bar</text>)
      wrap(conditions, (width - 20) / 5.5).each_with_index do |line, i|
        out << %(<text x="10" y="#{38 + (i * 13)}" font-size="10" fill="#555555">#{CompareReport.escape(line)}</text>)
      end
      legend(out)
      @apps.each_with_index do |app, row|
        @sizes.each_with_index do |kib, col|
          panel(out, app, kib, 10 + col * PANEL_W, TOP + row * PANEL_H)
        end
      end
      out << "</svg>"
      "#{out.join("\n")}\n"
    end

    # Lines of at most `width` characters, broken at spaces (two at most).
    def wrap(text, width)
      lines = [+""]
      text.split(" ").each do |word|
        lines << +"" if !lines.last.empty? && lines.last.size + word.size + 1 > width && lines.size < 2
        lines.last << " " unless lines.last.empty?
        lines.last << word
      end
      lines
    end

    def legend(out)
      x = 10
      @servers.each do |server|
        out << %(<rect x="#{x}" y="62" width="12" height="12" fill="#{colour(server)}"/>)
        out << %(<text x="#{x + 16}" y="72">#{CompareReport.escape(name(server))}</text>)
        x += 24 + (name(server).size * 7)
      end
      return unless @servers.include?("webrick") && @sockets.include?("unix")

      out << %(<text x="#{x + 10}" y="72" fill="#555555">WEBrick has no unix socket listener: n/a on unix</text>)
    end

    def panel(out, app, kib, left, top)
      plot_h = PANEL_H - PLOT_TOP - PLOT_BOTTOM
      base_y = top + PLOT_TOP + plot_h
      values = @sockets.flat_map { |socket| @servers.map { |server| cell(app, kib, socket, server)&.req_s || 0 } }
      scale_max, step = axis(values.max)
      out << %(<text x="#{left + PLOT_LEFT}" y="#{top + 14}" font-size="12" font-weight="bold">#{CompareReport.escape("#{app}.ru, #{kib} KiB")}</text>)
      (scale_max / step).round.downto(0) do |i|
        value = step * i
        y = (base_y - (plot_h * value / scale_max)).round(1)
        out << %(<line x1="#{left + PLOT_LEFT}" y1="#{y}" x2="#{left + PANEL_W - 12}" y2="#{y}" stroke="#{i.zero? ? "#333333" : "#e0e0e0"}"/>)
        out << %(<text x="#{left + PLOT_LEFT - 4}" y="#{y + 4}" text-anchor="end" fill="#555555">#{CompareReport.compact(value)}</text>)
      end
      out << %(<text x="#{left + 10}" y="#{top + PLOT_TOP + (plot_h / 2)}" font-size="10" fill="#555555" ) +
             %(transform="rotate(-90 #{left + 10} #{top + PLOT_TOP + (plot_h / 2)})" text-anchor="middle">req/s</text>)
      group_w = (@servers.size * (BAR_W + BAR_GAP)) - BAR_GAP
      @sockets.each_with_index do |socket, g|
        gx = left + PLOT_LEFT + 14 + (g * (group_w + GROUP_GAP))
        out << %(<text x="#{gx + (group_w / 2.0)}" y="#{base_y + 16}" text-anchor="middle">#{socket}</text>)
        @servers.each_with_index do |server, b|
          bar(out, app, kib, socket, server, gx + (b * (BAR_W + BAR_GAP)), base_y, plot_h, scale_max)
        end
      end
    end

    def bar(out, app, kib, socket, server, x, base_y, plot_h, scale_max)
      c = cell(app, kib, socket, server)
      mid = x + (BAR_W / 2.0)
      unless c
        out << %(<text x="#{mid}" y="#{base_y - 4}" font-size="8" text-anchor="middle" fill="#999999">n/a</text>)
        return
      end
      h = scale_max.positive? ? (plot_h * c.req_s / scale_max).round(1) : 0
      rps_ratio, = ratios(app, kib, socket, server)
      tip = "#{name(server)}, #{app}.ru #{kib} KiB over #{socket}: #{grouping(c.req_s)} req/s, p99 #{ms(c.p99_ms)}"
      tip += format(", %.2f× Puma", rps_ratio) if rps_ratio && server != BASELINE
      tip += ", #{c.failed} failed" if c.failed.positive?
      out << %(<rect x="#{x}" y="#{(base_y - h).round(1)}" width="#{BAR_W}" height="#{h}" fill="#{colour(server)}">) +
             %(<title>#{CompareReport.escape(tip)}</title></rect>)
      label = rps_ratio ? format("%.2f×", rps_ratio) : CompareReport.compact(c.req_s)
      out << %(<text x="#{mid}" y="#{(base_y - h - 3).round(1)}" font-size="8.5" text-anchor="middle">#{label}</text>)
    end

    # [top of the axis, tick step]: the step is 1, 2, 2.5 or 5 times a
    # power of ten, at most five steps up to a top at or above value.
    def axis(value)
      return [1, 0.25] unless value.positive?

      power = 10.0**Math.log10(value / 5.0).floor
      step = [1, 2, 2.5, 5, 10].map { |m| m * power }.find { |v| (value / v).ceil <= 5 }
      [step * (value / step).ceil, step]
    end
  end
end

if $PROGRAM_NAME == __FILE__
  case ARGV
  in ["summary", path] then puts CompareReport.summary(path)
  in ["report", out] then CompareReport::Report.new(out).write
  else abort "usage: ruby #{$PROGRAM_NAME} summary RUN.json | report OUT_DIR"
  end
end
