# frozen_string_literal: true

require "tsubame/config/hooks"
require "tsubame/support/log"

module Tsubame
  # What Puma's directives ask of the app threads (docs/PUMA.md):
  # before_thread_start / before_thread_exit hooks, out_of_band hooks after
  # a request when the server is otherwise idle, and clean_thread_locals.
  # Server#serve_requests uses it only when one of them is configured, so
  # the request path of a server without them is unchanged.
  class ThreadHooks
    # Returns nil when none of them is configured.
    def self.build(options, native)
      wanted = %i[before_thread_start before_thread_exit out_of_band].any? { |key| !options[key].empty? } ||
               options[:clean_thread_locals]
      wanted ? new(options, native) : nil
    end

    def initialize(options, native)
      @options = options
      @native = native
      @log = Log.new($stdout, $stderr)
      @out_of_band = options[:out_of_band]
      @clean = options[:clean_thread_locals]
      # Requests running, counted under the gate the out_of_band hooks hold
      # while they run: no request starts meanwhile (Puma: "the worker
      # doesn't accept new requests until this code finishes").
      @gate = Mutex.new
      @busy = 0
    end

    # A hook that raises is logged; the thread serves on (Puma logs too).
    def thread_started
      Hooks.run_logged(@options[:before_thread_start], "before_thread_start", @log)
    end

    def thread_exiting
      Hooks.run_logged(@options[:before_thread_exit], "before_thread_exit", @log)
    end

    def around_request
      return run_request { yield } if @out_of_band.empty?

      @gate.synchronize { @busy += 1 }
      begin
        run_request { yield }
      ensure
        @gate.synchronize do
          @busy -= 1
          run_out_of_band if @busy.zero? && idle_queue?
        end
      end
    end

    private

    def run_request
      yield
    ensure
      clean_locals if @clean
    end

    def idle_queue?
      @native.stats["backlog"].to_i.zero?
    end

    def run_out_of_band
      Hooks.run_logged(@out_of_band, "out_of_band", @log)
    end

    # Puma 5's clean_thread_locals: the request's Thread.current[] values
    # do not leak into the next request on this thread.
    def clean_locals
      current = Thread.current
      current.keys.each { |key| current[key] = nil unless key == :__recursive_key__ }
    end
  end
end
