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
require "tsubame/stream"
require "tsubame/app_errors"
require "tsubame/request_timeouts"

module Tsubame
  # Runs a Rack app on the native engine: the engine reads whole requests
  # and queues them; a pool of Ruby threads takes them (waiting with the GVL
  # released), calls the app, and hands the response back to the engine.
  class Server
    RACK3 = Gem::Version.new(Rack.release) >= Gem::Version.new("3.0")

    # Seconds the app threads get, all together, to finish once the engine
    # has stopped; then those still running (stuck in the app after a drain
    # timeout) are killed. One shared deadline, so N stuck threads do not
    # cost N seconds.
    THREAD_GRACE = 1.0

    attr_reader :app, :options

    def initialize(app, options)
      @app = app
      @options = options
      @native = nil
      @threads = []
      @app_errors = AppErrors.new(options[:lowlevel_error_handler], $stderr)
    end

    # Binds every listener; raises Tsubame::BindError naming the bind.
    def bind
      @native ||= Native::Server.new(@options.native)
      self
    end

    def addresses
      bind
      @native.addresses
    end

    def start
      bind
      @base_env = base_env
      @timeouts = RequestTimeouts.new(@native, @options[:request_timeout_grace], @app_errors.method(:log_line))
      @native.start
      @threads = Array.new(@options[:threads_max]) { |i| spawn_thread(i) }
      @timeouts.start(@threads)
      self
    end

    # Begins a graceful stop. Safe to call from a trap handler.
    def stop
      @native&.stop
    end

    # Blocks until the engine has drained, then until the threads finish.
    # Returns :drained, or :timed_out when drain_timeout cut requests short.
    #
    # The native wait runs on a helper thread while this one sleeps in
    # Queue#pop: Ruby delivers signals (and runs trap handlers) only to a
    # main thread sleeping in Ruby, not one blocked inside an extension.
    def wait
      done = Thread::Queue.new
      waiter = Thread.new { done << @native.wait }
      outcome = done.pop
      waiter.join
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

    private

    def join_threads
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + THREAD_GRACE
      @threads.each do |thread|
        left = deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC)
        thread.join([left, 0].max) || thread.kill
      end
    end

    def spawn_thread(index)
      Thread.new do
        Thread.current.name = "tsubame-#{index}"
        Thread.current.report_on_exception = false
        serve_requests(index)
      end
    end

    def serve_requests(index)
      native = @native
      base = @base_env
      timeouts = @timeouts
      timeouts.worker do
        while (request = native.next_request)
          timeouts.run(index, request) { handle(request, request.env(base)) }
        end
      end
    end

    def handle(request, env)
      status = headers = body = error = nil
      begin
        status, headers, body = @app.call(env)
        return if request.hijacked?

        result = request.respond(status, headers, body)
        stream(result, headers, body) unless result == true
      rescue Exception => e # rubocop:disable Lint/RescueException
        # Anything the app raises, including ScriptError and timeouts, is
        # the request's failure, not the server's.
        error = e
        status = @app_errors.answer(request, env, e)
      ensure
        close_body(body, env)
        finish(env, status, headers, error)
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

    def base_env
      env = {
        "rack.errors" => $stderr,
        "rack.multithread" => @options[:threads_max] > 1,
        "rack.multiprocess" => false,
        "rack.run_once" => false,
        "rack.url_scheme" => "http",
        "rack.hijack?" => true,
        "SCRIPT_NAME" => ENV.fetch("SCRIPT_NAME", ""),
        "SERVER_SOFTWARE" => "Tsubame #{VERSION}",
        "GATEWAY_INTERFACE" => "CGI/1.2"
      }
      env["rack.version"] = Rack::VERSION unless RACK3
      env.each_value { |value| value.freeze if value.is_a?(String) }
      env.freeze
    end
  end
end
