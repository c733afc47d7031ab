# frozen_string_literal: true

require "tls/support"

# Client certificates (mTLS): verify_mode=force_peer requires one signed by
# ca=PATH; verify_mode=peer checks one if sent and lets clients without one
# in. Refusals happen in the handshake, so the app never sees the request.
class TlsClientAuthTest < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::TlsSupport

  APP = <<~'RUBY'
    run ->(env) { [200, { "content-type" => "text/plain" }, ["hello #{env["rack.url_scheme"]}"]] }
  RUBY

  def client(name)
    { cert: certs.path("#{name}.pem"), key: certs.path("#{name}.key") }
  end

  def get(port, **client)
    https(port, **client).start { |http| http.get("/").body }
  end

  def assert_refused(port, **client)
    error = assert_raises(OpenSSL::SSL::SSLError, EOFError, Errno::ECONNRESET, Errno::EPIPE) { get(port, **client) }
    error
  end

  def test_force_peer_accepts_a_client_of_the_ca_and_refuses_the_rest
    bind = ssl_bind(extra: "&ca=#{certs.path("ca.pem")}&verify_mode=force_peer")
    with_server(APP, args: ["-b", bind]) do |server|
      port = ssl_port(server)
      assert_equal "hello https", get(port, **client("client"))
      assert_refused(port)
      assert_refused(port, **client("stranger"))
      # curl agrees, and still gets in with the right certificate.
      _out, _err, status = curl("--cacert", certs.path("ca.pem"), "https://localhost:#{port}/")
      refute status.success?
      out, err, status = curl("--cacert", certs.path("ca.pem"), "--cert", certs.path("client.pem"),
                              "--key", certs.path("client.key"), "https://localhost:#{port}/")
      assert status.success?, err
      assert_equal "hello https", out
    end
  end

  def test_peer_lets_clients_without_a_certificate_in_but_checks_one_that_is_sent
    bind = ssl_bind(extra: "&ca=#{certs.path("ca.pem")}&verify_mode=peer")
    with_server(APP, args: ["-b", bind]) do |server|
      port = ssl_port(server)
      assert_equal "hello https", get(port)
      assert_equal "hello https", get(port, **client("client"))
      assert_refused(port, **client("stranger"))
    end
  end
end
