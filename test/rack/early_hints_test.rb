# frozen_string_literal: true

require "tls/support"
require "rack/support"

# early_hints: env["rack.early_hints"] sends 103 responses ahead of the
# final one, on HTTP/1.1 and HTTP/2, as curl sees them.
class EarlyHintsTest < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::TlsSupport
  include Tsubame::RackSupport

  APP = <<~'RUBY'
    run lambda { |env|
      hints = env["rack.early_hints"]
      return [200, { "content-type" => "text/plain" }, ["no hints offered"]] unless hints

      hints.call("link" => "</style.css>; rel=preload; as=style")
      hints.call("link" => ["</a.js>; rel=preload; as=script", "</b.js>; rel=preload; as=script"])
      [200, { "content-type" => "text/plain" }, ["final"]]
    }
  RUBY

  # Splits curl -i output into [status line, headers] per response.
  def responses(out)
    out.split("\r\n\r\n").map { |block| block.split("\r\n") }.reject(&:empty?)
  end

  def test_103_then_the_response_on_http1_and_http2
    with_server(APP, args: ["-b", ssl_bind, "--early-hints"]) do |server|
      url = "https://localhost:#{ssl_port(server)}/"
      { "--http1.1" => "HTTP/1.1", "--http2" => "HTTP/2" }.each do |flag, version|
        out, err, status = curl(flag, "-i", "--cacert", certs.path("ca.pem"), url)
        assert status.success?, err
        first, second, final = responses(out)
        assert_match(%r{\A#{Regexp.escape(version)} 103}, first.first, out)
        assert_includes first, "link: </style.css>; rel=preload; as=style"
        assert_match(%r{\A#{Regexp.escape(version)} 103}, second.first, out)
        assert_equal ["link: </a.js>; rel=preload; as=script", "link: </b.js>; rel=preload; as=script"],
                     second.grep(/\Alink:/)
        assert_match(%r{\A#{Regexp.escape(version)} 200}, final.first, out)
        assert out.end_with?("final"), out
      end
      # Cleartext HTTP/1.1 too.
      out, err, status = curl("--http1.1", "-i", "http://127.0.0.1:#{server.port}/")
      assert status.success?, err
      assert_equal [103, 103, 200], responses(out).first(3).map { |r| r.first[/ (\d{3})/, 1].to_i }
    end
  end

  # The env is built in one place for pool threads and fiber loops, so a
  # request routed to fibers is offered early hints too.
  def test_fiber_mode_requests_get_early_hints
    with_server(APP, args: ["--early-hints", "--fibers"]) do |server|
      out, err, status = curl("--http1.1", "-i", "http://127.0.0.1:#{server.port}/")
      assert status.success?, err
      assert_equal [103, 103, 200], responses(out).first(3).map { |r| r.first[/ (\d{3})/, 1].to_i }
      assert out.end_with?("final"), out
    end
  end

  def test_http10_clients_never_see_a_103
    with_server(APP, args: ["--early-hints"]) do |server|
      response = exchange(server, "GET / HTTP/1.0\r\n\r\n")
      assert_equal 200, response.status
      assert_equal "final", response.body
    end
  end

  def test_off_by_default
    with_server(APP, args: ["-b", ssl_bind]) do |server|
      out, err, status = curl("--http2", "-i", "--cacert", certs.path("ca.pem"), "https://localhost:#{ssl_port(server)}/")
      assert status.success?, err
      assert_equal 1, responses(out).size - 1
      assert out.end_with?("no hints offered")
    end
  end
end
