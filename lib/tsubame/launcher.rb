# frozen_string_literal: true

# Loaded by Puma too, so apps that call Time#iso8601 or Time.parse without
# requiring it work the same here.
require "time"
require "tsubame/version"
require "tsubame/errors"
require "tsubame/config/bind_uri"
require "tsubame/config/app_loader"
require "tsubame/config/hooks"
require "tsubame/restart/hot_restart"
require "tsubame/serve/listeners"
require "tsubame/serve/socket_activation"
require "tsubame/serve/self_signed"
require "tsubame/support/named_thread"
require "tsubame/support/log"
require "tsubame/support/log_redirect"
require "tsubame/control/run_files"
require "tsubame/control/process_sample"
require "tsubame/support/process_info"
require "tsubame/restart/restart_file"
require "tsubame/support/systemd_notify"
require "tsubame/serve/idle_timeout"
require "tsubame/config/puma_constant"
require "tsubame/support/formatted_output"
require "tsubame/config/boot_checks"

module Tsubame
  # Runs one server from resolved Options until it is told to stop: loads
  # the app, binds, prints the banner, handles the pidfile and signals.
  # With `workers` above 0 it hands over to Tsubame::Cluster instead.
  # Shared by the CLI and the Rack handler; errors are raised, never turned
  # into an exit, so each caller reports them its own way.
  class Launcher
    SIGNALS = %w[TERM INT USR2 HUP USR1 TTIN TTOU].freeze

    # app: a Rack app, or nil to load options[:rackup].
    # ignored: settings to warn about (see ConfigLoader#ignored).
    # server_class: stands in for Tsubame::Server; tests pass a fake so the
    # native extension is not needed.
    def initialize(options, app: nil, ignored: [], stdout: $stdout, stderr: $stderr, server_class: nil)
      @options = options
      @app = app
      @ignored = ignored
      # custom_logger: the server's lines go to its #write.
      if options[:custom_logger]
        require "tsubame/serve/custom_logger" # only with one (footprint_test.rb)
        stdout = CustomLogger::Output.new(options[:custom_logger])
      end
      @stdout = stdout
      @stderr = stderr
      @server_class = server_class
      @restart = false
      # Restart requests, for the restarter thread (see #request_restart).
      @restart_requests = Thread::Queue.new
      @stand_in = nil
      @started_at = Time.now
    end

    # Yields the bound server before it starts, if a block is given (single
    # mode only: a cluster's master has no server). Returns the exit status
    # once the server has stopped.
    def run
      BootChecks.sync_output(@options)
      # The banner is how scripts and tests learn the real addresses, so it
      # must not sit in a buffer when stdout is a pipe.
      @stdout.sync = true
      @stdout = FormattedOutput.wrap(@stdout, @options[:log_formatter])
      @stderr = FormattedOutput.wrap(@stderr, @options[:log_formatter])
      ENV["RACK_ENV"] = @options[:environment]
      BootChecks.change_directory(@options)
      HotRestart.configure(restart_command: @options[:restart_command], directory: @options[:directory])
      # systemd's variables go before any app code could see them or a
      # worker inherit them (see SystemdNotify, SocketActivation).
      @systemd = SystemdNotify.take
      SocketActivation.take
      # Asked first, which also takes the hot restart's variable out of ENV
      # before the app loads. A cluster hot restart's pre-flight check stops
      # here, the config loaded, whatever mode that config asks for. A
      # stand-in serves alone whatever the config's worker count: the
      # re-executed process applies that.
      if HotRestart.check?
        # Required here: only a hot restart's check runs it (footprint_test.rb).
        require "tsubame/restart/check"
        return HotRestartCheck.run(@options, app: @app, stdout: @stdout, stderr: @stderr)
      end
      return run_stand_in if HotRestart.stand_in?

      warn_ignored
      BootChecks.warnings(@options).each { |warning| @stderr.puts "tsubame: warning: #{warning}" }
      BootChecks.debug_lines(@options).each { |line| @stdout.puts line } if @options[:debug]
      return stopped(run_cluster) if @options[:workers].positive?

      print_header
      server = server_class.new(@app || load_app, @options)
      server.bind
      server.listeners.notes.each { |note| @stdout.puts note }
      print_addresses(server.addresses)
      yield server if block_given?
      stopped(serve(server))
    end

    # For the control app in single mode (see ControlApp): what a master
    # answers in cluster mode.
    def command(name)
      case name
      when :stop then leave(@server)
      when :halt then halt
      when :hot_restart then request_restart
      end
    end

    def stats
      status = @server.status
      {
        "started_at" => @started_at.utc.iso8601,
        "mode" => "single",
        "pid" => Process.pid,
        "rss_mb" => ProcessInfo.rss_mb(Process.pid),
        "memory" => ProcessInfo.memory(Process.pid),
        "versions" => { "tsubame" => VERSION, "ruby" => RUBY_DESCRIPTION }
      }.merge(status.reject { |key, _| key == "engine" }).merge("engine" => status["engine"])
    end

    def ask_workers(_type, **)
      []
    end

    # For /metrics and the status page (see Cluster#metric_samples).
    def metric_samples
      [[ProcessSample.take(@server)], nil]
    end

    def cluster?
      false
    end

    private

    def run_cluster
      require "tsubame/cluster/master"
      cluster = Cluster.new(@options, app: @app, stdout: @stdout, stderr: @stderr, systemd: @systemd)
      status = cluster.run
      @sigterm ||= cluster.sigterm?
      status
    end

    # The server has stopped (a hot restart never gets here: it execs;
    # after_stopped, alias on_stopped, ran already): with
    # raise_exception_on_sigterm, a stop a TERM began ends the process by
    # SIGTERM as Puma's does.
    def stopped(status)
      if @sigterm && @options[:raise_exception_on_sigterm]
        @stdout.flush
        trap("TERM", "DEFAULT")
        Process.kill("TERM", Process.pid)
        sleep 1
      end
      status
    end

    def serve(server)
      @server = server
      control = start_control
      metrics_server = start_metrics_server
      RunFiles.write(@options, control)
      previous = trap_signals(server)
      # Last line of the banner, printed once the traps are in: a script
      # that waits for it may signal at once (a USR2 before the traps
      # would kill the process).
      @stdout.puts "Use Ctrl-C to stop"
      BootChecks.restore_output(@options)
      LogRedirect.apply(@options)
      watcher = watch_restart_file if @options[:tmp_restart]
      restarter = nil
      ticker = nil
      idle = nil
      PumaConstant.stats_source = self
      begin
        server.start
        restarter = start_restarter(server)
        retire_old_workers
        @systemd.ready(systemd_status(server))
        ticker = @systemd.start_ticker(healthy: -> { healthy?(server) }) { systemd_status(server) }
        Hooks.run_logged(@options[:on_booted], "on_booted", Log.new(@stdout, @stderr))
        idle = IdleTimeout.new(@options[:idle_timeout]).watch(server, Log.new(@stdout, @stderr)) if @options[:idle_timeout]
        # Server#wait keeps the main thread interruptible, so the trap
        # handlers above run while it waits.
        server.wait
      ensure
        ticker&.kill
        idle&.kill
        watcher&.kill
        stop_restarter(restarter)
        previous.each { |signal, handler| trap(signal, handler) }
        control&.stop
        metrics_server&.stop
        clean_up unless @restart
      end
      return hot_restart(server) if @restart

      Hooks.run_logged(@options[:after_stopped], "after_stopped", Log.new(@stdout, @stderr))
      @stdout.puts "- Goodbye!"
      0
    end

    # systemctl status shows it: what the server has and does.
    def systemd_status(server)
      status = server.status
      "Serving: threads #{@options[:threads_min]}:#{@options[:threads_max]}, " \
        "#{status["requests_in_flight"]} busy, #{status["backlog"]} queued, #{status["requests_count"]} requests"
    rescue StandardError => e
      "Serving (status unavailable: #{e.class})"
    end

    # Asked before each watchdog ping. The ping comes from a Ruby thread,
    # so a process whose GVL is never let go stops pinging by itself; so
    # does one whose app threads are all stuck (past request_timeout_grace),
    # which would never answer again: systemd then restarts the service.
    def healthy?(server)
      server.status.dig("engine", "stuck_threads").to_i < @options[:threads_max]
    rescue StandardError
      false
    end

    def server_class
      @server_class || begin
        require "tsubame/serve/server"
        Server
      end
    end

    def load_app
      AppLoader.load_app(@options)
    end

    def warn_ignored
      return if @ignored.empty?

      @stderr.puts "tsubame: warning: not implemented yet, ignored: #{@ignored.join(", ")}"
    end

    def print_header
      @stdout.puts "Tsubame starting in single mode..."
      @stdout.puts "* Tsubame version: #{VERSION} (ruby #{RUBY_VERSION}-p#{RUBY_PATCHLEVEL})"
      @stdout.puts "*  Min threads: #{@options[:threads_min]}"
      @stdout.puts "*  Max threads: #{@options[:threads_max]}"
      @stdout.puts "*  Environment: #{@options[:environment]}"
      @stdout.puts "*          PID: #{Process.pid}"
    end

    def print_addresses(addresses)
      addresses.each { |address| @stdout.puts "* Listening on #{BindURI.display(address)}" }
    end

    # metrics_url: /metrics alone, no token (docs/OBSERVABILITY.md).
    def start_metrics_server
      return unless @options[:metrics_url]

      require "tsubame/control/server"
      ControlServer.new(@options[:metrics_url], ControlToken::NONE, MetricsApp.new(self), Log.new(@stdout, @stderr),
                        name: "Metrics").start
    end

    def start_control
      return unless @options[:control_url]

      require "tsubame/control/server"
      control = ControlServer.new(@options[:control_url], @options[:control_token], ControlApp.new(self),
                                  Log.new(@stdout, @stderr))
      control.start
      control
    end

    # The server's stop is safe to call from a trap handler, so the handlers
    # do little else. Returns the previous handlers to put back, which
    # matters when Tsubame runs inside another program via the Rack handler.
    def trap_signals(server)
      SIGNALS.to_h do |signal|
        [signal, trap(signal) { on_signal(signal, server) }]
      end
    end

    def on_signal(signal, server)
      case signal
      when "TERM", "INT"
        @sigterm = true if signal == "TERM"
        leave(server)
      when "USR2" then request_restart
      when "HUP" then hangup(server)
      else
        # Logging is I/O, which a trap handler should not do itself.
        Thread.new { @stderr.puts "tsubame: #{signal} needs cluster mode (workers > 0); ignored" }
      end
    end

    # A stop with shutdown_delay: readiness fails at once while serving goes
    # on, so a load balancer takes the instance out before the drain closes
    # anything. A second TERM/INT (or ctl stop) cuts the delay short.
    def leave(server)
      @systemd.stopping
      delay = @options[:shutdown_delay]
      return server.stop if delay.zero? || @leaving

      @leaving = true
      server.enter_lame_duck
      # A trap handler must not sleep or do I/O itself.
      Thread.new do
        @stdout.puts "- Shutdown delay: readiness fails now; serving #{delay}s more before the drain"
        sleep delay
        server.stop
      end
    end

    # HUP reopens the stdout_redirect files; with TLS binds it also reloads
    # the certificates (on a thread: a trap handler should do no I/O). With
    # neither, Puma's behaviour: a hangup with nowhere to log stops.
    def hangup(server)
      LogRedirect.reopen(@options) if LogRedirect.configured?(@options)
      server.reopen_access_log if @options[:access_log_file]
      if server.tls?
        Thread.new { server.reload_tls(@stdout) }
      elsif !LogRedirect.configured?(@options) && !@options[:access_log_file]
        @systemd.stopping
        server.stop
      end
    end

    # USR2, `ctl restart`, tmp/restart.txt. Only queues the request, so it
    # is safe in a trap handler; the restarter thread does the work.
    def request_restart
      @restart_requests << :restart
    end

    # The restarter: for each request, boots the new code in a stand-in
    # (see StandIn) while this server serves on; once the stand-in serves,
    # stops this server, keeping the sockets open, so #serve re-executes.
    # Requests made while one is under way are the same restart.
    def start_restarter(server)
      NamedThread.start("tsubame-restart") do
        loop do
          @restart_requests.pop
          break if hand_over(server)

          @restart_requests.clear
        end
      end
    end

    # Returns whether the stand-in serves (and this server is stopping), or
    # the server is stopping anyway.
    def hand_over(server)
      return stopping_anyway if server.stopping?

      @systemd.reloading("Hot restart: booting the new code in a stand-in process")
      @stdout.puts "* Hot restart: booting the new code in a stand-in process; this one serves until it is ready"
      # Not killed by #stop_restarter between starting the child and
      # recording it: nothing would stop it then.
      require "tsubame/restart/stand_in" # only a hot restart starts one (footprint_test.rb)
      Thread.handle_interrupt(Object => :never) { @stand_in = StandIn.start(server.listeners) }
      if (failure = @stand_in.wait_ready(boot_timeout))
        @stand_in = nil
        @stderr.puts "tsubame: hot restart failed: #{failure}; the old code keeps serving"
        @systemd.ready(systemd_status(server))
        return false
      end
      # TERM/INT came while the stand-in booted: the stop wins.
      if server.stopping?
        @stand_in.stop
        @stand_in = nil
        return stopping_anyway
      end
      @stdout.puts "* Hot restart: stand-in (PID #{@stand_in.pid}) serves the new code; " \
                   "this process drains, then re-executes"
      @restart = true
      server.stop(close_listeners: false)
      true
    rescue StandardError => e
      unless @restart
        @stand_in&.stop
        @stand_in = nil
      end
      # The restarter must outlive a failed restart to try the next one.
      @stderr.puts "tsubame: hot restart failed: #{e.class}: #{e.message}; the old code keeps serving"
      @systemd.ready(systemd_status(server)) unless @restart
      false
    end

    def stopping_anyway
      @stdout.puts "* Hot restart not done: the server is stopping"
      true
    end

    # The server stopped: a stand-in still booting is not wanted any more
    # (one that serves is handed to the re-executed process instead).
    def stop_restarter(restarter)
      restarter&.kill&.join
      @stand_in&.stop unless @restart
    end

    # As long as a cluster worker gets to boot.
    def boot_timeout
      @options[:worker_boot_timeout] || @options[:worker_timeout]
    end

    def hot_restart(server)
      @stdout.puts "* Restarting: re-executing #{HotRestart.command&.join(" ")}"
      Hooks.run_logged(@options[:on_restart], "on_restart", Log.new(@stdout, @stderr))
      error = HotRestart.exec(server.listeners, workers: [@stand_in&.pid].compact, env: @systemd.exec_env)
      @stderr.puts "tsubame: hot restart failed: #{error.message}"
      # Nothing would ever stop it once this process is gone.
      @stand_in&.stop
      server.listeners.close
      clean_up
      1
    end

    # After a hot restart, once this process serves: the stand-in (from
    # single mode) or the old workers (from cluster mode) are still this
    # process's children, and would serve on.
    def retire_old_workers
      pids = HotRestart.inherited_workers
      return if pids.empty?

      @stdout.puts "* Hot restart: serving; stopping PID #{pids.join(", ")}, which served meanwhile"
      pids.each do |pid|
        Process.kill("TERM", pid)
        Process.detach(pid)
      rescue SystemCallError
        nil
      end
    end

    # A hot restart's stand-in (see StandIn): the new code serving the
    # inherited sockets while its parent drains and re-executes. The
    # pidfile, state file, control app, restart-file watcher and log
    # redirection stay its parent's, and so do the signals but TERM/INT.
    def run_stand_in
      parent = Process.ppid
      ready = HotRestart.stand_in_ready_io
      @stdout.puts "* Hot restart stand-in (PID #{Process.pid}) booting the new code for PID #{parent}"
      Process.setproctitle("tsubame: hot restart stand-in for #{parent}#{" [#{@options[:tag]}]" if @options[:tag]}")
      app = @app || load_app
      klass = server_class
      listeners = Listeners.bind(SelfSigned.binds(@options, owner: parent), @options[:backlog], adopt_only: true)
      # Every bind is new: nothing to serve until the re-executed process
      # binds them, so it need not wait for anything.
      if listeners.empty?
        stand_in_ready(ready, "none of its binds was inherited; nothing to serve")
        return 0
      end

      serve_stand_in(klass.new(app, @options, listeners: listeners), ready, parent)
    end

    def serve_stand_in(server, ready, parent)
      previous = SIGNALS.to_h do |signal|
        # Ignored with a handler, not "IGNORE": ignored signals stay
        # ignored in programs the app execs.
        [signal, trap(signal) { server.stop if %w[TERM INT].include?(signal) }]
      end
      begin
        server.start
        server.stop unless stand_in_ready(ready, "serving until PID #{parent} has re-executed")
        orphaned = watch_parent(parent, server)
        server.wait
      ensure
        orphaned&.kill
        previous.each { |signal, handler| trap(signal, handler) }
      end
      @stdout.puts "* Hot restart stand-in (PID #{Process.pid}) stopped"
      0
    end

    # Returns false if the parent no longer listens: it gave up on this
    # stand-in, or is gone.
    def stand_in_ready(ready, what)
      @stdout.puts "* Hot restart stand-in (PID #{Process.pid}) #{what}"
      ready.write("ready\n")
      true
    rescue SystemCallError
      false
    ensure
      ready.close
    end

    # A stand-in whose parent died (or exited after a failed exec) has
    # nobody left to stop it.
    def watch_parent(parent, server)
      Thread.new do
        sleep 0.5 while Process.ppid == parent
        server.stop
      end
    end

    def halt
      @systemd.stopping("Halting")
      clean_up
      @stdout.flush
      exit!(0)
    end

    def watch_restart_file
      file = RestartFile.new
      # On after a request: a restart whose new code fails to boot leaves
      # this process serving, and the next touch must restart it again.
      Thread.new do
        loop do
          sleep RestartFile::INTERVAL until file.touched?
          request_restart
        end
      end
    end

    def clean_up
      RunFiles.remove(@options)
    end
  end
end
