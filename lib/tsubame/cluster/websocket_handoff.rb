# frozen_string_literal: true

require "socket"

module Tsubame
  # `websocket_worker` (docs/REALTIME.md): the datagram socket pair over
  # which the HTTP workers hand WebSocket connections to the WebSocket
  # worker (crates/tsubame-engine/src/net/handoff.rs). The master makes it
  # before the first fork and keeps both ends for its whole life, so a
  # WebSocket worker that restarts reads the same socket and the HTTP
  # workers never need a new one. Each engine takes its own duplicate of
  # the end it uses.
  class WebsocketHandoff
    # The index the WebSocket worker runs under (hooks, stats, logs):
    # never one of the HTTP workers' 0...workers.
    INDEX = -1

    def initialize
      @sender, @receiver = UNIXSocket.pair(:DGRAM)
    end

    # The engine options of a worker: the WebSocket worker reads the
    # receiving end, the others write to the sending one.
    def native_options(index)
      index == INDEX ? { handoff_from_fd: @receiver.fileno } : { handoff_to_fd: @sender.fileno }
    end

    def close
      [@sender, @receiver].each { |socket| socket.close unless socket.closed? }
    end
  end
end
