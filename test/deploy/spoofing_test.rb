# frozen_string_literal: true

require_relative "support"

# Attempts to choose one's own REMOTE_ADDR (docs/PROXY.md, "What is
# refused"): each is refused (the connection closed before the app) or
# ignored (the app sees the real peer), as documented.
class SpoofingTest < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::DeploySupport

  PROXY_BINDS = ["tcp://127.0.0.1:0?proxy_protocol=v1", "tcp://127.0.0.1:0?proxy_protocol=v2"].freeze
  HEADER_MODE = <<~RUBY
    set_remote_address header: "X-Forwarded-For"
    trusted_proxies ["127.0.0.1", "10.0.0.0/8"]
  RUBY

  # --- forwarding headers ---------------------------------------------------

  def test_forwarding_headers_count_only_from_trusted_proxies
    with_deploy_server(config: HEADER_MODE) do |server, _log|
      seen = ->(headers, from = nil) { body_of(exchange(server.port, request("/", headers), from: from)) }
      # 1. A forged header from a peer that is not a trusted proxy: ignored.
      assert_equal "127.0.0.3", seen.call({ "X-Forwarded-For" => "6.6.6.6" }, "127.0.0.3")
      # 2. From a trusted proxy: the first untrusted entry from the right;
      #    what the client put first is passed over.
      assert_equal "198.51.100.7", seen.call({ "X-Forwarded-For" => "6.6.6.6, 198.51.100.7, 10.1.1.1" })
      # 3. Several fields are one list, in order.
      assert_equal "198.51.100.7", seen.call({ "X-Forwarded-For" => ["6.6.6.6", "198.51.100.7"] })
      # 4. Garbage ends the walk: the nearest trusted hop (here the peer).
      assert_equal "127.0.0.1", seen.call({ "X-Forwarded-For" => "6.6.6.6, not-an-address" })
      assert_equal "127.0.0.1", seen.call({ "X-Forwarded-For" => "6.6.6.6:99999" })
      # 5. The underscore spelling is not the header.
      assert_equal "127.0.0.1", seen.call({ "X_Forwarded_For" => "6.6.6.6" })
      # 6. Every hop trusted: the leftmost.
      assert_equal "10.9.9.9", seen.call({ "X-Forwarded-For" => "10.9.9.9, 10.1.1.1" })
      # No header at all: the peer.
      assert_equal "127.0.0.1", seen.call({})
    end
  end

  def test_a_fixed_remote_address
    with_deploy_server(config: "set_remote_address \"192.0.2.200\"\n") do |server, _log|
      assert_equal "192.0.2.200", body_of(exchange(server.port, request("/", { "X-Forwarded-For" => "6.6.6.6" })))
    end
  end

  # --- PROXY headers --------------------------------------------------------

  def test_refused_proxy_headers_close_the_connection_before_the_app
    config = "first_data_timeout 1\nhealth_check_path \"/up\"\n"
    with_deploy_server(binds: PROXY_BINDS, config: config) do |server, log|
      v1, v2 = port_of(server, 1), port_of(server, 2)
      full_v2 = v2_header(src: "6.6.6.6")
      refused = {
        "truncated v2 header" => [v2, [full_v2[0, 20]]],
        "v2 signature only" => [v2, [full_v2[0, 12]]],
        "v1 header on a v2 bind" => [v2, [v1_header(src: "6.6.6.6") + request]],
        "v2 header on a v1 bind" => [v1, [full_v2 + request]],
        "no header on a v1 bind" => [v1, [request]],
        "no header on a v2 bind" => [v2, [request]],
        "PROXY after TLS ClientHello bytes" => [v1, ["\x16\x03\x01\x00\xc8\x01\x00\x00\xc4\x03\x03".b + v1_header(src: "6.6.6.6") + request]],
        "oversized v1 line" => [v1, ["PROXY UNKNOWN #{"x" * 200}\r\n" + request]],
        "v1 with a bad port" => [v1, ["PROXY TCP4 6.6.6.6 10.0.0.1 65536 443\r\n" + request]],
        "v1 with a name for an address" => [v1, ["PROXY TCP4 localhost 10.0.0.1 1 443\r\n" + request]],
        "v1 lowercase" => [v1, ["proxy TCP4 6.6.6.6 10.0.0.1 1 443\r\n" + request]],
        "v2 bad signature" => [v2, [full_v2.sub("QUIT", "QUIX") + request]],
        "v2 oversized length" => [v2, [V2_SIGNATURE + [0x21, 0x11, 60_000].pack("CCn") + ("\0" * 100) + request]],
        "header that never comes (timeout)" => [v1, ["PROXY TCP4 6.6"]]
      }
      refused.each do |name, (port, pieces)|
        started = monotonic
        assert_equal "", exchange(port, *pieces, timeout: 4), "#{name}: nothing is answered"
        assert_operator monotonic - started, :<, 3, "#{name}: closed by the server"
      end
      assert_empty app_saw(log), "no refused connection reached the app"
      assert_equal refused.size, health(server)["proxy_refused"]
      assert_match(/WARN 127\.0\.0\.1 closed: .*PROXY header/, server.stderr)
    end
  end

  def test_valid_headers_in_pieces_and_a_second_header_as_a_request
    with_deploy_server(binds: PROXY_BINDS) do |server, log|
      v1, v2 = port_of(server, 1), port_of(server, 2)
      # Split over several TCP writes: valid, must work.
      line = v1_header(src: "192.0.2.21")
      assert_equal "192.0.2.21", body_of(exchange(v1, line[0, 7], line[7, 12], line[19..] + request))
      header = v2_header(src: "192.0.2.22")
      assert_equal "192.0.2.22", body_of(exchange(v2, header[0, 5], header[5, 10], header[15..], request))
      # A second PROXY line is no header but a request line: refused as
      # HTTP, and the app never sees the address it names.
      reply = exchange(v1, v1_header + v1_header(src: "6.6.6.6") + request)
      assert_match(/\AHTTP\/1\.1 [45]\d\d/, reply)
      assert_equal %w[192.0.2.21 192.0.2.22], app_saw(log)
    end
  end
end
