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
    # Status pages open at once (each holds an event stream and a thread);
    # more are answered 503.
    MAX_STREAMS = 8

    attr_reader :url, :token

    # name: how the log line calls it ("Control app", "Metrics").
    def initialize(url, configured_token, app, log, name: "Control app")
      @url = url
      @token = ControlToken.resolve(configured_token)
      @generated = configured_token.nil?
      @app = app
      @log = log
      @name = name
      @socket = nil
      @thread = nil
      @streams = []
      @streams_lock = Mutex.new
    end

    def start
      @socket = open_socket
      socket = @socket
      @thread = NamedThread.start("tsubame-control") { accept_loop(socket) }
      @log.info("* #{@name} on #{@url}#{@token ? "" : " (no token required)"}")
      # A token nobody knows would make the app useless; it is also in the
      # state file when there is one.
      @log.info("* #{@name} token (generated): #{@token}") if @generated
      self
    end

    def stop
      socket = @socket
      @socket = nil
      return unless socket

      socket.close unless socket.closed?
      @thread&.join(1)
      streams = @streams_lock.synchronize { @streams.dup }
      streams.each do |thread, client|
        finish(client)
        thread.join(0.5)
      end
      unix_path&.then { |path| File.delete(path) if File.socket?(path) }
    rescue SystemCallError, IOError
      nil
    end

    # A forked worker inherits the listening socket, and the connection
    # being answered if the fork came in the middle of it; it must keep
    # neither open.
    def close_in_child
      streams = @streams_lock.synchronize { @streams.map(&:last) }
      [@socket, @client, *streams].each { |io| io.close if io && !io.closed? }
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
      handed_off = false
      path, params, bearer = read_request(client)
      status, body = path ? respond(path, params, bearer) : [400, { "error" => "bad request" }]
      if body.is_a?(ControlApp::EventStream)
        handed_off = stream(client, body.feed)
      else
        write_response(client, status, body)
      end
    rescue StandardError => e
      write_response(client, 500, { "error" => "#{e.class}: #{e.message}" })
    ensure
      finish(client) unless handed_off
    end

    # The status page's server-sent events, on a thread of their own so
    # the accept loop goes on. Returns false when too many are open (the
    # client got a 503).
    def stream(client, feed)
      @streams_lock.synchronize do
        if @streams.size >= MAX_STREAMS
          write_response(client, 503, { "error" => "too many status pages open (#{MAX_STREAMS})" })
          return false
        end

        thread = NamedThread.start("tsubame-control-events") { send_events(client, feed) }
        @streams << [thread, client]
      end
      true
    end

    def send_events(client, feed)
      client.write("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-store\r\n" \
                   "connection: close\r\n\r\n")
      seen = nil
      while @socket
        snapshot = feed.next_after(seen, 2.0)
        next if snapshot.nil? || snapshot.equal?(seen)

        seen = snapshot
        client.write("data: #{JSON.generate(snapshot)}\n\n")
      end
    rescue IOError, SystemCallError
      # The page was closed.
      nil
    ensure
      @streams_lock.synchronize { @streams.reject! { |_, io| io.equal?(client) } }
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

    def respond(path, params, bearer)
      return [403, { "error" => "invalid token" }] unless authorized?(params["token"] || bearer)

      @app.call(path.delete_prefix("/"), params)
    end

    def authorized?(given)
      return true unless @token
      return false unless given && given.bytesize == @token.bytesize

      # Compared in constant time: the token is a secret.
      given.bytes.zip(@token.bytes).map { |a, b| a ^ b }.reduce(0, :|).zero?
    end

    # Returns [path, params, bearer token], or nil for a request that is
    # not one. A scraper may send the token as `Authorization: Bearer`
    # (Prometheus' `authorization` setting) instead of in the query.
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
      bearer = head[/^authorization:[ \t]*bearer[ \t]+(\S+)[ \t]*\r?$/i, 1]
      [path, URI.decode_www_form(query.to_s).to_h, bearer]
    rescue ArgumentError
      nil
    end

    def write_response(client, status, body)
      type, text, headers =
        if body.is_a?(ControlApp::Raw)
          [body.content_type, body.text, body.headers || {}]
        else
          ["application/json", JSON.generate(body), {}]
        end
      extra = headers.map { |name, value| "#{name}: #{value}\r\n" }.join
      client.write("HTTP/1.1 #{status} #{REASONS.fetch(status, "OK")}\r\n" \
                   "content-type: #{type}\r\ncontent-length: #{text.bytesize}\r\n#{extra}" \
                   "connection: close\r\n\r\n#{text}")
    rescue IOError, SystemCallError
      nil
    end

    REASONS = { 200 => "OK", 400 => "Bad Request", 403 => "Forbidden", 404 => "Not Found",
                409 => "Conflict", 500 => "Internal Server Error", 503 => "Service Unavailable" }.freeze
  end
end
