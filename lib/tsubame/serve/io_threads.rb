# frozen_string_literal: true

module Tsubame
  # Puma's max_io_threads: requests the app marks IO-bound (with
  # env["puma.mark_as_io_bound"].call) stop counting against `threads`,
  # so up to this many more threads take requests meanwhile. Threads hold
  # a slot from asking the engine for a request until they answered it;
  # there are `regular` slots plus one per marked request, at most `extra`.
  class IoThreads
    def initialize(regular, extra)
      @regular = regular
      @extra = extra
      @mutex = Mutex.new
      @changed = ConditionVariable.new
      @holding = 0
      @marked = {}
      @closed = false
    end

    # Blocks until a slot is free; false once the server stops.
    def acquire
      @mutex.synchronize do
        @changed.wait(@mutex) while !@closed && @holding >= allowed
        @holding += 1 unless @closed
        !@closed
      end
    end

    def release(thread = Thread.current)
      @mutex.synchronize do
        @holding -= 1
        @marked.delete(thread)
        @changed.broadcast
      end
    end

    # What env["puma.mark_as_io_bound"] holds for a request on `thread`;
    # calling it again for the same request changes nothing.
    def marker(thread = Thread.current)
      lambda do
        @mutex.synchronize do
          @marked[thread] = true
          @changed.broadcast
        end
        nil
      end
    end

    def close
      @mutex.synchronize do
        @closed = true
        @changed.broadcast
      end
    end

    private

    def allowed
      @regular + [@marked.size, @extra].min
    end
  end
end
