# frozen_string_literal: true

require "time"
require "tsubame/version"
require "tsubame/errors"
require "tsubame/bind_uri"
require "tsubame/app_loader"
require "tsubame/hooks"
require "tsubame/hot_restart"
require "tsubame/log"
require "tsubame/log_redirect"
require "tsubame/run_files"
require "tsubame/process_info"
require "tsubame/restart_file"

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
      @stdout = stdout
      @stderr = stderr
      @server_class = server_class
      @restart = false
      @started_at = Time.now
    end

    # Yields the bound server before it starts, if a block is given (single
    # mode only: a cluster's master has no server). Returns the exit status
    # once the server has stopped.
    def run
      # The banner is how scripts and tests learn the real addresses, so it
      # must not sit in a buffer when stdout is a pipe.
      @stdout.sync = true
      warn_ignored
      ENV["RACK_ENV"] = @options[:environment]
      return run_cluster if @options[:workers].positive?

      print_header
      server = server_class.new(@app || load_app, @options)
      server.bind
      print_addresses(server.addresses)
      yield server if block_given?
      serve(server)
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
        "versions" => { "tsubame" => VERSION, "ruby" => RUBY_DESCRIPTION }
      }.merge(status.reject { |key, _| key == "engine" }).merge("engine" => status["engine"])
    end

    def ask_workers(_type, **)
      []
    end

    def cluster?
      false
    end

    private

    def run_cluster
      require "tsubame/cluster"
      Cluster.new(@options, app: @app, stdout: @stdout, stderr: @stderr).run
    end

    def serve(server)
      @server = server
      control = start_control
      RunFiles.write(@options, control)
      previous = trap_signals(server)
      LogRedirect.apply(@options)
      watcher = watch_restart_file if @options[:tmp_restart]
      begin
        server.start
        retire_old_workers
        Hooks.run_logged(@options[:on_booted], "on_booted", Log.new(@stdout, @stderr))
        # Server#wait keeps the main thread interruptible, so the trap
        # handlers above run while it waits.
        server.wait
      ensure
        watcher&.kill
        previous.each { |signal, handler| trap(signal, handler) }
        control&.stop
        clean_up unless @restart
      end
      return hot_restart(server) if @restart

      @stdout.puts "- Goodbye!"
      0
    end

    def server_class
      @server_class || begin
        require "tsubame/server"
        Server
      end
    end

    def load_app
      AppLoader.load(@options[:rackup])
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
      @stdout.puts "Use Ctrl-C to stop"
    end

    def start_control
      return unless @options[:control_url]

      require "tsubame/control_server"
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
      when "TERM", "INT" then leave(server)
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
      if server.tls?
        Thread.new { server.reload_tls(@stdout) }
      elsif !LogRedirect.configured?(@options)
        server.stop
      end
    end

    # USR2, `ctl restart`, tmp/restart.txt: drain, keeping the sockets
    # open, then exec (see #hot_restart). Clients arriving meanwhile wait
    # in the listen backlog.
    def request_restart
      @restart = true
      @server.stop(close_listeners: false)
    end

    def hot_restart(server)
      @stdout.puts "* Restarting: re-executing #{HotRestart.command&.join(" ")}"
      Hooks.run_logged(@options[:on_restart], "on_restart", Log.new(@stdout, @stderr))
      error = HotRestart.exec(server.listeners)
      @stderr.puts "tsubame: hot restart failed: #{error.message}"
      server.listeners.close
      clean_up
      1
    end

    # A hot restart from cluster mode into a config with no workers: the
    # old workers are still this process's children and would serve on.
    def retire_old_workers
      HotRestart.inherited_workers.each do |pid|
        Process.kill("TERM", pid)
        Process.detach(pid)
      rescue SystemCallError
        nil
      end
    end

    def halt
      clean_up
      @stdout.flush
      exit!(0)
    end

    def watch_restart_file
      file = RestartFile.new
      Thread.new do
        sleep RestartFile::INTERVAL until file.touched?
        request_restart
      end
    end

    def clean_up
      RunFiles.remove(@options)
    end
  end
end
