# frozen_string_literal: true

module Tsubame
  # The fiber scheduler's timers (sleep, timeouts, request deadlines): a
  # binary heap on the monotonic clock, so the loop learns the next
  # deadline in O(1) and a thousand sleeping fibers cost no scan. A
  # cancelled timer stays in the heap, marked, until it reaches the top.
  class FiberTimers
    Timer = Struct.new(:at, :callback, :cancelled) do
      def cancel
        self.cancelled = true
      end
    end

    def initialize
      @heap = []
    end

    def self.now
      Process.clock_gettime(Process::CLOCK_MONOTONIC)
    end

    def after(seconds, &callback)
      timer = Timer.new(FiberTimers.now + seconds, callback, false)
      push(timer)
      timer
    end

    # Seconds until the next live timer (0 if due), or nil when none.
    def wait_interval(now = FiberTimers.now)
      drop_cancelled
      top = @heap.first
      return nil unless top

      [top.at - now, 0].max
    end

    # Calls the callbacks of every timer that is due.
    def fire(now = FiberTimers.now)
      while (top = @heap.first) && (top.cancelled || top.at <= now)
        pop
        top.callback.call unless top.cancelled
      end
    end

    def empty?
      drop_cancelled
      @heap.empty?
    end

    private

    def drop_cancelled
      pop while @heap.first&.cancelled
    end

    def push(timer)
      @heap << timer
      index = @heap.size - 1
      while index.positive?
        parent = (index - 1) / 2
        break if @heap[parent].at <= timer.at

        @heap[index] = @heap[parent]
        index = parent
      end
      @heap[index] = timer
    end

    def pop
      top = @heap.first
      last = @heap.pop
      return top if @heap.empty?

      index = 0
      size = @heap.size
      loop do
        child = (2 * index) + 1
        break if child >= size

        child += 1 if child + 1 < size && @heap[child + 1].at < @heap[child].at
        break if last.at <= @heap[child].at

        @heap[index] = @heap[child]
        index = child
      end
      @heap[index] = last
      top
    end
  end
end
