# frozen_string_literal: true

require "json"
require "socket"
require "uri"
require "tsubame/config/control_token"
require "tsubame/control/app"
require "tsubame/support/named_thread"

module Tsubame
  # The control app's listener: a plain Ruby thread with a blocking accept
  # loop, in the master (or, in single mode, next to the app threads).
  #
  # Not the engine: in cluster mode the master must never start a tokio
  # runtime (it forks, and threads do not survive fork), and an operator's
  # request is rare and tiny. Requests are served one at a time, each with
  # a short read deadline, so a client that sends nothing cannot hold the
  # thread for long; no app thread is ever involved.
  class ControlServer
    READ_TIMEOUT = 5.0
    MAX_HEAD = 8192

    attr_reader :url, :token

    def initialize(url, configured_token, app, log)
      @url = url
      @token = ControlToken.resolve(configured_token)
      @generated = configured_token.nil?
      @app = app
      @log = log
      @socket = nil
      @thread = nil
    end

    def start
      @socket = open_socket
      socket = @socket
      @thread = NamedThread.start("tsubame-control") { accept_loop(socket) }
      @log.info("* Control app on #{@url}#{@token ? "" : " (no token required)"}")
      # A token nobody knows would make the app useless; it is also in the
      # state file when there is one.
      @log.info("* Control app token (generated): #{@token}") if @generated
      self
    end

    def stop
      socket = @socket
      @socket = nil
      return unless socket

      socket.close unless socket.closed?
      @thread&.join(1)
      unix_path&.then { |path| File.delete(path) if File.socket?(path) }
    rescue SystemCallError, IOError
      nil
    end

    # A forked worker inherits the listening socket, and the connection
    # being answered if the fork came in the middle of it; it must keep
    # neither open.
    def close_in_child
      [@socket, @client].each { |io| io.close if io && !io.closed? }
    end

    private

    def open_socket
      if (path = unix_path)
        remove_stale(path)
        UNIXServer.new(path)
      else
        uri = URI.parse(@url.sub(%r{\Atcp://}, "http://"))
        TCPServer.new(uri.hostname, uri.port)
      end
    rescue SystemCallError, URI::InvalidURIError => e
      raise BindError, "control app #{@url}: #{e.message}"
    end

    def unix_path
      @url.start_with?("unix://") ? @url.delete_prefix("unix://") : nil
    end

    def remove_stale(path)
      return unless File.socket?(path)

      begin
        UNIXSocket.new(path).close
        raise BindError, "control app #{@url}: another process is listening there"
      rescue SystemCallError
        File.delete(path)
      end
    end

    def accept_loop(socket)
      loop do
        @client = socket.accept
        serve(@client)
        @client = nil
      end
    rescue IOError, SystemCallError
      # The socket was closed: stopping (or a worker's copy).
      nil
    end

    def serve(client)
      path, params = read_request(client)
      status, body = path ? respond(path, params) : [400, { "error" => "bad request" }]
      write_response(client, status, body)
    rescue StandardError => e
      write_response(client, 500, { "error" => "#{e.class}: #{e.message}" })
    ensure
      finish(client)
    end

    # shutdown, not just close: a worker forked while this connection was
    # open holds a copy of it, and the client must see the end anyway.
    def finish(client)
      client.shutdown unless client.closed?
    rescue SystemCallError, IOError
      nil
    ensure
      client.close unless client.closed?
    end

    def respond(path, params)
      return [403, { "error" => "invalid token" }] unless authorized?(params["token"])

      @app.call(path.delete_prefix("/"), params)
    end

    def authorized?(given)
      return true unless @token
      return false unless given && given.bytesize == @token.bytesize

      # Compared in constant time: the token is a secret.
      given.bytes.zip(@token.bytes).map { |a, b| a ^ b }.reduce(0, :|).zero?
    end

    # Returns [path, params], or nil for a request that is not one.
    def read_request(client)
      head = +""
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + READ_TIMEOUT
      until head.include?("\r\n\r\n") || head.include?("\n\n")
        left = deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC)
        return nil if left <= 0 || head.bytesize > MAX_HEAD || !client.wait_readable(left)

        chunk = client.read_nonblock(4096, exception: false)
        return nil if chunk.nil?

        head << chunk if chunk.is_a?(String)
      end
      _method, target = head.lines.first.to_s.split(" ", 3)
      return nil unless target&.start_with?("/")

      path, query = target.split("?", 2)
      [path, URI.decode_www_form(query.to_s).to_h]
    rescue ArgumentError
      nil
    end

    def write_response(client, status, body)
      json = JSON.generate(body)
      client.write("HTTP/1.1 #{status} #{REASONS.fetch(status, "OK")}\r\n" \
                   "content-type: application/json\r\ncontent-length: #{json.bytesize}\r\n" \
                   "connection: close\r\n\r\n#{json}")
    rescue IOError, SystemCallError
      nil
    end

    REASONS = { 200 => "OK", 400 => "Bad Request", 403 => "Forbidden", 404 => "Not Found",
                409 => "Conflict", 500 => "Internal Server Error" }.freeze
  end
end
