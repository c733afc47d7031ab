# frozen_string_literal: true

require "tsubame/errors"
require "tsubame/config/bind_uri"
require "tsubame/config/options"
require "tsubame/config/control_token"
require "tmpdir"

module Tsubame
  # The config file language: Puma's directives, so an existing
  # config/puma.rb keeps working. Every directive writes to the :file layer
  # of Options; the public methods of this class are exactly the directives.
  class DSL
    # Puma's names, so that `rackup DefaultRackup` and friends still resolve.
    DefaultRackup = Options::DEFAULTS[:rackup]
    DefaultTCPHost = Options::DEFAULT_HOST
    DefaultTCPPort = Options::DEFAULT_PORT

    # Puma directives for features Tsubame does not have yet (cluster mode,
    # plugins, the control app...). A config written for Puma should still
    # boot, with one warning, rather than fail on the first of them.
    NOT_YET = %i[
      app before_refork before_thread_exit before_thread_start bind_to_activated_sockets
      before_worker_fork clean_thread_locals debug
      directory drain_on_shutdown extra_runtime_dependencies
      fork_worker io_selector_backend log_formatter max_fast_inline
      mutate_stdout_and_stderr_to_sync_on_write nakayoshi_fork
      on_refork on_stopped on_thread_exit on_thread_start
      on_worker_fork out_of_band
      prune_bundler queue_requests rack_url_scheme
      raise_exception_on_sigterm restart_command
      shutdown_debug silence_fork_callback_warning
      silence_single_worker_warning state_permission
      worker_culling_strategy
    ].freeze

    # Plugins Tsubame provides itself; any other is listed in the warning.
    PLUGINS = %w[tmp_restart].freeze

    LAYER = :file

    # Evaluates one config file into options. Returns ignored, with an
    # entry such as "workers (config/puma.rb:3)" added for every directive
    # in NOT_YET that the file used.
    def self.load(path, options, ignored = [])
      source = begin
        File.read(path)
      rescue SystemCallError => e
        raise ConfigError, "cannot read config file #{path}: #{e.message}"
      end
      new(path, options, ignored).__send__(:evaluate, source)
      ignored
    end

    def initialize(path, options, ignored)
      @path = path
      @options = options
      @ignored = ignored
    end

    def threads(min, max = min)
      @options.set_threads(min, max, layer: LAYER)
    end

    def port(number, host = Options::DEFAULT_HOST)
      @options.append(:binds, BindURI.tcp(host, number), layer: LAYER)
    end

    def bind(uri)
      @options.append(:binds, uri, layer: LAYER)
    end

    # Puma's ssl_bind: the same bind as ssl://HOST:PORT?cert=...&key=...
    # Options Tsubame cannot honour (cert_pem, key_pem, keystore, cipher
    # filters) fail the boot naming the option rather than being dropped.
    def ssl_bind(host, port, opts = {})
      params = opts.map do |key, value|
        next if value.nil?

        "#{key}=#{value.to_s.gsub(/[%&\s]/) { |c| format("%%%02X", c.ord) }}"
      end
      host = host.to_s
      host = "[#{host}]" if host.include?(":") && !host.start_with?("[")
      uri = "ssl://#{host}:#{BindURI.port(port)}"
      query = params.compact.join("&")
      @options.append(:binds, query.empty? ? uri : "#{uri}?#{query}", layer: LAYER)
    end

    # Puma's early_hints: env["rack.early_hints"] sends 103 responses.
    def early_hints(answer = true)
      set(:early_hints, answer)
    end

    # HTTP/2 over TLS (ALPN h2), on by default.
    def http2(answer = true)
      set(:http2, answer)
    end

    # The public folder, served by the engine before the app
    # (docs/FILES.md): `public_dir "public", index: true, immutable: /-\h{8,}\./`.
    def public_dir(path, index: false, immutable: :fingerprint)
      set(:public_dir, path)
      set(:public_index, index)
      set(:public_immutable, immutable)
    end

    # X-Sendfile: Rack::Sendfile hands files under these directories to the
    # engine (docs/FILES.md). Each call adds roots.
    def x_sendfile(*roots)
      roots.flatten.each { |root| @options.append(:x_sendfile_roots, root, layer: LAYER) }
    end

    # X-Accel-Redirect: `x_accel_redirect "/_files/" => "/srv/files"`, a
    # URL prefix and the directory its files come from (docs/FILES.md).
    # The Hash form reads as the mapping it makes; each call adds mappings.
    def x_accel_redirect(mappings)
      unless mappings.is_a?(Hash) && !mappings.empty?
        raise ConfigError, "x_accel_redirect takes \"URI\" => \"DIR\" (got #{mappings.inspect})"
      end

      mappings.each { |uri, dir| @options.append(:x_accel_mappings, [uri, dir], layer: LAYER) }
    end

    # Response compression by the engine (docs/FILES.md):
    # `compress`, `compress min_size: 512, types: %w[text/ application/json]`.
    def compress(answer = true, min_size: nil, types: nil)
      set(:compress, answer)
      set(:compress_min_size, min_size) unless min_size.nil?
      set(:compress_types, types) unless types.nil?
    end

    # Cleartext HTTP/2 with prior knowledge on every non-TLS bind.
    def h2c(answer = true)
      set(:h2c, answer)
    end

    def h2_max_concurrent_streams(count)
      set(:h2_max_concurrent_streams, count)
    end

    def h2_initial_window_size(bytes)
      set(:h2_initial_window_size, bytes)
    end

    def h2_initial_connection_window_size(bytes)
      set(:h2_initial_connection_window_size, bytes)
    end

    # Take X-Forwarded-Proto as the scheme: only behind a proxy that sets it.
    def trust_forwarded_proto(answer = true)
      set(:trust_forwarded_proto, answer)
    end

    # Puma's set_remote_address (docs/PROXY.md), what REMOTE_ADDR says:
    #   :socket (default)               the connection's peer
    #   :localhost, "1.2.3.4"           that value, always
    #   header: "X-Forwarded-For"       the header, walked from the right
    #                                   past trusted_proxies, when the peer
    #                                   is one of them
    #   proxy_protocol: :v1 (or :v2)    a PROXY header on every bind
    # Each form replaces the others.
    def set_remote_address(value = :socket)
      header, fixed, proxy = remote_address_form(value)
      set(:remote_address_header, header)
      set(:remote_address_value, fixed)
      set(:proxy_protocol, proxy)
    end

    # The proxies whose forwarding header is believed (set_remote_address
    # header:): addresses or CIDR ranges. Default: loopback and the
    # private ranges.
    def trusted_proxies(*list)
      set(:trusted_proxies, list.flatten)
    end

    # Development only: a certificate for localhost made at boot for the
    # ssl:// binds that name none.
    def tls_self_signed(answer = true)
      set(:tls_self_signed, answer)
    end

    # Binds from this file replace the default anyway; this is for configs
    # that build their list in steps.
    def clear_binds!
      @options.clear(:binds, layer: LAYER)
    end

    def environment(name)
      set(:environment, name)
    end

    def rackup(path)
      set(:rackup, path)
    end

    def pidfile(path)
      set(:pidfile, path)
    end

    def lowlevel_error_handler(handler = nil, &block)
      handler ||= block
      raise ConfigError, "lowlevel_error_handler needs a block or an object that responds to #call" unless handler

      set(:lowlevel_error_handler, handler)
    end

    # log_requests and quiet each undo the other, so whichever comes later
    # (or from a higher layer, e.g. -q against a file's log_requests) wins.
    def log_requests(which = true)
      set(:log_requests, which)
      set(:quiet, false) if which
    end

    def quiet(which = true)
      set(:quiet, which)
      set(:log_requests, false) if which
    end

    def backlog(count)
      set(:backlog, count)
    end

    def io_threads(count)
      set(:io_threads, count)
    end

    def http_content_length_limit(bytes)
      set(:max_body_size, bytes)
    end
    alias max_body_size http_content_length_limit

    def spool_threshold(bytes)
      set(:spool_threshold, bytes)
    end

    def upload_dir(path)
      set(:upload_dir, path)
    end

    def max_uri_size(bytes)
      set(:max_uri_size, bytes)
    end

    def max_header_size(bytes)
      set(:max_header_size, bytes)
    end

    def max_headers(count)
      set(:max_headers, count)
    end

    def persistent_timeout(seconds)
      set(:persistent_timeout, seconds)
    end

    def first_data_timeout(seconds)
      set(:first_data_timeout, seconds)
    end

    def body_timeout(seconds)
      set(:body_timeout, seconds)
    end

    # Answer 503 when the app has not started its response in time (nil:
    # off), and raise Tsubame::RequestTimeout in the thread running it.
    def request_timeout(seconds)
      set(:request_timeout, seconds)
    end

    def request_timeout_grace(seconds)
      set(:request_timeout_grace, seconds)
    end

    # Longest wait for a free thread before the engine answers 503.
    def queue_timeout(seconds)
      set(:queue_timeout, seconds)
    end

    # After this many seconds with no new request, freed memory goes back
    # to the OS (glibc's malloc_trim); false turns it off.
    def idle_memory_trim(seconds)
      set(:idle_memory_trim, seconds)
    end

    def max_queue(count)
      set(:max_queue, count)
    end

    # Fiber mode (docs/FIBERS.md): requests run in non-blocking fibers
    # under Tsubame's scheduler instead of on the thread pool.
    def fiber_scheduler(enabled = true)
      set(:fiber_scheduler, enabled)
    end

    # Only these paths run on fibers (String prefixes or Regexps); the
    # rest stays on the thread pool. Repeated directives add up.
    def fiber_paths(*paths)
      paths.flatten.each { |path| @options.append(:fiber_paths, path, layer: LAYER) }
    end

    def fiber_threads(count)
      set(:fiber_threads, count)
    end

    # Requests queued for or running on fibers at once; beyond it 503
    # (nil: no limit).
    def max_fibers(count)
      set(:max_fibers, count)
    end

    def max_connections(count)
      set(:max_connections, count)
    end

    def max_spooled_uploads(count)
      set(:max_spooled_uploads, count)
    end

    # Bytes of uploads past spool_threshold kept in memory at once before
    # further ones go to disk (0: every one goes to disk).
    def upload_memory(bytes)
      set(:upload_memory, bytes)
    end

    def retry_after(seconds)
      set(:retry_after, seconds)
    end

    def health_check_path(path)
      set(:health_check_path, path)
    end

    def readiness_check_path(path)
      set(:readiness_check_path, path)
    end

    def readiness_queue_threshold(count)
      set(:readiness_queue_threshold, count)
    end

    def readiness_queue_wait(seconds)
      set(:readiness_queue_wait, seconds)
    end

    def readiness_hold(seconds)
      set(:readiness_hold, seconds)
    end

    # Seconds a thread that ran out of work stays awake for the next
    # hand-off (docs/ARCHITECTURE.md); 0 turns it off.
    def handoff_spin(seconds)
      set(:handoff_spin, seconds)
    end

    # rack.upgrade (engine-held WebSockets and SSE, docs/WEBSOCKETS.md): the
    # threads that run the handlers' callbacks, and the engine's limits.
    def upgrade_threads(count)
      set(:upgrade_threads, count)
    end

    def websocket_max_frame(bytes)
      set(:websocket_max_frame, bytes)
    end

    def websocket_max_message(bytes)
      set(:websocket_max_message, bytes)
    end

    # Messages per second a client may send; 0 is no limit.
    def websocket_max_rate(per_second)
      set(:websocket_max_rate, per_second)
    end

    def upgrade_max_pending(bytes)
      set(:upgrade_max_pending, bytes)
    end

    def upgrade_ping_interval(seconds)
      set(:upgrade_ping_interval, seconds)
    end

    # Tsubame.publish and ActionCable's tsubame adapter in a cluster: bytes
    # of messages held for one worker that is not keeping up, before
    # messages for it are dropped (and counted in the stats).
    def publish_buffer(bytes)
      set(:publish_buffer, bytes)
    end

    # On TERM/INT: readiness answers 503 at once, serving goes on for this
    # long, then the drain (docs/OVERLOAD.md, "Stopping behind a balancer").
    def shutdown_delay(seconds)
      set(:shutdown_delay, seconds)
    end

    # Puma also takes :immediately and :forever. Waiting forever is not
    # offered: a stop must finish, so it has to have a bound.
    def force_shutdown_after(seconds)
      seconds = 0 if seconds == :immediately
      if seconds == :forever
        raise ConfigError, "force_shutdown_after :forever is not supported; give a number of seconds"
      end

      set(:drain_timeout, seconds)
    end
    alias drain_timeout force_shutdown_after

    def tcp_nodelay(which = true)
      set(:tcp_nodelay, which)
    end

    # --- cluster mode -------------------------------------------------------

    def workers(count)
      set(:workers, count)
    end

    def preload_app!(which = true)
      set(:preload_app, which)
    end

    def worker_timeout(seconds)
      set(:worker_timeout, seconds)
    end

    def worker_boot_timeout(seconds)
      set(:worker_boot_timeout, seconds)
    end

    def worker_shutdown_timeout(seconds)
      set(:worker_shutdown_timeout, seconds)
    end

    def worker_check_interval(seconds)
      set(:worker_check_interval, seconds)
    end

    def worker_max_requests(count)
      set(:worker_max_requests, count)
    end

    def worker_max_memory(megabytes)
      set(:worker_max_memory, megabytes)
    end

    # Puma's directive. On by default here, at 0.025 s rather than Puma's
    # 0.005: on a loaded machine an idle worker can take longer than 5 ms to
    # be scheduled, and the delay only costs anything while every worker is
    # busy. `nil` turns it off. See crates/tsubame-engine/src/accept.rs.
    def wait_for_less_busy_worker(seconds = Options::DEFAULTS[:wait_for_less_busy_worker])
      set(:wait_for_less_busy_worker, seconds)
    end

    def before_fork(&block)
      hook(:before_fork, block)
    end

    def on_worker_boot(&block)
      hook(:on_worker_boot, block)
    end
    alias before_worker_boot on_worker_boot

    def on_worker_shutdown(&block)
      hook(:on_worker_shutdown, block)
    end
    alias before_worker_shutdown on_worker_shutdown

    def after_worker_fork(&block)
      hook(:after_worker_fork, block)
    end
    alias after_worker_boot after_worker_fork

    def on_booted(&block)
      hook(:on_booted, block)
    end

    def on_restart(&block)
      hook(:on_restart, block)
    end

    # Puma's form: activate_control_app "tcp://127.0.0.1:9293",
    # { auth_token: "secret" } or { no_token: true }. Without either, a
    # random token is made at boot (see README "Control app").
    def activate_control_app(url = "auto", opts = {})
      url = "unix://#{File.join(Dir.tmpdir, "tsubame-ctl-#{Process.pid}.sock")}" if url == "auto"
      set(:control_url, url)
      set(:control_token, opts[:auth_token]) if opts[:auth_token]
      set(:control_token, ControlToken::NONE) if opts[:no_token]
    end

    def state_path(path)
      set(:state_path, path)
    end

    def stdout_redirect(stdout = nil, stderr = nil, append = false)
      set(:redirect_stdout, stdout)
      set(:redirect_stderr, stderr)
      set(:redirect_append, append)
    end

    def tag(name)
      set(:tag, name)
    end

    def plugin(name)
      if PLUGINS.include?(name.to_s)
        set(name.to_sym, true)
      else
        @ignored << "plugin #{name.inspect} (#{location(caller_locations)})"
      end
      nil
    end

    NOT_YET.each do |name|
      define_method(name) do |*_args, **_options, &_block|
        @ignored << "#{name} (#{location(caller_locations)})"
        nil
      end
    end

    private

    def remote_address_form(value)
      case value
      when :socket then [nil, nil, nil]
      when :localhost then [nil, "127.0.0.1", nil]
      when String then [nil, value, nil]
      when Hash then remote_address_hash(value)
      else raise ConfigError, "set_remote_address takes :socket, :localhost, a String, header: or proxy_protocol: (got #{value.inspect})"
      end
    end

    def remote_address_hash(value)
      unknown = value.keys - %i[header proxy_protocol]
      if unknown.any? || value.size != 1
        raise ConfigError, "set_remote_address takes one of header: or proxy_protocol: (got #{value.inspect})"
      end
      return [value[:header], nil, nil] if value.key?(:header)

      [nil, nil, value[:proxy_protocol] || raise(ConfigError, "set_remote_address proxy_protocol: needs :v1 or :v2")]
    end

    def set(key, value)
      @options.set(key, value, layer: LAYER)
    end

    def hook(key, block)
      raise ConfigError, "#{key} needs a block" unless block

      @options.append(key, block, layer: LAYER)
    end

    def evaluate(source)
      instance_eval(source, @path, 1)
    rescue SyntaxError => e
      raise ConfigError, syntax_error_message(e)
    rescue StandardError, ScriptError => e
      detail = e.is_a?(ConfigError) ? e.message : "#{e.message} (#{e.class})"
      raise ConfigError, "#{location(e.backtrace_locations)}: #{detail}"
    end

    # The raise happens inside this class, so the backtrace is what points
    # at the offending line of the config file.
    def method_missing(name, *_args, **_options, &_block)
      raise ConfigError, "unknown directive '#{name}'"
    end

    def respond_to_missing?(_name, _include_private = false)
      false
    end

    def location(locations)
      line = locations&.find { |frame| frame.path == @path }&.lineno
      line ? "#{@path}:#{line}" : @path
    end

    # Ruby reports "path:line: syntax error, ..." followed by a source
    # excerpt; the first line is what the user needs.
    def syntax_error_message(error)
      lines = error.message.lines.map(&:chomp)
      lines.find { |line| line.start_with?("#{@path}:") } || "#{@path}: #{lines.first}"
    end
  end
end
