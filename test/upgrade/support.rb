# frozen_string_literal: true

require "socket"
require "digest/sha1"
require "base64"
require "json"
require "openssl"
require "open3"

module Tsubame
  # A WebSocket client written for the tests, byte by byte, so a test can
  # also send what no real client would (unmasked frames, bad opcodes).
  module UpgradeSupport
    GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

    # An app with a rack.upgrade handler that echoes, greets, records its
    # callbacks in a file named by TSUBAME_TEST_EVENTS, and answers a few
    # commands; /publish?channel=c&message=m publishes, /threads counts
    # Ruby threads, /sse-publish is the same for SSE.
    APP = <<~'RUBY'
      require "json"
      log = ENV.fetch("TSUBAME_TEST_EVENTS")
      record = ->(line) { File.open(log, "a") { |f| f.puts(line) } }
      handler = Class.new do
        define_method(:on_open) do |conn|
          record.call("open #{conn.protocol}")
          conn.subscribe("chat")
          conn.write("welcome")
        end
        define_method(:on_message) do |conn, data|
          record.call("message #{data.encoding} #{data.bytesize}")
          case data
          when "close-4001" then conn.close(4001)
          when "pending" then conn.write("pending #{conn.pending}")
          when "pid" then conn.write(Process.pid.to_s)
          when "raise" then raise "handler failure"
          else conn.write(data)
          end
        end
        define_method(:on_shutdown) { |conn| record.call("shutdown"); conn.write("bye") }
        define_method(:on_close) { |conn| record.call("close #{conn.open?}") }
      end
      run lambda { |env|
        case env["PATH_INFO"]
        when "/threads" then [200, { "content-type" => "text/plain" }, [Thread.list.size.to_s]]
        when "/publish"
          params = Rack::Utils.parse_query(env["QUERY_STRING"])
          message = params.fetch("message")
          message = message.b if params["binary"]
          count = Tsubame.publish(params.fetch("channel"), message)
          [200, { "content-type" => "text/plain" }, [count.to_s]]
        else
          if env["rack.upgrade?"]
            env["rack.upgrade"] = handler.new
            [200, {}, []]
          else
            [200, { "content-type" => "text/plain" }, ["upgrade? #{env["rack.upgrade?"].inspect}"]]
          end
        end
      }
    RUBY

    # One client connection after its handshake.
    class Client
      # last_rsv: the RSV bits of the last frame read (4: RSV1, a
      # permessage-deflate message).
      attr_reader :response_head, :last_rsv

      # tls: an OpenSSL::SSL::SSLContext for wss://.
      def initialize(port, path: "/ws", headers: {}, tls: nil)
        @sock = TCPSocket.new("127.0.0.1", port)
        if tls
          @sock = OpenSSL::SSL::SSLSocket.new(@sock, tls)
          @sock.sync_close = true
          @sock.connect
        end
        @buf = +"".b
        key = Base64.strict_encode64(Random.bytes(16))
        @expected_accept = Base64.strict_encode64(Digest::SHA1.digest(key + GUID))
        lines = ["GET #{path} HTTP/1.1", "Host: 127.0.0.1:#{port}", "Upgrade: websocket", "Connection: Upgrade",
                 "Sec-WebSocket-Key: #{key}", "Sec-WebSocket-Version: 13"]
        headers.each { |name, value| lines << "#{name}: #{value}" }
        @sock.write("#{lines.join("\r\n")}\r\n\r\n")
        @response_head = read_until("\r\n\r\n")
      end

      def accepted?
        @response_head.start_with?("HTTP/1.1 101") &&
          @response_head.match?(/^sec-websocket-accept:\s*#{Regexp.escape(@expected_accept)}\r?$/i)
      end

      # A frame as a client sends it: masked unless told otherwise.
      def send_frame(opcode, payload, fin: true, mask: true, rsv: 0)
        @sock.write(UpgradeSupport.frame(opcode, payload, fin: fin, mask: mask, rsv: rsv))
      end

      # Raw bytes, for frames the helpers above cannot make.
      def sock_write(bytes)
        @sock.write(bytes)
      end

      def text(data)
        send_frame(0x1, data.encode(Encoding::UTF_8))
      end

      def binary(data)
        send_frame(0x2, data)
      end

      def close_frame(code = 1000, reason = "")
        send_frame(0x8, [code].pack("n") + reason)
      end

      # The next frame from the server: [opcode, payload]; nil at EOF.
      def read_frame(timeout: 5)
        head = read_exact(2, timeout)
        return nil unless head

        first, second = head.unpack("CC")
        raise "server frames must not be masked" if second & 0x80 != 0

        @last_rsv = (first >> 4) & 0x7

        len = second & 0x7f
        len = read_exact(2, timeout).unpack1("n") if len == 126
        len = read_exact(8, timeout).unpack1("Q>") if len == 127
        [first & 0x0f, read_exact(len, timeout) || raise("frame cut short")]
      end

      # The next data frame's payload, answering nothing else.
      def read_message(timeout: 5)
        loop do
          frame = read_frame(timeout: timeout)
          return nil unless frame
          return frame[1] if [1, 2].include?(frame[0])
        end
      end

      # The close code of the server's close frame, reading past data.
      def read_close(timeout: 5)
        loop do
          frame = read_frame(timeout: timeout)
          return :eof unless frame
          return frame[1].bytesize >= 2 ? frame[1].unpack1("n") : :no_code if frame[0] == 8
        end
      end

      def eof?(timeout = 3)
        return false unless readable?(timeout)

        @sock.read_nonblock(65_536, exception: false).nil?
      rescue Errno::ECONNRESET
        true
      end

      def close
        @sock.close unless @sock.closed?
      end

      private

      def read_until(separator)
        until (at = @buf.index(separator))
          fill(5)
        end
        @buf.slice!(0, at + separator.bytesize)
      end

      def read_exact(count, timeout)
        while @buf.bytesize < count
          return nil unless fill(timeout)
        end
        @buf.slice!(0, count)
      end

      # TLS may hold decrypted bytes the socket no longer shows.
      def readable?(timeout)
        (@sock.respond_to?(:pending) && @sock.pending.positive?) || @sock.to_io.wait_readable(timeout)
      end

      def fill(timeout)
        raise "no data from the server within #{timeout}s" unless readable?(timeout)

        chunk = @sock.read_nonblock(65_536, exception: false)
        return false if chunk.nil?

        @buf << chunk unless chunk == :wait_readable
        true
      rescue Errno::ECONNRESET
        false
      end
    end

    # WebSockets over HTTP/2 (RFC 8441) on one HTTP/2 connection, through
    # h2_websocket_client.py (Debian's python3-h2 and python3-websockets):
    # each method is one of its commands, answered as a Hash.
    class H2Client
      SCRIPT = File.expand_path("h2_websocket_client.py", __dir__)

      def initialize(port, tls: false)
        args = [SCRIPT, port.to_s]
        args << "--tls" if tls
        @stdin, @stdout, @stderr, @wait = Open3.popen3("/usr/bin/python3", *args)
      end

      def call(op, **args)
        @stdin.puts(JSON.generate(args.merge(op: op)))
        raise "the h2 client did not answer #{op}: #{@stderr.read_nonblock(65_536, exception: false)}" unless @stdout.wait_readable(60)

        line = @stdout.gets
        raise "the h2 client exited: #{@stderr.read}" unless line

        JSON.parse(line)
      end

      def settings = call("settings")

      # The answer to an extended CONNECT: "stream" and "status" (or
      # "reset"), "headers" ([name, value] pairs) and for a refusal "body".
      def open(path = "/ws", **opts) = call("open", path: path, **opts)

      def get(path) = call("get", path: path)

      def text(stream, data) = call("text", stream: stream, data: data)

      def binary(stream, data) = call("binary", stream: stream, data: [data].pack("m0"))

      def raw(stream, bytes) = call("raw", stream: stream, hex: bytes.unpack1("H*"))

      def close_frame(stream, code = 1000, reason = "") = call("close", stream: stream, code: code, reason: reason)

      # The next frame: {"type" => "text"|"binary"|"close"|"ping"|"end"|"reset"|"timeout", ...};
      # a binary message's data comes decoded.
      def recv(stream, timeout: 10)
        frame = call("recv", stream: stream, timeout: timeout)
        frame["data"] = frame["data"].unpack1("m0") if frame["type"] == "binary"
        frame
      end

      # The next text or binary message's data, past pings.
      def read_message(stream, timeout: 10)
        loop do
          frame = recv(stream, timeout: timeout)
          return frame["data"] if %w[text binary].include?(frame["type"])
          raise "expected a message, got #{frame.inspect}" unless frame["type"] == "ping"
        end
      end

      %w[end reset pause resume unacked].each do |op|
        define_method(op) { |stream| call(op, stream: stream) }
      end

      def close
        @stdin.close unless @stdin.closed?
        Process.kill("KILL", @wait.pid) unless @wait.join(5)
        @wait.value
      rescue Errno::ESRCH
        nil
      end
    end

    # A frame as a client sends it: masked unless told otherwise; `rsv`
    # the three RSV bits (4: RSV1).
    def self.frame(opcode, payload, fin: true, mask: true, rsv: 0)
      payload = payload.b
      len = payload.bytesize
      head = [(fin ? 0x80 : 0) | (rsv << 4) | opcode].pack("C")
      mask_bit = mask ? 0x80 : 0
      head << if len < 126 then [mask_bit | len].pack("C")
              elsif len < 65_536 then [mask_bit | 126, len].pack("Cn")
              else [mask_bit | 127, len].pack("CQ>")
              end
      return head + payload unless mask

      key = Random.bytes(4)
      head + key + payload.bytes.each_with_index.map { |b, i| b ^ key.getbyte(i % 4) }.pack("C*")
    end

    def events(path)
      File.exist?(path) ? File.readlines(path, chomp: true) : []
    end

    # Serves `app` with TSUBAME_TEST_EVENTS naming a fresh file (where the
    # test apps' `record` writes, read back with `events`) and, when given,
    # `config` as a config file; yields the server and the file's path.
    def with_event_log(app, args: [], config: nil)
      Dir.mktmpdir do |dir|
        log = File.join(dir, "events")
        if config
          File.write(File.join(dir, "tsubame.rb"), config)
          args += ["-C", File.join(dir, "tsubame.rb")]
        end
        with_server(app, args: args, env: { "TSUBAME_TEST_EVENTS" => log }) { |server| yield server, log }
      end
    end
  end
end
