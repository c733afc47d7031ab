# frozen_string_literal: true

require "tsubame/errors"

module Tsubame
  # Turns the engine's "this request passed its deadline" notices into a
  # Tsubame::RequestTimeout raised in the Ruby thread running the request.
  # The engine has already answered the client 503; this frees the thread.
  #
  # A worker thread defers RequestTimeout everywhere except while it runs a
  # request (`run`), and throws away one that arrives late, so a timeout
  # meant for one request can never land in the next.
  class RequestTimeouts
    IMMEDIATE = { RequestTimeout => :immediate }.freeze
    DEFERRED = { RequestTimeout => :never }.freeze

    # `enabled` is whether a request timeout is set at all: without one no
    # RequestTimeout can be raised, and `run` skips handle_interrupt, whose
    # mask Hash Ruby 3.1 allocates on every call.
    def initialize(native, grace, log, enabled: true)
      @native = native
      @enabled = enabled
      @grace = grace
      @log = log
      @running = []
      @threads = []
      @fiber_loops = []
    end

    def start(threads, fiber_loops = [])
      @threads = threads
      @fiber_loops = fiber_loops
      return self unless @enabled

      @watchdog = Thread.new do
        Thread.current.name = "tsubame-timeouts"
        watch
      end
    end

    def enabled?
      @enabled
    end

    # Wraps a worker thread's whole loop.
    def worker(&block)
      Thread.handle_interrupt(DEFERRED, &block)
    end

    # Runs one request on worker `index`; only here can a timeout interrupt.
    def run(index, request)
      return yield unless @enabled

      @running[index] = request
      Thread.handle_interrupt(IMMEDIATE) { yield }
    ensure
      @running[index] = nil
      discard_late_timeout if Thread.pending_interrupt?
    end

    private

    def discard_late_timeout
      Thread.handle_interrupt(IMMEDIATE) { nil }
    rescue RequestTimeout
      nil
    end

    def watch
      while (seq = @native.next_timeout)
        index = @running.index { |request| request&.seq == seq }
        next time_out_fiber(seq) unless index

        request = @running[index]
        @log.call("request ##{seq} passed its deadline; raising Tsubame::RequestTimeout in tsubame-#{index}")
        @threads[index].raise(RequestTimeout, "request ##{seq} passed its deadline")
        check_stuck_later(index, request, seq)
      end
    end

    # In fiber mode the request may run on a fiber: its loop raises the
    # timeout into that fiber alone (Fiber#raise), the loop goes on.
    def time_out_fiber(seq)
      fiber_loop = @fiber_loops.find { |candidate| candidate.time_out(seq) }
      return unless fiber_loop

      @log.call("request ##{seq} passed its deadline; raising Tsubame::RequestTimeout in its fiber")
      Thread.new do
        sleep @grace
        if fiber_loop.running?(seq)
          @native.report_stuck_thread
          @log.call("the fiber running request ##{seq} is still running #{@grace}s after its timeout: fiber stuck")
        end
      end
    end

    # A thread blocked in C code (or rescuing Exception) may ignore the
    # raise; after the grace period it is logged and counted in the
    # engine's stats (`stuck_threads` in the probe JSON and Server#stats).
    def check_stuck_later(index, request, seq)
      Thread.new do
        sleep @grace
        if @running[index].equal?(request)
          @native.report_stuck_thread
          @log.call("tsubame-#{index} is still running request ##{seq} #{@grace}s after its timeout: thread stuck")
        end
      end
    end
  end
end
