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
  # other threads a turn before a non-blocking one: at once when a Tsubame
  # thread is waiting to take the GVL back (a request ready to run),
  # otherwise once a millisecond (`Native.pass_gvl?`, gvl_turns.rs), so the
  # writing threads do not hand the GVL to one another after every frame.
  #
  # The turn comes before the write, never after it: what the app does
  # right after a write then runs, as on a plain socket, before another
  # thread can read the client's answer to it. ActionCable writes its
  # welcome, then marks the connection ready for messages; a pass between
  # the two let its event loop read the client's subscribe first, and its
  # MessageBuffer (check, then act, no lock) lost about one subscription
  # in a few hundred.
  #
  # The inherited method is called through an alias rather than `super`:
  # in Ruby 3.1 a `super` call that passes keywords allocates a Hash, one
  # object per frame written (a thousand per broadcast to a thousand
  # subscribers, for the GC to collect).
  class HijackedSocket < BasicSocket
    alias_method :write_nonblock_without_pass, :write_nonblock
    private :write_nonblock_without_pass

    def write_nonblock(buf, exception: true)
      Thread.pass if Native.pass_gvl?
      write_nonblock_without_pass(buf, exception: exception)
    end
  end
end
