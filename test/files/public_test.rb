# frozen_string_literal: true

require "files/support"
require "tls/support"
require "json"
require "time"

# The public folder (--public): files answered by the engine before the
# app, with validators, ranges, precompressed siblings and cache headers.
class PublicFolderTest < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::HttpSupport
  include Tsubame::PublicSupport
  include Tsubame::TlsSupport

  def with_public(args: [])
    in_tmpdir do |dir|
      root = build_public(dir)
      yield_server = lambda do |extra|
        with_server(APP, args: ["--public", root, *extra, *args]) { |server| yield server, root }
      end
      yield_server.call([])
    end
  end

  def get(client, path, headers = {})
    client.write(get_request(path, headers))
    client.read_response
  end

  def test_off_by_default
    in_tmpdir do |dir|
      build_public(dir)
      with_server(APP) { |server| assert_equal "app GET /a.txt", server.get("/a.txt").body }
    end
  end

  def test_files_are_served_and_everything_else_goes_to_the_app
    with_public do |server, root|
      client = conn(server)
      a = get(client, "/a.txt")
      assert_equal ["HTTP/1.1 200 OK", "hello public\n", "13", "text/plain; charset=utf-8", "bytes"],
                   [a.status_line, a.body, a["content-length"], a["content-type"], a["accept-ranges"]]
      mtime = File.mtime(File.join(root, "a.txt"))
      assert_equal format('"%x-%x"', mtime.to_i, 13), a["etag"]
      assert_equal mtime.httpdate, a["last-modified"]
      refute a.header?("cache-control")
      refute a.header?("vary"), "no precompressed sibling, nothing varies"
      client.write(request("HEAD", "/a.txt"))
      head = client.read_response(head: true)
      assert_equal ["HTTP/1.1 200 OK", "13", a["etag"]], [head.status_line, head["content-length"], head["etag"]]
      assert_equal "b\n", get(client, "/sub/b.txt").body
      assert_equal "hello public\n", get(client, "/a.txt?v=1").body, "the query does not matter"
      # Not in the folder, or not GET/HEAD: the app.
      assert_equal "app GET /missing.txt", get(client, "/missing.txt").body
      assert_equal "app GET /sub", get(client, "/sub").body
      assert_equal "app GET /sub/", get(client, "/sub/").body
      assert_equal "app GET /docs/", get(client, "/docs/").body, "index.html only with --public-index"
      client.write(request("POST", "/a.txt", {}, "x"))
      assert_equal "app POST /a.txt", client.read_response.body
      client.write(request("DELETE", "/a.txt"))
      assert_equal "app DELETE /a.txt", client.read_response.body
      # Refusals keep the connection.
      assert_equal 404, get(client, "/.env").status
      assert_equal 400, get(client, "/%c0%ae%c0%ae/a.txt").status
      assert_equal "hello public\n", get(client, "/a.txt").body
    ensure
      client&.close
    end
  end

  def test_index_html_for_directories_when_asked
    with_public(args: ["--public-index"]) do |server, _root|
      client = conn(server)
      assert_equal ["<h1>home</h1>\n", "text/html; charset=utf-8"], get(client, "/").then { |r| [r.body, r["content-type"]] }
      assert_equal "<h1>docs</h1>\n", get(client, "/docs/").body
      assert_equal "app GET /docs", get(client, "/docs").body, "no redirect: the app decides"
      assert_equal "app GET /sub/", get(client, "/sub/").body, "no index.html there"
    ensure
      client&.close
    end
  end

  def test_conditional_requests_answer_304
    with_public do |server, _root|
      client = conn(server)
      a = get(client, "/a.txt")
      etag = a["etag"]
      date = a["last-modified"]
      [
        { "If-None-Match" => etag },
        { "If-None-Match" => "\"nope\", W/#{etag}" },
        { "If-None-Match" => "*" },
        { "If-Modified-Since" => date },
        { "If-Modified-Since" => (Time.httpdate(date) + 3600).httpdate }
      ].each do |headers|
        response = get(client, "/a.txt", headers)
        assert_equal ["HTTP/1.1 304 Not Modified", etag, date, ""],
                     [response.status_line, response["etag"], response["last-modified"], response.body], headers.inspect
        refute response.header?("content-length"), headers.inspect
      end
      [
        { "If-None-Match" => "\"nope\"" },
        { "If-Modified-Since" => (Time.httpdate(date) - 1).httpdate },
        { "If-Modified-Since" => "not a date" },
        # If-None-Match decides alone when present (RFC 9110 §13.2.2).
        { "If-None-Match" => "\"nope\"", "If-Modified-Since" => date }
      ].each do |headers|
        assert_equal [200, "hello public\n"], get(client, "/a.txt", headers).then { |r| [r.status, r.body] }, headers.inspect
      end
      client.write(request("HEAD", "/a.txt", { "If-None-Match" => etag }))
      assert_equal 304, client.read_response(head: true).status
    ensure
      client&.close
    end
  end

  def test_single_ranges_multipart_and_unsatisfiable
    with_public do |server, root|
      big = Random.new(7).bytes(3 << 20)
      File.binwrite(File.join(root, "big.bin"), big)
      client = conn(server, timeout: 20)
      {
        "bytes=0-4" => [0, 4], "bytes=6-" => [6, 12], "bytes=-3" => [10, 12], "bytes=10-999" => [10, 12]
      }.each do |range, (first, last)|
        response = get(client, "/a.txt", "Range" => range)
        assert_equal ["HTTP/1.1 206 Partial Content", "bytes #{first}-#{last}/13", "hello public\n"[first..last],
                      (last - first + 1).to_s, "text/plain; charset=utf-8"],
                     [response.status_line, response["content-range"], response.body, response["content-length"],
                      response["content-type"]], range
      end
      # A range deep in a large file, sent from its offset.
      response = get(client, "/big.bin", "Range" => "bytes=1000000-2999999")
      assert_equal ["bytes 1000000-2999999/#{big.bytesize}", big.byteslice(1_000_000, 2_000_000)],
                   [response["content-range"], response.body]
      # Several ranges: multipart/byteranges, in the order asked.
      response = get(client, "/a.txt", "Range" => "bytes=6-11, 0-4")
      assert_equal 206, response.status
      boundary = response["content-type"][/\Amultipart\/byteranges; boundary=(\S+)\z/, 1]
      assert boundary, response["content-type"]
      parts = response.body.split("--#{boundary}")
      assert_equal "--\r\n", parts.pop
      parts.shift
      assert_equal [["bytes 6-11/13", "public"], ["bytes 0-4/13", "hello"]], parts.map { |part|
        head, body = part.split("\r\n\r\n", 2)
        [head[/content-range: (.*)/, 1], body.delete_suffix("\r\n")]
      }
      assert_equal response.body.bytesize.to_s, response["content-length"]
      # Nothing satisfiable: 416 with the length.
      response = get(client, "/a.txt", "Range" => "bytes=13-")
      assert_equal ["HTTP/1.1 416 Range Not Satisfiable", "bytes */13"], [response.status_line, response["content-range"]]
      # Not a range we take: the whole file.
      ["items=0-1", "bytes=5-1", "bytes=0-0,0-0,0-0,0-0,0-0,0-0,0-0,0-0,0-0,0-0,0-0,0-0,0-0,0-0,0-0,0-0,0-0",
       "bytes=0-12,0-12"].each do |range|
        assert_equal [200, "hello public\n"], get(client, "/a.txt", "Range" => range).then { |r| [r.status, r.body] }, range
      end
      client.write(request("HEAD", "/a.txt", { "Range" => "bytes=0-4" }))
      head = client.read_response(head: true)
      assert_equal [206, "5", "bytes 0-4/13"], [head.status, head["content-length"], head["content-range"]]
      assert_equal "hello public\n", get(client, "/a.txt").body, "the connection is still in step"
    ensure
      client&.close
    end
  end

  def test_if_range_applies_the_range_only_to_the_same_file
    with_public do |server, _root|
      client = conn(server)
      a = get(client, "/a.txt")
      [a["etag"], a["last-modified"]].each do |validator|
        response = get(client, "/a.txt", "Range" => "bytes=0-4", "If-Range" => validator)
        assert_equal [206, "hello"], [response.status, response.body], validator
      end
      ["\"other\"", "W/#{a["etag"]}", (Time.httpdate(a["last-modified"]) - 60).httpdate].each do |validator|
        response = get(client, "/a.txt", "Range" => "bytes=0-4", "If-Range" => validator)
        assert_equal [200, "hello public\n"], [response.status, response.body], validator
      end
    ensure
      client&.close
    end
  end

  def test_precompressed_siblings_by_accept_encoding
    with_public do |server, root|
      css = File.join(root, "app.css")
      File.write(css, "body { color: red }\n")
      File.write("#{css}.gz", "GZ")
      File.write("#{css}.br", "BR")
      File.write("#{css}.zst", "ZST")
      client = conn(server)
      {
        nil => [nil, "body { color: red }\n"],
        "gzip, deflate, br, zstd" => ["br", "BR"],
        "gzip" => ["gzip", "GZ"],
        "x-gzip" => ["gzip", "GZ"],
        "zstd, gzip" => ["zstd", "ZST"],
        "br;q=0.5, gzip" => ["gzip", "GZ"],
        "br;q=0, gzip;q=0, zstd;q=0" => [nil, "body { color: red }\n"],
        "identity" => [nil, "body { color: red }\n"]
      }.each do |accept, (coding, body)|
        response = get(client, "/app.css", accept ? { "Accept-Encoding" => accept } : {})
        assert_equal [200, coding, body, "text/css; charset=utf-8", "accept-encoding"],
                     [response.status, response["content-encoding"], response.body, response["content-type"], response["vary"]],
                     accept.inspect
      end
      gz = get(client, "/app.css", "Accept-Encoding" => "gzip")
      plain = get(client, "/app.css")
      refute_equal plain["etag"], gz["etag"], "each encoding is its own representation"
      response = get(client, "/app.css", "Accept-Encoding" => "gzip", "If-None-Match" => gz["etag"])
      assert_equal [304, "accept-encoding"], [response.status, response["vary"]]
      File.delete("#{css}.br", "#{css}.zst")
      assert_equal "GZ", get(client, "/app.css", "Accept-Encoding" => "br, gzip").body
    ensure
      client&.close
    end
  end

  # Which siblings a file has is remembered while its directory has not
  # changed (docs/FILES.md): a sibling added to or removed from a
  # directory that had been quiet for a long time is seen on the very
  # next request, in a subdirectory and through a linked directory alike.
  def test_siblings_added_or_removed_later_are_seen_at_once
    with_public do |server, root|
      FileUtils.mkdir_p(File.join(root, "assets"))
      FileUtils.ln_s(File.join(root, "assets"), File.join(root, "linked"))
      js = File.join(root, "assets", "app.js")
      File.write(js, "plain")
      long_ago = Time.at(1_700_000_000)
      File.utime(long_ago, long_ago, File.dirname(js))
      client = conn(server)
      %w[/assets/app.js /linked/app.js].each do |path|
        2.times do # the second answer is the remembered one
          response = get(client, path, "Accept-Encoding" => "gzip")
          assert_equal [200, "plain", nil, nil], [response.status, response.body, response["vary"], response["content-encoding"]], path
        end
      end
      File.write("#{js}.gz", "GZ")
      %w[/assets/app.js /linked/app.js].each do |path|
        response = get(client, path, "Accept-Encoding" => "gzip")
        assert_equal [200, "GZ", "accept-encoding", "gzip"], [response.status, response.body, response["vary"], response["content-encoding"]], path
      end
      File.utime(long_ago, long_ago, File.dirname(js))
      get(client, "/assets/app.js", "Accept-Encoding" => "gzip") # remembered with the .gz
      File.delete("#{js}.gz")
      response = get(client, "/assets/app.js", "Accept-Encoding" => "gzip")
      assert_equal [200, "plain", nil], [response.status, response.body, response["vary"]]
    ensure
      client&.close
    end
  end

  def test_fingerprinted_names_are_immutable_and_the_pattern_is_configurable
    with_public do |server, root|
      File.write(File.join(root, "app-0123456789abcdef.css"), "x")
      File.write(File.join(root, "logo-4f9a8b7c.png"), "x")
      File.write(File.join(root, "jquery-3.7.1.min.js"), "x")
      client = conn(server)
      immutable = "public, max-age=31536000, immutable"
      assert_equal immutable, get(client, "/app-0123456789abcdef.css")["cache-control"]
      assert_equal [immutable, "image/png"], get(client, "/logo-4f9a8b7c.png").then { |r| [r["cache-control"], r["content-type"]] }
      refute get(client, "/jquery-3.7.1.min.js").header?("cache-control")
      refute get(client, "/a.txt").header?("cache-control")
      assert_equal immutable, get(client, "/app-0123456789abcdef.css", "If-None-Match" => "*")["cache-control"], "on a 304 too"
    ensure
      client&.close
    end
    with_public(args: ["--public-immutable", "off"]) do |server, root|
      File.write(File.join(root, "app-0123456789abcdef.css"), "x")
      refute server.get("/app-0123456789abcdef.css").key?("cache-control")
    end
    with_public(args: ["--public-immutable", "\\.v\\d+\\."]) do |server, root|
      File.write(File.join(root, "app.v2.js"), "x")
      File.write(File.join(root, "app-0123456789abcdef.css"), "x")
      assert_equal "public, max-age=31536000, immutable", server.get("/app.v2.js")["cache-control"]
      refute server.get("/app-0123456789abcdef.css").key?("cache-control")
    end
  end

  def test_content_types_come_from_the_table
    with_public do |server, root|
      {
        "x.html" => "text/html; charset=utf-8", "x.js" => "text/javascript; charset=utf-8",
        "x.json" => "application/json; charset=utf-8", "x.svg" => "image/svg+xml; charset=utf-8",
        "x.PNG" => "image/png", "x.woff2" => "font/woff2", "x.wasm" => "application/wasm",
        "x.unknown" => "application/octet-stream", "noext" => "application/octet-stream"
      }.each do |name, type|
        File.write(File.join(root, name), "x")
        assert_equal type, server.get("/#{name}")["content-type"], name
      end
    end
  end

  def test_the_dsl_directive_sets_the_folder_and_its_index
    in_tmpdir do |dir|
      root = build_public(dir)
      config = File.join(dir, "tsubame.rb")
      File.write(config, "public_dir #{root.inspect}, index: true, immutable: false\n")
      with_server(APP, args: ["-C", config]) do |server|
        assert_equal "<h1>home</h1>\n", server.get("/").body
        assert_equal "hello public\n", server.get("/a.txt").body
      end
    end
  end

  def test_a_missing_folder_is_a_config_error
    out, status = Open3.capture2e(RbConfig.ruby, "-Ilib", Tsubame::TestHelpers::EXE, "--public", "/nonexistent/dir",
                                  "-b", "tcp://127.0.0.1:0", File::NULL)
    refute status.success?
    assert_match(%r{public_dir must be an existing directory \(got "/nonexistent/dir"\)}, out)
  end

  def test_tls_and_http2_serve_the_folder_too
    with_public(args: ["-b", ssl_bind, "--h2c"]) do |server, _root|
      port = ssl_port(server)
      https(port).start do |http|
        assert_equal "hello public\n", http.get("/a.txt").body
        response = http.get("/a.txt", "Range" => "bytes=0-4")
        assert_equal ["206", "hello"], [response.code, response.body]
      end
      out, err, status = curl("--http2", "--cacert", certs.path("ca.pem"), "-i", "-H", "range: bytes=6-11",
                              "https://localhost:#{port}/a.txt")
      assert status.success?, err
      assert_match(%r{\AHTTP/2 206}, out)
      assert_match(%r{^content-range: bytes 6-11/13\r$}, out)
      assert out.end_with?("\r\n\r\npublic"), out
      out, err, status = curl("--http2-prior-knowledge", "http://127.0.0.1:#{server.port}/sub/b.txt")
      assert status.success?, err
      assert_equal "b\n", out
      out, = curl("--http2-prior-knowledge", "http://127.0.0.1:#{server.port}/missing")
      assert_equal "app GET /missing", out
    end
  end
end
