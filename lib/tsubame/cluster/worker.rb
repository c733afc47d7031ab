# frozen_string_literal: true

require "tsubame/config/app_loader"
require "tsubame/config/hooks"
require "tsubame/config/boot_checks"
require "tsubame/support/log_redirect"
require "tsubame/support/clock"
require "tsubame/support/process_info"
require "tsubame/cluster/mold"
require "tsubame/control/process_sample"

module Tsubame
  # One cluster worker, running in the child the master forked: loads the
  # app (unless the master preloaded it), serves the inherited listeners
  # with its own engine and thread pool, and checks in with the master.
  class Worker
    include Clock

    # Signals meant for the master that may reach a worker too, e.g. sent
    # to the whole process group. A Ruby handler that does nothing, rather
    # than "IGNORE", because ignored signals stay ignored in programs the
    # app execs.
    MASTER_SIGNALS = %w[USR1 USR2 TTIN TTOU].freeze

    # fork_link: worker 0's end of the ForkLink under fork_worker (it forks
    # the other workers). forked: this worker was forked by worker 0, so
    # its parent is worker 0, not the master.
    # handoff: the engine options of websocket_workers
    # (WebsocketHandoff#native_options), nil without it.
    def initialize(index:, phase:, master_pid:, options:, listeners:, link:, app:, log:, fork_link: nil,
                   forked: false, handoff: nil)
      @index = index
      @phase = phase
      @master_pid = master_pid
      @options = options
      @listeners = listeners
      @link = link
      @app = app
      @log = log
      @server = nil
      @stopped = false
      # Puma's hook data (Hooks::Keyed): from the boot hooks to the
      # shutdown hooks of this worker.
      @hook_data = {}
      @stop_requested = false
      @forked = forked
      @handoff = handoff
      # Whether the WebSocket worker is up, as the master last said.
      @handoff_on = false
      @mold = fork_link && Mold.new(self, fork_link, log)
      # Requests served by the servers this process ran before the current
      # one (worker 0 runs a new one after each fork cycle).
      @requests_before = 0
    end

    attr_reader :index, :phase, :master_pid, :options, :listeners, :link, :app, :handoff

    # Returns the exit status. The master counts a worker that exits before
    # its "boot" message as a failed boot.
    def run
      started = monotonic
      install_traps
      # Forked by worker 0: the master learns the pid from this, and may
      # answer with the TERM of a stop begun meanwhile, which these traps
      # (not worker 0's, inherited) must be there to take.
      @link.send("type" => "forked", "pid" => Process.pid, "index" => @index) if @forked
      BootChecks.restore_output(@options)
      Hooks.run(@options[:on_worker_boot], @index, data: @hook_data)
      @app ||= AppLoader.load_app(@options)
      @started_wall = Time.now.to_f
      start_server
      @link.send("type" => "boot", "pid" => Process.pid, "index" => @index,
                 "boot_seconds" => (monotonic - started).round(3))
      checker = Thread.new { check_in }
      @mold&.start
      serve
      @stopped = true
      checker.join(1) || checker.kill
      Hooks.run_logged(@options[:on_worker_shutdown], "before_worker_shutdown", @log, @index, data: @hook_data)
      0
    end

    # Worker 0 under fork_worker, before a batch: the stopped server's
    # allocators give back what they hold free (see Mold#compact_heap).
    def trim_memory
      @server&.trim_memory
    end

    # Worker 0 under fork_worker, from its Mold's thread: stop serving so
    # that the main thread can fork (see #serve).
    def pause_for_fork
      @server&.stop(close_listeners: false)
    end

    private

    def start_server
      @server = Server.new(@app, @options, listeners: @listeners,
                                           busy_accept_delay: @options[:wait_for_less_busy_worker],
                                           worker_index: @index, handoff: @handoff)
      @server.start
      @server.handoff = @handoff_on if @handoff
      @server.upgrades.relay = ->(publish) { @link.send(publish) }
    end

    # Serves until stopped. Worker 0 under fork_worker stops its server for
    # each batch of forks: a process with the engine's threads running must
    # not fork (the child would hold locks and a runtime whose threads it
    # does not have), so the engine drains and is shut down, the workers
    # are forked from the warm, quiet process, and a new engine serves the
    # same listeners.
    def serve
      loop do
        @server.wait
        batch = @mold&.take_batch
        break if batch.nil? || @stop_requested

        @requests_before += @server.stats["requests_total"].to_i
        @mold.fork_batch(batch)
        # A TERM while the batch was forked stopped nothing (the server was
        # stopped already): it is honoured here, and once more right after
        # the new server exists, in case it came in between.
        break if @stop_requested

        start_server
        @server.stop if @stop_requested
      end
    end

    def install_traps
      %w[TERM INT].each { |signal| trap(signal) { stop } }
      # halt: no draining, requests in flight are cut.
      trap("QUIT") { exit!(0) }
      trap("HUP") { hangup }
      MASTER_SIGNALS.each { |signal| trap(signal) {} }
      # The master's handler would wake the master's loop; the app may
      # want to wait for its own children.
      trap("CHLD", "DEFAULT")
    end

    def hangup
      LogRedirect.reopen(@options)
      server = @server
      server&.reopen_access_log
      Thread.new { server.reload_tls($stdout) } if server&.tls?
    end

    # Before the server exists (the app is still loading) there is nothing
    # to drain, so the worker just exits.
    def stop
      @stop_requested = true
      @server ? @server.stop : exit(0)
    end

    # Pings the master every worker_check_interval (a worker that stops
    # pinging for worker_timeout is killed as hung), and answers its
    # requests. When the link closes, the master either re-executed itself
    # (hot restart: same pid, it will stop this worker once its new ones
    # serve) or died; the parent pid tells which.
    def check_in
      interval = @options[:worker_check_interval]
      link_open = true
      next_ping = monotonic + interval
      until @stopped
        unless master_alive?
          @log.info("! master (pid #{@master_pid}) is gone; worker #{@index} stopping")
          @server.stop
          break
        end

        wait = next_ping - monotonic
        if wait.positive?
          link_open = serve_master(wait) if link_open
          sleep(wait) unless link_open
          next
        end

        link_open &&= ping
        next_ping = [next_ping + interval, monotonic].max
      end
    rescue StandardError => e
      @log.error("! worker #{@index} check-in failed: #{e.class}: #{e.message}")
    end

    # A forked worker's parent is worker 0, which may stop before it does;
    # the master's pid is what tells (a hot restart keeps it).
    def master_alive?
      return Process.ppid == @master_pid unless @forked

      ProcessInfo.alive?(@master_pid)
    end

    def status
      status = @server.status
      status["requests_count"] += @requests_before
      status
    end

    # Waits up to `timeout` for requests from the master and answers them.
    # Returns false once the link is closed.
    def serve_master(timeout)
      return true unless @link.io.wait_readable(timeout)

      messages = @link.read_available
      return false if messages.nil?

      messages.each { |message| answer(message) }
      true
    end

    def answer(message)
      # Another worker's Tsubame.publish: delivered here, nothing to reply.
      return @server.upgrades.deliver(message) if message["type"] == "publish"
      return hand_off_upgrades(message["on"] == true) if message["type"] == "handoff"

      data =
        case message["type"]
        when "gc"
          GC.start
          { "pid" => Process.pid, "gc" => "done" }
        when "backtraces" then backtraces
        when "metrics" then ProcessSample.take(@server, index: @index).merge("started" => @started_wall)
        when "lame_duck"
          # The cluster is stopping with shutdown_delay: the master sends
          # TERM once the delay is over.
          @server.enter_lame_duck
          { "pid" => Process.pid, "lame_duck" => true }
        else { "error" => "unknown request #{message["type"].inspect}" }
        end
      @link.send("type" => "reply", "id" => message["id"], "pid" => Process.pid, "data" => data)
    end

    # websocket_workers: the master says whether a WebSocket worker is up
    # (a no-op in a WebSocket worker, whose engine has nothing to hand off).
    # Checks in at once, so the master's /stats shows the change
    # (`handoff_on`) without waiting for the next ping.
    def hand_off_upgrades(on)
      @handoff_on = on
      return unless @server

      @server.handoff = on
      ping
    end

    # The master's view of this worker: alive, and its latest status.
    def ping
      @link.send("type" => "ping", "status" => status)
    end

    def backtraces
      Thread.list.map do |thread|
        { "name" => thread.name || thread.inspect, "backtrace" => thread.backtrace || [] }
      end
    end
  end
end
