# frozen_string_literal: true

require "tsubame/control/prometheus"

module Tsubame
  # /metrics: every process's sample (ProcessSample) as Prometheus series.
  # In cluster mode each worker's series carry worker="INDEX" and the
  # master's own (Ruby, memory, the workers' lifecycle) worker="master";
  # in single mode there is no worker label.
  module Metrics
    module_function

    HISTOGRAMS = {
      "total" => ["tsubame_http_request_duration_seconds",
                  "From reading the request head to writing the last byte of the response"],
      "queue_wait" => ["tsubame_http_request_queue_wait_seconds",
                       "Time a request waited in the queue for an application thread"],
      "app" => ["tsubame_http_request_app_seconds",
                "Time from an application thread taking a request to its response head"],
      "upstream_wait" => ["tsubame_http_request_upstream_wait_seconds",
                          "Time from the X-Request-Start a proxy stamped to the engine reading the head"]
    }.freeze

    # [stats key, metric name, help]: engine counters kept before /metrics.
    ENGINE_COUNTERS = [
      ["connections_total", "tsubame_connections_accepted_total", "Connections accepted"],
      ["read_timeouts", "tsubame_http_read_timeouts_total",
       "Requests answered 408: a slow client's head or body did not arrive in time"],
      ["rejected_total", "tsubame_http_rejected_total",
       "Requests refused as malformed or over a limit (parse errors, 4xx/5xx from the engine)"],
      ["client_disconnects", "tsubame_client_disconnects_total",
       "Clients gone with a request half sent or a response half written"],
      ["accept_errors", "tsubame_accept_errors_total", "accept() failures (descriptors, memory)"],
      ["spool_errors", "tsubame_spool_errors_total", "Request bodies that could not be spooled to disk"],
      ["proxy_refused", "tsubame_proxy_protocol_refused_total", "Connections refused for a bad PROXY header"],
      ["stuck_threads", "tsubame_stuck_threads_total", "Threads still running a request past its timeout and grace"]
    ].freeze

    SHED_REASONS = %w[queue_full queue_timeout request_timeout fiber_limit connection_limit upload_limit].freeze

    # samples: ProcessSample hashes; cluster: the master's stats (or nil
    # in single mode).
    def render(samples, cluster: nil)
      text = PrometheusText.new
      samples.each do |sample|
        labels = labels_for(sample, cluster)
        ruby(text, labels, sample["ruby"])
        engine(text, labels, sample) if sample["stats"]
      end
      workers(text, cluster) if cluster
      text.to_s
    end

    def labels_for(sample, cluster)
      return {} unless cluster

      { "worker" => sample["index"].nil? ? "master" : sample["index"].to_s }
    end

    def engine(text, labels, sample)
      engine = sample["engine"]
      stats = sample["stats"]
      requests(text, labels, engine) if engine["enabled"]
      ENGINE_COUNTERS.each { |key, name, help| text.add(name, "counter", help, labels, stats[key].to_i) }
      SHED_REASONS.each do |reason|
        text.add("tsubame_requests_shed_total", "counter", "Requests the engine answered 503 itself, by reason",
                 labels.merge("reason" => reason), stats.fetch("shed", {})[reason].to_i)
      end
      Array(engine["probes"]).each do |probe, result, count|
        text.add("tsubame_probes_total", "counter", "Health (liveness) and readiness answers, by result",
                 labels.merge("probe" => probe, "result" => result), count)
      end
      text.add("tsubame_access_log_lines_total", "counter", "Access log lines written", labels,
               engine["access_log_lines"])
      text.add("tsubame_access_log_dropped_total", "counter",
               "Access log lines dropped because the writer was behind (slow disk)", labels,
               engine["access_log_dropped"])
      gauges(text, labels, sample, stats)
    end

    def requests(text, labels, engine)
      Array(engine["requests"]).each do |klass, method, protocol, count|
        text.add("tsubame_http_requests_total", "counter",
                 "Requests answered, by status class, method and protocol",
                 labels.merge("code" => klass, "method" => method, "protocol" => protocol), count)
      end
      HISTOGRAMS.each do |key, (name, help)|
        histogram = engine[key]
        text.histogram(name, help, labels, engine["bounds"], histogram["buckets"], histogram["sum"])
      end
      text.add("tsubame_http_request_body_bytes_total", "counter", "Request body bytes received", labels,
               engine["request_body_bytes"])
      text.add("tsubame_http_response_body_bytes_total", "counter", "Response body bytes sent", labels,
               engine["response_body_bytes"])
    end

    def gauges(text, labels, sample, stats)
      text.add("tsubame_connections_open", "gauge", "Open client connections", labels,
               stats["connections_active"].to_i)
      text.add("tsubame_queue_depth", "gauge", "Requests waiting for an application thread", labels,
               stats["backlog"].to_i)
      text.add("tsubame_threads_max", "gauge", "Application threads", labels, sample["threads_max"])
      text.add("tsubame_threads_busy", "gauge", "Application threads running a request", labels,
               sample["threads_busy"])
      text.add("tsubame_fibers_running", "gauge", "Requests running on fibers (fiber mode)", labels,
               stats["fibers_running"].to_i)
      text.add("tsubame_fiber_queue_depth", "gauge", "Requests waiting for a fiber loop (fiber mode)", labels,
               stats["fiber_backlog"].to_i)
      text.add("tsubame_app_errors_total", "counter", "Exceptions the application raised", labels,
               sample["app_errors"])
    end

    def ruby(text, labels, ruby)
      return unless ruby

      text.add("tsubame_ruby_gc_runs_total", "counter", "Ruby GC runs, by kind",
               labels.merge("kind" => "minor"), ruby["gc_minor"])
      text.add("tsubame_ruby_gc_runs_total", "counter", "Ruby GC runs, by kind",
               labels.merge("kind" => "major"), ruby["gc_major"])
      text.add("tsubame_ruby_gc_time_seconds_total", "counter", "Time spent in Ruby GC", labels,
               ruby["gc_time_ms"] && ruby["gc_time_ms"] / 1000.0)
      text.add("tsubame_ruby_heap_live_slots", "gauge", "Ruby heap slots holding live objects", labels,
               ruby["heap_live_slots"])
      text.add("tsubame_ruby_threads", "gauge", "Ruby threads in the process", labels, ruby["threads"])
      text.add("tsubame_process_resident_memory_bytes", "gauge", "Resident memory (RSS)", labels,
               ruby["rss_bytes"])
    end

    def workers(text, cluster)
      events = cluster["worker_events"]
      text.add("tsubame_workers", "gauge", "Workers serving or starting (not stopping)", {}, cluster["workers"])
      text.add("tsubame_workers_booted", "gauge", "Workers that finished booting", {}, cluster["booted_workers"])
      text.add("tsubame_workers_wanted", "gauge", "Workers the master keeps running", {}, cluster["workers_wanted"])
      text.add("tsubame_worker_boots_total", "counter", "Workers that booted", {}, events["boots"])
      text.add("tsubame_worker_deaths_total", "counter", "Serving workers that exited unasked", {}, events["deaths"])
      events["kills"].each do |reason, count|
        text.add("tsubame_worker_kills_total", "counter", "Workers the master killed (SIGKILL), by reason",
                 { "reason" => reason }, count)
      end
      events["restarts"].each do |reason, count|
        text.add("tsubame_worker_restarts_total", "counter", "Workers replaced, by reason",
                 { "reason" => reason }, count)
      end
    end
  end
end
