# frozen_string_literal: true

require "socket"

module Tsubame
  # How many connections wait in a listening socket's accept queue, for
  # drain_on_shutdown. Linux reports it for a TCP listener as TCP_INFO's
  # tcpi_unacked (the queue's length, sk_ack_backlog); a UNIX listener has
  # no such count, so it counts as empty.
  module ListenBacklog
    # struct tcp_info: eight u8 fields, then u32 rto, ato, snd_mss, rcv_mss,
    # unacked.
    UNACKED_OFFSET = 8 + (4 * 4)

    module_function

    def empty?(listeners)
      listeners.sockets.all? { |socket| waiting(socket).zero? }
    end

    def waiting(socket)
      return 0 if socket.closed?

      info = socket.getsockopt(Socket::IPPROTO_TCP, Socket::TCP_INFO).data
      info.byteslice(UNACKED_OFFSET, 4).unpack1("L")
    rescue SystemCallError, IOError, NoMethodError
      0
    end
  end
end
