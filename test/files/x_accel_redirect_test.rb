# frozen_string_literal: true

require "http1/support"
require "json"
require "cgi"
require "rack"
require "tsubame/serve/x_accel_redirect"

# X-Accel-Redirect (--x-accel-redirect URI=DIR): Rack::Sendfile, or the app
# itself, answers with an x-accel-redirect URL, and the engine sends the
# file that URL maps to, inside the mapped directory only.
class XAccelRedirectTest < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::HttpSupport

  APP = <<~'RUBY'
    require "rack"
    require "json"
    files = ENV.fetch("XA_FILES")
    # Given the variation, Rack::Sendfile reads the server's X-Accel-Mapping.
    map "/sendfile" do
      use Rack::Sendfile, "X-Accel-Redirect"
      run Rack::Files.new(files)
    end
    # Rails' default (no variation): the mapping is not read.
    map "/plain" do
      use Rack::Sendfile
      run Rack::Files.new(files)
    end
    # The app writes the header itself; its body's close leaves a mark.
    Body = Struct.new(:mark) do
      def each
        yield "the app's body"
      end

      def close
        File.write(mark, "closed") if mark
      end
    end
    map "/raw" do
      run lambda { |env|
        params = Rack::Utils.parse_query(env["QUERY_STRING"])
        # Rack 3 header names are lower case; a Rack 2 app may send any case.
        name = Rack.release.start_with?("2.") ? "X-Accel-Redirect" : "x-accel-redirect"
        headers = { "content-type" => "application/octet-stream", "x-app" => "1", name => params.fetch("url") }
        [200, headers, Body.new(params["mark"])]
      }
    end
    map "/env" do
      run lambda { |env|
        seen = env.values_at("sendfile.type", "HTTP_X_SENDFILE_TYPE", "HTTP_X_ACCEL_MAPPING")
        [200, { "content-type" => "application/json" }, [JSON.generate(seen + [Rack.release])]]
      }
    end
  RUBY

  TOKEN = "t"
  NAME = "report one.bin"

  def with_mappings(dir, mappings, args: [])
    control = free_port
    args += ["--control-url", "tcp://127.0.0.1:#{control}", "--control-token", TOKEN]
    mappings.each { |uri, root| args += ["--x-accel-redirect", "#{uri}=#{root}"] }
    env = { "XA_FILES" => File.join(dir, "storage") }
    with_server(APP, args: args, env: env) do |server|
      sendfiles = lambda do
        JSON.parse(Net::HTTP.get(URI("http://127.0.0.1:#{control}/stats?token=#{TOKEN}"))).fetch("engine")["files_sendfile"]
      end
      yield server, sendfiles
    end
  end

  def fixture(dir)
    root = File.join(dir, "storage")
    outside = File.join(dir, "outside")
    FileUtils.mkdir_p([File.join(root, "sub"), outside])
    File.binwrite(File.join(root, NAME), Random.new(5).bytes(300_000))
    File.write(File.join(root, "sub", "b.txt"), "b\n")
    File.write(File.join(outside, "secret.txt"), "SECRET")
    File.symlink(File.join(outside, "secret.txt"), File.join(root, "link_out"))
    root
  end

  def raw_query(url, mark = nil)
    query = "url=#{CGI.escape(url)}"
    query += "&mark=#{CGI.escape(mark)}" if mark
    "/raw?#{query}"
  end

  def test_rack_sendfile_with_the_servers_mapping
    in_tmpdir do |dir|
      root = fixture(dir)
      expected = File.binread(File.join(root, NAME))
      with_mappings(dir, [["/_files/", root]]) do |server, sendfiles|
        client = conn(server)
        client.write(get_request("/sendfile/report%20one.bin"))
        response = client.read_response
        assert_equal [200, "300000", expected], [response.status, response["content-length"], response.body]
        assert response["last-modified"], "Rack::Files' other headers are kept"
        refute response.header?("x-accel-redirect"), "the header is the engine's, not the client's"
        assert_equal 1, sendfiles.call, "sent by sendfile(2), not by the app"
        client.write(request("HEAD", "/sendfile/report%20one.bin"))
        head = client.read_response(head: true)
        assert_equal [200, "300000"], [head.status, head["content-length"]]
        client.write(get_request("/sendfile/sub/b.txt"))
        assert_equal [200, "b\n"], client.read_response.then { |r| [r.status, r.body] }, "the connection is still in step"
      ensure
        client&.close
      end
    end
  end

  # Without a variation Rack::Sendfile reads no mapping, says so on
  # rack.errors and leaves the to_path body, which the engine sends anyway.
  def test_rack_sendfile_without_a_variation_still_sends_the_file
    in_tmpdir do |dir|
      root = fixture(dir)
      with_mappings(dir, [["/_files/", root]]) do |server|
        response = server.get("/plain/report%20one.bin")
        assert_equal ["200", File.binread(File.join(root, NAME))], [response.code, response.body]
        assert_nil response["x-accel-redirect"]
        assert_match(/x-accel-mapping header missing/i, server.stderr)
      end
    end
  end

  def test_a_raw_header_with_a_percent_encoded_name
    in_tmpdir do |dir|
      root = fixture(dir)
      with_mappings(dir, [["/_files/", root], ["/_small", File.join(root, "sub")]]) do |server, sendfiles|
        mark = File.join(dir, "closed")
        response = server.get(raw_query("/_files/report%20one.bin", mark))
        assert_equal ["200", "300000", "1", "application/octet-stream"],
                     [response.code, response["content-length"], response["x-app"], response["content-type"]]
        assert_equal File.binread(File.join(root, NAME)), response.body
        assert_nil response["x-accel-redirect"]
        assert_equal 1, sendfiles.call
        # Closed once the engine has taken the file, which may be just
        # after the client has it all.
        assert wait_for_file(mark), "the app's body was closed"
        assert_equal ["200", "b\n"], server.get(raw_query("/_small/b.txt?ignored=1")).then { |r| [r.code, r.body] },
                     "a prefix given without its slash; a raw ? starts arguments"
        assert_equal ["200", "b\n"], server.get(raw_query("/_files/sub%2Fb.txt")).then { |r| [r.code, r.body] }
        File.write(File.join(root, "日本.txt"), "nihon\n")
        assert_equal ["200", "nihon\n"], server.get(raw_query("/_files/%E6%97%A5%E6%9C%AC.txt")).then { |r| [r.code, r.body] }
        assert_equal "404", server.get(raw_query("/_files/%FF.txt")).code, "a name that is not UTF-8 is looked up as bytes"
      end
    end
  end

  def test_refusals_are_500_with_a_log_line_and_missing_files_404
    in_tmpdir do |dir|
      root = fixture(dir)
      with_mappings(dir, [["/_files/", root]]) do |server, sendfiles|
        mark = File.join(dir, "closed")
        refused = {
          "/other/#{NAME}" => "is under no X-Accel-Redirect prefix (/_files/)",
          "/_filesX/b.txt" => "is under no X-Accel-Redirect prefix",
          File.join(root, NAME) => "is under no X-Accel-Redirect prefix",
          "/_files/../outside/secret.txt" => "has a '..' segment",
          "/_files/%2e%2e/outside/secret.txt" => "has a '..' segment",
          "/_files/sub/%2E%2E%2F..%2Foutside%2Fsecret.txt" => "has a '..' segment",
          "/_files/..%5Coutside%5Csecret.txt" => "contains a backslash",
          "/_files/b.txt%00.png" => "contains a NUL byte",
          "/_files/link_out" => "is outside the allowed roots (#{File.realpath(root)})",
          "/_files/" => "is not a regular file",
          "/_files/sub" => "is not a regular file"
        }
        refused.each do |url, reason|
          response = server.get(raw_query(url, mark))
          assert_equal ["500", "500 Internal Server Error\n"], [response.code, response.body], url
          assert_nil response["x-accel-redirect"]
          assert_equal "closed", File.read(mark), url
          File.delete(mark)
          assert_includes server.stderr, "x-accel-redirect refused: #{url.inspect} #{reason}"
        end
        assert_equal "404", server.get(raw_query("/_files/gone.bin")).code
        assert_match(%r{x-accel-redirect file not found: "/_files/gone.bin" \(ENOENT\)}, server.stderr)
        assert_equal 0, sendfiles.call
      end
    end
  end

  def test_env_values_are_the_servers_not_the_clients
    in_tmpdir do |dir|
      root = fixture(dir)
      small = File.join(root, "sub")
      with_mappings(dir, [["/_files", root], ["/_small/", small]]) do |server|
        sent = { "X-Sendfile-Type" => "X-Sendfile", "X-Accel-Mapping" => "/=/_files/" }
        seen = JSON.parse(server.get("/env", sent).body)
        assert_equal ["X-Accel-Redirect", "X-Accel-Redirect", "#{small}/=/_small/,#{root}/=/_files/", Rack.release], seen,
                     "the longest directory first, as Rack::Sendfile takes the first that matches; the server runs this Rack"
        # Through Rack::Sendfile: the client's mapping would have sent /.
        response = server.get("/sendfile/sub/b.txt", sent)
        assert_equal ["200", "b\n"], [response.code, response.body]
      end
    end
  end

  def test_off_by_default
    in_tmpdir do |dir|
      root = fixture(dir)
      with_server(APP, env: { "XA_FILES" => root }) do |server|
        assert_equal [nil, "X-Accel-Redirect", "/=/x/", Rack.release],
                     JSON.parse(server.get("/env", "X-Sendfile-Type" => "X-Accel-Redirect", "X-Accel-Mapping" => "/=/x/").body),
                     "only the client's own headers, which Rack::Sendfile does not read"
        response = server.get(raw_query("/_files/b.txt"))
        assert_equal ["200", "the app's body", "/_files/b.txt"], [response.code, response.body, response["x-accel-redirect"]]
      end
    end
  end

  # In-process: a directory whose name is not ASCII, against decoded URLs
  # that are bytes (and not always valid UTF-8).
  def test_a_directory_named_in_utf8
    in_tmpdir do |dir|
      root = File.join(dir, "あ")
      FileUtils.mkdir_p(root)
      File.write(File.join(root, "日.txt"), "x")
      logs = []
      accel = Tsubame::XAccelRedirect.new([["/_f/", root]], logs.method(:<<))
      status, headers, body = accel.apply(200, { "X-Accel-Redirect" => "/_f/%E6%97%A5.txt" }, [])
      assert_equal [200, { "content-length" => "1" }, File.join(root, "日.txt").b],
                   [status, headers, body.to_path.b]
      assert_equal 404, accel.apply(200, { "x-accel-redirect" => "/_f/%FF" }, []).first
      assert_equal ['x-accel-redirect file not found: "/_f/%FF" (ENOENT)'], logs
    end
  end
end
