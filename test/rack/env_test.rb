# frozen_string_literal: true

require "rack/support"

# The env an app gets, checked against the Rack SPEC: by the Rack in use's
# own Rack::Lint, and key by key over real sockets.
class RackEnvTest < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::RackSupport

  # TestServer wraps it in Rack::Lint, which raises on any SPEC violation;
  # the server turns that into a 500 (or, once the body has started, a cut
  # connection), so exact statuses and bodies prove there was none. Only
  # what both SPECs allow: no rewind (Rack 3's input need not have it).
  LINT_APP = <<~'RUBY'
    streamed = Class.new do
      def each
        yield "one,"
        yield "two,"
        yield "three"
      end
    end

    app = lambda do |env|
      case env["PATH_INFO"]
      when "/query"
        text = "#{env["REQUEST_METHOD"]} #{env["PATH_INFO"]}?#{env["QUERY_STRING"]}"
        [200, { "content-type" => "text/plain", "content-length" => text.bytesize.to_s }, [text]]
      when "/post"
        input = env["rack.input"]
        first = input.read(4)
        rest = input.read
        at_eof = input.read(1).inspect
        text = "#{env["CONTENT_TYPE"]}|#{env["CONTENT_LENGTH"]}|#{first}|#{rest}|#{at_eof}"
        [200, { "content-type" => "text/plain", "content-length" => text.bytesize.to_s }, [text]]
      when "/post-lines"
        input = env["rack.input"]
        first = input.gets
        lines = []
        input.each { |line| lines << line }
        text = "#{first.inspect}|#{lines.inspect}|#{input.gets.inspect}"
        [200, { "content-type" => "text/plain", "content-length" => text.bytesize.to_s }, [text]]
      when "/head"
        [200, { "content-type" => "text/plain", "content-length" => "5" }, []]
      when "/stream"
        [200, { "content-type" => "text/plain" }, streamed.new]
      when "/errors"
        env["rack.errors"].puts("lint-errors-marker")
        env["rack.errors"].write("lint-errors-write\n")
        env["rack.errors"].flush
        [200, { "content-type" => "text/plain", "content-length" => "2" }, ["ok"]]
      else
        [404, { "content-type" => "text/plain", "content-length" => "9" }, ["not found"]]
      end
    end
    run app
  RUBY

  def test_lint_get_with_query
    with_server(LINT_APP) do |s|
      res = s.get("/query?a=1&b=two")
      assert_equal "200", res.code, res.body
      assert_equal "GET /query?a=1&b=two", res.body
      assert_equal "20", res["content-length"]
      # Lint is really running: a keep-alive second request on the same
      # connection is checked too.
      http = s.http
      assert_equal "GET /query?", http.get("/query").body
      assert_equal "404", http.get("/nope").code
      refute_match(/LintError/, s.stderr)
    end
  end

  def test_lint_post_with_body
    with_server(LINT_APP) do |s|
      body = "line one\nline two\nlast"
      res = s.http.post("/post", body, "Content-Type" => "text/x-lines")
      assert_equal "200", res.code, s.stderr
      assert_equal "text/x-lines|#{body.bytesize}|line| one\nline two\nlast|nil", res.body
      res = s.http.post("/post-lines", body, "Content-Type" => "text/x-lines")
      assert_equal "200", res.code, s.stderr
      assert_equal "\"line one\\n\"|[\"line two\\n\", \"last\"]|nil", res.body
      refute_match(/LintError/, s.stderr)
    end
  end

  def test_lint_head
    with_server(LINT_APP) do |s|
      reply = exchange(s, request_bytes("HEAD", "/head", "Connection" => "close"), head: true)
      assert_equal "HTTP/1.1 200 OK", reply.status_line, s.stderr
      assert_equal "5", reply["content-length"]
      assert_equal "", reply.body, "HEAD gets no body"
      assert reply.closed
      refute_match(/LintError/, s.stderr)
    end
  end

  def test_lint_streamed_response
    with_server(LINT_APP) do |s|
      reply = exchange(s, get_bytes("/stream", "Connection" => "close"))
      assert_equal 200, reply.status, s.stderr
      assert_equal "chunked", reply["transfer-encoding"]
      assert_equal "one,two,three", reply.body
      assert reply.complete, "terminating chunk sent"
      refute_match(/LintError/, s.stderr)
    end
  end

  def test_lint_rack_errors
    with_server(LINT_APP) do |s|
      res = s.get("/errors")
      assert_equal "200", res.code, s.stderr
      assert_equal "ok", res.body
      stderr = wait_until { s.stderr.then { |text| text if text.include?("lint-errors-write") } } || s.stderr
      assert_includes stderr, "lint-errors-marker\n"
      assert_includes stderr, "lint-errors-write\n"
      refute_match(/LintError/, stderr)
    end
  end

  # Returns the env as JSON: strings, booleans, integers and arrays of them
  # as they are; anything else as its class name plus the IO-ish methods it
  # has. rack.input is read in full into "body".
  ENV_APP = <<~'RUBY'
    require "json"
    run lambda { |env|
      out = {}
      env.each do |key, value|
        out[key] =
          case value
          when String, true, false, nil, Integer then value
          when Array then value.all? { |v| v.is_a?(String) || v.is_a?(Integer) } ? value : value.class.name
          else
            "#{value.class.name}(#{%i[puts write flush gets read each rewind call].select { |m| value.respond_to?(m) }.join(",")})"
          end
      end
      out["body"] = env["rack.input"].read
      out["errors_is_stderr"] = env["rack.errors"].equal?($stderr)
      out["env_frozen"] = env.frozen?
      out["env_class"] = env.class.name
      out["encodings"] = env.select { |k, v| k.is_a?(String) && !k.include?(".") && v.is_a?(String) }
                            .map { |_, v| v.encoding.name }.uniq
      text = JSON.generate(out)
      [200, { "content-type" => "application/json", "content-length" => text.bytesize.to_s }, [text]]
    }
  RUBY

  def env_for(server, bytes)
    reply = exchange(server, bytes)
    assert_equal 200, reply.status, "#{reply.raw}\n#{server.stderr}"
    assert reply.complete
    JSON.parse(reply.body)
  end

  def test_env_for_a_get
    # Reports the server's own rack.input, rack.errors and rack.hijack, which Lint would wrap.
    with_server(ENV_APP, lint: false) do |s|
      env = env_for(s, "GET /a/b%20c?x=1&y=%20z HTTP/1.1\r\nHost: example.com:8080\r\n" \
                       "X-Custom-Thing: hello\r\nX-Multi: a\r\nX-Multi: b\r\nCookie: c1=1\r\nCookie: c2=2\r\n" \
                       "Accept: text/plain\r\nConnection: close\r\n\r\n")
      assert_equal "GET", env["REQUEST_METHOD"]
      assert_equal "", env["SCRIPT_NAME"]
      assert_equal "/a/b%20c", env["PATH_INFO"], "PATH_INFO is not unescaped"
      assert_equal "x=1&y=%20z", env["QUERY_STRING"]
      assert_equal "/a/b%20c?x=1&y=%20z", env["REQUEST_URI"]
      assert_equal "example.com", env["SERVER_NAME"]
      assert_equal "8080", env["SERVER_PORT"]
      assert_equal "example.com:8080", env["HTTP_HOST"]
      assert_equal "HTTP/1.1", env["SERVER_PROTOCOL"]
      assert_equal "127.0.0.1", env["REMOTE_ADDR"]
      assert_equal "hello", env["HTTP_X_CUSTOM_THING"]
      assert_equal "a, b", env["HTTP_X_MULTI"]
      assert_equal "c1=1; c2=2", env["HTTP_COOKIE"]
      assert_equal "text/plain", env["HTTP_ACCEPT"]
      refute env.key?("CONTENT_TYPE"), "no CONTENT_TYPE without a body"
      refute env.key?("CONTENT_LENGTH"), "no CONTENT_LENGTH without a body"
      assert_equal "http", env["rack.url_scheme"]
      assert_equal [1, 3], env["rack.version"] if rack2?
      assert_equal true, env["rack.multithread"], "default 5 threads"
      assert_equal false, env["rack.multiprocess"]
      assert_equal false, env["rack.run_once"]
      assert_equal true, env["rack.hijack?"]
      assert_match(/\(.*call/, env["rack.hijack"])
      assert_equal true, env["errors_is_stderr"]
      assert_match(/\(.*gets,read,each,rewind/, env["rack.input"])
      assert_equal "", env["body"], "empty rack.input reads as \"\""
      assert_equal false, env["env_frozen"]
      assert_equal "Hash", env["env_class"]
      assert_empty env.keys.grep(/\A(HTTP_CONTENT_TYPE|HTTP_CONTENT_LENGTH)\z/)
      # Every CGI value is a binary or ASCII-only string (Lint checks the latter).
      assert_empty env["encodings"] - %w[ASCII-8BIT US-ASCII UTF-8]
    end
  end

  def test_env_for_a_post
    with_server(ENV_APP) do |s|
      body = "name=value&other=2"
      env = env_for(s, "POST /form HTTP/1.1\r\nHost: example.com\r\nContent-Type: application/x-www-form-urlencoded\r\n" \
                       "Content-Length: #{body.bytesize}\r\nConnection: close\r\n\r\n#{body}")
      assert_equal "POST", env["REQUEST_METHOD"]
      assert_equal "/form", env["PATH_INFO"]
      assert_equal "", env["QUERY_STRING"]
      assert_equal "example.com", env["SERVER_NAME"]
      assert_equal "80", env["SERVER_PORT"], "port-less Host means the scheme's default"
      assert_equal "application/x-www-form-urlencoded", env["CONTENT_TYPE"]
      assert_equal body.bytesize.to_s, env["CONTENT_LENGTH"]
      refute env.key?("HTTP_CONTENT_TYPE")
      refute env.key?("HTTP_CONTENT_LENGTH")
      assert_equal body, env["body"]
    end
  end

  # The binding gathers an env's entries and inserts them in batches
  # (ffi.rs `EnvPairs`); a request with more headers than one batch holds
  # must still have every one, once, in the order sent, after the
  # server's own keys.
  def test_env_with_many_headers_keeps_every_one_in_order
    with_server(ENV_APP) do |s|
      names = (1..45).map { |i| format("X-Many-%02d", i) }
      fields = names.map { |n| "#{n}: v-#{n}\r\n" }.join
      env = env_for(s, "GET /many HTTP/1.1\r\nHost: example.com\r\n#{fields}X-Many-07: again\r\nConnection: close\r\n\r\n")
      keys = names.map { |n| "HTTP_#{n.upcase.tr("-", "_")}" }
      assert_equal keys, env.keys.grep(/\AHTTP_X_MANY_/)
      names.each_with_index do |n, i|
        expected = n == "X-Many-07" ? "v-#{n}, again" : "v-#{n}"
        assert_equal expected, env[keys[i]]
      end
      assert_operator env.keys.index("GATEWAY_INTERFACE"), :<, env.keys.index("REQUEST_METHOD")
      assert_equal "/many", env["PATH_INFO"]
      assert_equal "http", env["rack.url_scheme"]
      assert_equal env.keys.uniq, env.keys
    end
  end

  def test_env_server_name_and_port_variants
    with_server(ENV_APP) do |s|
      env = env_for(s, "GET / HTTP/1.1\r\nHost: [::1]:9000\r\nConnection: close\r\n\r\n")
      assert_equal ["[::1]", "9000"], env.values_at("SERVER_NAME", "SERVER_PORT")
      # HTTP/1.0 without Host: the listener's own address.
      env = env_for(s, "GET /old HTTP/1.0\r\n\r\n")
      assert_equal "HTTP/1.0", env["SERVER_PROTOCOL"]
      assert_equal ["127.0.0.1", s.port.to_s], env.values_at("SERVER_NAME", "SERVER_PORT")
      refute env.key?("HTTP_HOST")
    end
  end

  def test_env_over_a_unix_socket
    with_server(ENV_APP, unix: true) do |s|
      reply = UNIXSocket.open(s.unix_path) do |sock|
        sock.write("GET /u?q=1 HTTP/1.1\r\nHost: app.test:81\r\nConnection: close\r\n\r\n")
        parse_reply(sock.read, true)
      end
      env = JSON.parse(reply.body)
      assert_equal ["/u", "q=1", "app.test", "81", "http"], env.values_at("PATH_INFO", "QUERY_STRING", "SERVER_NAME", "SERVER_PORT", "rack.url_scheme")
      assert_kind_of String, env["REMOTE_ADDR"]
      # No Host and no TCP port: the scheme's default port, never "0".
      reply = UNIXSocket.open(s.unix_path) do |sock|
        sock.write("GET / HTTP/1.0\r\n\r\n")
        parse_reply(sock.read, true)
      end
      env = JSON.parse(reply.body)
      assert_equal %w[localhost 80], env.values_at("SERVER_NAME", "SERVER_PORT")
    end
  end

  def test_env_single_thread_is_not_multithread
    with_server(ENV_APP, args: ["-t", "1:1"]) do |s|
      env = env_for(s, get_bytes("/", "Connection" => "close"))
      assert_equal false, env["rack.multithread"]
    end
  end

  # Each step's result is reported, so one request checks IO#read
  # semantics in full.
  INPUT_APP = <<~'RUBY'
    require "json"
    run lambda { |env|
      input = env["rack.input"]
      r = []
      r << input.read(0)
      r << input.read(3)
      buf = +"junk-that-is-replaced"
      got = input.read(5, buf)
      r << got << got.equal?(buf)
      r << input.read(3).encoding.name
      r << input.read
      r << input.read(4)
      r << input.read
      buf = +"stale"
      r << input.read(4, buf) << buf
      r << input.rewind
      r << input.gets << input.gets << input.gets << input.gets
      input.rewind
      lines = []
      input.each { |line| lines << line }
      r << lines
      input.rewind
      r << input.read(1_000_000)
      text = JSON.generate(r)
      [200, { "content-type" => "application/json", "content-length" => text.bytesize.to_s }, [text]]
    }
  RUBY

  def test_rack_input_read_gets_each_rewind
    # The server's own rack.input: rewind and its return value (Lint 2 returns true, Lint 3 has no rewind).
    with_server(INPUT_APP, lint: false) do |s|
      body = "abcdefghijk\nsecond line\nthird"
      reply = exchange(s, request_bytes("POST", "/", { "Connection" => "close" }, body))
      assert_equal 200, reply.status, s.stderr
      assert_equal [
        "",                       # read(0)
        "abc",                    # read(3)
        "defgh", true,            # read(5, buf) fills and returns buf
        "ASCII-8BIT",             # read(3) ("ijk") is binary
        "\nsecond line\nthird",   # read: the rest
        nil,                      # read(4) at EOF
        "",                       # read at EOF
        nil, "",                  # read(4, buf) at EOF: nil, buf emptied
        0,                        # rewind
        "abcdefghijk\n", "second line\n", "third", nil,
        ["abcdefghijk\n", "second line\n", "third"],
        body
      ], JSON.parse(reply.body)
    end
  end

  def test_rack_input_chunked_request_body
    # The server's own rack.input: rewind and its return value (Lint 2 returns true, Lint 3 has no rewind).
    with_server(INPUT_APP, lint: false) do |s|
      body = "abcdefghijk\nsecond line\nthird"
      chunked = "#{body[0, 10].bytesize.to_s(16)}\r\n#{body[0, 10]}\r\n#{body[10..].bytesize.to_s(16)}\r\n#{body[10..]}\r\n0\r\n\r\n"
      reply = exchange(s, request_bytes("POST", "/", { "Transfer-Encoding" => "chunked", "Connection" => "close" }, chunked))
      assert_equal 200, reply.status, s.stderr
      assert_equal body, JSON.parse(reply.body).last
    end
  end

  # Bodies above spool_threshold (256 KiB) are read from a temp file; the
  # IO semantics must not change.
  SPOOL_APP = <<~'RUBY'
    require "json"
    require "digest"
    run lambda { |env|
      input = env["rack.input"]
      r = [env["CONTENT_LENGTH"], input.read(10)]
      buf = +"x"
      r << input.read(5, buf).dup << input.gets
      whole = input.read
      r << whole.bytesize << input.read(1) << input.read << input.rewind
      count = 0
      input.each { count += 1 }
      r << count << input.gets << input.rewind
      digest = Digest::SHA256.new
      while (piece = input.read(65_536, buf))
        digest << piece
      end
      r << digest.hexdigest << input.read(nil, buf) << buf
      text = JSON.generate(r)
      [200, { "content-type" => "application/json", "content-length" => text.bytesize.to_s }, [text]]
    }
  RUBY

  def test_rack_input_spooled_to_a_file
    require "digest"
    body = (1..40_000).map { |i| "line #{i}\n" }.join # ~400 KB
    # The server's own rack.input: rewind and its return value (Lint 2 returns true, Lint 3 has no rewind).
    with_server(SPOOL_APP, lint: false) do |s|
      reply = exchange(s, request_bytes("POST", "/", { "Connection" => "close" }, body), timeout: 10)
      assert_equal 200, reply.status, s.stderr
      assert_equal [
        body.bytesize.to_s, "line 1\nlin", "e 2\nl", "ine 3\n",
        body.bytesize - 21, nil, "", 0,
        40_000, nil, 0,
        Digest::SHA256.hexdigest(body), "", ""
      ], JSON.parse(reply.body)
    end
  end

  def test_rack_env_from_cli_and_environment
    app = 'run ->(env) { [200, { "content-type" => "text/plain" }, [ENV["RACK_ENV"].to_s]] }'
    with_server(app, args: ["-e", "production"]) do |s|
      assert_equal "production", s.get("/").body
      assert_includes s.stdout, "*  Environment: production\n"
    end
    with_server(app, env: { "RACK_ENV" => "staging" }) do |s|
      assert_equal "staging", s.get("/").body
      assert_includes s.stdout, "*  Environment: staging\n"
    end
    with_server(app, env: { "RACK_ENV" => nil, "RAILS_ENV" => nil }) do |s|
      assert_equal "development", s.get("/").body
    end
  end
end
