# frozen_string_literal: true

require "socket"
require "tsubame/errors"
require "tsubame/config/bind_uri"
require "tsubame/restart/hot_restart"
require "tsubame/serve/socket_activation"

module Tsubame
  # The listening sockets, owned by Ruby rather than by an engine.
  #
  # An engine closes its listeners when it stops, which is right for one
  # process but not for several sharing them: cluster workers come and go
  # while the master keeps the sockets open, and a hot restart carries them
  # across exec. So the sockets are bound here, and every engine adopts a
  # duplicate with an `fd://N` bind (crates/tsubame-engine/src/bind.rs);
  # the socket closes when its last holder lets go.
  class Listeners
    # activated: the socket came from systemd (socket activation), which
    # owns it: a unix socket's file must stay when this process stops, for
    # systemd to hand the socket to the next start.
    Entry = Struct.new(:uri, :address, :io, :activated)

    # Binds each URI, adopting the sockets a hot restart handed over for
    # the same URI instead of binding again (which would fail, or pick a
    # new port for port 0), or else the sockets systemd handed over
    # (socket activation, see SocketActivation.match) whose address the
    # URI names. On failure nothing stays open.
    #
    # An activated socket no bind matches is closed, with a line in #notes,
    # as Puma does ("* Closing unused activated socket: ...").
    #
    # adopt_only: for a hot restart's stand-in, which serves only the
    # sockets handed over and owns none (closing them must not remove a
    # unix socket's file): a bind new in the config is left to the
    # re-executed process, which would fail to bind it again.
    #
    # activated_binds: Puma's bind_to_activated_sockets: true also serves
    # every activated socket no configured bind asked for; "only" serves
    # the activated sockets and none of the configured binds.
    def self.bind(binds, backlog, inherited: HotRestart.inherited_fds, adopt_only: false,
                  activated: SocketActivation.take, activated_binds: false)
      binds = SocketActivation.binds_with(activated, binds, activated_binds) if activated_binds && !adopt_only
      entries = []
      notes = []
      from_systemd = HotRestart.activated_fds
      BindURI.merge_sni(binds).each do |uri|
        if (fds = inherited.delete(BindURI.handover_key(uri)))
          fds.each { |fd| entries << adopt(uri, fd, activated: from_systemd.include?(fd)) }
        elsif !adopt_only && !(found = SocketActivation.match(activated, uri)).empty?
          found.each do |socket|
            notes << "* Using activated socket #{socket.describe} for #{uri}"
            entries << adopt(uri, socket.fd, activated: true)
          end
        elsif !adopt_only
          Native.bind_listeners(uri, backlog).each do |address, fd|
            entries << Entry.new(uri, address, socket_for(fd), false)
          end
        end
      end
      # A bind removed from the config since the restart: let it go.
      inherited.each_value { |fds| fds.each { |fd| close_fd(fd) } }
      inherited.clear
      close_unused(activated, notes)
      new(entries, owner: !adopt_only, notes: notes)
    rescue StandardError
      entries&.each { |entry| entry.io.close unless entry.io.closed? }
      raise
    end

    # The file of an unused unix socket is left alone (Puma removes it):
    # it is the .socket unit's, which hands it over again at the next start.
    def self.close_unused(activated, notes)
      activated.each do |socket|
        notes << "* Closing unused activated socket: #{socket.describe}"
        SocketActivation.close(socket)
      end
      activated.clear
    end

    def self.adopt(uri, fd, activated: false)
      io = socket_for(fd)
      address = address_of(io)
      address = address.sub(%r{\Atcp://}, "ssl://") if uri.start_with?("ssl://")
      Entry.new(uri, address, io, activated)
    rescue SystemCallError => e
      raise BindError, "#{uri}: cannot adopt inherited descriptor #{fd}: #{e.message}"
    end

    def self.socket_for(fd)
      io = Socket.for_fd(fd)
      # Kept only by an explicit hot restart, never by some other exec.
      io.close_on_exec = true
      io
    end

    def self.address_of(io)
      addr = io.local_address
      return "unix://#{addr.unix_path}" if addr.unix?

      host = addr.ipv6? ? "[#{addr.ip_address}]" : addr.ip_address
      "tcp://#{host}:#{addr.ip_port}"
    end

    def self.close_fd(fd)
      IO.for_fd(fd).close
    rescue SystemCallError, ArgumentError
      nil
    end

    private_class_method :adopt, :socket_for, :address_of, :close_fd, :close_unused

    # owner: whether closing also removes unix socket files. A worker's
    # copies are not the owner: the socket outlives it, so must the file.
    # notes: log lines about activated sockets, for the banner.
    def initialize(entries, owner:, notes: [])
      @entries = entries.freeze
      @owner = owner
      @notes = notes.freeze
    end

    attr_reader :notes

    def addresses
      @entries.map(&:address)
    end

    # Bind parameters that describe the protocol rather than the socket,
    # so they go with the descriptor to the engine.
    # Numbered forms (cert.1, sni.1...) go too: several certificates on one
    # listener (BindURI.merge_sni).
    PROTOCOL_KEYS = (%w[ssl ca verify_mode h2c no_tlsv1 no_tlsv1_1 proxy_protocol sni_dir ssl_cipher_filter
                        ssl_ciphersuites reuse verification_flags] + BindURI::CERT_KEYS).freeze

    # What an engine is given instead of the configured binds: the
    # descriptor plus the bind's TLS settings (checked already, when the
    # socket was bound from the full URI).
    # busy_accept_delay: see crates/tsubame-engine/src/accept.rs.
    def native_binds(busy_accept_delay: nil)
      @entries.map do |entry|
        params = protocol_params(entry.uri)
        params << "busy_accept_delay=#{Float(busy_accept_delay)}" if busy_accept_delay
        "fd://#{entry.io.fileno}#{"?#{params.join("&")}" unless params.empty?}"
      end
    end

    # The same sockets, for a forked worker to adopt and close.
    def for_worker
      self.class.new(@entries, owner: false)
    end

    def closed?
      @entries.all? { |entry| entry.io.closed? }
    end

    # The listening sockets themselves (ListenBacklog reads their queues).
    def sockets
      @entries.map(&:io)
    end

    # Safe to call twice. Removing a unix socket's file first means clients
    # are refused at once instead of waiting on a socket nobody accepts on.
    def close
      @entries.each do |entry|
        next if entry.io.closed?

        unlink(entry.address) if @owner && !entry.activated
        entry.io.close
      end
    end

    # { configured URI => [fd, ...] } with close-on-exec cleared, for a hot
    # restart: the sockets survive exec under the same numbers.
    def inheritable
      @entries.each { |entry| entry.io.close_on_exec = false }
      descriptors
    end

    # { configured URI => [fd, ...] }, as they are.
    def descriptors
      @entries.each_with_object({}) { |entry, map| (map[BindURI.handover_key(entry.uri)] ||= []) << entry.io.fileno }
    end

    def empty?
      @entries.empty?
    end

    # The descriptors systemd handed over (socket activation), for a hot
    # restart to tell the next process which sockets are not its own.
    def activated_fds
      @entries.select(&:activated).map { |entry| entry.io.fileno }
    end

    # After a failed exec: back to closing on exec.
    def keep_private
      @entries.each { |entry| entry.io.close_on_exec = true unless entry.io.closed? }
    end

    private

    def protocol_params(uri)
      scheme, rest = uri.split("://", 2)
      query = rest.to_s.split("?", 2)[1].to_s
      params = query.split("&").select { |pair| PROTOCOL_KEYS.include?(pair.split("=", 2).first.split(".", 2).first) }
      params.unshift("ssl=true") if scheme == "ssl"
      params
    end

    def unlink(address)
      path = address.delete_prefix("unix://")
      return if path == address

      File.delete(path) if File.socket?(path)
    rescue SystemCallError
      nil
    end
  end
end
