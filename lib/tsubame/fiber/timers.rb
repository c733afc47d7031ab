# frozen_string_literal: true

module Tsubame
  # The fiber scheduler's timers (sleep, IO and block timeouts,
  # Timeout.timeout) on the monotonic clock: the loop learns the next
  # deadline in O(1) and a thousand sleeping fibers cost no scan.
  class FiberTimers
    # `target` and `value` are handed back by `fire`: a timer holds no
    # block, so arming one (every sleep and IO wait with a timeout) builds
    # no closure.
    Timer = Struct.new(:at, :target, :value, :cancelled) do
      def cancel
        self.cancelled = true
      end
    end

    def initialize
      # Sorted by `at`, soonest first. Timers mostly arrive in deadline
      # order (a thousand requests sleeping the same second), so a new one
      # usually goes at the end and the due ones come off the front, both
      # O(1); one that belongs elsewhere is placed by binary search.
      @timers = []
    end

    def self.now
      Process.clock_gettime(Process::CLOCK_MONOTONIC)
    end

    def after(seconds, target, value = nil)
      timer = Timer.new(FiberTimers.now + seconds, target, value, false)
      last = @timers.last
      if last.nil? || last.at <= timer.at
        @timers << timer
      else
        at = timer.at
        @timers.insert(@timers.bsearch_index { |t| t.at > at }, timer)
      end
      timer
    end

    # Seconds until the next live timer (0 if due), or nil when none.
    def wait_interval(now = FiberTimers.now)
      drop_cancelled
      top = @timers.first
      return nil unless top

      [top.at - now, 0].max
    end

    # Yields the target and value of every timer that is due.
    def fire(now = FiberTimers.now)
      while (top = @timers.first) && (top.cancelled || top.at <= now)
        @timers.shift
        yield top.target, top.value unless top.cancelled
      end
    end

    def empty?
      drop_cancelled
      @timers.empty?
    end

    private

    # A cancelled timer stays, marked, until it reaches the front.
    def drop_cancelled
      @timers.shift while @timers.first&.cancelled
    end
  end
end
