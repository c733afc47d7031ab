# frozen_string_literal: true

require "time"
require "tsubame/support/named_thread"

module Tsubame
  # What the live status page shows, sampled once a second while a page is
  # open (a thread that stops itself after IDLE_STOP seconds without a
  # reader): totals across workers, per-worker rows, requests per second
  # and p50/p99 of the request duration over the last minute (from the
  # engine's histogram: the difference between now and a minute ago,
  # interpolated within a bucket as Prometheus' histogram_quantile does).
  class StatusFeed
    INTERVAL = 1.0
    WINDOW = 60
    IDLE_STOP = 10.0

    # sampler: returns [samples, cluster stats or nil] (the target's
    # #metric_samples).
    def initialize(sampler)
      @sampler = sampler
      @lock = Mutex.new
      @changed = ConditionVariable.new
      @history = []
      @latest = nil
      @thread = nil
      @wanted_at = 0.0
    end

    # The latest snapshot (Hash), waiting for the first one if needed; the
    # sampler runs while it is asked for.
    def latest
      @lock.synchronize do
        wanted
        @changed.wait(@lock, 5) unless @latest
        @latest
      end
    end

    # Blocks until a snapshot newer than `seen` (or `timeout`).
    def next_after(seen, timeout)
      @lock.synchronize do
        wanted
        @changed.wait(@lock, timeout) if @latest.equal?(seen)
        @latest
      end
    end

    private

    # Under the lock: a reader is here, so the sampler runs. A sampler
    # started after a pause starts a new history (its rates would span
    # the pause).
    def wanted
      @wanted_at = now
      return if @thread&.alive?

      @history.clear
      @thread = NamedThread.start("tsubame-status") { run }
    end

    def now
      Process.clock_gettime(Process::CLOCK_MONOTONIC)
    end

    def run
      loop do
        break if @lock.synchronize { now - @wanted_at > IDLE_STOP }

        started = now
        snapshot = build(*@sampler.call)
        @lock.synchronize do
          @latest = snapshot
          @changed.broadcast
        end
        sleep([INTERVAL - (now - started), 0.05].max)
      end
    rescue StandardError => e
      warn "tsubame: status page sampler failed: #{e.class}: #{e.message}"
    ensure
      @lock.synchronize { @thread = nil }
    end

    # Each point keeps every process's counters by pid, so that rates and
    # the window's histogram are differences per process: a worker that
    # was replaced (a new pid, counters from zero) adds what it served
    # instead of pulling the totals down.
    def build(samples, cluster)
      workers = samples.select { |s| s["stats"] }
      point = { "at" => now, "requests" => workers.sum { |s| requests(s) },
                "shed" => workers.sum { |s| s["stats"]["shed_total"].to_i },
                "by_pid" => workers.to_h { |s| [s["pid"], [requests(s), s.dig("engine", "total", "buckets")]] } }
      @history << point
      @history.shift while @history.size > WINDOW + 1
      summary(workers, cluster, point)
    end

    def requests(sample)
      Array(sample.dig("engine", "requests")).sum { |row| row[3] }
    end

    # Requests served between two points, process by process.
    def served_between(earlier, later)
      later["by_pid"].sum do |pid, (count, _)|
        before = earlier["by_pid"][pid]
        before ? [count - before[0], 0].max : count
      end
    end

    # The cumulative duration buckets of the requests served between two
    # points, process by process.
    def buckets_between(earlier, later)
      sum = nil
      later["by_pid"].each do |pid, (_, buckets)|
        next unless buckets

        before = earlier["by_pid"].dig(pid, 1)
        sum ||= Array.new(buckets.size, 0)
        buckets.each_index { |k| sum[k] += buckets[k] - (before ? before[k] : 0) }
      end
      sum
    end

    def summary(workers, cluster, point)
      previous = @history[-2]
      first = @history.first
      bounds = workers.first&.dig("engine", "bounds") || []
      window = buckets_between(first, point)
      {
        "time" => Time.now.utc.iso8601,
        "mode" => cluster ? "cluster" : "single",
        "workers" => workers.map { |s| worker_row(s) },
        "workers_wanted" => cluster&.fetch("workers_wanted", nil),
        "threads_busy" => workers.sum { |s| s["threads_busy"].to_i },
        "threads_max" => workers.sum { |s| s["threads_max"].to_i },
        "queue_depth" => workers.sum { |s| s["stats"]["backlog"].to_i },
        "connections" => workers.sum { |s| s["stats"]["connections_active"].to_i },
        "requests_total" => point["requests"],
        "rps" => rate(point, previous),
        "p50_ms" => quantile(0.5, bounds, window),
        "p99_ms" => quantile(0.99, bounds, window),
        "window_seconds" => (point["at"] - first["at"]).round,
        "shed" => shed(workers),
        "shed_total" => point["shed"],
        "recent_events" => cluster ? cluster.dig("worker_events", "recent").last(10).reverse : []
      }
    end

    def worker_row(sample)
      stats = sample["stats"]
      { "index" => sample["index"], "pid" => sample["pid"], "threads_busy" => sample["threads_busy"],
        "threads_max" => sample["threads_max"], "queue" => stats["backlog"].to_i,
        "connections" => stats["connections_active"].to_i, "requests" => requests(sample),
        "rss_mb" => sample.dig("ruby", "rss_bytes") && (sample.dig("ruby", "rss_bytes") / 1_048_576.0).round(1) }
    end

    def shed(workers)
      totals = Hash.new(0)
      workers.each { |s| s["stats"].fetch("shed", {}).each { |reason, n| totals[reason] += n.to_i } }
      totals
    end

    # Requests a second since the previous sample.
    def rate(point, previous)
      return 0.0 unless previous

      elapsed = point["at"] - previous["at"]
      return 0.0 unless elapsed.positive?

      (served_between(previous, point) / elapsed).round(1)
    end

    # Milliseconds, or nil with no requests in the window.
    def quantile(q, bounds, cumulative)
      return nil unless cumulative && !cumulative.empty? && cumulative.last.positive?

      rank = q * cumulative.last
      index = cumulative.index { |count| count >= rank } || (cumulative.size - 1)
      # Past the last finite bound: all that can be said is "over it".
      return (bounds.last * 1000.0).round(2) if index >= bounds.size

      lower = index.zero? ? 0.0 : bounds[index - 1]
      below = index.zero? ? 0 : cumulative[index - 1]
      in_bucket = cumulative[index] - below
      fraction = in_bucket.positive? ? (rank - below) / in_bucket : 1.0
      ((lower + (bounds[index] - lower) * fraction) * 1000.0).round(2)
    end
  end
end
