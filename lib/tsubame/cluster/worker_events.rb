# frozen_string_literal: true

require "time"

module Tsubame
  # The master's count of what happened to its workers, for /metrics and
  # the status page: boots, deaths, kills and replacements by reason, and
  # the last few of them with their time. Written by the master's loop,
  # read by the control app's thread, hence the lock.
  class WorkerEvents
    RECENT = 20

    # Why the master killed a worker (SIGKILL).
    KILL_REASONS = %w[hung boot_timeout stop_timeout].freeze
    # Why it started a replacement for a serving worker.
    RESTART_REASONS = %w[died stuck_threads max_requests max_memory phased_restart].freeze

    def initialize
      @lock = Mutex.new
      @boots = 0
      @deaths = 0
      @kills = KILL_REASONS.to_h { |reason| [reason, 0] }
      @restarts = RESTART_REASONS.to_h { |reason| [reason, 0] }
      @recent = []
    end

    def booted(index, pid)
      record("boot", index, pid, nil) { @boots += 1 }
    end

    # A serving worker exited without being asked to: it is replaced.
    def died(index, pid, how)
      record("death", index, pid, how) do
        @deaths += 1
        @restarts["died"] += 1
      end
    end

    def killed(index, pid, reason)
      record("kill", index, pid, reason) { @kills[reason] += 1 }
    end

    def replaced(index, pid, reason)
      record("restart", index, pid, reason) { @restarts[reason] += 1 }
    end

    def to_h
      @lock.synchronize do
        { "boots" => @boots, "deaths" => @deaths, "kills" => @kills.dup, "restarts" => @restarts.dup,
          "recent" => @recent.dup }
      end
    end

    private

    def record(kind, index, pid, detail)
      @lock.synchronize do
        yield
        @recent << { "time" => Time.now.utc.iso8601, "event" => kind, "worker" => index, "pid" => pid,
                     "detail" => detail }
        @recent.shift while @recent.size > RECENT
      end
    end
  end
end
