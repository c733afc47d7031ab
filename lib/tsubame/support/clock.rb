# frozen_string_literal: true

module Tsubame
  # Elapsed-time arithmetic uses the monotonic clock, which wall-clock
  # changes (NTP steps, DST) cannot move. Included where it is needed.
  module Clock
    private

    def monotonic
      Process.clock_gettime(Process::CLOCK_MONOTONIC)
    end
  end
end
