# frozen_string_literal: true

module Tsubame
  # The control app's endpoints (Puma's names), over a target: the cluster
  # master (Tsubame::Cluster) or, in single mode, the Launcher. Both answer
  # #stats, #command(name), #ask_workers(type) and #cluster?.
  #
  # Actions are queued for the target's own thread (the master's loop, or
  # the server's stop) and answered at once; the answer says what was
  # started, not that it finished.
  class ControlApp
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
    end

    # Returns [status, body Hash or Array].
    def call(action, _params = {})
      if (command, message = ACTIONS[action])
        @target.command(command)
        [200, { "message" => message }]
      elsif (command, message = CLUSTER_ACTIONS[action])
        cluster_action(command, message)
      else
        query(action)
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

    def query(action)
      case action
      when "stats" then [200, @target.stats]
      when "gc" then [200, gc]
      when "gc-stats" then [200, GC.stat]
      when "thread-backtraces" then [200, backtraces]
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
