# frozen_string_literal: true

module Tsubame
  # What happens when the app raises: the error is logged with its
  # backtrace and the client gets a 500 (or what lowlevel_error_handler
  # returns), unless the response had already started, in which case the
  # connection is cut so the client cannot mistake a partial body for a
  # whole one.
  class AppErrors
    DEFAULT_BODY = "Internal Server Error\n"

    def initialize(handler, log)
      @handler = handler
      @log = log
      @count = 0
      @count_lock = Mutex.new
    end

    # Errors the app raised (from call, from the body's each or close, from
    # a response_finished callback), for the stats: each is also logged.
    def count
      @count_lock.synchronize { @count }
    end

    # Returns the status sent, or nil if nothing could be sent.
    def answer(request, env, error)
      if error.is_a?(Tsubame::ClientDisconnected)
        log_line("client disconnected during #{describe(env)}")
        return nil
      end
      log(error, env)
      return nil if request.answered?

      status, headers, body = response_for(error, env)
      request.respond(status, headers, body)
      status
    rescue StandardError => e
      log(e, env, "while sending the error response")
      nil
    end

    def log(error, env, context = nil)
      @count_lock.synchronize { @count += 1 }
      where = context ? " #{context}" : ""
      line = "error#{where} handling #{describe(env)}: #{error.class}: #{error.message}"
      # An error the engine's loop met sending a response was never
      # raised in Ruby and has no backtrace: no empty line for it.
      (error.backtrace || []).each { |frame| line += "\n  #{frame}" }
      log_line(line)
    end

    def log_line(message)
      @log.write("[tsubame] #{Time.now.utc.strftime('%Y-%m-%dT%H:%M:%S.%3NZ')} #{message}\n")
    end

    private

    def response_for(error, env)
      return default_response unless @handler

      status, headers, body = call_handler(error, env)
      body = [body] if body.is_a?(String)
      [Integer(status), headers || {}, body || []]
    rescue StandardError => e
      log(e, env, "in lowlevel_error_handler")
      default_response
    end

    # Puma calls the handler with (error), (error, env) or
    # (error, env, status) depending on its arity; so does Tsubame.
    def call_handler(error, env)
      case @handler.arity
      when 1 then @handler.call(error)
      when 2 then @handler.call(error, env)
      else @handler.call(error, env, 500)
      end
    end

    def default_response
      [500, { "content-type" => "text/plain" }, [DEFAULT_BODY]]
    end

    def describe(env)
      "#{env['REQUEST_METHOD']} #{env['REQUEST_URI']}"
    end
  end
end
