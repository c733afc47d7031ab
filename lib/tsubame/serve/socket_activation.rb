# frozen_string_literal: true

require "socket"
require "tsubame/errors"

module Tsubame
  # systemd socket activation (sd_listen_fds(3)): listening sockets a
  # `.socket` unit (or `systemd-socket-activate`) opened and handed over
  # as descriptors 3, 4, ... with LISTEN_FDS (how many), LISTEN_PID (for
  # which process) and LISTEN_FDNAMES (their `FileDescriptorName=`s,
  # colon-separated).
  #
  # Listeners.bind matches them to the configured binds by address, as
  # Puma does, instead of binding again (see #match). docs/SYSTEMD.md has
  # the rules.
  module SocketActivation
    ENV_KEYS = %w[LISTEN_FDS LISTEN_PID LISTEN_FDNAMES].freeze
    FIRST_FD = 3

    # One handed-over descriptor. address is "tcp://IP:PORT" or
    # "unix://PATH", or nil for what cannot serve as a listener (a UDP or
    # connected socket, something that is not a socket); why says why.
    Activated = Struct.new(:fd, :name, :address, :why) do
      def describe
        text = "fd #{fd}"
        text += " (#{name})" if name && !name.empty? && name != "unknown"
        "#{text} #{address || why}"
      end
    end

    WILDCARDS = ["0.0.0.0", "::"].freeze

    class << self
      # The sockets for this process, read once: the first call takes the
      # variables out of ENV (as sd_listen_fds(unset_environment=1) does,
      # whether or not they were meant for this pid), so the app and the
      # workers never see them.
      def take
        @take ||= from_env(ENV)
      end

      # Returns [Activated, ...], empty unless LISTEN_PID is this process.
      # Every descriptor is made close-on-exec at once (as sd_listen_fds
      # does): one that is not adopted must not leak into a child.
      def from_env(env)
        values = ENV_KEYS.to_h { |key| [key, env.delete(key)] }
        count = Integer(values["LISTEN_FDS"].to_s, 10)
        return [] unless count.positive? && Integer(values["LISTEN_PID"].to_s, 10) == Process.pid

        names = values["LISTEN_FDNAMES"].to_s.split(":")
        Array.new(count) { |index| inspect_fd(FIRST_FD + index, names[index]) }
      rescue ArgumentError
        []
      end

      # Removes and returns the activated sockets that serve uri (a
      # configured bind): same port and same address, or a host name that
      # resolves to the socket's address, or a wildcard bind (0.0.0.0, ::)
      # and a wildcard socket of either family (systemd's `ListenStream=PORT`
      # is one dual-stack [::] socket); for unix://, the same path.
      def match(activated, uri)
        found = activated.select { |socket| socket.address && serves?(socket.address, uri) }
        activated.replace(activated - found)
        found
      end

      # Puma's bind_to_activated_sockets: true adds a bind for every
      # activated socket no configured bind matches; "only" replaces the
      # configured binds with the activated sockets. Listeners.bind then
      # adopts them by address as for any bind.
      def binds(configured, options)
        mode = options[:bind_to_activated_sockets]
        return configured unless mode

        addresses = take.filter_map(&:address)
        if mode == "only"
          raise BindError, "bind_to_activated_sockets 'only': no socket was handed over (LISTEN_FDS)" if addresses.empty?

          return addresses
        end
        configured + addresses.reject { |address| configured.any? { |uri| serves?(address, uri) } }
      end

      def close(activated)
        IO.for_fd(activated.fd, autoclose: true).close
      rescue SystemCallError, ArgumentError, IOError
        nil
      end

      private

      def inspect_fd(fd, name)
        io = Socket.for_fd(fd)
        io.autoclose = false
        io.close_on_exec = true
        type = io.getsockopt(:SOCKET, :TYPE).int
        listening = io.getsockopt(:SOCKET, :ACCEPTCONN).bool
        return Activated.new(fd, name, nil, "is not a stream socket") unless type == Socket::SOCK_STREAM
        # systemd-socket-activate --accept, or Accept=yes: one connection
        # per process, which is inetd's model, not a server's.
        return Activated.new(fd, name, nil, "is a connection, not a listening socket (Accept=yes?)") unless listening

        Activated.new(fd, name, address_of(io.local_address), nil)
      rescue SystemCallError => e
        Activated.new(fd, name, nil, "cannot be used: #{e.message}")
      end

      def address_of(addr)
        return "unix://#{addr.unix_path}" if addr.unix?

        host = addr.ipv6? ? "[#{addr.ip_address}]" : addr.ip_address
        "tcp://#{host}:#{addr.ip_port}"
      end

      def serves?(address, uri)
        scheme, rest = uri.split("://", 2)
        location = rest.to_s.split("?", 2).first
        if scheme == "unix"
          path = address.delete_prefix("unix://")
          return address.start_with?("unix://") && same_path?(path, location)
        end
        return false unless address.start_with?("tcp://")

        host, port = split(location)
        socket_host, socket_port = split(address.delete_prefix("tcp://"))
        return false if port.nil? || port.zero? || port != socket_port

        same_host?(host, socket_host)
      end

      def split(location)
        match = /\A\[?(?<host>.*?)\]?:(?<port>\d+)\z/.match(location.to_s)
        match && [match[:host], Integer(match[:port], 10)]
      end

      def same_host?(host, socket_host)
        return true if host == socket_host
        return true if WILDCARDS.include?(host) && WILDCARDS.include?(socket_host)

        Addrinfo.getaddrinfo(host, nil, nil, :STREAM).any? { |ai| ai.ip_address == socket_host }
      rescue SocketError
        false
      end

      def same_path?(path, location)
        path == location || File.expand_path(path) == File.expand_path(location) ||
          File.realdirpath(path) == File.realdirpath(location)
      rescue SystemCallError
        false
      end
    end
  end
end
