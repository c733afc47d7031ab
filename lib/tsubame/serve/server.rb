# frozen_string_literal: true

require "socket"
# Rack 2.2's Rack::Lint checks SERVER_NAME with URI.parse but never
# requires uri (and rescues the NameError), so without this every request
# to a Lint-wrapped app failed until something else happened to load it.
require "uri"
require "rack"
require "tsubame/version"
require "tsubame/errors"
require "tsubame/tsubame_native"
require "tsubame/serve/stream"
require "tsubame/serve/hijacked_socket"
require "tsubame/serve/app_errors"
require "tsubame/serve/listeners"
require "tsubame/serve/socket_activation"
require "tsubame/serve/self_signed"
require "tsubame/serve/request_timeouts"
require "tsubame/config/bind_uri"
require "tsubame/support/clock"
require "tsubame/fiber/routes"
require "tsubame/serve/idle_memory"
require "tsubame/serve/upgrades"
require "tsubame/support/named_thread"
require "tsubame/serve/io_threads"
require "tsubame/serve/response_headers"
require "tsubame/serve/thread_hooks"
require "tsubame/serve/listen_backlog"
require "tsubame/serve/shutdown_debug"

module Tsubame
  # Runs a Rack app on the native engine: the engine reads whole requests
  # and queues them; a pool of Ruby threads takes them (waiting with the GVL
  # released), calls the app, and hands the response back to the engine.
  class Server
    include Clock

    RACK3 = Gem::Version.new(Rack.release) >= Gem::Version.new("3.0")

    # Seconds the app threads get, all together, to finish once the engine
    # has stopped; then those still running (stuck in the app after a drain
    # timeout) are killed. One shared deadline, so N stuck threads do not
    # cost N seconds.
    THREAD_GRACE = 1.0

    # RFC 9110 field names (tokens), for the heads Ruby writes itself.
    HEADER_NAME = /\A[!#$%&'*+\-.^_`|~0-9A-Za-z]+\z/

    attr_reader :app, :options, :upgrades

    # listeners: sockets bound elsewhere (a cluster worker's, inherited from
    # the master); by default the server binds options[:binds] itself.
    # busy_accept_delay: for cluster workers sharing those sockets, how long
    # to hold back from a new connection while no thread is idle, so an
    # idle worker takes it first.
    # worker_index: a cluster worker's index, for the access log.
    # handoff: the engine options of a cluster worker under
    # websocket_workers (WebsocketHandoff#native_options).
    def initialize(app, options, listeners: nil, busy_accept_delay: nil, worker_index: nil, handoff: nil)
      @app = app
      if (logger = options[:custom_logger]) && options[:log_requests] && !options[:quiet]
        require "tsubame/serve/custom_logger" # only with one (footprint_test.rb)
        @app = CustomLogger::RequestLog.new(app, logger)
      end
      @worker_index = worker_index
      @options = options
      @listeners = listeners
      @handoff = handoff
      @busy_accept_delay = busy_accept_delay
      @native = nil
      @fiber_mode = false
      @threads = []
      @fiber_loops = []
      @idle_memory = nil
      @stopping = false
      @stop_requested = false
      @events = Thread::Queue.new
      @app_errors = AppErrors.new(options[:lowlevel_error_handler], $stderr)
    end

    # Binds every listener; raises Tsubame::BindError naming the bind. The
    # engine adopts duplicates of the sockets (see Listeners), so they can
    # outlive it: a hot restart hands them to the next process.
    def bind
      @listeners ||= Listeners.bind(SelfSigned.binds(@options), @options[:backlog],
                                    activated_binds: @options[:bind_to_activated_sockets])
      @native ||= begin
        native = FiberRoutes.apply(@options.native)
        native[:binds] = @listeners.native_binds(busy_accept_delay: @busy_accept_delay)
        # A WebSocket worker's index is negative: the access log has none.
        native[:worker_index] = @worker_index if @worker_index && !@worker_index.negative?
        native.merge!(@handoff) if @handoff
        @fiber_mode = native[:fiber_scheduler]
        Native.rack3 = RACK3
        Native::Server.new(native)
      end
      self
    end

    def listeners
      bind
      @listeners
    end

    # websocket_workers, in an HTTP worker: whether upgrade requests go to
    # the WebSocket workers (the master says when one is up).
    def handoff=(on)
      bind
      @native.handoff = on
    end

    def tls?
      @options[:binds].any? { |uri| BindURI.tls?(uri) }
    end

    def addresses
      bind
      @native.addresses
    end

    def start
      bind
      @env_templates = env_templates
      @early_hints = @options[:early_hints]
      @x_sendfile = sendfile_variation
      @timeouts = RequestTimeouts.new(@native, @options[:request_timeout_grace], @app_errors.method(:log_line),
                                      enabled: !@options[:request_timeout].nil?)
      @thread_hooks = ThreadHooks.build(@options, @native)
      @native.start
      listeners = PublishListeners.process
      listeners.limit = @options[:publish_buffer]
      listeners.log_line = @app_errors.method(:log_line)
      @upgrades = Upgrades.new(@native, @options[:upgrade_threads], @app_errors.method(:log_line),
                               listeners: listeners)
      Upgrades.current = @upgrades
      # max_io_threads: the extra threads wait at the gate until a
      # request is marked IO-bound.
      @io_gate = IoThreads.new(@options[:threads_max], @options[:max_io_threads]) if @options[:max_io_threads].positive?
      @threads = Array.new(@options[:threads_max] + @options[:max_io_threads]) { |i| spawn_thread(i) }
      @fiber_loops = start_fiber_loops
      @timeouts.start(@threads, @fiber_loops)
      @idle_memory = IdleMemory.new(@native, @options[:idle_memory_trim]).start if @options[:idle_memory_trim]
      finish_early_stop
      self
    end

    # The lame-duck period (shutdown_delay): readiness answers 503 and
    # responses close their connections, while everything is still served.
    # Safe to call from a trap handler.
    def enter_lame_duck
      @stopping = true
      @native&.enter_lame_duck
    end

    # Whether a stop (or the lame duck before one) has begun; a hot restart
    # asked for then must not turn the stop into a restart.
    def stopping?
      @stopping
    end

    # Begins a graceful stop. Safe to call from a trap handler.
    # close_listeners: false keeps the sockets open (for a hot restart, or
    # for a cluster master that still holds them); #wait then leaves them
    # to the caller.
    def stop(close_listeners: true)
      @stopping = true
      # Not @stopping: the lame duck sets that too, and serves on.
      @stop_requested = true
      if @options[:shutdown_debug] == true
        # The backtraces show where each thread was when the stop came, so
        # #wait's thread takes them before the engine lets the threads go.
        @events << :shutdown_debug
      else
        stop_engine
      end
      # Closed by #wait's thread, not here: a trap handler should do no I/O.
      @events << :close_listeners if close_listeners
    end

    # Blocks until the engine has drained, then until the threads finish.
    # Returns :drained, or :timed_out when drain_timeout cut requests short.
    #
    # The native wait runs on a helper thread while this one sleeps in
    # Queue#pop: Ruby delivers signals (and runs trap handlers) only to a
    # main thread sleeping in Ruby, not one blocked inside an extension.
    #
    # Once the engine stopped accepting, closing our copies of the sockets
    # lets the kernel refuse new clients at once, instead of queueing them
    # on a socket nobody will accept on again.
    def wait
      waiter = Thread.new { @events << [:stopped, @native.wait] }
      outcome = nil
      until outcome
        event = @events.pop
        case event
        when :close_listeners then @listeners.close
        when :drain then drain_backlog
        when :shutdown_debug
          ShutdownDebug.dump($stdout)
          stop_engine
        else outcome = event.last
        end
      end
      waiter.join
      ShutdownDebug.dump($stdout) if @options[:shutdown_debug] == :on_force && outcome == :timed_out
      # max_io_threads: the gate closes once the engine has stopped, not
      # at #stop: threads go on taking the requests the drain still hands
      # out (a closed gate sent them away, leaving queued requests to the
      # drain timeout), and #stop runs in trap handlers, where the gate's
      # Mutex raises ThreadError.
      @io_gate&.close
      @idle_memory&.stop
      join_threads
      outcome
    end

    def run
      start
      wait
    end

    def stats
      @native.stats
    end

    # What the allocators hold free goes back to the OS (IdleMemory's trim,
    # also worker 0's before it forks); true if glibc returned any.
    def trim_memory
      @native.trim_memory
    end

    # The engine's per-request counters and histograms (docs/OBSERVABILITY.md).
    def metrics
      @native.metrics
    end

    # HUP: the access log file is opened again by name (log rotation).
    def reopen_access_log
      @native&.reopen_access_log
    end

    # HUP with TLS binds: new handshakes get the certificate and key now on
    # disk, open connections keep theirs. A file that cannot be used is
    # logged by name and that bind keeps its old certificate.
    def reload_tls(log = $stdout)
      count = @native.reload_tls
      log.puts "- TLS certificates reloaded (#{count} bind#{"s" unless count == 1})"
    rescue BindError => e
      log.puts "! TLS certificate reload failed, keeping the old certificates: #{e.message}"
    end

    # Puma's names for what a worker reports to the master (the "last_status"
    # of its stats), plus Tsubame's own. Threads are all started at boot, so
    # "running" (threads spawned) is the maximum.
    def status
      stats = self.stats
      max = @options[:threads_max]
      idle = [stats["waiting_threads"].to_i, max].min
      backlog = stats["backlog"].to_i
      {
        "backlog" => backlog,
        "running" => max,
        "pool_capacity" => idle,
        "max_threads" => max,
        "busy_threads" => max - idle + backlog,
        "requests_count" => stats["requests_total"].to_i,
        "requests_in_flight" => max - idle,
        "connections_active" => stats["connections_active"].to_i,
        "app_errors" => @app_errors.count,
        "publish" => PublishListeners.process.stats,
        "engine" => stats
      }
    end

    private

    def stop_engine
      # drain_on_shutdown: #wait's thread stops the engine once the listen
      # backlog is empty (a trap handler must not wait).
      if @options[:drain_on_shutdown] && @native && !@drain_requested
        @drain_requested = true
        @events << :drain
      else
        @native&.stop
      end
    end

    # A stop can come from a trap handler while #start runs (a cluster
    # worker's TERM as it boots): before #bind made the engine it found no
    # engine to stop, and then #start would start one that nothing stops,
    # and #wait would wait for it forever. What it could not do is done
    # here; a stop from here on finds the engine in place.
    def finish_early_stop
      return unless @stop_requested

      stop_engine unless @drain_requested
    end

    # Fiber mode (docs/FIBERS.md): threads running the requests the engine
    # routes to fibers, next to the thread pool.
    def start_fiber_loops
      return [] unless @fiber_mode

      # Here, not at the top: a server without fiber mode never carries the
      # fiber loop, its scheduler and timers (test/serve/footprint_test.rb).
      require "tsubame/fiber/loop"
      handle = ->(request) { handle(request, env_for(request)) }
      Array.new(@options[:fiber_threads]) do |index|
        FiberLoop.new(@native, index, handle, @app_errors.method(:log_line)).start
      end
    end

    # drain_on_shutdown: the engine goes on accepting until the kernel's
    # listen backlogs are empty (or drain_timeout passed), then stops;
    # the connections it took are served by the drain as usual. The
    # listeners are closed after that (:close_listeners comes later).
    def drain_backlog
      deadline = monotonic + @options[:drain_timeout]
      sleep 0.01 until ListenBacklog.empty?(@listeners) || monotonic > deadline
      @native.stop
    end

    def join_threads
      deadline = monotonic + THREAD_GRACE
      (@threads + @fiber_loops.map(&:thread) + (@upgrades&.threads || [])).each do |thread|
        left = deadline - monotonic
        thread.join([left, 0].max) || thread.kill
      end
    end

    def spawn_thread(index)
      NamedThread.start("tsubame-#{index}") { serve_requests(index) }
    end

    # The Rack::Sendfile backend (docs/FILES.md), or nil; Options allows
    # at most one of them.
    def sendfile_variation
      roots = @options[:x_sendfile_roots]
      mappings = @options[:x_accel_mappings]
      log_line = @app_errors.method(:log_line)
      # Required here: a server with neither never carries them
      # (footprint_test.rb).
      unless roots.empty?
        require "tsubame/serve/x_sendfile"
        return XSendfile.new(roots, log_line)
      end
      return if mappings.empty?

      require "tsubame/serve/x_accel_redirect"
      XAccelRedirect.new(mappings, log_line)
    end

    # One pool thread's loop. With max_io_threads (`gate`) each request is
    # taken and answered holding a slot; Puma's thread directives
    # (`hooks`, ThreadHooks) wrap each request.
    def serve_requests(index)
      native = @native
      timeouts = @timeouts
      hooks = @thread_hooks
      gate = @io_gate
      hooks&.thread_started
      timeouts.worker do
        # Nothing of the server's own to run around each request: the
        # engine's loop calls the app (app_loop.rs), and hands back here
        # only what it does not send itself.
        next native.serve(@app, @env_templates, self) if native_loop?

        while !gate || gate.acquire
          begin
            request = native.next_request
            break unless request

            if hooks
              hooks.around_request { timeouts.run(index, request) { handle(request, env_for(request, gate)) } }
            else
              timeouts.run(index, request) { handle(request, env_for(request, gate)) }
            end
          ensure
            gate&.release
          end
        end
      end
    ensure
      hooks&.thread_exiting
    end

    # Whether `Native::Server#serve` runs the pool threads' loop: only when
    # no request timeout, thread hook, max_io_threads gate, early hints or
    # X-Sendfile has to run around each request.
    def native_loop?
      !@timeouts.enabled? && !@thread_hooks && !@io_gate && !@early_hints && !@x_sendfile
    end

    # The Rack env of a request, the same whether a pool thread or a fiber
    # loop runs it.
    def env_for(request, gate = nil)
      env = request.env(@env_templates)
      env["puma.mark_as_io_bound"] = gate.marker if gate
      env["rack.early_hints"] = request.method(:early_hints) if @early_hints
      @x_sendfile&.prepare(env)
      env
    end

    def handle(request, env)
      input = env["rack.input"]
      begin
        status, headers, body = @app.call(env)
      rescue Exception => e # rubocop:disable Lint/RescueException
        # Anything the app raises, including ScriptError and timeouts, is
        # the request's failure, not the server's.
        return complete(request, env, input, nil, nil, nil, e)
      end
      complete(request, env, input, status, headers, body, nil)
    end

    # From the native loop (app_loop.rs): the app returned something other than an
    # Array, destructured as Ruby does.
    def complete_result(request, env, input, result)
      status, headers, body = result
      complete(request, env, input, status, headers, body, nil)
    end

    # Everything after the app's call: its response (or, when the app
    # raised `error`, the error's), then `after_response`. `input` is the
    # `rack.input` the request came with (the app may replace the env's).
    def complete(request, env, input, status, headers, body, error)
      unless error || request.hijacked?
        begin
          headers = ResponseHeaders.normalize(headers, RACK3)
          status, headers, body = @x_sendfile.apply(status, headers, body) if @x_sendfile
          send_response(request, env, status, headers, body)
        rescue Exception => e # rubocop:disable Lint/RescueException
          error = e
        end
      end
      status = @app_errors.answer(request, env, error) if error
    ensure
      after_response(request, env, input, status, headers, body, error)
    end

    def send_response(request, env, status, headers, body)
      # rack.upgrade: the engine answers the handshake, not the app's
      # response (its body is closed afterwards as always).
      if env["rack.upgrade?"] && (handler = env["rack.upgrade"])
        @upgrades.take(request, env, handler)
      elsif headers["rack.protocol"] && env["rack.protocol"]
        switch_protocols(request, env, headers, body)
      else
        result = request.respond(status, headers, body)
        stream(result, headers, body) unless result == true
      end
    end

    # The request's end, once its response went (or failed): the body's
    # close, the response_finished callbacks, the input's release.
    def after_response(request, env, input, status, headers, body, error)
      close_body(body, env)
      finish(env, status, headers, error)
      # After a full hijack the app may still be reading the body on its
      # own thread; otherwise the request is over.
      input.release unless request.hijacked?
    end

    # A `rack.protocol` response header (Rack 3.1): the server switches the
    # connection to that protocol (101 with `upgrade`) and the body's
    # `call` gets the raw socket, both ways. A protocol the client did not
    # offer is the app's error.
    def switch_protocols(request, env, headers, body)
      protocol = headers["rack.protocol"]
      unless env["rack.protocol"].include?(protocol)
        raise ArgumentError, "rack.protocol #{protocol.inspect} is not one the client offered #{env["rack.protocol"].inspect}"
      end

      io = request.call
      head = +"HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: #{protocol}\r\n"
      headers.each do |name, value|
        next if name.start_with?("rack.") || %w[connection upgrade content-length].include?(name.downcase)
        raise ArgumentError, "invalid response header name #{name.inspect}" unless name.match?(HEADER_NAME)

        Array(value.is_a?(String) ? value.split("\n") : value).each do |line|
          raise ArgumentError, "invalid response header value for #{name}" if line.to_s.match?(/[\r\0]/)

          head << "#{name}: #{line}\r\n"
        end
      end
      begin
        io.write(head << "\r\n")
        if body.respond_to?(:call) && !body.respond_to?(:each)
          body.call(io)
        else
          body.each { |chunk| io.write(chunk) }
          io.close
        end
      rescue Exception # rubocop:disable Lint/RescueException
        # The socket is the app's now, but a failing body cannot go on
        # with it: the client sees the connection end, not a hang.
        io.close unless io.closed?
        raise
      end
    end

    def stream(stream, headers, body)
      if (hijack = headers["rack.hijack"])
        hijack.call(stream)
      elsif body.respond_to?(:each)
        body.each { |chunk| stream.write(chunk) }
        stream.close
      else
        body.call(stream)
      end
    rescue Exception # rubocop:disable Lint/RescueException
      stream.abort
      raise
    end

    def close_body(body, env)
      body.close if body.respond_to?(:close)
    rescue Exception => e # rubocop:disable Lint/RescueException
      @app_errors.log(e, env, "closing the response body")
    end

    # rack.response_finished (Rack 3) callbacks take (env, status, headers,
    # error); Puma's rack.after_reply callbacks take none. Both keys hold
    # the same list, so each callback is called the way its arity asks.
    def finish(env, status, headers, error)
      callbacks = env["rack.response_finished"]
      return if callbacks.nil? || callbacks.empty?

      callbacks.reverse_each do |callback|
        if callback.respond_to?(:arity) && callback.arity.zero?
          callback.call
        else
          callback.call(env, status, headers, error)
        end
      rescue Exception => e # rubocop:disable Lint/RescueException
        @app_errors.log(e, env, "in a response_finished callback")
      end
    end

    def env_templates
      env = {
        "rack.errors" => $stderr,
        "rack.multithread" => @options[:threads_max] > 1,
        "rack.multiprocess" => false,
        "rack.run_once" => false,
        # rack_url_scheme: what a connection that is not TLS says (the
        # engine sets "https" on TLS ones, or from X-Forwarded-Proto).
        "rack.url_scheme" => @options[:rack_url_scheme] || "http",
        "rack.hijack?" => true,
        "SCRIPT_NAME" => ENV.fetch("SCRIPT_NAME", ""),
        "SERVER_SOFTWARE" => "Tsubame #{VERSION}",
        "GATEWAY_INTERFACE" => "CGI/1.2"
      }
      env["rack.version"] = Rack::VERSION unless RACK3
      env.each_value { |value| value.freeze if value.is_a?(String) }
      # In tables of a few sizes: every env is a copy of the smallest one
      # with room for the request's entries and the app's.
      Native.env_templates(env)
    end
  end
end
