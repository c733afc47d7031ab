# frozen_string_literal: true

require "http1/support"
require "json"
require "cgi"

# X-Sendfile (--x-sendfile ROOT): Rack::Sendfile answers with an
# x-sendfile header, and the engine sends the file, inside the roots only.
class XSendfileTest < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::HttpSupport

  APP = <<~'RUBY'
    require "rack"
    # A to_path body for any absolute path (?path=...), whose close leaves
    # a mark, so the test sees the app's body closed.
    Body = Struct.new(:to_path, :mark) do
      def each
        yield File.binread(to_path)
      end

      def close
        File.write(mark, "closed") if mark
      end
    end
    use Rack::Sendfile
    run lambda { |env|
      params = Rack::Utils.parse_query(env["QUERY_STRING"])
      if env["PATH_INFO"] == "/type"
        next [200, { "content-type" => "text/plain" }, [env["sendfile.type"].to_s + " " + env["HTTP_X_SENDFILE_TYPE"].to_s]]
      end
      [200, { "content-type" => "application/octet-stream", "x-app" => "1" }, Body.new(params.fetch("path"), params["mark"])]
    }
  RUBY

  TOKEN = "t"

  def with_roots(dir, roots)
    control = free_port
    args = ["--control-url", "tcp://127.0.0.1:#{control}", "--control-token", TOKEN]
    roots.each { |root| args += ["--x-sendfile", root] }
    with_server(APP, args: args) do |server|
      sendfiles = lambda do
        JSON.parse(Net::HTTP.get(URI("http://127.0.0.1:#{control}/stats?token=#{TOKEN}"))).fetch("engine")["files_sendfile"]
      end
      yield server, sendfiles, dir
    end
  end

  def fixture(dir)
    root = File.join(dir, "storage")
    outside = File.join(dir, "outside")
    FileUtils.mkdir_p([root, outside])
    File.binwrite(File.join(root, "report.bin"), Random.new(3).bytes(300_000))
    File.write(File.join(outside, "secret.txt"), "SECRET")
    File.symlink(File.join(outside, "secret.txt"), File.join(root, "link_out"))
    root
  end

  def path_query(path, mark = nil)
    query = "path=#{CGI.escape(path)}"
    query += "&mark=#{CGI.escape(mark)}" if mark
    "/file?#{query}"
  end

  def test_files_inside_a_root_are_sent_by_the_engine
    in_tmpdir do |dir|
      root = fixture(dir)
      with_roots(dir, [root]) do |server, sendfiles|
        client = conn(server)
        assert_equal "X-Sendfile X-Sendfile", server.get("/type", "X-Sendfile-Type" => "x-accel-redirect").body,
                     "set by the server, over what the client sent"
        mark = File.join(dir, "closed")
        client.write(get_request(path_query(File.join(root, "report.bin"), mark)))
        response = client.read_response
        expected = File.binread(File.join(root, "report.bin"))
        assert_equal [200, "300000", expected, "1"], [response.status, response["content-length"], response.body, response["x-app"]]
        refute response.header?("x-sendfile"), "the header is the engine's, not the client's"
        assert_equal 1, sendfiles.call, "sent by sendfile(2), not by the app"
        assert_equal "closed", wait_for_file(mark), "the app's body was closed (after the engine took the file)"
        client.write(request("HEAD", path_query(File.join(root, "report.bin"))))
        head = client.read_response(head: true)
        assert_equal [200, "300000"], [head.status, head["content-length"]]
        client.write(get_request("/type"))
        assert_equal "X-Sendfile X-Sendfile", client.read_response.body, "the connection is still in step"
      ensure
        client&.close
      end
    end
  end

  def test_paths_outside_the_roots_are_refused_with_500_and_logged
    in_tmpdir do |dir|
      root = fixture(dir)
      with_roots(dir, [root]) do |server, sendfiles|
        mark = File.join(dir, "closed")
        [File.join(dir, "outside", "secret.txt"), File.join(root, "link_out"), File.join(root, "..", "outside", "secret.txt"),
         "/etc/passwd"].each do |path|
          response = server.get(path_query(path, mark))
          assert_equal ["500", "500 Internal Server Error\n"], [response.code, response.body], path
          refute_includes response.body, "SECRET"
          assert_nil response["x-sendfile"]
          assert_equal "closed", File.read(mark), path
          File.delete(mark)
        end
        assert_equal "404", server.get(path_query(File.join(root, "gone.bin"))).code
        assert_equal "500", server.get(path_query(root)).code, "a directory"
        assert_equal 0, sendfiles.call
        log = server.stderr
        assert_match(%r{x-sendfile refused: ".*/outside/secret.txt" is outside the allowed roots}, log)
        assert_match(%r{x-sendfile refused: ".*/storage/link_out" is outside the allowed roots}, log)
        assert_match(%r{x-sendfile refused: "/etc/passwd" is outside the allowed roots}, log)
        assert_match(%r{x-sendfile file not found: ".*/storage/gone.bin"}, log)
        assert_match(%r{x-sendfile refused: ".*/storage" is not a regular file}, log)
      end
    end
  end

  def test_off_by_default
    in_tmpdir do |dir|
      root = fixture(dir)
      with_server(APP) do |server|
        assert_equal " ", server.get("/type", "X-Sendfile-Type" => "x-sendfile").body.then { |b| b.sub(/x-sendfile\z/i, "") },
                     "sendfile.type is not set"
        response = server.get(path_query(File.join(root, "report.bin")))
        assert_equal ["200", 300_000], [response.code, response.body.bytesize]
        assert_nil response["x-sendfile"]
      end
    end
  end
end
