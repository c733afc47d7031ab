# frozen_string_literal: true

require "rack/support"
require "digest"
require "zlib"

# A body that is one large String (16 KiB and more) is sent from the app's
# own memory instead of being copied (docs/ARCHITECTURE.md, step 8). What
# the client gets must be exactly what the app returned, even when the app
# changes that String afterwards and the GC compacts the heap while the
# bytes are still on their way, over HTTP/1.1, HTTP/2 and with
# compression; and the strings must be let go once sent.
class LargeBodyTest < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::RackSupport

  # /fresh/N: a new, unfrozen String of N bytes whose content depends on a
  # seed; once the response is handed over, the app overwrites that String
  # and runs GC.compact (rack.after_reply, before the client has read it).
  # /frozen/N: one frozen String per size, kept by the app. /text/N: text.
  # /rss: the server's VmRSS in kB after a full GC.
  APP = <<~'RUBY'
    require "digest"
    FROZEN = Hash.new { |h, n| h[n] = Random.new(n).bytes(n).freeze }
    run lambda { |env|
      case env["PATH_INFO"]
      when %r{\A/fresh/(\d+)\z}
        n = $1.to_i
        body = Random.new(n + 1).bytes(n)
        digest = Digest::SHA256.hexdigest(body)
        env["rack.after_reply"] << lambda do
          body.replace("Z" * n)
          GC.start
          GC.compact
        end
        [200, { "content-type" => "application/octet-stream", "x-sha256" => digest }, [body]]
      when %r{\A/frozen/(\d+)\z}
        body = FROZEN[$1.to_i]
        [200, { "content-type" => "application/octet-stream", "x-sha256" => Digest::SHA256.hexdigest(body) }, [body]]
      when %r{\A/text/(\d+)\z}
        body = ("lorem ipsum dolor sit amet " * ($1.to_i / 27 + 1))[0, $1.to_i]
        [200, { "content-type" => "text/plain", "x-sha256" => Digest::SHA256.hexdigest(body) }, [body]]
      when "/rss"
        3.times { GC.start }
        [200, { "content-type" => "text/plain" }, [File.read("/proc/self/status")[/^VmRSS:\s+(\d+)/, 1]]]
      else [404, {}, []]
      end
    }
  RUBY

  def test_bodies_around_the_threshold_arrive_whole_on_one_connection
    with_server(APP, args: ["-t", "2:2"], lint: LINT_FORWARDS_BODY) do |server|
      http = server.http
      [100, 16_383, 16_384, 16_385, 100_000, 1 << 20].each do |n|
        %w[fresh frozen].each do |kind|
          response = http.get("/#{kind}/#{n}")
          assert_equal ["200", n.to_s, n, response["x-sha256"]],
                       [response.code, response["content-length"], response.body.bytesize,
                        Digest::SHA256.hexdigest(response.body)], "#{kind}/#{n}"
        end
      end
    ensure
      http&.finish
    end
  end

  # The client waits before reading 8 MiB: by then the app has overwritten
  # its String and compacted the heap, while most of the body is still in
  # the engine's hands.
  def test_a_slow_reader_gets_the_bytes_the_app_returned_not_what_it_wrote_later
    with_server(APP, args: ["-t", "1:1"], lint: LINT_FORWARDS_BODY) do |server|
      n = 8 << 20
      sock = server.socket
      sock.write("GET /fresh/#{n} HTTP/1.1\r\nHost: x\r\n\r\n")
      sleep 1
      data, = read_until_close(sock, 1.5) # the connection stays open: read what came
      head, body = data.split("\r\n\r\n", 2)
      assert_match(%r{\AHTTP/1.1 200}, head)
      assert_equal n.to_s, head[/^content-length: (\d+)/i, 1], "sent whole, not streamed"
      assert_equal n, body.bytesize
      assert_equal head[/^x-sha256: (\h+)/i, 1], Digest::SHA256.hexdigest(body)
      refute_includes body[0, 1000], "ZZZZZZZZ"
      assert_equal "200", server.get("/frozen/100").code, "the server is still serving"
    ensure
      sock&.close
    end
  end

  def test_http2_and_compression_send_the_same_bytes
    with_server(APP, args: ["--h2c", "--compress"], lint: LINT_FORWARDS_BODY) do |server|
      in_tmpdir do |dir|
        out = File.join(dir, "h2")
        _, err, status = Open3.capture3("curl", "-s", "--http2-prior-knowledge", "-D", "#{out}.head", "-o", out,
                                        "http://127.0.0.1:#{server.port}/fresh/300000")
        assert status.success?, err
        head = File.read("#{out}.head")
        assert_match(%r{\AHTTP/2 200}, head)
        assert_equal head[/^x-sha256: (\h+)/i, 1], Digest::SHA256.file(out).hexdigest
      end
      response = server.get("/text/100000", "Accept-Encoding" => "gzip")
      assert_equal "gzip", response["content-encoding"]
      text = Zlib.gunzip(response.body)
      assert_equal [100_000, response["x-sha256"]], [text.bytesize, Digest::SHA256.hexdigest(text)]
    end
  end

  # 300 fresh 1 MiB bodies: if the engine kept every String it was handed,
  # that would be 300 MB more; released, the server stays near where it was.
  def test_sent_strings_are_let_go
    with_server(APP, args: ["-t", "1:1"], lint: LINT_FORWARDS_BODY) do |server|
      http = server.http
      20.times { http.get("/fresh/#{1 << 20}") }
      before = http.get("/rss").body.to_i
      300.times { |i| assert_equal 1 << 20, http.get("/fresh/#{1 << 20}").body.bytesize, "request #{i}" }
      after = http.get("/rss").body.to_i
      assert_operator after - before, :<, 100_000, "RSS grew from #{before} kB to #{after} kB"
    ensure
      http&.finish
    end
  end
end
