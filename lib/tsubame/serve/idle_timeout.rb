# frozen_string_literal: true

require "tsubame/support/clock"

module Tsubame
  # Puma 7's idle_timeout: the server (in cluster mode, the whole cluster)
  # stops once no request has come for this many seconds. Fed with the
  # request count and whether any request is in flight, from the server's
  # status (single mode) or the workers' check-ins (cluster mode).
  class IdleTimeout
    include Clock

    attr_reader :seconds

    def initialize(seconds)
      @seconds = seconds
      @count = nil
      @since = monotonic
    end

    def idle?(count, busy)
      now = monotonic
      if busy || count != @count
        @count = count
        @since = now
        return false
      end
      now - @since >= @seconds
    end

    # Single mode: checks the server's status a few times per timeout.
    def watch(server, log)
      Thread.new do
        loop do
          sleep [@seconds / 4.0, 0.25].max
          status = server.status
          next unless idle?(status["requests_count"], status["requests_in_flight"].to_i.positive?)

          log.info("- Idle timeout reached (#{@seconds}s without a request); stopping")
          break server.stop
        end
      end
    end
  end
end
