# frozen_string_literal: true

require "tls/support"

# ssl:// binds over HTTP/1.1: Net::HTTP and curl against a certificate the
# test made, the env a TLS request gets, TLS over a UNIX socket, and the
# plain bind beside it unchanged.
class TlsHttp1Test < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::TlsSupport

  def test_net_http_over_tls_get_and_post_with_the_env_of_an_https_request
    with_server(ENV_APP, args: ["-b", ssl_bind]) do |server|
      port = ssl_port(server)
      https(port).start do |http|
        report = JSON.parse(http.get("/a/b?x=1").body)
        assert_equal %w[https on HTTP/1.1], report.values_at("scheme", "https", "protocol")
        assert_equal [port.to_s, "/a/b", "x=1"], report.values_at("server_port", "path", "query")
        # Full hijack is bridged over TLS HTTP/1.1, so both are on.
        assert_equal [true, true], report.values_at("hijack", "hijack_callable")
        # Same connection, a body this time.
        body = Random.new(7).bytes(300_000)
        report = JSON.parse(http.post("/up", body, "content-type" => "application/octet-stream").body)
        assert_equal [body.bytesize, Digest::SHA256.hexdigest(body)], report.values_at("size", "sha256")
      end
      # The plain bind of the same server still speaks plain HTTP.
      report = JSON.parse(server.get("/").body)
      assert_equal ["http", nil, true, true], report.values_at("scheme", "https", "hijack", "hijack_callable")
    end
  end

  def test_curl_http1_and_http2_with_tls_1_2_and_1_3
    with_server(ENV_APP, args: ["-b", ssl_bind]) do |server|
      url = "https://localhost:#{ssl_port(server)}/c?y=2"
      [["--http1.1", "--tlsv1.3", "HTTP/1.1"], ["--http2", "--tlsv1.3", "HTTP/2"],
       ["--http1.1", "--tls-max", "1.2", "HTTP/1.1"], ["--http2", "--tls-max", "1.2", "HTTP/2"]].each do |*flags, protocol|
        out, err, status = curl("--cacert", certs.path("ca.pem"), *flags, "-w", "\n%{http_version} %{http_code}", url)
        assert status.success?, "curl #{flags.join(" ")}: #{err}"
        json, summary = out.split("\n")
        assert_equal "#{protocol.delete_prefix("HTTP/")} 200", summary, flags.join(" ")
        assert_equal ["https", protocol, "y=2", "localhost:#{ssl_port(server)}"],
                     JSON.parse(json).values_at("scheme", "protocol", "query", "host")
      end
    end
  end

  # rustls takes a response's plaintext before the socket has taken all the
  # records; what is left must still go out before the connection waits
  # for the next request, or a client reading slowly never sees the end.
  def test_large_and_streamed_responses_arrive_whole_on_a_kept_alive_connection
    app = <<~'RUBY'
      run lambda { |env|
        n = env["QUERY_STRING"].to_i
        if env["PATH_INFO"] == "/stream"
          body = Enumerator.new { |y| n.times { |i| y << (i % 10).to_s * 100_000 } }
          [200, { "content-type" => "text/plain" }, body]
        else
          [200, { "content-type" => "application/octet-stream" }, [Random.new(n).bytes(n)]]
        end
      }
    RUBY
    with_server(app, args: ["-b", ssl_bind]) do |server|
      https(ssl_port(server)).start do |http|
        3.times do |round|
          size = 6_000_000 + round
          received = +"".b
          http.request_get("/big?#{size}") do |response|
            response.read_body do |part|
              received << part
              sleep 0.001 if received.bytesize < 2_000_000 # a slow reader at first
            end
          end
          expected = Random.new(size).bytes(size)
          assert_equal [expected.bytesize, Digest::SHA256.hexdigest(expected)],
                       [received.bytesize, Digest::SHA256.hexdigest(received)], "round #{round}"
          streamed = http.get("/stream?30").body
          expected = Array.new(30) { |i| (i % 10).to_s * 100_000 }.join
          assert_equal [expected.bytesize, Digest::SHA256.hexdigest(expected)],
                       [streamed.bytesize, Digest::SHA256.hexdigest(streamed)], "streamed, round #{round}"
        end
      end
    end
  end

  def test_tls_over_a_unix_socket
    in_tmpdir do |dir|
      sock = File.join(dir, "tls.sock")
      bind = "unix://#{sock}?ssl=true&cert=#{certs.path("server.pem")}&key=#{certs.path("server.key")}"
      with_server(ENV_APP, args: ["-b", bind]) do
        out, err, status = curl("--unix-socket", sock, "--cacert", certs.path("ca.pem"), "--http1.1",
                                "https://localhost/u")
        assert status.success?, err
        assert_equal %w[https on /u], JSON.parse(out).values_at("scheme", "https", "path")
        # A plaintext request on the TLS socket is not served.
        plain = UNIXSocket.new(sock)
        plain.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        refute_match(/HTTP\/1\.1 200/, plain.read.to_s)
        plain.close
      end
    end
  end

  def test_boot_errors_name_the_file_on_one_line_and_exit_1
    in_tmpdir do |dir|
      garbage = write_file(dir, "garbage.key", "not a key\n")
      missing = File.join(dir, "missing.pem")
      cases = {
        ssl_bind(cert: missing) => [missing, /cannot read certificate/],
        ssl_bind(key: garbage) => [garbage, /no PEM private key/],
        ssl_bind(key: dir) => [dir, /key/],
        ssl_bind(cert: certs.path("server2.pem")) => [certs.path("server2.pem"), /does not go with certificate/],
        "#{ssl_bind}&verify_mode=force_peer" => ["ca=PATH", /need ca=PATH/],
        "#{ssl_bind}&keystore=x" => ["keystore", /JRuby/],
        "ssl://127.0.0.1:0" => ["cert=PATH", /needs cert=PATH and key=PATH/]
      }
      cases.each do |bind, (named, reason)|
        _out, err, status = run_tsubame("-b", bind, write_file(dir, "config.ru", "run ->(_) { [200, {}, []] }"))
        assert_equal 1, status.exitstatus, bind
        lines = err.lines.reject { |l| l.start_with?("!") && l.include?("self-signed") }
        assert_equal 1, lines.size, "one line for #{bind}: #{err}"
        assert_includes lines.first, named
        assert_match reason, lines.first
      end
    end
  end

  def test_partial_hijack_works_over_tls
    app = <<~RUBY
      run lambda { |env|
        raise "partial hijack not announced" unless env["rack.hijack?"]

        [200, { "rack.hijack" => ->(io) { io.write("raw over tls"); io.close } }, []]
      }
    RUBY
    with_server(app, args: ["-b", ssl_bind]) do |server|
      response = https(ssl_port(server)).start { |http| http.get("/") }
      assert_equal ["200", "raw over tls"], [response.code, response.body]
    end
  end

  # Full hijack over TLS HTTP/1.1: the app gets a UNIX socket the engine
  # bridges to the TLS stream (what ActionCable needs for wss://). What the
  # app writes arrives encrypted, what the client sends after the head
  # reaches the app, and the app's close ends the TLS connection.
  def test_full_hijack_over_tls_is_bridged_both_ways
    app = <<~'RUBY'
      run lambda { |env|
        io = env["rack.hijack"].call
        io.write("HTTP/1.1 101 Switching Protocols\r\nupgrade: echo\r\nconnection: upgrade\r\n\r\n")
        line = io.gets
        io.write("echo #{env["rack.url_scheme"]} #{io.class}: #{line}")
        io.close
        [-1, {}, []]
      }
    RUBY
    with_server(app, args: ["-b", ssl_bind]) do |server|
      context = OpenSSL::SSL::SSLContext.new
      context.set_params(ca_file: certs.path("ca.pem"), verify_mode: OpenSSL::SSL::VERIFY_PEER)
      tcp = TCPSocket.new("127.0.0.1", ssl_port(server))
      tls = OpenSSL::SSL::SSLSocket.new(tcp, context)
      tls.hostname = "localhost"
      tls.sync_close = true
      tls.connect
      tls.write("GET / HTTP/1.1\r\nHost: localhost\r\nConnection: upgrade\r\nUpgrade: echo\r\n\r\n")
      head = +""
      head << tls.readpartial(1024) until head.include?("\r\n\r\n")
      assert_match(%r{\AHTTP/1.1 101 }, head)
      tls.write("hello through the bridge\n")
      rest = head.split("\r\n\r\n", 2).last
      Timeout.timeout(10) do
        loop { rest << tls.readpartial(1024) }
      rescue EOFError
        nil
      end
      assert_equal "echo https Tsubame::HijackedSocket: hello through the bridge\n", rest
    ensure
      tls&.close
    end
  end
end
