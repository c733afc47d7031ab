# frozen_string_literal: true

require "tsubame/support/clock"

module Tsubame
  # Puma's custom_logger: an object whose #write takes each log line. The
  # server's own lines and, with log_requests, one line per request (the
  # engine's format) go to it instead of stdout.
  module CustomLogger
    # Stands in for stdout where the launcher and the cluster master print.
    class Output
      def initialize(logger)
        @logger = logger
        @mutex = Mutex.new
      end

      def write(*parts)
        parts.join.each_line { |line| emit(line.chomp) }
        parts.sum { |part| part.to_s.bytesize }
      end

      def puts(*lines)
        lines = [""] if lines.empty?
        lines.flatten.each { |line| emit(line.to_s.chomp) }
        nil
      end

      def print(*parts)
        write(*parts)
        nil
      end

      def flush
        self
      end

      def sync
        true
      end

      def sync=(_value); end

      private

      def emit(line)
        @mutex.synchronize { @logger.write(line) }
      end
    end

    # Rack middleware for log_requests with a custom logger: the engine
    # writes its request log to stdout, so with a custom logger it is off
    # there and written here (Options#native turns it off).
    class RequestLog
      include Clock

      def initialize(app, logger)
        @app = app
        @logger = logger
      end

      def call(env)
        started = monotonic
        status, headers, body = @app.call(env)
        log(env, status, headers, body, monotonic - started)
        [status, headers, body]
      end

      private

      # The size is the Content-Length, or an Array body's bytes; other
      # bodies are not known before they are sent ("-").
      def log(env, status, headers, body, elapsed)
        length = header(headers, "content-length")
        length ||= body.sum(&:bytesize).to_s if body.is_a?(Array) && body.all?(String)
        query = env["QUERY_STRING"].to_s
        target = query.empty? ? env["PATH_INFO"] : "#{env["PATH_INFO"]}?#{query}"
        @logger.write(format(%(%s - - [%s] "%s %s %s" %d %s %.4f),
                             env["REMOTE_ADDR"] || "-", Time.now.utc.strftime("%d/%b/%Y:%H:%M:%S %z"),
                             env["REQUEST_METHOD"], target, env["SERVER_PROTOCOL"], status.to_i,
                             length.nil? || length == "0" ? "-" : length, elapsed))
      rescue StandardError => e
        warn "tsubame: custom_logger failed: #{e.class}: #{e.message}"
      end

      def header(headers, name)
        return headers[name] || headers[name.split("-").map(&:capitalize).join("-")] if headers.is_a?(Hash)

        nil
      end
    end
  end
end
