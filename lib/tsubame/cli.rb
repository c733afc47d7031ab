# frozen_string_literal: true

require "optparse"
require "tsubame"
require "tsubame/config/bind_uri"
require "tsubame/config/loader"
require "tsubame/launcher"

module Tsubame
  # `tsubame [options] [rackup file]`, with Puma's flags and meanings.
  # Every failure the user can fix is reported as one line on stderr with
  # exit status 1; flags and config are fully checked, and the rackup file
  # looked for, before the native extension is loaded.
  class CLI
    LAYER = :cli

    # `tsubame NAME ...` runs another program, each with its own --help;
    # listed at the end of `tsubame --help`.
    SUBCOMMANDS = {
      "bench" => "HTTP load generator, open loop with -r (tsubame bench --help)",
      "tune" => "Find the workers and threads that serve the most within an SLO (tsubame tune --help)",
      "ctl" => "Talk to a running server's control app, like pumactl (tsubame ctl --help)"
    }.freeze

    def initialize(argv, stdout: $stdout, stderr: $stderr, env: ENV)
      @argv = argv.dup
      @stdout = stdout
      @stderr = stderr
      @env = env
      @options = Options.new
    end

    # Returns the process exit status.
    def run
      # Loaded only for their subcommand: a server process never needs them
      # (about 3 MB of RSS in every worker).
      if @argv.first == "bench"
        require "tsubame/bench"
        return Bench.run(@argv.drop(1), stderr: @stderr, env: @env)
      end
      if @argv.first == "tune"
        require "tsubame/tune/command"
        return Tune::Command.new(@argv.drop(1), stdout: @stdout, stderr: @stderr, env: @env).run
      end

      catch(:exit) do
        parse
        loader = ConfigLoader.new(@options, env: @env).load
        check_rackup
        Launcher.new(@options, ignored: loader.ignored, stdout: @stdout, stderr: @stderr).run
      end
    rescue OptionParser::ParseError, Error => e
      @stderr.puts "tsubame: #{e.message}"
      1
    end

    private

    def parse
      rest = parser.parse(@argv)
      raise ConfigError, "too many arguments: #{rest.join(" ")} (expected one rackup file)" if rest.size > 1

      @options.set(:rackup, rest.first, layer: LAYER) if rest.first
    end

    # An inline `app` needs none; a relative path is read from `directory`
    # when the config names one (the launcher changes to it first).
    def check_rackup
      return if @options[:app]

      path = @options[:rackup]
      found = File.file?(File.expand_path(path, @options[:directory] || Dir.pwd))
      raise ConfigError, "rackup file not found: #{path}" unless found
    end

    def parser
      OptionParser.new do |o|
        o.program_name = "tsubame"
        o.version = VERSION
        o.banner = "Usage: tsubame [options] [rackup file (default: ./config.ru)]\n" \
                   "       tsubame #{SUBCOMMANDS.keys.join("|")} [options] ..."
        o.separator ""
        listen_flags(o)
        tuning_flags(o)
        config_flags(o)
        cluster_flags(o)
        info_flags(o)
        subcommands(o)
      end
    end

    def subcommands(opts)
      opts.separator ""
      opts.separator "Subcommands:"
      SUBCOMMANDS.each { |name, summary| opts.separator format("    %-7s %s", name, summary) }
    end

    def listen_flags(opts)
      opts.on("-b", "--bind URI", "Listen on URI: tcp://HOST:PORT, unix://PATH, ssl://HOST:PORT (repeatable)") do |uri|
        @options.append(:binds, uri, layer: LAYER)
      end
      opts.on("-p", "--port PORT", "Listen on tcp://#{Options::DEFAULT_HOST}:PORT (default #{Options::DEFAULT_PORT})") do |port|
        @options.append(:binds, BindURI.tcp(Options::DEFAULT_HOST, port), layer: LAYER)
      end
      opts.on("--backlog N", "Listen queue length (default #{Options::DEFAULTS[:backlog]})") do |n|
        @options.set(:backlog, n, layer: LAYER)
      end
      protocol_flags(opts)
    end

    def protocol_flags(opts)
      opts.on("--tls-self-signed", "DEVELOPMENT ONLY: a generated localhost certificate for ssl:// binds without cert=") do
        @options.set(:tls_self_signed, true, layer: LAYER)
      end
      opts.on("--[no-]http2", "Offer HTTP/2 by ALPN on ssl:// binds (default: on)") do |on|
        @options.set(:http2, on, layer: LAYER)
      end
      opts.on("--h2c", "Cleartext HTTP/2 with prior knowledge on tcp:// and unix:// binds") do
        @options.set(:h2c, true, layer: LAYER)
      end
      opts.on("--public DIR", "Serve files from DIR before the app (GET/HEAD; see docs/FILES.md)") do |dir|
        @options.set(:public_dir, dir, layer: LAYER)
      end
      opts.on("--public-index", "With --public: index.html for a path ending in /") do
        @options.set(:public_index, true, layer: LAYER)
      end
      opts.on("--public-immutable REGEX", "File names sent with Cache-Control immutable (off: none)") do |pattern|
        @options.set(:public_immutable, pattern, layer: LAYER)
      end
      opts.on("--x-sendfile ROOT", "Rack::Sendfile hands files under ROOT to the engine (repeatable)") do |root|
        @options.append(:x_sendfile_roots, root, layer: LAYER)
      end
      opts.on("--x-accel-redirect URI=DIR", "Rack::Sendfile's X-Accel-Redirect: URLs under URI are files in DIR (repeatable)") do |map|
        @options.append(:x_accel_mappings, map, layer: LAYER)
      end
      opts.on("--compress", "gzip/brotli responses by Accept-Encoding, in the engine (see docs/FILES.md)") do
        @options.set(:compress, true, layer: LAYER)
      end
      opts.on("--compress-min-size BYTES", "With --compress: smallest body compressed (default 1024)") do |bytes|
        @options.set(:compress_min_size, bytes, layer: LAYER)
      end
      opts.on("--compress-types LIST", "With --compress: comma-separated types; text/ is a prefix") do |list|
        @options.set(:compress_types, list, layer: LAYER)
      end
      opts.on("--early-hints", "Offer env[\"rack.early_hints\"] (103 responses)") do
        @options.set(:early_hints, true, layer: LAYER)
      end
      opts.on("--trust-forwarded-proto", "Take X-Forwarded-Proto as rack.url_scheme (only behind a proxy)") do
        @options.set(:trust_forwarded_proto, true, layer: LAYER)
      end
      proxy_flags(opts)
    end

    # Behind a proxy (docs/PROXY.md).
    def proxy_flags(opts)
      opts.on("--proxy-protocol VERSION", "A PROXY header (v1 or v2) first on every connection of every bind") do |v|
        @options.set(:proxy_protocol, v, layer: LAYER)
      end
      opts.on("--remote-address-header NAME",
              "REMOTE_ADDR from this header (e.g. X-Forwarded-For) when the peer is a trusted proxy") do |name|
        @options.set(:remote_address_header, name, layer: LAYER)
      end
      opts.on("--trusted-proxies LIST", "Comma-separated addresses/CIDRs whose forwarding header is believed " \
                                        "(default: loopback and private ranges)") do |list|
        @options.set(:trusted_proxies, list, layer: LAYER)
      end
    end

    def tuning_flags(opts)
      defaults = Options::DEFAULTS
      opts.on("-t", "--threads MIN:MAX",
              "Ruby threads running the app; N means N:N (default #{defaults[:threads_min]}:#{defaults[:threads_max]})") do |spec|
        @options.set_threads(*Options.parse_threads(spec), layer: LAYER)
      end
      opts.on("--io-threads N", "Engine threads doing network I/O (default #{defaults[:io_threads]})") do |n|
        @options.set(:io_threads, n, layer: LAYER)
      end
      opts.on("--max-body-size BYTES", "Largest request body accepted (default: no limit)") do |n|
        @options.set(:max_body_size, n, layer: LAYER)
      end
      opts.on("--request-timeout SECONDS", "503 when the app has not answered in time (default: off)") do |s|
        @options.set(:request_timeout, s, layer: LAYER)
      end
      opts.on("--queue-timeout SECONDS",
              "503 when no thread took the request in time (default #{defaults[:queue_timeout]})") do |s|
        @options.set(:queue_timeout, s, layer: LAYER)
      end
      opts.on("--idle-memory-trim SECONDS",
              "Give freed memory back to the OS after SECONDS with no request; off: never " \
              "(default #{defaults[:idle_memory_trim]})") do |s|
        @options.set(:idle_memory_trim, s, layer: LAYER)
      end
      opts.on("--max-queue N", "503 at once when N requests already wait (default #{defaults[:max_queue]})") do |n|
        @options.set(:max_queue, n, layer: LAYER)
      end
      opts.on("--max-connections N", "503 and close past N open connections (default: from ulimit -n)") do |n|
        @options.set(:max_connections, n, layer: LAYER)
      end
      opts.on("--health-check-path PATH", "Liveness answered by the engine, never queued (default: off)") do |path|
        @options.set(:health_check_path, path, layer: LAYER)
      end
      opts.on("--readiness-check-path PATH", "Readiness: 503 while busy or draining (default: off)") do |path|
        @options.set(:readiness_check_path, path, layer: LAYER)
      end
      opts.on("--readiness-queue-wait SECONDS",
              "Readiness says busy once a request waited this long for a thread " \
              "(default #{defaults[:readiness_queue_wait]})") do |s|
        @options.set(:readiness_queue_wait, s, layer: LAYER)
      end
      opts.on("--readiness-hold SECONDS",
              "Readiness stays busy this long after (default #{defaults[:readiness_hold]})") do |s|
        @options.set(:readiness_hold, s, layer: LAYER)
      end
      opts.on("--inline MODE", "The one app thread also drives the connections: on, off or auto " \
                                "(default auto: on with one app thread, one I/O thread, no fibers)") do |s|
        @options.set(:inline, { "on" => true, "off" => false }.fetch(s, s), layer: LAYER)
      end
      opts.on("--handoff-spin SECONDS",
              "A thread out of work stays awake this long for the next hand-off; 0 is off " \
              "(default #{defaults[:handoff_spin]})") do |s|
        @options.set(:handoff_spin, s, layer: LAYER)
      end
      opts.on("--upgrade-threads COUNT",
              "Threads running rack.upgrade handlers (WebSockets, SSE) (default #{defaults[:upgrade_threads]})") do |n|
        @options.set(:upgrade_threads, n, layer: LAYER)
      end
      opts.on("--websocket-max-message BYTES",
              "Largest WebSocket message a client may send (default #{defaults[:websocket_max_message]})") do |n|
        @options.set(:websocket_max_message, n, layer: LAYER)
      end
      opts.on("--websocket-max-rate COUNT",
              "WebSocket messages a client may send per second; 0 is no limit " \
              "(default #{defaults[:websocket_max_rate]})") do |n|
        @options.set(:websocket_max_rate, n, layer: LAYER)
      end
      opts.on("--[no-]websocket-deflate",
              "Compress WebSocket messages (permessage-deflate) when the client offers it " \
              "(default on)") do |on|
        @options.set(:websocket_deflate, on, layer: LAYER)
      end
      opts.on("--shutdown-delay SECONDS",
              "On TERM/INT, fail readiness and keep serving this long before draining " \
              "(default #{defaults[:shutdown_delay]})") do |s|
        @options.set(:shutdown_delay, s, layer: LAYER)
      end
      fiber_flags(opts)
      opts.on("--drain-timeout SECONDS",
              "On TERM/INT, wait this long for requests in flight (default #{defaults[:drain_timeout]})") do |s|
        @options.set(:drain_timeout, s, layer: LAYER)
      end
    end

    # Fiber mode (docs/FIBERS.md).
    def fiber_flags(opts)
      defaults = Options::DEFAULTS
      opts.on("--fibers", "Run requests on fibers under Tsubame's scheduler (all of them, or those --fiber-path picks)") do
        @options.set(:fiber_scheduler, true, layer: LAYER)
      end
      opts.on("--fiber-path PREFIX", "With --fibers: only paths starting with PREFIX run on fibers (repeatable)") do |prefix|
        @options.append(:fiber_paths, prefix, layer: LAYER)
      end
      opts.on("--max-fibers N", "503 past N requests queued for or running on fibers (default #{defaults[:max_fibers]})") do |n|
        @options.set(:max_fibers, n, layer: LAYER)
      end
      opts.on("--fiber-threads N", "Ruby threads running fiber loops (default #{defaults[:fiber_threads]})") do |n|
        @options.set(:fiber_threads, n, layer: LAYER)
      end
    end

    def config_flags(opts)
      opts.on("-C", "--config FILE", "Load this config file instead of the default ones; '-' loads none") do |path|
        @options.append(:config_files, path, layer: LAYER)
      end
      opts.on("-e", "--environment NAME", "Rack environment (default: RACK_ENV, RAILS_ENV or development)") do |name|
        @options.set(:environment, name, layer: LAYER)
      end
      opts.on("--pidfile PATH", "Write the process id to PATH while running") do |path|
        @options.set(:pidfile, path, layer: LAYER)
      end
      opts.on("-q", "--quiet", "Do not log requests (default)") do
        @options.set(:quiet, true, layer: LAYER)
        @options.set(:log_requests, false, layer: LAYER)
      end
      opts.on("-v", "--log-requests", "Log every request to stdout") do
        @options.set(:log_requests, true, layer: LAYER)
        @options.set(:quiet, false, layer: LAYER)
      end
      observability_flags(opts)
    end

    # docs/OBSERVABILITY.md
    def observability_flags(opts)
      opts.on("--access-log FORMAT", "Access log: common, combined or json (default: none)") do |format|
        @options.set(:access_log, format, layer: LAYER)
      end
      opts.on("--access-log-file PATH", "Write the access log to PATH, reopened on HUP (default: stdout)") do |path|
        @options.set(:access_log_file, path, layer: LAYER)
      end
      opts.on("--[no-]metrics", "Count requests for the control app's /metrics (default: on)") do |on|
        @options.set(:metrics, on, layer: LAYER)
      end
      opts.on("--metrics-url URL", "Serve /metrics alone, with no token, on tcp://HOST:PORT or unix://PATH") do |url|
        @options.set(:metrics_url, url, layer: LAYER)
      end
      opts.on("--request-id", "Keep or make an X-Request-Id for every request, in the env and the response") do
        @options.set(:request_id, true, layer: LAYER)
      end
      opts.on("--request-start-header", "Add X-Request-Start: t=MICROSECONDS to requests that come without one") do
        @options.set(:request_start_header, true, layer: LAYER)
      end
    end

    def cluster_flags(opts)
      opts.on("-w", "--workers N",
              "Fork N worker processes (cluster mode); 0: one process (default: WEB_CONCURRENCY or 0)") do |n|
        @options.set(:workers, n, layer: LAYER)
      end
      opts.on("--preload", "Load the app in the master before forking workers") do
        @options.set(:preload_app, true, layer: LAYER)
      end
      opts.on("--websocket-workers N", "Cluster mode: N more workers serve every WebSocket connection (default 0)") do |n|
        @options.set(:websocket_workers, n, layer: LAYER)
      end
      opts.on("--control-url URL", "Serve the control app on tcp://HOST:PORT or unix://PATH") do |url|
        @options.set(:control_url, url, layer: LAYER)
      end
      opts.on("--control-token TOKEN", "Token the control app requires (default: a random one)") do |token|
        @options.set(:control_token, token, layer: LAYER)
      end
      opts.on("-S", "--state PATH", "Write a state file (pid, control app address) to PATH") do |path|
        @options.set(:state_path, path, layer: LAYER)
      end
      opts.on("--tag NAME", "Name shown in the process titles") do |name|
        @options.set(:tag, name, layer: LAYER)
      end
      opts.on("--redirect-stdout PATH", "Send stdout to PATH (reopened on HUP)") do |path|
        @options.set(:redirect_stdout, path, layer: LAYER)
      end
      opts.on("--redirect-stderr PATH", "Send stderr to PATH (reopened on HUP)") do |path|
        @options.set(:redirect_stderr, path, layer: LAYER)
      end
      opts.on("--redirect-append", "Append to the redirect files instead of truncating them") do
        @options.set(:redirect_append, true, layer: LAYER)
      end
    end

    def info_flags(opts)
      opts.separator ""
      opts.on("-V", "--version", "Print the version and exit") do
        @stdout.puts "tsubame #{VERSION}"
        throw :exit, 0
      end
      opts.on("-h", "--help", "Print this help and exit") do
        @stdout.puts opts
        throw :exit, 0
      end
    end
  end
end
