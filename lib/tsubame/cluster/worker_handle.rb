# frozen_string_literal: true

require "time"
require "tsubame/support/clock"
require "tsubame/support/process_info"
require "tsubame/cluster/websocket_handoff"

module Tsubame
  # The master's record of one worker process.
  class WorkerHandle
    include Clock

    attr_reader :pid, :index, :link, :started_at, :booted_at, :last_checkin, :last_status,
                :stop_deadline, :stop_reason
    # phase: a refork moves worker 0 to the new phase without replacing it.
    # fork_link: worker 0's ForkLink under fork_worker. auto_reforked: the
    # refork after fork_worker's request count was started for it.
    attr_accessor :replacement, :replaces, :phase, :fork_link, :auto_reforked
    # Its RSS in MB at the last boot or ping (`sample_rss`), nil before.
    attr_reader :rss_mb
    # Set once the worker exited (Puma's WorkerHandle#process_status, for
    # after_worker_shutdown hooks).
    attr_accessor :process_status

    # adopted: a worker of the master this one replaced by re-executing
    # itself (hot restart). It has no link and is stopped once the new
    # workers serve.
    # forked: forked by worker 0 (fork_worker), so not the master's child;
    # its pid is known once it says so ("forked").
    def initialize(pid:, index:, phase:, link:, adopted: false, forked: false)
      @pid = pid
      @forked = forked
      @index = index
      @phase = phase
      @link = link
      @adopted = adopted
      @started_at = monotonic
      @started_wall = Time.now
      @booted_at = nil
      @last_checkin = nil
      @last_checkin_wall = nil
      @last_status = {}
      @stop_deadline = nil
      @stop_reason = nil
      @rss_mb = nil
      @replacement = nil
      @replaces = nil
      @replaced = false
      @killed = false
    end

    # The master sent it SIGKILL; it is gone once reaped.
    def killed!
      @killed = true
    end

    def killed?
      @killed
    end

    def adopted?
      @adopted
    end

    # A WebSocket worker (websocket_workers): it takes no connection from
    # the listeners, only the upgrade requests the others hand over.
    def websocket?
      WebsocketHandoff.index?(@index)
    end

    def forked?
      @forked
    end

    # Whether the master can wait(2) for it: otherwise its end is seen by
    # polling (Cluster#reap_others).
    def child?
      !@forked && !@adopted
    end

    def pid=(pid)
      @pid ||= pid
    end

    # The index it serves under, after a cull moved it (worker_culling_strategy).
    def index=(index)
      @index = index
    end

    # Stopped because its replacement booted (recycling, phased restart).
    def replaced!
      @replaced = true
    end

    def replaced?
      @replaced ? true : false
    end

    def booted?
      !@booted_at.nil?
    end

    def stopping?
      !@stop_deadline.nil?
    end

    # Serving, or about to: not on its way out.
    def active?
      !stopping? && !adopted?
    end

    # Reads the process's RSS now. A worker's last ping can be read after
    # it exited (a replaced worker stopping, its /proc entry a zombie's
    # with no VmRSS): the last reading then stands, rather than stats
    # showing no RSS for it.
    def sample_rss
      @rss_mb = ProcessInfo.rss_mb(@pid) || @rss_mb
    end

    def booted!
      @booted_at = monotonic
      checked_in!
    end

    def checked_in!(status = nil)
      @last_checkin = monotonic
      @last_checkin_wall = Time.now
      @last_status = status if status
    end

    def stopping!(reason, deadline)
      @stop_reason = reason
      @stop_deadline = monotonic + deadline
    end

    def boot_seconds
      booted? ? @booted_at - @started_at : monotonic - @started_at
    end

    # Seconds since the worker was last heard from (its boot counts).
    def silent_for
      monotonic - (@last_checkin || @started_at)
    end

    # Threads still running a request past request_timeout_grace: the
    # thread cannot be freed, so the worker has to be replaced.
    def stuck_threads
      @last_status.fetch("engine", {}).fetch("stuck_threads", 0).to_i
    end

    def requests_count
      @last_status.fetch("requests_count", 0).to_i
    end

    # One entry of the stats' worker_status: Puma's fields, then Tsubame's.
    def to_status
      {
        "started_at" => @started_wall.utc.iso8601,
        "pid" => @pid,
        "index" => @index,
        "phase" => @phase,
        "booted" => booted?,
        "last_checkin" => @last_checkin_wall&.utc&.iso8601,
        "last_status" => @last_status,
        "rss_mb" => @rss_mb,
        "stopping" => stopping?,
        "role" => websocket? ? "websocket" : "http",
        "publish_dropped" => @link ? @link.dropped : 0
      }
    end

    def describe
      return "Old worker (PID: #{@pid})" if adopted?

      "#{WebsocketHandoff.name_of(@index)} (PID: #{@pid || "not forked yet"})"
    end

    private
  end
end
