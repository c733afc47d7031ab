# frozen_string_literal: true

require "tsubame/config/hooks"
require "tsubame/cluster/worker_link"

module Tsubame
  # fork_worker (docs/REFORK.md): worker 0 is the mold the other workers
  # are forked from, so they start with its warmed heap and share its pages
  # copy-on-write. A thread waits for the master's batches on the
  # ForkLink; for each, the worker stops serving, and its main thread forks
  # the batch (#fork_batch) and serves again.
  class Mold
    def initialize(worker, fork_link, log)
      @worker = worker
      @fork_link = fork_link
      @log = log
      @batches = Thread::Queue.new
      @children = []
    end

    def start
      @thread = Thread.new { receive_batches }
      self
    end

    # The next batch the master asked for, or nil (the server stopped for
    # another reason: a TERM).
    def take_batch
      @batches.empty? ? nil : @batches.pop
    end

    # In the main thread, with the server stopped. Puma's order: the
    # before_refork hooks, then each worker (before_worker_fork, fork,
    # after_worker_fork, here in worker 0), then after_refork.
    def fork_batch(batch)
      options = @worker.options
      Hooks.run_logged(options[:before_refork], "before_refork", @log)
      compact_heap
      batch.each { |index, phase, io| fork_one(index, phase, io, batch) }
      Hooks.run_logged(options[:after_refork], "after_refork", @log)
    ensure
      batch.each { |_, _, io| io.close unless io.closed? }
    end

    private

    def receive_batches
      while (batch = @fork_link.receive)
        @batches << batch
        @worker.pause_for_fork
      end
    rescue IOError
      nil
    end

    # Pages no child writes to are pages that stay shared. A young object
    # is written to when a later collection promotes it (its age is in its
    # header), so four full collections first make every survivor old, as
    # nakayoshi_fork does; then GC.compact moves the live objects together
    # (Ruby >= 2.7 where the platform allows), so the children's new objects
    # land on fewer shared pages. Last, malloc_trim: the memory those
    # collections freed goes back to the OS instead of being a resident
    # page every child shares and then copies when it allocates there.
    def compact_heap
      4.times { GC.start(full_mark: true, immediate_sweep: true) }
      GC.compact if GC.respond_to?(:compact)
    rescue NotImplementedError
      nil
    ensure
      @worker.trim_memory
    end

    def fork_one(index, phase, io, batch)
      options = @worker.options
      Hooks.run(options[:before_worker_fork], index)
      pid = fork { exit!(child(index, phase, io, batch)) }
      io.close
      # Reaped here (worker 0 is its parent); the master watches it by pid.
      @children << Process.detach(pid)
      Hooks.run_logged(options[:after_worker_fork], "after_worker_fork", @log, index)
      @log.info("- Worker #{index} forked from worker 0 (PID: #{pid})")
    rescue SystemCallError => e
      @log.error("! worker 0 cannot fork worker #{index}: #{e.message}")
    end

    # In the new worker: let go of what is worker 0's (its link and fork
    # link, the other new workers' links), then serve. exit!, not exit: the
    # at_exit handlers belong to worker 0's process.
    def child(index, phase, io, batch)
      batch.each { |_, _, other| other.close unless other == io || other.closed? }
      @fork_link.close
      @worker.link.close
      link = WorkerLink.new(io)
      tag = @worker.options[:tag] ? " [#{@worker.options[:tag]}]" : ""
      Process.setproctitle("tsubame: cluster worker #{index}: #{@worker.master_pid}#{tag}")
      Worker.new(index: index, phase: phase, master_pid: @worker.master_pid, options: @worker.options,
                 listeners: @worker.listeners, link: link, app: @worker.app, log: @log, forked: true,
                 handoff: @worker.handoff).run
    rescue Exception => e # rubocop:disable Lint/RescueException
      # A TERM before its server existed (Worker#stop exits): it stopped, it
      # did not fail; exit! still, for the reason above.
      return e.status if e.is_a?(SystemExit)

      @log.error("! worker #{index} failed to boot: #{e.class}: #{e.message}\n" \
                 "#{Array(e.backtrace).first(20).join("\n")}")
      1
    ensure
      # exit! does not flush.
      $stdout.flush
      $stderr.flush
    end
  end
end
