# frozen_string_literal: true

require "tsubame/version"
require "tsubame/errors"
require "tsubame/bind_uri"

module Tsubame
  # Runs one server from resolved Options until it is told to stop: loads
  # the app, binds, prints the banner, handles the pidfile and signals.
  # Shared by the CLI and the Rack handler; errors are raised, never turned
  # into an exit, so each caller reports them its own way.
  class Launcher
    SIGNALS = %w[TERM INT].freeze

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
    end

    # Yields the bound server before it starts, if a block is given.
    # Returns 0 once the server has stopped.
    def run
      # The banner is how scripts and tests learn the real addresses, so it
      # must not sit in a buffer when stdout is a pipe.
      @stdout.sync = true
      warn_ignored
      ENV["RACK_ENV"] = @options[:environment]
      print_header
      server = server_class.new(@app || load_app, @options)
      server.bind
      print_addresses(server.addresses)
      yield server if block_given?
      serve(server)
      @stdout.puts "- Goodbye!"
      0
    end

    private

    def serve(server)
      write_pidfile
      previous = trap_signals(server)
      begin
        server.start
        # Server#wait keeps the main thread interruptible, so the trap
        # handlers above run while it waits.
        server.wait
      ensure
        previous.each { |signal, handler| trap(signal, handler) }
        remove_pidfile
      end
    end

    def server_class
      @server_class || begin
        require "tsubame/server"
        Server
      end
    end

    def load_app
      require "rack"
      require "rack/builder"
      result = Rack::Builder.parse_file(@options[:rackup])
      # Rack 2 returns [app, options from a "#\" line]; Rack 3 returns the app.
      result.is_a?(Array) && !result.respond_to?(:call) ? result.first : result
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

    # The server's stop is safe to call from a trap handler, so the handler
    # does nothing else. Returns the previous handlers to put back, which
    # matters when Tsubame runs inside another program via the Rack handler.
    def trap_signals(server)
      SIGNALS.to_h { |signal| [signal, trap(signal) { server.stop }] }
    end

    def write_pidfile
      path = @options[:pidfile]
      File.write(path, "#{Process.pid}\n") if path
    rescue SystemCallError => e
      raise ConfigError, "cannot write pidfile #{path}: #{e.message}"
    end

    def remove_pidfile
      path = @options[:pidfile]
      File.delete(path) if path && File.exist?(path)
    rescue SystemCallError
      # Already gone or not ours to remove; either way nothing to clean up.
      nil
    end
  end
end
