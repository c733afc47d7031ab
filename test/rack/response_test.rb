# frozen_string_literal: true

require "rack/support"

# What the server makes of the app's [status, headers, body]: header forms,
# body kinds, body closing, and app failures.
class RackResponseTest < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::RackSupport

  # CLOSE_LOG (a path from the test) gets one line per body closed.
  APP = <<~'RUBY'
    log = lambda do |line|
      File.open(ENV.fetch("CLOSE_LOG"), "a") { |f| f.puts(line) }
    end

    closing = Struct.new(:name, :chunks, :log) do
      def each
        chunks.each { |c| yield c }
      end

      def close
        log.call("closed #{name}")
      end
    end

    raising = Struct.new(:log) do
      def each
        yield "first chunk\n"
        raise ArgumentError, "each-failure-marker"
      end

      def close
        log.call("closed raising")
      end
    end

    # Keeps producing until the client goes away (or 10 s pass).
    endless = Struct.new(:log, :count) do
      def each
        self.count = 0
        1000.times do
          self.count += 1
          yield "x" * 16_384
          sleep 0.01
        end
      end

      def close
        log.call("closed endless after #{count}")
      end
    end

    endless_call = Class.new do
      def initialize(log)
        @log = log
        @count = 0
      end

      def call(stream)
        1000.times do
          @count += 1
          stream.write("y" * 16_384)
          sleep 0.01
        end
        stream.close
      end

      def close
        @log.call("closed endless-call after #{@count}")
      end
    end

    file_body = Struct.new(:path, :log) do
      def to_path
        path
      end

      def each
        raise "each must not be called when to_path is served"
      end

      def close
        log.call("closed file")
      end
    end

    # Rack 3 streaming body: call(stream), no each (so not a Struct).
    streaming = Class.new do
      def initialize(log)
        @log = log
      end

      def call(stream)
        stream.write("streamed ")
        stream << "via "
        stream.write("call")
        stream.close
      end

      def close
        @log.call("closed streaming")
      end
    end

    run lambda { |env|
      case env["PATH_INFO"]
      when "/array-headers"
        [200, { "content-type" => "text/plain", "set-cookie" => ["a=1", "b=2"], "x-list" => ["p", "q", "r"] }, ["arr"]]
      when "/newline-headers"
        [200, { "content-type" => "text/plain", "set-cookie" => "a=1\nb=2", "x-list" => "p\nq\nr" }, ["nl"]]
      when "/array-body"
        [200, { "content-type" => "text/plain" }, ["hello ", "", "array ", "body"]]
      when "/to-ary"
        # What Rack::ETag hands on: its buffered parts behind a BodyProxy.
        [200, { "content-type" => "text/plain" }, Rack::BodyProxy.new(["proxied ", "parts"]) { log.call("closed proxy") }]
      when "/each"
        [200, { "content-type" => "text/plain" }, closing.new("each", ["chunk-1;", "chunk-2;", "chunk-3"], log)]
      when "/each-sized"
        [200, { "content-type" => "text/plain", "content-length" => "12" }, closing.new("sized", ["hello ", "sized!"], log)]
      when "/file"
        [200, { "content-type" => "application/octet-stream" }, file_body.new(ENV.fetch("BODY_FILE"), log)]
      when "/streaming"
        [200, { "content-type" => "text/plain" }, streaming.new(log)]
      when "/closing-array"
        [200, { "content-type" => "text/plain" }, closing.new("array-ish", ["a"], log)]
      when "/raise-in-each"
        [200, { "content-type" => "text/plain" }, raising.new(log)]
      when "/endless"
        [200, { "content-type" => "text/plain" }, endless.new(log)]
      when "/endless-call"
        [200, { "content-type" => "text/plain" }, endless_call.new(log)]
      when "/raise"
        raise NameError, "app-failure-marker"
      when "/bad-header-value"
        [200, { "content-type" => "text/plain", "x-evil" => "ok\r\nInjected: yes" }, ["should not be sent"]]
      when "/bad-header-array"
        [200, { "content-type" => "text/plain", "x-evil" => ["fine", "ok\r\n\r\nHTTP/1.1 200 OK"] }, ["nope"]]
      when "/bad-header-name"
        [200, { "content-type" => "text/plain", "bad name" => "x" }, ["nope"]]
      when "/bad-header-closing"
        [200, { "x-evil" => "a\rb" }, closing.new("bad-header", ["nope"], log)]
      when "/no-content"
        [204, {}, closing.new("no-content", ["must not be sent"], log)]
      when "/string-status"
        # Rack 2's SPEC: the status is whatever `to_i` makes >= 100.
        ["201", { "content-type" => "text/plain" }, ["created"]]
      when "/bad-status"
        [nil, { "content-type" => "text/plain" }, closing.new("bad-status", ["nope"], log)]
      when "/ok"
        [200, { "content-type" => "text/plain" }, ["still fine"]]
      else
        [404, { "content-type" => "text/plain" }, ["not found"]]
      end
    }
  RUBY

  def setup
    @dir = Dir.mktmpdir("tsubame-rack-response")
    @close_log = File.join(@dir, "close.log")
    @body_file = File.join(@dir, "body.bin")
    @file_content = (0..255).map(&:chr).join.b * 300 + "tail".b
    File.binwrite(@body_file, @file_content)
  end

  def teardown
    FileUtils.rm_rf(@dir)
  end

  def serve(args: [], lint: true, &block)
    with_server(APP, args: args, env: { "CLOSE_LOG" => @close_log, "BODY_FILE" => @body_file }, lint: lint, &block)
  end

  def close_log_with(line)
    wait_for_file(@close_log) { |text| text.include?(line) }.to_s
  end

  def get(server, path)
    exchange(server, get_bytes(path, { "Connection" => "close" }))
  end

  def test_array_and_newline_header_values_become_repeated_lines
    # Rack 2 newline-joined and Rack 3 Array header values: each breaks the other SPEC.
    serve(lint: false) do |s|
      %w[/array-headers /newline-headers].each do |path|
        reply = get(s, path)
        assert_equal 200, reply.status, s.stderr
        assert_equal %w[a=1 b=2], reply.all("set-cookie"), path
        assert_equal %w[p q r], reply.all("x-list"), path
        assert_equal ["text/plain"], reply.all("content-type")
      end
    end
  end

  def test_array_body
    # Rack 2's Lint hides the Array body: the content-length is what is checked.
    serve(lint: LINT_FORWARDS_BODY) do |s|
      reply = get(s, "/array-body")
      assert_equal 200, reply.status
      assert_equal "16", reply["content-length"]
      assert_nil reply["transfer-encoding"]
      assert_equal "hello array body", reply.body
      assert reply.complete
    end
  end

  def test_a_body_whose_to_ary_gives_an_array_goes_out_whole_and_is_closed
    # Rack 2's Lint hides to_ary, which is what is checked.
    serve(lint: LINT_FORWARDS_BODY) do |s|
      reply = get(s, "/to-ary")
      assert_equal 200, reply.status, s.stderr
      assert_equal "13", reply["content-length"]
      assert_nil reply["transfer-encoding"], "not streamed chunk by chunk"
      assert_equal "proxied parts", reply.body
      assert_includes close_log_with("closed proxy"), "closed proxy\n"
    end
  end

  def test_each_body_is_streamed_chunked_and_closed
    serve do |s|
      reply = get(s, "/each")
      assert_equal 200, reply.status
      assert_equal "chunked", reply["transfer-encoding"]
      assert_nil reply["content-length"]
      assert_equal "chunk-1;chunk-2;chunk-3", reply.body
      assert reply.complete, "terminating 0-chunk"
      assert_includes reply.raw, "8\r\nchunk-1;\r\n", "each piece is its own chunk"
      assert_includes close_log_with("closed each"), "closed each\n"
    end
  end

  def test_each_body_with_content_length_is_sent_raw
    serve do |s|
      reply = get(s, "/each-sized")
      assert_equal 200, reply.status
      assert_equal "12", reply["content-length"]
      assert_nil reply["transfer-encoding"]
      assert_equal "hello sized!", reply.body
      assert_includes close_log_with("closed sized"), "closed sized\n"
    end
  end

  def test_each_body_over_keep_alive
    serve do |s|
      http = s.http
      3.times do
        res = http.get("/each")
        assert_equal "chunk-1;chunk-2;chunk-3", res.body
      end
      assert_equal "hello array body", http.get("/array-body").body
      assert_equal 3, close_log_with("closed each\nclosed each\nclosed each").scan("closed each").size
    end
  end

  def test_head_and_204_send_no_body_and_close_it
    # Rack 2's Lint hides the Array body that /ok sends with its length.
    serve(lint: LINT_FORWARDS_BODY) do |s|
      data = s.raw(request_bytes("HEAD", "/each") + request_bytes("GET", "/no-content") +
                   get_bytes("/ok", { "Connection" => "close" }))
      responses = data.split(%r{(?=HTTP/1\.1 \d{3} )})
      assert_equal 3, responses.size, data
      assert_match %r{\AHTTP/1\.1 200 OK\r\n.*\r\n\r\n\z}m, responses[0], "HEAD: head only"
      assert_match %r{\AHTTP/1\.1 204 No Content\r\n.*\r\n\r\n\z}m, responses[1], "204: head only"
      refute_match(/content-length|transfer-encoding/i, responses[1])
      assert_match %r{\AHTTP/1\.1 200 OK\r\n.*\r\n\r\nstill fine\z}m, responses[2]
      log = close_log_with("closed no-content")
      assert_includes log, "closed each\n"
      assert_includes log, "closed no-content\n"
    end
  end

  def test_to_path_body_is_served_from_the_file
    # Rack 2's Lint hides to_path, which is what is checked.
    serve(lint: LINT_FORWARDS_BODY) do |s|
      reply = get(s, "/file")
      assert_equal 200, reply.status, s.stderr
      assert_equal @file_content.bytesize.to_s, reply["content-length"]
      assert_equal @file_content, reply.body
      assert_includes close_log_with("closed file"), "closed file\n"
      assert_empty s.stderr
    end
  end

  # Serves FILES_DIR's files by name, through Rack::Files (its path is
  # ASCII-8BIT: PATH_INFO is) and through a body of the app's own whose
  # to_path is the same path tagged ASCII-8BIT or UTF-8 (for a Latin-1
  # name, UTF-8 that is not valid UTF-8).
  FILE_NAMES_APP = <<~'RUBY'
    files = Rack::Files.new(ENV.fetch("FILES_DIR"))

    path_body = Struct.new(:path) do
      def to_path
        path
      end

      def each
        raise "each must not be called when to_path is served"
      end
    end

    run lambda { |env|
      case env["PATH_INFO"]
      when %r{\A/files(/.*)\z}
        files.call(env.merge("PATH_INFO" => $1))
      when %r{\A/to-path/(binary|utf-8)/(.*)\z}
        encoding, name = $1, $2
        path = File.join(ENV.fetch("FILES_DIR"), Rack::Utils.unescape_path(name)).b
        path.force_encoding(Encoding::UTF_8) if encoding == "utf-8"
        [200, { "content-type" => "application/octet-stream" }, path_body.new(path)]
      else
        [404, { "content-type" => "text/plain" }, ["not found"]]
      end
    }
  RUBY

  # Unix paths are bytes: a to_path body opens its file whatever the name's
  # bytes and whatever encoding its String is tagged with.
  def test_to_path_bodies_open_non_ascii_file_names
    files_dir = File.join(@dir, "files")
    Dir.mkdir(files_dir)
    contents = {}
    ["日本語.txt", "café.txt", "caf\xE9.txt".b].each_with_index do |name, i|
      contents[name] = "file #{i} ".b + name.b + "\n".b + (0..255).map(&:chr).join.b * (i + 1)
      File.binwrite(File.join(files_dir, name), contents[name])
    end
    assert_equal 3, Dir.children(files_dir).size
    # Rack 2's Lint hides to_path, which is what is checked.
    with_server(FILE_NAMES_APP, env: { "FILES_DIR" => files_dir }, lint: LINT_FORWARDS_BODY) do |s|
      contents.each do |name, content|
        escaped = name.b.bytes.map { |b| b < 0x80 ? b.chr : format("%%%02X", b) }.join
        ["/files/", "/to-path/binary/", "/to-path/utf-8/"].each do |prefix|
          reply = get(s, prefix + escaped)
          where = "#{prefix}#{name.inspect}"
          assert_equal 200, reply.status, "#{where}: #{reply.raw.inspect} #{s.stderr}"
          assert_equal content.bytesize.to_s, reply["content-length"], where
          assert_equal content, reply.body, where
        end
      end
      assert_empty s.stderr
    end
  end

  def test_rack3_streaming_body
    # Rack 2's SPEC has no streaming (call) body.
    serve(lint: !RACK2) do |s|
      reply = get(s, "/streaming")
      assert_equal 200, reply.status, s.stderr
      assert_equal "chunked", reply["transfer-encoding"]
      assert_equal "streamed via call", reply.body
      assert reply.complete
      assert reply.closed
      assert_includes close_log_with("closed streaming"), "closed streaming\n"
      # And the connection stays usable when the client wants it.
      http = s.http
      assert_equal "streamed via call", http.get("/streaming").body
      assert_equal "still fine", http.get("/ok").body
    end
  end

  def test_body_each_raising_cuts_the_response_and_closes_the_body
    serve do |s|
      started = monotonic
      # Keep-alive request: only the server can end this exchange early.
      reply = exchange(s, get_bytes("/raise-in-each"), timeout: 5)
      assert_operator monotonic - started, :<, 4, "server closed the connection"
      assert reply.closed, "connection closed"
      assert_equal 200, reply.status
      assert_equal "chunked", reply["transfer-encoding"]
      assert_equal "first chunk\n", reply.body
      refute reply.complete, "no terminating 0-chunk: the client can tell the body is cut"
      refute_includes reply.raw, "0\r\n\r\n"
      assert_includes close_log_with("closed raising"), "closed raising\n"
      stderr = wait_until { s.stderr.then { |t| t if t.include?("each-failure-marker") } }.to_s
      assert_includes stderr, "ArgumentError: each-failure-marker"
      assert_equal "still fine", s.get("/ok").body
    end
  end

  def test_body_closed_when_the_client_disconnects_mid_body
    serve do |s|
      %w[endless endless-call].each do |name|
        sock = s.socket
        sock.write(get_bytes("/#{name}"))
        head = +""
        head << sock.readpartial(65_536) until head.include?("\r\n\r\n")
        assert_match %r{\AHTTP/1\.1 200 OK\r\n}, head
        sock.close
        log = close_log_with("closed #{name} after")
        count = log[/closed #{name} after (\d+)/, 1]
        refute_nil count, "#{name}: body closed after the client left (log: #{log.inspect})"
        assert_operator count.to_i, :<, 1000, "#{name}: stopped producing early"
      end
      assert_equal "still fine", s.get("/ok").body
    end
  end

  def test_app_raising_gives_500_with_backtrace_in_stderr
    serve do |s|
      reply = get(s, "/raise")
      assert_equal "HTTP/1.1 500 Internal Server Error", reply.status_line
      assert_equal "Internal Server Error\n", reply.body
      assert reply.complete
      refute_includes reply.body, "app-failure-marker", "no details to the client"
      stderr = wait_until { s.stderr.then { |t| t if t.include?("app-failure-marker") } }.to_s
      assert_match(/error handling GET \/raise: NameError: app-failure-marker/, stderr)
      assert_match(/^  .*config\.ru:\d+:in/, stderr, "backtrace points into the app")
      # The failure was the request's, not the server's.
      res = s.get("/ok")
      assert_equal "200", res.code
      assert_equal "still fine", res.body
      http = s.http
      assert_equal "500", http.get("/raise").code
      assert_equal "still fine", http.get("/ok").body, "keep-alive survives a 500"
    end
  end

  def test_invalid_header_values_give_500_never_a_split_response
    # Invalid header names and values on purpose.
    serve(lint: false) do |s|
      %w[/bad-header-value /bad-header-array /bad-header-name /bad-header-closing].each do |path|
        reply = get(s, path)
        assert_equal "HTTP/1.1 500 Internal Server Error", reply.status_line, path
        assert_equal "Internal Server Error\n", reply.body, path
        assert_equal 1, reply.raw.scan(%r{HTTP/1\.1 }).size, "one response only for #{path}: #{reply.raw.inspect}"
        refute_match(/injected/i, reply.raw)
        refute_includes reply.raw, "should not be sent"
        refute_includes reply.raw, "nope"
      end
      assert_includes close_log_with("closed bad-header"), "closed bad-header\n"
      assert_match(/invalid value for response header/, s.stderr)
      assert_equal "still fine", s.get("/ok").body
    end
  end

  def test_string_status_is_accepted
    # A String status: Rack 2's SPEC allows it, Rack 3's asks for an Integer.
    serve(lint: RACK2) do |s|
      reply = get(s, "/string-status")
      assert_equal "HTTP/1.1 201 Created", reply.status_line, s.stderr
      assert_equal "created", reply.body
    end
  end

  def test_missing_status_gives_500
    # A nil status on purpose.
    serve(lint: false) do |s|
      reply = get(s, "/bad-status")
      assert_equal "HTTP/1.1 500 Internal Server Error", reply.status_line
      assert_equal "Internal Server Error\n", reply.body
      assert_includes close_log_with("closed bad-status"), "closed bad-status\n"
      assert_match(/response status must be an Integer, got nil/, wait_until { s.stderr.then { |t| t unless t.empty? } }.to_s)
    end
  end

  def test_lowlevel_error_handler_replaces_the_500
    config = File.join(@dir, "tsubame.rb")
    File.write(config, <<~'RUBY')
      lowlevel_error_handler do |error, env|
        [503, { "content-type" => "text/plain", "x-handled" => "yes" }, ["handled #{error.class}: #{error.message} at #{env["PATH_INFO"]}\n"]]
      end
    RUBY
    serve(args: ["-C", config]) do |s|
      reply = get(s, "/raise")
      assert_equal "HTTP/1.1 503 Service Unavailable", reply.status_line
      assert_equal "yes", reply["x-handled"]
      assert_equal "handled NameError: app-failure-marker at /raise\n", reply.body
      assert_match(/NameError: app-failure-marker/, wait_until { s.stderr.then { |t| t unless t.empty? } }.to_s)
      assert_equal "still fine", s.get("/ok").body
    end
  end

  def test_lowlevel_error_handler_that_raises_falls_back_to_500
    config = File.join(@dir, "tsubame.rb")
    File.write(config, <<~'RUBY')
      lowlevel_error_handler { |_error| raise "handler-failure-marker" }
    RUBY
    serve(args: ["-C", config]) do |s|
      reply = get(s, "/raise")
      assert_equal "HTTP/1.1 500 Internal Server Error", reply.status_line
      assert_equal "Internal Server Error\n", reply.body
      assert_match(/handler-failure-marker/, wait_until { s.stderr.then { |t| t if t.include?("handler-failure") } }.to_s)
    end
  end
end
