# frozen_string_literal: true

require_relative "support"

# PROXY protocol binds (docs/PROXY.md), with headers written by the test:
# the app sees the header's client as REMOTE_ADDR, over plain HTTP/1 with
# keep-alive and over TLS, where the header comes before the handshake.
class ProxyProtocolTest < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::DeploySupport

  BINDS = ["tcp://127.0.0.1:0?proxy_protocol=v1", "tcp://127.0.0.1:0?proxy_protocol=v2"].freeze

  def test_v1_and_v2_headers_set_remote_addr_for_every_request_on_the_connection
    with_deploy_server(binds: BINDS) do |server, log|
      v1, v2 = port_of(server, 1), port_of(server, 2)
      reply = exchange(v1, v1_header + request("/a", {}, close: false) + request("/b"))
      assert_equal 2, reply.scan("HTTP/1.1 200").size, reply
      assert_equal %w[192.0.2.7 192.0.2.7], app_saw(log)
      assert_equal "203.0.113.5", body_of(exchange(v2, v2_header + request))
      ipv6 = "PROXY TCP6 2001:db8::7 2001:db8::1 4000 443\r\n"
      assert_equal "2001:db8::7", body_of(exchange(v1, ipv6 + request))
      # The plain bind beside them is untouched.
      assert_equal "127.0.0.1", body_of(exchange(server.port, request))
    end
  end

  def test_local_unknown_and_tlvs
    with_deploy_server(binds: BINDS) do |server, _log|
      v1, v2 = port_of(server, 1), port_of(server, 2)
      assert_equal "127.0.0.1", body_of(exchange(v1, "PROXY UNKNOWN\r\n" + request))
      assert_equal "127.0.0.1", body_of(exchange(v2, v2_header(command: 0) + request)), "LOCAL keeps the peer"
      alpn = [0x01, 2].pack("Cn") + "h2"
      assert_equal "198.51.100.1", body_of(exchange(v2, v2_header(src: "198.51.100.1", tlvs: alpn) + request))
    end
  end

  def test_tls_bind_reads_the_header_before_the_handshake
    binds = ["ssl://127.0.0.1:0?proxy_protocol=v2"]
    with_deploy_server(binds: binds, args: ["--tls-self-signed"]) do |server, log|
      tcp = TCPSocket.new("127.0.0.1", port_of(server, 1))
      tcp.write(v2_header(src: "198.51.100.9"))
      ctx = OpenSSL::SSL::SSLContext.new
      ctx.verify_mode = OpenSSL::SSL::VERIFY_NONE
      ctx.alpn_protocols = ["http/1.1"]
      tls = OpenSSL::SSL::SSLSocket.new(tcp, ctx)
      tls.sync_close = true
      tls.connect
      tls.write(request)
      assert_match(/\r\n\r\n198\.51\.100\.9\z/, tls.read)
      assert_equal ["198.51.100.9"], app_saw(log)
    ensure
      tls&.close
      tcp&.close
    end
  end

  def test_set_remote_address_proxy_protocol_applies_to_every_bind
    with_deploy_server(config: "set_remote_address proxy_protocol: :v1\n") do |server, log|
      assert_equal "192.0.2.44", body_of(exchange(server.port, v1_header(src: "192.0.2.44") + request))
      assert_equal "", exchange(server.port, request), "a bare request is refused on every bind now"
      assert_equal ["192.0.2.44"], app_saw(log)
    end
  end
end
