# frozen_string_literal: true

require "tls/support"

# HUP reloads TLS certificates without dropping connections;
# --tls-self-signed; X-Forwarded-Proto only when trusted.
class TlsReloadTest < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::TlsSupport

  APP = <<~'RUBY'
    run ->(env) { [200, { "content-type" => "text/plain" }, ["#{env["rack.url_scheme"]} #{env["SERVER_PORT"]}"]] }
  RUBY

  def tls_socket(port, ca)
    context = OpenSSL::SSL::SSLContext.new
    context.ca_file = ca
    context.verify_mode = OpenSSL::SSL::VERIFY_PEER
    ssl = OpenSSL::SSL::SSLSocket.new(TCPSocket.new("127.0.0.1", port), context)
    ssl.hostname = "localhost"
    ssl.sync_close = true
    ssl.connect
    ssl
  end

  # One keep-alive request on an open TLS socket; returns the body.
  def exchange(ssl)
    ssl.write("GET / HTTP/1.1\r\nHost: localhost:#{ssl.io.remote_address.ip_port}\r\n\r\n")
    head = +""
    head << ssl.readpartial(4096) until head.include?("\r\n\r\n")
    headers, body = head.split("\r\n\r\n", 2)
    length = headers[/content-length: (\d+)/i, 1].to_i
    body << ssl.readpartial(4096) while body.bytesize < length
    assert_match(%r{\AHTTP/1\.1 200}, headers)
    body
  end

  def wait_for_log(server, text, count: 1)
    Timeout.timeout(15) { sleep 0.05 until server.stdout.scan(text).size >= count }
  end

  def test_hup_swaps_the_certificate_for_new_handshakes_and_keeps_open_connections
    in_tmpdir do |dir|
      cert = File.join(dir, "live.pem")
      key = File.join(dir, "live.key")
      FileUtils.cp(certs.path("server.pem"), cert)
      FileUtils.cp(certs.path("server.key"), key)
      # Reads an Array body's bytes as they are; Rack 2's Lint hides it (sent chunked).
      with_server(APP, args: ["-b", ssl_bind(cert: cert, key: key)], lint: LINT_FORWARDS_BODY) do |server|
        port = ssl_port(server)
        before = tls_socket(port, certs.path("ca.pem"))
        assert_equal "https #{port}", exchange(before)

        FileUtils.cp(certs.path("server2.pem"), cert)
        FileUtils.cp(certs.path("server2.key"), key)
        server.signal("HUP")
        wait_for_log(server, "TLS certificates reloaded (1 bind)")

        # The connection from before the HUP goes on, on its old session.
        assert_equal "https #{port}", exchange(before)
        # New handshakes get the new certificate, from the other CA.
        assert_raises(OpenSSL::SSL::SSLError) { tls_socket(port, certs.path("ca.pem")) }
        after = tls_socket(port, certs.path("other_ca.pem"))
        assert_equal "https #{port}", exchange(after)
        assert_equal "https #{port}", exchange(before)

        # A broken key on the next HUP is reported by name; the server keeps
        # serving the certificate it has.
        File.write(key, "garbage\n")
        server.signal("HUP")
        wait_for_log(server, "TLS certificate reload failed")
        assert_includes server.stdout, key
        fresh = tls_socket(port, certs.path("other_ca.pem"))
        assert_equal "https #{port}", exchange(fresh)
        [before, after, fresh].each(&:close)
        assert_nil Process.waitpid(server.pid, Process::WNOHANG), "HUP must not stop a server with TLS binds"
      end
    end
  end

  def test_tls_self_signed_makes_a_localhost_certificate_and_warns
    # Reads an Array body's bytes as they are; Rack 2's Lint hides it (sent chunked).
    with_server(APP, args: ["-b", "ssl://127.0.0.1:0", "--tls-self-signed"], lint: LINT_FORWARDS_BODY) do |server|
      assert_includes server.stderr, "for development only"
      port = ssl_port(server)
      context = OpenSSL::SSL::SSLContext.new
      context.verify_mode = OpenSSL::SSL::VERIFY_NONE
      ssl = OpenSSL::SSL::SSLSocket.new(TCPSocket.new("127.0.0.1", port), context)
      ssl.sync_close = true
      ssl.connect
      names = ssl.peer_cert.extensions.find { |e| e.oid == "subjectAltName" }.value
      assert_includes names, "DNS:localhost"
      assert_equal "https #{port}", exchange(ssl)
      ssl.close
    end
  end

  def test_x_forwarded_proto_is_taken_only_when_trusted
    with_server(APP) do |server|
      assert_equal "http #{server.port}", server.get("/", "X-Forwarded-Proto" => "https").body
    end
    with_server(APP, args: ["--trust-forwarded-proto"]) do |server|
      assert_equal "https #{server.port}", server.get("/", "X-Forwarded-Proto" => "https, http").body
      assert_equal "http #{server.port}", server.get("/").body
    end
  end
end
