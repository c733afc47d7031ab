# frozen_string_literal: true

require "http1/support"
require "tls/support"
require "zlib"
require "open3"

# --compress: whole bodies (Array bodies) and streamed bodies gzip-, zstd-
# or brotli-encoded by the engine, chosen by Accept-Encoding; everything else
# left as it was.
class CompressTest < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::HttpSupport
  include Tsubame::TlsSupport

  HTML = ("<p>Tsubame compresses this paragraph, which repeats.</p>\n" * 200).freeze

  APP = <<~RUBY
    html = #{HTML.dump}
    run lambda { |env|
      type = "text/html; charset=utf-8"
      case env["PATH_INFO"]
      when "/html" then [200, { "content-type" => type, "etag" => '"v1"', "vary" => "Cookie" }, [html]]
      when "/json" then [200, { "content-type" => "application/json" }, ['{"a":' + "1," * 2000 + '"b":2}']]
      when "/png" then [200, { "content-type" => "image/png" }, [html]]
      when "/small" then [200, { "content-type" => type }, ["<p>small</p>"]]
      when "/encoded" then [200, { "content-type" => type, "content-encoding" => "identity-ish" }, [html]]
      when "/no-transform" then [200, { "content-type" => type, "cache-control" => "no-transform" }, [html]]
      when "/missing" then [404, { "content-type" => type }, [html]]
      when "/stream" then [200, { "content-type" => type }, html.each_line]
      when "/stream-sized" then [200, { "content-type" => type, "content-length" => html.bytesize.to_s }, html.each_line]
      when "/partial" then [200, { "content-type" => type, "rack.hijack" => ->(io) { io.write(html); io.close } }, []]
      when "/events"
        # One event, then nothing until the test creates the file named in
        # the query: the first event must reach the client before that.
        go = env["QUERY_STRING"]
        events = Enumerator.new do |y|
          y << "data: one\n\n"
          deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 10
          sleep 0.01 until File.exist?(go) || Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
          y << "data: two\n\n"
        end
        [200, { "content-type" => "text/event-stream" }, events]
      else [200, { "content-type" => "text/plain" }, ["?"]]
      end
    }
  RUBY

  def get(client, path, headers = {})
    client.write(get_request(path, headers))
    client.read_response
  end

  def test_gzip_and_brotli_by_accept_encoding
    # Rack 2's Lint hides the Array body, whose known length decides compression.
    with_server(APP, args: ["--compress"], lint: LINT_FORWARDS_BODY) do |server|
      client = conn(server)
      gz = get(client, "/html", "Accept-Encoding" => "gzip, deflate")
      assert_equal ["gzip", gz.body.bytesize.to_s, "Cookie, accept-encoding", 'W/"v1"'],
                   [gz["content-encoding"], gz["content-length"], gz["vary"], gz["etag"]]
      assert_operator gz.body.bytesize, :<, HTML.bytesize / 5
      assert_equal HTML, Zlib.gunzip(gz.body).force_encoding(Encoding::UTF_8)
      br = get(client, "/html", "Accept-Encoding" => "gzip, deflate, br")
      assert_equal ["br", br.body.bytesize.to_s], [br["content-encoding"], br["content-length"]]
      assert_operator br.body.bytesize, :<, HTML.bytesize / 5
      assert_equal "gzip", get(client, "/html", "Accept-Encoding" => "br;q=0.1, gzip;q=0.9")["content-encoding"]
      # curl decodes brotli: the bytes are the page.
      out, err, status = curl("--compressed", "-H", "accept-encoding: br", "http://127.0.0.1:#{server.port}/html")
      assert status.success?, err
      assert_equal HTML, out
      json = get(client, "/json", "Accept-Encoding" => "gzip")
      assert_equal ["gzip", "accept-encoding"], [json["content-encoding"], json["vary"]]
      # Not accepted: sent plain, still saying the answer varies.
      [{}, { "Accept-Encoding" => "identity" }, { "Accept-Encoding" => "gzip;q=0, br;q=0" }].each do |headers|
        plain = get(client, "/html", headers)
        assert_equal [nil, HTML.bytesize.to_s, "Cookie, accept-encoding", '"v1"'],
                     [plain["content-encoding"], plain["content-length"], plain["vary"], plain["etag"]], headers.inspect
        assert_equal HTML, plain.body.force_encoding(Encoding::UTF_8)
      end
      client.write(request("HEAD", "/html", { "Accept-Encoding" => "gzip" }))
      head = client.read_response(head: true)
      assert_equal [200, nil], [head.status, head["content-encoding"]], "HEAD is left as the app made it"
      assert_equal "?", get(client, "/other").body, "the connection is in step"
    ensure
      client&.close
    end
  end

  # Decoded by Debian's zstd tool (the Makefile installs it).
  def unzstd(bytes)
    out, err, status = Open3.capture3("zstd", "-d", "-c", stdin_data: bytes, binmode: true)
    assert status.success?, err
    out.force_encoding(Encoding::UTF_8)
  end

  def test_zstd_whole_and_streamed
    # Rack 2's Lint hides the Array body, whose known length decides compression.
    with_server(APP, args: ["--compress"], lint: LINT_FORWARDS_BODY) do |server|
      client = conn(server)
      whole = get(client, "/html", "Accept-Encoding" => "gzip;q=0.8, zstd")
      assert_equal ["zstd", whole.body.bytesize.to_s, "Cookie, accept-encoding", 'W/"v1"'],
                   [whole["content-encoding"], whole["content-length"], whole["vary"], whole["etag"]]
      assert_operator whole.body.bytesize, :<, HTML.bytesize / 5
      assert_equal HTML, unzstd(whole.body)
      assert_equal "zstd", get(client, "/html", "Accept-Encoding" => "gzip, zstd")["content-encoding"], "zstd before gzip on a tie"
      assert_equal "br", get(client, "/html", "Accept-Encoding" => "gzip, zstd, br")["content-encoding"], "brotli first on a tie"
      streamed = get(client, "/stream", "Accept-Encoding" => "zstd")
      assert_equal ["zstd", nil], [streamed["content-encoding"], streamed["content-length"]]
      assert_equal HTML, unzstd(streamed.body), "the stream's frame is finished at the end"
    ensure
      client&.close
    end
  end

  def test_responses_that_are_left_alone
    # Rack 2's Lint hides the Array body, whose known length decides compression.
    with_server(APP, args: ["--compress"], lint: LINT_FORWARDS_BODY) do |server|
      client = conn(server)
      { "/png" => "an incompressible type", "/small" => "under compress_min_size",
        "/encoded" => "already encoded by the app", "/no-transform" => "no-transform",
        "/missing" => "not a 200", "/stream-sized" => "a streamed body with its own content-length" }.each do |path, why|
        response = get(client, path, "Accept-Encoding" => "gzip, br")
        expected = path == "/encoded" ? "identity-ish" : nil
        assert_equal [expected, false], [response["content-encoding"], response["vary"].to_s.include?("accept-encoding")], why
      end
      # The close ends these bodies: an HTTP/1.0 stream, and a partial
      # hijack, where the app writes to the socket itself.
      { "/stream" => "HTTP/1.0", "/partial" => "HTTP/1.1" }.each do |path, version|
        other = conn(server)
        other.write(request("GET", path, { "Accept-Encoding" => "gzip" }, version: version))
        response = other.read_response
        assert_equal [nil, HTML], [response["content-encoding"], response.body.force_encoding(Encoding::UTF_8)], path
        other.close
      end
    ensure
      client&.close
    end
  end

  def test_streamed_bodies_are_compressed_as_they_stream
    # Rack 2's Lint hides the Array body, whose known length decides compression.
    with_server(APP, args: ["--compress"], lint: LINT_FORWARDS_BODY) do |server|
      client = conn(server)
      gz = get(client, "/stream", "Accept-Encoding" => "gzip")
      assert_equal %w[gzip chunked accept-encoding], [gz["content-encoding"], gz["transfer-encoding"], gz["vary"]]
      assert_nil gz["content-length"]
      assert_equal HTML, Zlib.gunzip(gz.body).force_encoding(Encoding::UTF_8)
      assert_operator gz.body.bytesize, :<, HTML.bytesize / 5
      plain = get(client, "/stream")
      assert_equal [nil, "accept-encoding"], [plain["content-encoding"], plain["vary"]]
      assert_equal HTML, plain.body.force_encoding(Encoding::UTF_8)
      client.write(request("HEAD", "/stream", { "Accept-Encoding" => "gzip" }))
      assert_nil client.read_response(head: true)["content-encoding"], "HEAD: no body to encode"
      out, err, status = curl("--compressed", "-H", "accept-encoding: br", "http://127.0.0.1:#{server.port}/stream")
      assert status.success?, err
      assert_equal HTML, out, "brotli, streamed"
    ensure
      client&.close
    end
  end

  # Each batch is flushed out of the encoder: an event reaches the client
  # while the app is still waiting to write the next one.
  def test_a_streamed_event_is_readable_before_the_next_is_written
    Dir.mktmpdir do |dir|
      go = File.join(dir, "go")
      # Rack 2's Lint hides the Array body, whose known length decides compression.
      with_server(APP, args: ["--compress"], lint: LINT_FORWARDS_BODY) do |server|
        client = conn(server, timeout: 5)
        client.write(get_request("/events?#{go}", "Accept-Encoding" => "gzip"))
        head = client.read_until("\r\n\r\n")
        assert_match(/^content-encoding: gzip$/i, head)
        inflater = Zlib::Inflate.new(Zlib::MAX_WBITS + 16)
        seen = +""
        until seen.include?("data: one\n\n")
          size = Integer(client.read_until("\r\n"), 16)
          refute_equal 0, size, "the body ended before the first event"
          seen << inflater.inflate(client.read_exact(size))
          client.read_exact(2)
        end
        assert_equal "data: one\n\n", seen, "only the first event so far"
        File.write(go, "")
        rest = +"".b
        loop do
          size = Integer(client.read_until("\r\n"), 16)
          break if size.zero?

          rest << client.read_exact(size)
          client.read_exact(2)
        end
        seen << inflater.inflate(rest) << inflater.finish
        assert_equal "data: one\n\ndata: two\n\n", seen
        assert inflater.finished?, "the gzip stream was finished (trailer sent)"
      ensure
        client&.close
      end
    end
  end

  def test_settings_and_off_by_default
    with_server(APP) do |server|
      response = server.get("/html", "Accept-Encoding" => "gzip")
      assert_nil response["content-encoding"]
      assert_equal HTML.bytesize, response.body.bytesize
    end
    # Rack 2's Lint hides the Array body, whose known length decides compression.
    with_server(APP, args: ["--compress", "--compress-min-size", "5", "--compress-types", "image/png, text/x-none"], lint: LINT_FORWARDS_BODY) do |server|
      client = conn(server)
      assert_equal "gzip", get(client, "/png", "Accept-Encoding" => "gzip")["content-encoding"]
      assert_nil get(client, "/html", "Accept-Encoding" => "gzip")["content-encoding"], "text/ is no longer listed"
    ensure
      client&.close
    end
  end

  def test_http2_responses_are_compressed_too
    # Rack 2's Lint hides the Array body, whose known length decides compression.
    with_server(APP, args: ["--compress", "-b", ssl_bind], lint: LINT_FORWARDS_BODY) do |server|
      out, err, status = curl("--http2", "--cacert", certs.path("ca.pem"), "-i", "-H", "accept-encoding: gzip",
                              "https://localhost:#{ssl_port(server)}/html")
      assert status.success?, err
      head, body = out.b.split("\r\n\r\n", 2)
      assert_match(%r{\AHTTP/2 200}, head)
      assert_match(/^content-encoding: gzip\r$/, head)
      assert_equal HTML, Zlib.gunzip(body).force_encoding(Encoding::UTF_8)
      out, err, status = curl("--http2", "--cacert", certs.path("ca.pem"), "-i", "-H", "accept-encoding: gzip",
                              "https://localhost:#{ssl_port(server)}/stream")
      assert status.success?, err
      head, body = out.b.split("\r\n\r\n", 2)
      assert_match(/^content-encoding: gzip\r?$/, head)
      assert_equal HTML, Zlib.gunzip(body).force_encoding(Encoding::UTF_8), "a streamed body over HTTP/2"
    end
  end
end
