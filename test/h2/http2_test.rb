# frozen_string_literal: true

require "tls/support"
require "digest"

# HTTP/2: h2 by ALPN on ssl:// binds and h2c with prior knowledge, driven
# with curl. Every body is checked byte for byte.
class Http2Test < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::TlsSupport

  # /stream/N streams N chunks of 1000 bytes (chunk i is the digit i % 10),
  # /burst/N streams N chunks of assorted sizes with no pause (Burst.piece),
  # /declared/L/N the same with a content-length of L, /blob/N answers N
  # pseudo-random bytes seeded by N, anything else reports the env and the
  # request body's digest.
  APP = <<~'RUBY'
    require "json"
    require "digest"
    class Chunks
      def initialize(count)
        @count = count
      end

      def each
        @count.times { |i| sleep 0.002; yield((i % 10).to_s * 1000) }
      end
    end

    class Burst
      def self.piece(i) = ((i % 26) + 97).chr * (((i * 7919) % 3001) + 1)

      def initialize(count)
        @count = count
      end

      def each
        @count.times { |i| yield Burst.piece(i) }
      end
    end

    run lambda { |env|
      case env["PATH_INFO"]
      when %r{\A/stream/(\d+)\z} then [200, { "content-type" => "text/plain" }, Chunks.new($1.to_i)]
      when %r{\A/burst/(\d+)\z} then [200, { "content-type" => "text/plain" }, Burst.new($1.to_i)]
      when %r{\A/declared/(\d+)/(\d+)\z}
        [200, { "content-type" => "text/plain", "content-length" => $1 }, Burst.new($2.to_i)]
      when %r{\A/blob/(\d+)\z} then [200, { "content-type" => "application/octet-stream" }, [Random.new($1.to_i).bytes($1.to_i)]]
      else
        body = env["rack.input"].read
        report = {
          "scheme" => env["rack.url_scheme"], "https" => env["HTTPS"], "protocol" => env["SERVER_PROTOCOL"],
          "method" => env["REQUEST_METHOD"], "path" => env["PATH_INFO"], "query" => env["QUERY_STRING"],
          "host" => env["HTTP_HOST"], "server_name" => env["SERVER_NAME"], "server_port" => env["SERVER_PORT"],
          "hijack" => env["rack.hijack?"], "hijack_callable" => !env["rack.hijack"].nil?,
          "content_length" => env["CONTENT_LENGTH"], "size" => body.bytesize,
          "sha256" => Digest::SHA256.hexdigest(body), "cookie" => env["HTTP_COOKIE"]
        }
        [200, { "content-type" => "application/json", "connection" => "keep-alive", "x-app" => "yes" },
         [JSON.generate(report)]]
      end
    }
  RUBY

  def h2(*args)
    curl("--http2", "--cacert", certs.path("ca.pem"), *args)
  end

  def test_pseudo_headers_and_env_of_an_http2_request
    with_server(APP, args: ["-b", ssl_bind]) do |server|
      port = ssl_port(server)
      out, err, status = h2("-i", "-H", "cookie: a=1", "-H", "cookie: b=2", "https://localhost:#{port}/p/q?r=s")
      assert status.success?, err
      head, body = out.split("\r\n\r\n", 2)
      assert_match(%r{\AHTTP/2 200}, head)
      assert_match(/^x-app: yes/, head)
      refute_match(/^connection:/i, head, "connection-specific headers are not sent over HTTP/2")
      report = JSON.parse(body)
      assert_equal ["https", "on", "HTTP/2", "GET", "/p/q", "r=s"],
                   report.values_at("scheme", "https", "protocol", "method", "path", "query")
      assert_equal ["localhost:#{port}", "localhost", port.to_s],
                   report.values_at("host", "server_name", "server_port")
      # Rack 3's rack.hijack? announces partial hijack only (it works here).
      assert_equal [!RACK2, false], report.values_at("hijack", "hijack_callable")
      assert_equal "a=1; b=2", report["cookie"]
    end
  end

  def test_request_bodies_with_and_without_content_length_arrive_whole
    with_server(APP, args: ["-b", ssl_bind]) do |server|
      url = "https://localhost:#{ssl_port(server)}/upload"
      in_tmpdir do |dir|
        [0, 1, 70_000, 3_000_000].each do |size|
          path = File.join(dir, "body-#{size}")
          File.binwrite(path, Random.new(size).bytes(size))
          expected = [size, Digest::SHA256.file(path).hexdigest]
          out, err, status = h2("--data-binary", "@#{path}", url)
          assert status.success?, err
          report = JSON.parse(out)
          assert_equal expected, report.values_at("size", "sha256"), "#{size} bytes with content-length"
          assert_equal size.to_s, report["content_length"]
          # Chunked upload from curl becomes DATA frames without a length.
          out, err, status = h2("-H", "transfer-encoding: chunked", "--data-binary", "@#{path}", url)
          assert status.success?, err
          report = JSON.parse(out)
          assert_equal expected, report.values_at("size", "sha256"), "#{size} bytes without content-length"
          assert_equal size.to_s, report["content_length"]
        end
      end
    end
  end

  def test_streaming_and_large_responses_byte_for_byte
    with_server(APP, args: ["-b", ssl_bind]) do |server|
      base = "https://localhost:#{ssl_port(server)}"
      out, err, status = h2("#{base}/stream/50")
      assert status.success?, err
      assert_equal Array.new(50) { |i| (i % 10).to_s * 1000 }.join, out
      # Larger than every flow-control window: the server must wait for
      # WINDOW_UPDATEs rather than overrun the client.
      out, err, status = h2("#{base}/blob/5000000")
      assert status.success?, err
      assert_equal Random.new(5_000_000).bytes(5_000_000), out.b
    end
  end

  # Chunks the app yields back to back are taken from the channel together
  # and small ones merged into DATA frames (h2.rs `send_stream`); what the
  # client gets must be the same bytes in the same order, within the
  # declared length, also when small windows make the server wait.
  def test_bursts_of_small_chunks_arrive_whole_in_order_and_within_their_length
    burst = ->(n) { Array.new(n) { |i| ((i % 26) + 97).chr * (((i * 7919) % 3001) + 1) }.join }
    with_server(APP, args: ["-b", ssl_bind]) do |server|
      port = ssl_port(server)
      base = "https://localhost:#{port}"
      assert_equal([3000, 1, 37].map { |n| digest_line("/burst/#{n}", burst.call(n)) },
                   parallel_get(server, [3000, 1, 37].map { |n| "/burst/#{n}" }))
      # The app streams more than its content-length: the client gets
      # exactly that many bytes and a complete response.
      out, err, status = h2("#{base}/declared/100000/500")
      assert status.success?, err
      assert_equal burst.call(500)[0, 100_000], out
      # Fewer than declared: the stream is reset, not ended as if complete.
      _out, _err, status = h2("#{base}/declared/#{burst.call(20).bytesize + 1}/20")
      refute status.success?, "a body shorter than its content-length must not look complete"
      # 16 KiB windows: every merged frame waits for WINDOW_UPDATEs.
      out, err, status = Open3.capture3("nghttp", "-w", "14", "-W", "14", "https://127.0.0.1:#{port}/burst/3000")
      assert status.success?, err
      assert_equal burst.call(3000), out
    end
  end

  # Fetches `paths` as concurrent streams of one connection with
  # parallel_get.py (it says why not curl): [path, length, sha256] each.
  def parallel_get(server, paths)
    out, err, status = Open3.capture3("/usr/bin/python3", File.join(__dir__, "parallel_get.py"),
                                      ssl_port(server).to_s, *paths)
    assert status.success?, err
    lines = out.lines.map(&:split)
    assert_equal ["connections", "1"], lines.pop, "all streams share one connection"
    lines
  end

  def digest_line(path, body)
    [path, body.bytesize.to_s, Digest::SHA256.hexdigest(body)]
  end

  def test_many_concurrent_streams_on_one_connection
    with_server(APP, args: ["-b", ssl_bind, "-t", "4:4"]) do |server|
      # Sixty whole bodies and twenty streamed ones at once, each checked
      # byte for byte.
      sizes = Array.new(60) { |i| 1000 + (i * 7919) }
      assert_equal sizes.map { |n| digest_line("/blob/#{n}", Random.new(n).bytes(n)) },
                   parallel_get(server, sizes.map { |n| "/blob/#{n}" })
      streamed = Array.new(20) { |i| 10 + i }
      assert_equal streamed.map { |n| digest_line("/stream/#{n}", Array.new(n) { |k| (k % 10).to_s * 1000 }.join) },
                   parallel_get(server, streamed.map { |n| "/stream/#{n}" })
    end
  end

  def test_stream_limit_and_windows_are_advertised_as_configured
    in_tmpdir do |dir|
      config = write_file(dir, "h2.rb", <<~RUBY)
        h2_max_concurrent_streams 7
        h2_initial_window_size 131_072
        h2_initial_connection_window_size 1_000_000
      RUBY
      with_server(APP, args: ["-b", ssl_bind, "-C", config]) do |server|
        out, status = Open3.capture2e("nghttp", "-nv", "https://127.0.0.1:#{ssl_port(server)}/")
        assert status.success?, out
        settings = out[/recv SETTINGS frame.*?\n(?:\s+[\[(].*\n)+/] or flunk out
        assert_includes settings, "[SETTINGS_MAX_CONCURRENT_STREAMS(0x03):7]"
        assert_includes settings, "[SETTINGS_INITIAL_WINDOW_SIZE(0x04):131072]"
        assert_match(/recv WINDOW_UPDATE frame <length=4, flags=0x00, stream_id=0>\n\s+\(window_size_increment=#{1_000_000 - 65_535}\)/, out)
      end
    end
  end

  def test_h2c_prior_knowledge_and_http1_on_the_same_bind
    with_server(APP, args: ["--h2c"]) do |server|
      out, err, status = curl("--http2-prior-knowledge", "-i", "http://127.0.0.1:#{server.port}/h?c=1")
      assert status.success?, err
      head, body = out.split("\r\n\r\n", 2)
      assert_match(%r{\AHTTP/2 200}, head)
      assert_equal %w[http HTTP/2 c=1], JSON.parse(body).values_at("scheme", "protocol", "query")
      assert_nil JSON.parse(body)["https"]
      report = JSON.parse(server.get("/h1").body)
      assert_equal ["HTTP/1.1", true], report.values_at("protocol", "hijack")
    end
  end

  def test_limits_answer_per_stream_and_the_connection_goes_on
    with_server(APP, args: ["-b", ssl_bind, "--max-body-size", "1000"]) do |server|
      base = "https://localhost:#{ssl_port(server)}"
      in_tmpdir do |dir|
        big = write_file(dir, "big", "x" * 5000)
        args = ["-o", File.join(dir, "a"), "-w", "%{http_code} %{num_connects}\n", "--data-binary", "@#{big}", "#{base}/up",
                "--next", "--http2", "--cacert", certs.path("ca.pem"), "-o", File.join(dir, "b"),
                "-w", "%{http_code} %{num_connects}\n", "#{base}/after"]
        out, err, status = h2(*args)
        assert status.success?, err
        assert_equal ["413 1", "200 0"], out.lines.map(&:strip), "the 413 does not cost the connection: #{err}"
        assert_match(/larger than the configured limit/, File.read(File.join(dir, "a")))
        assert_equal "/after", JSON.parse(File.read(File.join(dir, "b")))["path"]
      end
    end
  end

  def test_a_graceful_stop_lets_open_streams_finish
    app = <<~'RUBY'
      run lambda { |env|
        File.write(ENV["MARK"], "") if ENV["MARK"]
        sleep 1
        [200, { "content-type" => "text/plain" }, ["finished #{env["SERVER_PROTOCOL"]}"]]
      }
    RUBY
    in_tmpdir do |dir|
      mark = File.join(dir, "mark")
      server = Tsubame::TestServer.new(app, args: ["-b", ssl_bind], env: { "MARK" => mark })
      begin
        client = Thread.new { h2("https://localhost:#{ssl_port(server)}/") }
        Timeout.timeout(10) { sleep 0.01 until File.exist?(mark) }
        status = server.stop("TERM")
        out, err, curl_status = client.value
        assert curl_status.success?, err
        assert_equal "finished HTTP/2", out
        assert_equal 0, status.exitstatus
      ensure
        server.kill
      end
    end
  end

  def test_http2_can_be_turned_off_and_then_alpn_picks_http1
    with_server(APP, args: ["-b", ssl_bind, "--no-http2"]) do |server|
      out, err, status = h2("-w", "\n%{http_version}", "https://localhost:#{ssl_port(server)}/")
      assert status.success?, err
      json, version = out.split("\n")
      assert_equal "1.1", version
      assert_equal "HTTP/1.1", JSON.parse(json)["protocol"]
    end
  end

  def test_health_probe_and_shedding_apply_per_stream
    app = <<~'RUBY'
      run ->(env) { sleep 1 if env["PATH_INFO"] == "/slow"; [200, {}, ["done"]] }
    RUBY
    args = ["-b", ssl_bind, "-t", "1:1", "--max-queue", "1", "--health-check-path", "/healthz"]
    with_server(app, args: args) do |server|
      base = "https://localhost:#{ssl_port(server)}"
      out, err, status = h2("-w", "\n%{http_code}", "#{base}/healthz")
      assert status.success?, err
      assert_match(/"status":"ok"/, out)
      # One thread busy, one request queued: the rest get 503 at once.
      in_tmpdir do |dir|
        args = Array.new(6) { |i| ["-o", File.join(dir, "r#{i}"), "-w", "%{http_code}\n", "#{base}/slow"] }.flatten
        out, err, status = h2("--parallel", "--parallel-max", "6", *args)
        assert status.success?, err
        codes = out.lines.map(&:to_i).sort
        assert_operator codes.count(200), :>=, 1
        assert_operator codes.count(503), :>=, 1, codes.inspect
        assert_equal 6, codes.count { |c| [200, 503].include?(c) }, codes.inspect
      end
    end
  end
end
