# frozen_string_literal: true

require "tsubame/cluster/fork_link"
require "tsubame/cluster/worker_link"
require "tsubame/cluster/worker_handle"
require "tsubame/support/process_info"

module Tsubame
  # The master's side of fork_worker (docs/REFORK.md), mixed into Cluster:
  # worker 0 is forked by the master, every other worker by worker 0, and a
  # refork (`tsubame ctl refork`, URG, or once worker 0 has served
  # fork_worker's count of requests) replaces workers 1.. with new forks of
  # the now warm worker 0.
  module Reforking
    private

    # The worker the others are forked from: worker 0, booted, serving,
    # with its fork link open.
    def mold
      @workers.find { |w| w.index == 0 && w.active? && w.booted? && w.fork_link && !w.fork_link.closed? }
    end

    # URG, `tsubame ctl refork`, or the request count. Like Puma: a new
    # phase, which worker 0 joins as it is; the others, now of an older
    # phase, are replaced by forks of it.
    def start_refork(why)
      return if @stopping || @leave_at
      return @log.error("! refork needs fork_worker") unless fork_worker?
      return @log.info("* Refork not started: a restart is already under way") if @phased_restart

      zero = mold
      return @log.info("* Refork not started: worker 0 is not serving yet") unless zero

      @phase += 1
      zero.phase = @phase
      @phased_restart = :refork
      @log.info("- Starting worker refork, phase: #{@phase} (#{why})")
      @systemd.reloading("Refork to phase #{@phase}")
    end

    # Once worker 0 has served fork_worker's count (0: never on its own).
    # Puma reforks once, in phase 0; here once per worker 0 process, so a
    # worker 0 started by a phased restart warms the next generation too.
    def check_auto_refork(worker)
      count = @options[:fork_worker]
      return unless fork_worker? && count.positive? && worker.index == 0 && !worker.auto_reforked
      return unless worker.requests_count >= count && worker == mold

      worker.auto_reforked = true
      start_refork("worker 0 served #{worker.requests_count} requests, fork_worker #{count}")
    end

    # Workers of indexes 1.. that are missing, forked from worker 0 in one
    # batch once it serves (until then they wait for it). Returns their
    # handles, or nil.
    def fork_missing(indexes)
      zero = mold
      fork_from_mold(zero, indexes.map { |index| [index, nil] }) if zero && indexes.any?
    end

    # pairs: [[index, worker it replaces or nil], ...]. One request to
    # worker 0, which stops serving once for the whole batch. Returns the
    # new handles (never forked if worker 0 was gone: they fail as boots).
    def fork_from_mold(zero, pairs)
      batch = []
      handles = pairs.map do |index, old|
        master_end, worker_end = WorkerLink.pair
        batch << [index, @phase, worker_end.io]
        handle = WorkerHandle.new(pid: nil, index: index, phase: @phase, link: master_end, forked: true)
        if old
          handle.replaces = old
          old.replacement = handle
        end
        handle
      end
      @lock.synchronize { @workers.concat(handles) }
      sent = zero.fork_link.request(batch)
      batch.each { |_, _, io| io.close }
      # Worker 0 is gone: these were never forked.
      handles.each { |handle| handle.link.close } unless sent
      handles
    end

    # Phased restart and refork under fork_worker: worker 0 first (from
    # the master, with the new code; a refork keeps it), then every older
    # worker at once, forked from the new worker 0. Returns true when it
    # handled the step.
    def advance_fork_worker_restart
      return false unless fork_worker?
      return true if replacing?

      zero = @workers.find { |w| w.index == 0 && w.active? }
      if zero && zero.phase < @phase
        replace(zero, "is from phase #{zero.phase}", "phased_restart") if zero.booted?
        return true
      end
      older = @workers.select { |w| w.active? && w.booted? && w.phase < @phase && !w.replacement }
      # The WebSocket workers come from the master, not from worker 0: a
      # phased restart replaces them one at a time; a refork (warmer forks
      # of worker 0) leaves them and their connections alone.
      websocket, older = older.partition(&:websocket?)
      if older.any?
        (zero = mold) && fork_from_mold(zero, older.map { |w| [w.index, w] })
      elsif websocket.any? && @phased_restart == :refork
        websocket.each { |w| w.phase = @phase }
      elsif websocket.any?
        replace(websocket.first, "is from phase #{websocket.first.phase}", "phased_restart")
      elsif @workers.none? { |w| w.active? && w.phase < @phase }
        finish_phased_restart
      end
      true
    end

    # A worker that is not the master's child (forked by worker 0, or a
    # previous master's): it is gone when kill(0) says so, or, never
    # forked, when its link closed without a pid.
    def reap_others
      @workers.reject(&:child?).each do |worker|
        if worker.pid.nil?
          exited(worker, nil) if worker.link.nil? || worker.link.closed?
        elsif !ProcessInfo.alive?(worker.pid)
          exited(worker, nil)
        end
      end
    end

    # "forked": the first word of a worker worker 0 forked.
    def forked(worker, message)
      worker.pid = message["pid"].to_i
      if worker.killed?
        signal(worker, "KILL")
      elsif worker.stopping?
        signal(worker, worker.stop_reason == "halt" ? "QUIT" : "TERM")
      end
    end
  end
end
