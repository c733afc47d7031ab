# frozen_string_literal: true

require "tsubame/support/named_thread"

module Tsubame
  # idle_memory_trim (README): once a server has been quiet for a whole
  # period after serving requests, it collects Ruby's garbage and hands the
  # memory glibc then holds free back to the OS, once per quiet spell. A
  # burst (uploads read in pieces, large bodies built in Ruby) otherwise
  # leaves a worker at its peak: an idle worker allocates nothing, so the
  # burst's garbage waits for a GC that never comes, and glibc keeps what
  # Ruby does free.
  class IdleMemory
    def initialize(native, period)
      @native = native
      @period = period
      @thread = nil
    end

    def start
      @thread = NamedThread.start("tsubame-idle-memory") { watch }
      self
    end

    # Holds nothing that a kill could leave half done: a GC or a trim in
    # progress finishes before the thread dies.
    def stop
      @thread&.kill
      @thread&.join
    end

    private

    def watch
      seen = requests
      # Nothing to give back before the first request.
      trimmed = true
      loop do
        sleep @period
        now = requests
        if now != seen
          seen = now
          trimmed = false
        elsif !trimmed
          trimmed = true
          GC.start
          @native.trim_memory
        end
      end
    end

    def requests
      @native.stats["requests_total"]
    end
  end
end
