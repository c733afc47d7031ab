# frozen_string_literal: true

require "tsubame/control/metrics"
require "tsubame/control/status_feed"
require "tsubame/control/status_page"

module Tsubame
  # The control app's endpoints (Puma's names), over a target: the cluster
  # master (Tsubame::Cluster) or, in single mode, the Launcher. Both answer
  # #stats, #command(name), #ask_workers(type) and #cluster?.
  #
  # Actions are queued for the target's own thread (the master's loop, or
  # the server's stop) and answered at once; the answer says what was
  # started, not that it finished.
  #
  # Most answers are JSON (a Hash or Array body); /metrics and the status
  # page's files are a Raw body, its event stream an EventStream
  # (docs/OBSERVABILITY.md).
  class ControlApp
    Raw = Struct.new(:content_type, :text, :headers)
    EventStream = Struct.new(:feed)

    ACTIONS = {
      "stop" => [:stop, "stopping"],
      "halt" => [:halt, "halting"],
      "restart" => [:hot_restart, "restarting (hot restart)"]
    }.freeze

    CLUSTER_ACTIONS = {
      "phased-restart" => [:phased_restart, "phased restart started"],
      "worker-count-up" => [:worker_count_up, "adding a worker"],
      "worker-count-down" => [:worker_count_down, "removing a worker"],
      "refork" => [:refork, "refork started"]
    }.freeze

    def initialize(target)
      @target = target
      @feed = StatusFeed.new(-> { target.metric_samples })
    end

    # Returns [status, body Hash or Array, Raw or EventStream].
    def call(action, params = {})
      if (command, message = ACTIONS[action])
        @target.command(command)
        [200, { "message" => message }]
      elsif (command, message = CLUSTER_ACTIONS[action])
        cluster_action(command, message)
      else
        query(action, params)
      end
    end

    private

    def cluster_action(command, message)
      return [409, { "error" => "needs cluster mode (workers > 0)" }] unless @target.cluster?
      if command == :phased_restart && @target.preloaded?
        return [409, { "error" => "phased restart is not available with preload_app!; use restart" }]
      end
      return [409, { "error" => "refork needs fork_worker" }] if command == :refork && !@target.fork_worker?

      @target.command(command)
      [200, { "message" => message }]
    end

    def query(action, params)
      case action
      when "stats" then [200, @target.stats]
      when "gc" then [200, gc]
      when "gc-stats" then [200, GC.stat]
      when "thread-backtraces" then [200, backtraces]
      when "metrics" then [200, metrics]
      when "status/events" then [200, EventStream.new(@feed)]
      else status_page(action, params)
      end
    end

    def metrics
      samples, cluster = @target.metric_samples
      Raw.new(PrometheusText::CONTENT_TYPE, Metrics.render(samples, cluster: cluster), {})
    end

    def status_page(action, params)
      case action
      when "status.json" then [200, @feed.latest || {}]
      when ->(name) { StatusPage.file?(name) }
        type, text = StatusPage.file(action, params["token"])
        [200, Raw.new(type, text, { "content-security-policy" => StatusPage::CSP, "cache-control" => "no-store" })]
      else [404, { "error" => "unknown action #{action.inspect}" }]
      end
    end

    def gc
      GC.start
      replies = @target.ask_workers("gc")
      { "message" => "GC done", "pids" => [Process.pid] + replies.map { |reply| reply["pid"] } }
    end

    # Puma's list of { name, backtrace }, one per thread, here with the
    # process each thread belongs to: the master's own, then each worker's
    # app threads (what an operator usually wants to see).
    def backtraces
      role = @target.cluster? ? "master" : "single"
      own = Thread.list.map do |thread|
        { "pid" => Process.pid, "process" => role, "name" => thread.name || thread.inspect,
          "backtrace" => thread.backtrace || [] }
      end
      own + @target.ask_workers("backtraces").flat_map do |reply|
        Array(reply["data"]).map { |thread| { "pid" => reply["pid"], "process" => "worker" }.merge(thread) }
      end
    end
  end
end

module Tsubame
  # The app behind metrics_url: /metrics alone, so a scraper needs no
  # token and learns nothing else.
  class MetricsApp
    def initialize(target)
      @control = ControlApp.new(target)
    end

    def call(action, _params = {})
      return @control.call("metrics") if action == "metrics"

      [404, { "error" => "only /metrics is served here" }]
    end
  end
end
