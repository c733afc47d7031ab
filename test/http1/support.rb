# frozen_string_literal: true

require "test_helper"
require "digest"

module Tsubame
  # Support for the http_*_test.rb files: a byte-exact HTTP/1.1 client over
  # one socket, and a probe app that reports what it saw.
  module HttpSupport
    # One parsed response. headers is an Array of [lowercased name, value]
    # in the order they came; chunks holds the chunk sizes of a chunked
    # body as they arrived.
    Response = Struct.new(:status_line, :headers, :body, :chunks, :head_bytes, keyword_init: true) do
      def status
        status_line[/\AHTTP\/1\.[01] (\d{3})/, 1].to_i
      end

      def [](name)
        values = headers.select { |(key, _)| key == name.downcase }.map(&:last)
        values.empty? ? nil : values.join(", ")
      end

      def header?(name)
        headers.any? { |(key, _)| key == name.downcase }
      end
    end

    # A client connection that keeps its own read buffer, so pipelined
    # responses that arrive in one read are split exactly where HTTP says.
    class Conn
      class Timeout < StandardError; end
      class Closed < StandardError; end

      attr_reader :sock

      def initialize(sock, timeout: 10)
        @sock = sock
        @timeout = timeout
        @buf = +"".b
      end

      def write(bytes)
        @sock.write(bytes)
        self
      end

      def close
        @sock.close unless @sock.closed?
      end

      # Reads one response. head: true for a response to HEAD (no body
      # whatever the headers say). With a sink, body bytes are appended to
      # it instead of kept (for large bodies).
      def read_response(head: false, sink: nil)
        head_bytes = read_until("\r\n\r\n")
        lines = head_bytes.split("\r\n")
        status_line = lines.shift
        headers = lines.map do |line|
          name, value = line.split(":", 2)
          raise "malformed response header line #{line.inspect}" unless value

          [name.downcase, value.strip]
        end
        response = Response.new(status_line: status_line, headers: headers, body: +"".b, chunks: [],
                                head_bytes: head_bytes)
        return response if status_line.start_with?("HTTP/1.1 1") # interim; caller reads the final one

        read_body(response, head, sink || response.body)
        response
      end

      # Whether the server closes the connection within `timeout` seconds
      # without sending anything more: :eof, :timeout, or the unexpected
      # bytes that arrived instead.
      def wait_close(timeout = 3)
        return @buf.dup unless @buf.empty?

        deadline = Time.now + timeout
        loop do
          left = deadline - Time.now
          return :timeout if left <= 0 || !@sock.wait_readable(left)

          chunk = @sock.read_nonblock(65_536, exception: false)
          return :eof if chunk.nil?
          return chunk unless chunk == :wait_readable
        end
      rescue Errno::ECONNRESET
        :eof
      end

      # Bytes that have arrived within `timeout`, without waiting for more.
      def available(timeout = 0.3)
        out = @buf.dup
        @buf.clear
        deadline = Time.now + timeout
        loop do
          left = deadline - Time.now
          break if left <= 0 || !@sock.wait_readable(left)

          chunk = @sock.read_nonblock(65_536, exception: false)
          break if chunk.nil?
          next if chunk == :wait_readable

          out << chunk
        end
        out
      end

      def read_until(separator)
        until (at = @buf.index(separator))
          fill
        end
        @buf.slice!(0, at + separator.bytesize)[0, at]
      end

      def read_exact(count, sink = +"".b)
        while count.positive?
          fill if @buf.empty?
          take = [count, @buf.bytesize].min
          sink << @buf.slice!(0, take)
          count -= take
        end
        sink
      end

      private

      def read_body(response, head, sink)
        return if head || [204, 304].include?(response.status)

        if response["transfer-encoding"]
          raise "unexpected transfer-encoding #{response["transfer-encoding"]}" unless response["transfer-encoding"] == "chunked"

          read_chunked(response, sink)
        elsif (length = response["content-length"])
          read_exact(Integer(length, 10), sink)
        else
          read_to_close(sink)
        end
      end

      def read_chunked(response, sink)
        loop do
          size = Integer(read_until("\r\n").split(";").first, 16)
          break if size.zero?

          response.chunks << size
          read_exact(size, sink)
          raise "chunk not followed by CRLF" unless read_exact(2) == "\r\n"
        end
        # No trailers are sent by the server: the next line ends the body.
        trailer = read_until("\r\n")
        raise "unexpected trailer #{trailer.inspect}" unless trailer.empty?
      end

      def read_to_close(sink)
        loop do
          sink << @buf.slice!(0, @buf.bytesize) unless @buf.empty?
          fill
        end
      rescue Closed
        sink
      end

      def fill
        raise Timeout, "no response data within #{@timeout}s (have #{@buf.inspect[0, 200]})" unless @sock.wait_readable(@timeout)

        chunk = @sock.read_nonblock(1 << 20, exception: false)
        raise Closed, "connection closed (have #{@buf.inspect[0, 200]})" if chunk.nil?

        @buf << chunk unless chunk == :wait_readable
      rescue Errno::ECONNRESET
        raise Closed, "connection reset (have #{@buf.inspect[0, 200]})"
      end
    end

    # Records every request it runs (except its own reporting endpoints), so
    # a test can prove that a refused request never reached it.
    PROBE_APP = <<~'RUBY'
      require "digest"
      $seen = []
      $closed = {}
      $lock = Mutex.new

      text = lambda do |body, status = 200, extra = {}|
        [status, { "content-type" => "text/plain", "content-length" => body.bytesize.to_s }.merge(extra), [body]]
      end

      # Yields slowly; close records how many pieces had been produced.
      slow_body = Struct.new(:id, :count) do
        def each
          self.count = 0
          200.times do |i|
            self.count = i + 1
            yield "tick #{i}\n"
            sleep 0.05
          end
        end

        def close
          $lock.synchronize { $closed[id] = count }
        end
      end

      # Yields "first", then waits for the gate file before "second", so a
      # client can prove the first chunk left before the second existed.
      gated_body = Struct.new(:gate) do
        def each
          yield "first"
          deadline = Time.now + 10
          sleep 0.01 until File.exist?(gate) || Time.now > deadline
          yield "second"
        end
      end

      # A burst of 300 small pieces written back to back, then the gate,
      # then "after": the whole burst must reach the client while the app
      # waits, however the server groups the pieces into writes. Served as
      # an `each` body, or as a Rack 3 streaming body with ?call.
      burst_body = Struct.new(:gate) do
        def each
          300.times { |i| yield format("piece %03d\n", i) }
          deadline = Time.now + 10
          sleep 0.01 until File.exist?(gate) || Time.now > deadline
          yield "after"
        end
      end
      # Not a Struct: a Struct has an `each` of its own.
      burst_call = Class.new do
        def initialize(body)
          @body = body
        end

        def call(stream)
          @body.each { |piece| stream.write(piece) }
          stream.close
        end
      end

      file_body = Struct.new(:to_path) do
        def each
          File.open(to_path, "rb") { |f| while (part = f.read(65_536)) do yield part end }
        end
      end

      big_pieces = lambda do
        block = Random.new(1234).bytes(65_536)
        Array.new(800) { |i| format("%08d", i) + block.byteslice(8..) }
      end

      run(lambda do |env|
        path = env["PATH_INFO"]
        unless path == "/seen" || path.start_with?("/closed/")
          $lock.synchronize { $seen << "#{env["REQUEST_METHOD"]} #{env["REQUEST_URI"]}" }
        end
        case path
        when "/seen" then text.call($lock.synchronize { $seen.join("\n") })
        when %r{\A/closed/(\w+)\z} then text.call($lock.synchronize { $closed[$1].to_s })
        when "/echo"
          body = env["rack.input"].read
          text.call("#{env["CONTENT_LENGTH"].inspect} #{env["HTTP_TRANSFER_ENCODING"].inspect} #{body}")
        when "/env"
          text.call(env.values_at("REMOTE_ADDR", "SERVER_PROTOCOL", "HTTP_VERSION").join(" "))
        when %r{\A/sleep/([\d.]+)/}
          sleep Float($1)
          text.call(path)
        when "/sha"
          input = env["rack.input"]
          digest = Digest::SHA256.new
          size = 0
          buffer = String.new
          while input.read(65_536, buffer)
            digest << buffer
            size += buffer.bytesize
          end
          input.rewind
          again = Digest::SHA256.hexdigest(input.read)
          text.call("#{size} #{digest.hexdigest} #{again == digest.hexdigest} #{env["CONTENT_LENGTH"]}")
        when "/fixed" then text.call("hello world")
        when "/no-length" then [200, { "content-type" => "text/plain" }, ["hello world"]]
        when "/204" then [204, { "content-type" => "text/plain" }, ["must not be sent"]]
        when "/304" then [304, { "etag" => '"x"' }, ["must not be sent"]]
        when %r{\A/slow/(\w+)\z} then [200, { "content-type" => "text/plain" }, slow_body.new($1, 0)]
        when "/gated" then [200, { "content-type" => "text/plain" }, gated_body.new(env["QUERY_STRING"])]
        when "/burst" then [200, { "content-type" => "text/plain" }, burst_body.new(env["QUERY_STRING"])]
        when "/burst-call"
          [200, { "content-type" => "text/plain" }, burst_call.new(burst_body.new(env["QUERY_STRING"]))]
        when "/each-with-length"
          [200, { "content-type" => "text/plain", "content-length" => "11" }, %w[hello \  world].each]
        when "/wrong-length" then [200, { "content-length" => "999" }, ["hello"]]
        when "/each-too-long" then [200, { "content-length" => "5" }, ["hello", " world"].each]
        when "/each-too-short" then [200, { "content-length" => "20" }, ["hi"].each]
        when "/big-array" then [200, { "content-type" => "application/octet-stream" }, big_pieces.call]
        when "/big-each"
          pieces = big_pieces.call
          [200, { "content-type" => "application/octet-stream" }, pieces.each]
        when %r{\A/files(/.*)\z}
          Rack::Files.new(ENV.fetch("FILES_DIR")).call(env.merge("PATH_INFO" => $1))
        when "/to-path"
          file = File.join(ENV.fetch("FILES_DIR"), "big.bin")
          [200, { "content-type" => "application/octet-stream", "content-length" => File.size(file).to_s },
           file_body.new(file)]
        else text.call(path)
        end
      end)
    RUBY

    # The bytes of /big-array and the big file: 800 pieces of 64 KiB.
    def self.big_pieces
      block = Random.new(1234).bytes(65_536)
      Array.new(800) { |i| format("%08d", i) + block.byteslice(8..) }
    end

    def self.big_digest
      @big_digest ||= begin
        digest = Digest::SHA256.new
        big_pieces.each { |piece| digest << piece }
        digest.hexdigest
      end
    end

    BIG_SIZE = 800 * 65_536

    def conn(server, timeout: 10)
      Conn.new(server.socket, timeout: timeout)
    end

    def get_request(path, headers = {})
      request("GET", path, headers)
    end

    def request(method, path, headers = {}, body = nil, version: "HTTP/1.1")
      head = +"#{method} #{path} #{version}\r\n"
      head << "Host: test.local\r\n" unless version == "HTTP/1.0" || headers.key?("Host")
      headers.each { |name, value| head << "#{name}: #{value}\r\n" }
      head << "Content-Length: #{body.bytesize}\r\n" if body && !headers.key?("Content-Length")
      head << "\r\n"
      head << body if body
      head
    end

    # What the probe app ran, one "METHOD URI" per line.
    def seen(server)
      response = server.get("/seen")
      assert_equal "200", response.code
      response.body.split("\n")
    end

    # Sends raw bytes on a fresh connection and checks the single response
    # is the given refusal, followed by the connection closing.
    def assert_refused(server, bytes, status_line)
      client = conn(server)
      client.write(bytes)
      response = client.read_response
      assert_equal status_line, response.status_line, "response to #{bytes[0, 80].inspect}"
      assert_equal "close", response["connection"]
      assert_equal "text/plain; charset=utf-8", response["content-type"]
      assert response.body.start_with?("#{status_line.split(" ", 2).last}\n"), response.body
      assert_equal :eof, client.wait_close, "connection left open after #{status_line}"
      response
    ensure
      client&.close
    end
  end
end
