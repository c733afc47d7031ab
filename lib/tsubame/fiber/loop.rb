# frozen_string_literal: true

require "tsubame/fiber/scheduler"
require "tsubame/support/named_thread"

module Tsubame
  # A Ruby thread running requests on fibers (fiber mode, docs/FIBERS.md).
  # It takes the requests the engine routed to fibers, without blocking,
  # whenever its Selector wakes, and runs each in its own fiber through the
  # same `handle` the thread pool uses. The engine's fiber queue wakes the
  # selector when requests arrive, so an idle loop sleeps in epoll.
  class FiberLoop
    attr_reader :thread

    # handle: called with a Native::Request inside the request's fiber.
    def initialize(native, index, handle, log)
      @native = native
      @index = index
      @handle = handle
      @log = log
      @running = {}
      @guard = Thread::Mutex.new
      @scheduler = nil
      @started = Thread::Queue.new
    end

    def start
      @thread = NamedThread.start("tsubame-fiber-#{@index}") { run }
      @started.pop
      self
    end

    # From the timeout watchdog's thread: raises Tsubame::RequestTimeout in
    # the fiber running request `seq`, if this loop runs it. The engine has
    # already answered 503; this frees the fiber and whatever it holds.
    def time_out(seq)
      fiber = @guard.synchronize { @running[seq] }
      return false unless fiber

      @scheduler.raise_in(fiber, RequestTimeout.new("request ##{seq} passed its deadline"))
      true
    end

    def running?(seq)
      @guard.synchronize { @running.key?(seq) }
    end

    private

    def run
      selector = Native::Selector.new
      @scheduler = FiberScheduler.new(selector, log: @log)
      selector.attach(@native)
      Fiber.set_scheduler(@scheduler)
      @started << true
      @scheduler.run(method(:take_requests))
    ensure
      @started << false if @scheduler.nil?
      Fiber.set_scheduler(nil) if @scheduler
    end

    # Starts a fiber for every queued request; false once the server has
    # stopped and nothing is left (the loop then finishes its fibers).
    def take_requests
      while (request = @native.next_fiber_request)
        start_request(request)
      end
      !request.equal?(false)
    end

    def start_request(request)
      seq = request.seq
      @scheduler.spawn do
        @guard.synchronize { @running[seq] = Fiber.current }
        @handle.call(request)
      ensure
        @guard.synchronize { @running.delete(seq) }
        @native.fiber_finished
      end
    end
  end
end
