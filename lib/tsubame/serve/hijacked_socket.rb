# frozen_string_literal: true

require "socket"

module Tsubame
  # The socket a full hijack (`env["rack.hijack"].call`) hands the app.
  #
  # Hijacking apps that serve many connections from a few threads
  # (ActionCable's worker pool, faye-websocket) send with `write_nonblock`,
  # which never gives up the GVL: a broadcast to a thousand subscribers
  # holds it from the first frame to the last, and a plain request waiting
  # for its turn waits for the whole burst (or Ruby's 100 ms time slice).
  # A blocking `write` gives the GVL up around the system call; this gives
  # other threads a turn after a non-blocking one: at once when a Tsubame
  # thread is waiting to take the GVL back (a request ready to run),
  # otherwise once a millisecond (`Native.pass_gvl?`, gvl_turns.rs), so the
  # writing threads do not hand the GVL to one another after every frame.
  #
  # The inherited method is called through an alias rather than `super`:
  # in Ruby 3.1 a `super` call that passes keywords allocates a Hash, one
  # object per frame written (a thousand per broadcast to a thousand
  # subscribers, for the GC to collect).
  class HijackedSocket < BasicSocket
    alias_method :write_nonblock_without_pass, :write_nonblock
    private :write_nonblock_without_pass

    def write_nonblock(buf, exception: true)
      written = write_nonblock_without_pass(buf, exception: exception)
      Thread.pass if Native.pass_gvl?
      written
    end
  end
end
