# frozen_string_literal: true

require "tsubame/errors"
require "tsubame/config/bind_uri"
require "tsubame/config/options"
require "tsubame/config/control_token"
require "tsubame/config/hooks"
require "tsubame/config/puma_constant"
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
    # `Puma` in a config file (Puma.cli_config, Puma.stats, Puma::Const):
    # constant lookup from the file's code reaches this class first.
    Puma = PumaConstant

    # Plugins Tsubame provides itself; any other is listed in the warning.
    PLUGINS = %w[tmp_restart].freeze

    LAYER = :file

    # Evaluates one config file into options. Returns ignored, with an
    # entry such as "plugin :heroku (config/puma.rb:3)" added for every
    # plugin Tsubame does not provide.
    def self.load(path, options, ignored = [])
      source = begin
        File.read(path)
      rescue SystemCallError => e
        raise ConfigError, "cannot read config file #{path}: #{e.message}"
      end
      PumaConstant.options = options
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

    # Without a host: set_default_host's, else 0.0.0.0.
    def port(number, host = nil)
      @options.append(:binds, BindURI.tcp(host || default_host, number), layer: LAYER)
    end

    def bind(uri)
      @options.append(:binds, uri, layer: LAYER)
    end

    # Puma's ssl_bind: the same bind as ssl://HOST:PORT?cert=...&key=...
    # Without cert: and key:, a self-signed certificate (tls_self_signed).
    # Every key goes into the query (PEM text of cert_pem/key_pem too,
    # escaped); the engine checks them (net/tls_query.rs), so an option
    # Tsubame cannot honour (keystore) fails the boot naming it rather
    # than being dropped. Repeated with sni: "host" for one address, the
    # binds become one listener with several certificates
    # (BindURI.merge_sni). docs/TLS_HTTP2.md lists the options.
    def ssl_bind(host, port, opts = {})
      # Puma's form without cert and key: a development certificate for
      # localhost (Puma takes it from the localhost gem).
      set(:tls_self_signed, true) unless %i[cert cert_pem sni_dir].any? { |key| opts.key?(key) }
      params = opts.map do |key, value|
        value = ssl_bind_value(key, value)
        next if value.nil?

        "#{key}=#{value.to_s.gsub(/[%&\s]/) { |c| format("%%%02X", c.ord) }}"
      end
      host = host.to_s
      host = "[#{host}]" if host.include?(":") && !host.start_with?("[")
      uri = "ssl://#{host}:#{BindURI.port(port)}"
      query = params.compact.join("&")
      @options.append(:binds, query.empty? ? uri : "#{uri}?#{query}", layer: LAYER)
    end

    # Puma's spellings: reuse: true or { size:, timeout: } (the session
    # cache), verification_flags as an Array.
    def ssl_bind_value(key, value)
      case key.to_sym
      when :reuse
        return "dflt" if value == true
        return nil unless value.is_a?(Hash) && (value.key?(:size) || value.key?(:timeout))

        "#{value[:size]}#{",#{value[:timeout]}" if value[:timeout]}"
      when :verification_flags then Array(value).join(",")
      else value
      end
    end
    private :ssl_bind_value

    # How often the session-ticket key of TLS binds changes, in seconds
    # (keys shared by all workers; docs/TLS_HTTP2.md).
    def tls_ticket_rotation(seconds)
      set(:tls_ticket_rotation, seconds)
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

    # true, false or :auto (the default): whether the one app thread also
    # drives the connections (docs/ARCHITECTURE.md, "Inline").
    def inline(mode = true)
      set(:inline, mode)
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

    # permessage-deflate when a client offers it; false: never.
    def websocket_deflate(enabled = true)
      set(:websocket_deflate, enabled)
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

    # Cluster mode: workers of their own for WebSocket connections; the
    # others hand them every upgrade request they read (docs/REALTIME.md).
    def websocket_workers(count = 1)
      set(:websocket_workers, count)
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

    # Puma 7's names, with the on_* ones they replaced. A key (String or
    # Symbol) gives the hook a Hash as second argument, shared with the
    # other hooks of that key in the same worker (Puma's hook data).
    def before_worker_boot(key = nil, &block)
      hook(:on_worker_boot, keyed(:before_worker_boot, key, block))
    end
    alias on_worker_boot before_worker_boot

    def before_worker_shutdown(key = nil, &block)
      hook(:on_worker_shutdown, keyed(:before_worker_shutdown, key, block))
    end
    alias on_worker_shutdown before_worker_shutdown

    def after_worker_fork(&block)
      hook(:after_worker_fork, block)
    end
    alias after_worker_boot after_worker_fork

    def after_booted(&block)
      hook(:on_booted, block)
    end
    alias on_booted after_booted

    def before_restart(&block)
      hook(:on_restart, block)
    end
    alias on_restart before_restart

    # --- Puma's other directives (docs/PUMA.md) --------------------------------

    # The app, instead of a rackup file: a #call-able or a block taking env.
    def app(obj = nil, &block)
      obj ||= block
      raise ConfigError, "app needs a block or an object that responds to #call" unless obj

      set(:app, obj)
    end

    # Where the server runs from: changed to before the app loads, and
    # again before a phased restart's workers load it, so a symlinked
    # release directory is followed to the new release.
    def directory(dir)
      set(:directory, dir.to_s)
    end

    # In each app thread, before it takes its first request.
    def before_thread_start(&block)
      hook(:before_thread_start, block)
    end
    alias on_thread_start before_thread_start

    # In each app thread as it ends (Tsubame's pool is fixed, so at the
    # stop; Puma runs it when a thread is trimmed).
    def before_thread_exit(&block)
      hook(:before_thread_exit, block)
    end
    alias on_thread_exit before_thread_exit

    # After a request, when no other request is running or queued; requests
    # wait for it to finish.
    def out_of_band(&block)
      hook(:out_of_band, block)
    end

    # Puma 5/6: thread-locals (Thread.current[]) are cleared after each
    # request.
    def clean_thread_locals(enabled = true)
      set(:clean_thread_locals, enabled)
    end

    # rack.url_scheme on connections that are not TLS ("https" behind a
    # proxy that ends TLS and sets no X-Forwarded-Proto).
    def rack_url_scheme(scheme = nil)
      set(:rack_url_scheme, scheme&.to_s)
    end

    # Formats each line Tsubame logs (banner, cluster events), in place of
    # the "[pid] " prefix.
    def log_formatter(&block)
      raise ConfigError, "log_formatter needs a block" unless block

      set(:log_formatter, block)
    end

    # The state file's permissions, e.g. 0600.
    def state_permission(permission)
      set(:state_permission, permission)
    end

    # Which workers stop when the count is lowered (TTOU): :youngest
    # (Puma's default) or :oldest.
    def worker_culling_strategy(strategy)
      set(:worker_culling_strategy, strategy)
    end

    # After a stop that a TERM began, the process ends by SIGTERM (exit
    # status 143) as Puma's does, instead of exiting with 0.
    def raise_exception_on_sigterm(answer = true)
      set(:raise_exception_on_sigterm, answer)
    end

    # What a hot restart re-executes instead of the command that started
    # the server (the arguments are kept).
    def restart_command(cmd)
      set(:restart_command, cmd.to_s)
    end

    # The effective configuration at boot, and cluster events in detail.
    def debug
      set(:debug, true)
    end

    # At a stop, every thread's backtrace (on_force: true: only when the
    # drain timed out).
    def shutdown_debug(val = true, on_force: false)
      set(:shutdown_debug, val && on_force ? :on_force : val)
    end

    # At a stop, connections already waiting in the listen backlog are
    # accepted and served before the drain (TCP binds).
    def drain_on_shutdown(which = true)
      set(:drain_on_shutdown, which)
    end

    # $stdout and $stderr write through (IO#sync), Puma's default.
    def mutate_stdout_and_stderr_to_sync_on_write(enabled = true)
      set(:sync_stdout, enabled)
    end

    def silence_single_worker_warning
      set(:silence_single_worker_warning, true)
    end

    def silence_fork_callback_warning
      set(:silence_fork_callback_warning, true)
    end

    # Puma's default (true) is what Tsubame's engine always does: it reads
    # whole requests before the app sees them.
    def queue_requests(answer = true)
      return if answer

      raise ConfigError, "queue_requests false is not available: Tsubame's engine always reads whole requests " \
                         "before a thread takes them; remove the line (persistent_timeout bounds keep-alive)"
    end

    # The engine's reactor is epoll (tokio), which :auto picks too.
    def io_selector_backend(backend)
      return if %i[auto epoll].include?(backend.to_s.to_sym)

      raise ConfigError, "io_selector_backend #{backend.inspect} is not available: the engine uses epoll; " \
                         "use :epoll or :auto, or remove the line (io_threads sets the engine's threads)"
    end

    # Puma's prune_bundler re-executes a master started under Bundler
    # without it. Outside Bundler there is nothing to prune and the line
    # does nothing, as in Puma (Puma's own test configs use it so). Under
    # Bundler Tsubame does not re-execute: a hot restart (USR2, `tsubame
    # ctl restart`) re-executes the master, which loads the new
    # Gemfile.lock, so the boot stops saying so.
    def prune_bundler(answer = true)
      return unless answer && under_bundler?

      raise ConfigError, "prune_bundler is not available under Bundler: use a hot restart (USR2 or " \
                         "`tsubame ctl restart`) to pick up a new Gemfile.lock; remove the line"
    end

    # The gems prune_bundler keeps; nothing to keep where nothing is pruned.
    def extra_runtime_dependencies(answer = [])
      return if Array(answer).empty? || !under_bundler?

      raise ConfigError, "extra_runtime_dependencies applies to prune_bundler, which is not available under " \
                         "Bundler: a hot restart (USR2) loads new gems; remove the line"
    end

    def under_bundler?
      defined?(::Bundler) || ENV.key?("BUNDLE_GEMFILE")
    end

    # --- reforking (docs/REFORK.md) ------------------------------------------

    # Workers 1.. fork from worker 0, and are re-forked from it once it has
    # served `after_requests` (0: only on `tsubame ctl refork` or URG).
    def fork_worker(after_requests = 1000)
      set(:fork_worker, Integer(after_requests))
    rescue ArgumentError, TypeError
      raise ConfigError, "fork_worker takes a number of requests (got #{after_requests.inspect})"
    end

    # Puma 5's nakayoshi_fork: with preload_app!, collect and compact the
    # master's heap before each fork.
    def nakayoshi_fork(enabled = true)
      set(:nakayoshi_fork, enabled)
    end

    # In worker 0, with its server stopped, before each batch of workers is
    # forked from it (Puma 5/6 called it on_refork). The key is Puma's hook
    # data key, accepted for its configs.
    def before_refork(_key = nil, &block)
      hook(:before_refork, block)
    end
    alias on_refork before_refork

    # In worker 0, after the batch was forked, before it serves again.
    def after_refork(_key = nil, &block)
      hook(:after_refork, block)
    end

    # In the process that forks (the master, or worker 0 under
    # fork_worker), before each worker is forked; given the index.
    def before_worker_fork(&block)
      hook(:before_worker_fork, block)
    end
    alias on_worker_fork before_worker_fork

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

    # --- observability (docs/OBSERVABILITY.md) ---------------------------

    # access_log :json, "log/access.log" (no path: stdout); :off for none.
    def access_log(format, path = nil)
      set(:access_log, format)
      set(:access_log_file, path)
    end

    def metrics(which = true)
      set(:metrics, which)
    end

    # /metrics alone, without a token, on a bind of its own.
    def metrics_url(url)
      set(:metrics_url, url)
    end

    def request_id(which = true)
      set(:request_id, which)
    end

    def request_start_header(which = true)
      set(:request_start_header, which)
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

    # --- Puma 7/8 directives (docs/PUMA.md) ------------------------------

    # Once the server has stopped serving, single or cluster mode.
    def after_stopped(&block)
      hook(:after_stopped, block)
    end
    alias on_stopped after_stopped

    # In the master, after a worker exited: gets the worker's handle
    # (index, pid, process_status).
    def after_worker_shutdown(&block)
      hook(:after_worker_shutdown, block)
    end

    # Requests one connection may make; the response to the last closes
    # it. Float::INFINITY (or nil): no limit.
    def max_keep_alive(requests)
      @max_keep_alive_given = true
      set(:max_keep_alive, requests)
    end

    # Puma's older name for max_keep_alive; as in Puma, it does not undo a
    # max_keep_alive given before it.
    def max_fast_inline(requests)
      set(:max_keep_alive, requests) unless @max_keep_alive_given
    end

    # false: every response closes its connection.
    def enable_keep_alives(enabled = true)
      set(:enable_keep_alives, enabled)
    end

    # The methods that reach the app; others get 501. :any lets every
    # method through; Puma::Const::IANA_HTTP_METHODS is the registry's list.
    def supported_http_methods(methods)
      set(:supported_http_methods, methods)
    end

    # Stop (the whole cluster too) after this many seconds without a request.
    def idle_timeout(seconds)
      set(:idle_timeout, seconds)
    end

    # Log lines (the banner, request logs, errors) go to this object's
    # #write instead of stdout/stderr.
    def custom_logger(logger)
      set(:custom_logger, logger)
    end

    # The host `port` binds when it names none.
    def set_default_host(host)
      set(:default_host, host)
    end

    def default_host
      @options[:default_host]
    end

    # Serve systemd's activated sockets whether or not a bind names them;
    # 'only': the activated sockets replace the binds (docs/SYSTEMD.md).
    def bind_to_activated_sockets(bind = true)
      set(:bind_to_activated_sockets, bind)
    end

    # A fresh Fiber for each request: Tsubame's fiber mode, whose requests
    # each run in their own fiber (docs/FIBERS.md).
    def fiber_per_request(which = true)
      set(:fiber_scheduler, which)
    end

    # Threads beyond `threads` max for requests the app marks IO-bound with
    # env["puma.mark_as_io_bound"].call.
    def max_io_threads(count)
      set(:max_io_threads, count)
    end

    # Puma's helpers for config code: the value of a setting by Puma's
    # name, and the DSL run on a block.
    def get(key, default = nil)
      name = PumaConstant.tsubame_name(key)
      value = name && @options[name]
      value.nil? ? default : value
    end

    def inject(&block)
      instance_eval(&block)
    end

    # Another config file, read now (a relative path from the current
    # directory, as Puma has it).
    def load(path)
      DSL.load(path.to_s, @options, @ignored)
      nil
    end

    # Directives for one mode only, run once every config file is read
    # (ConfigLoader), when the worker count is known.
    def single(&block)
      raise ConfigError, "single needs a block" unless block

      @options.append(:single_blocks, block, layer: LAYER)
    end

    def cluster(&block)
      raise ConfigError, "cluster needs a block" unless block

      @options.append(:cluster_blocks, block, layer: LAYER)
    end

    # Runs the single or cluster blocks as directives of the file that
    # defined each.
    def self.run_mode_blocks(options, ignored)
      key = options[:workers].positive? ? :cluster_blocks : :single_blocks
      options[key].each do |block|
        path = block.source_location&.first.to_s
        new(path, options, ignored).__send__(:evaluate_block, block)
      end
    end

    # false: request headers with an underscore in their name never reach
    # the app (HTTP_X_API_KEY could otherwise come from X_Api_Key).
    def allow_underscore_headers(allowed = true)
      set(:allow_underscore_headers, allowed)
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

    # Puma takes a String or Symbol key.
    def keyed(name, key, block)
      raise ConfigError, "#{name} needs a block" unless block
      return block if key.nil?
      raise ConfigError, "#{name} key must be a String or Symbol (got #{key.inspect})" unless key.is_a?(String) || key.is_a?(Symbol)

      Hooks::Keyed.new(key.to_sym, block)
    end

    def evaluate_block(block)
      instance_exec(&block)
    rescue StandardError, ScriptError => e
      detail = e.is_a?(ConfigError) ? e.message : "#{e.message} (#{e.class})"
      raise ConfigError, "#{location(e.backtrace_locations)}: #{detail}"
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
