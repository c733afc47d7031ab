# frozen_string_literal: true

require "socket"

module Tsubame
  # `websocket_workers` (docs/REALTIME.md): the datagram socket pair over
  # which the HTTP workers hand WebSocket connections to the WebSocket
  # workers (crates/tsubame-engine/src/handoff.rs). The master makes it
  # before the first fork and keeps both ends for its whole life, so a
  # WebSocket worker that restarts reads the same socket and the HTTP
  # workers never need a new one. Every WebSocket worker reads the one
  # receiving end: whichever is free first takes the next connection.
  # Each engine takes its own duplicate of the end it uses.
  class WebsocketHandoff
    # WebSocket workers run under the indexes -1, -2, ... (hooks, stats):
    # never one of the HTTP workers' 0...workers.
    def self.indexes(count)
      (1..count).map(&:-@)
    end

    def self.index?(index)
      !index.nil? && index.negative?
    end

    # How logs and process titles call a worker.
    def self.name_of(index)
      index?(index) ? "WebSocket worker #{-index}" : "Worker #{index}"
    end

    def initialize
      @sender, @receiver = UNIXSocket.pair(:DGRAM)
    end

    # The engine options of a worker: the WebSocket workers read the
    # receiving end, the others write to the sending one.
    def native_options(index)
      self.class.index?(index) ? { handoff_from_fd: @receiver.fileno } : { handoff_to_fd: @sender.fileno }
    end

    def close
      [@sender, @receiver].each { |socket| socket.close unless socket.closed? }
    end
  end
end
