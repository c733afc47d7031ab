# frozen_string_literal: true

require "tsubame/support/process_info"

module Tsubame
  # What one process reports for /metrics and the status page, as a Hash
  # that crosses the worker link as JSON: the engine's counters (kept by
  # the engine per request; read here, at a scrape) and what Ruby knows
  # about itself. Runs on the control app's thread or a worker's check-in
  # thread, never per request.
  module ProcessSample
    module_function

    # server: a Tsubame::Server, or nil for the master (no engine).
    def take(server, index: nil)
      sample = { "pid" => Process.pid, "index" => index, "ruby" => ruby_stats }
      return sample unless server

      status = server.status
      sample.merge(
        "engine" => server.metrics,
        "stats" => status["engine"],
        "threads_max" => status["max_threads"],
        "threads_busy" => status["requests_in_flight"],
        "app_errors" => status["app_errors"]
      )
    end

    def ruby_stats
      gc = GC.stat
      {
        "gc_count" => gc[:count],
        "gc_minor" => gc[:minor_gc_count],
        "gc_major" => gc[:major_gc_count],
        "gc_time_ms" => gc[:time],
        "heap_live_slots" => gc[:heap_live_slots],
        "rss_bytes" => ProcessInfo.rss_bytes(Process.pid),
        "threads" => Thread.list.size
      }
    end
  end
end
