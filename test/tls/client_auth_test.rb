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

  # A CRL from the test CA revoking the certificates named (none: an
  # empty CRL), PEM.
  def crl_pem(*revoked)
    ca = OpenSSL::X509::Certificate.new(File.read(certs.path("ca.pem")))
    crl = OpenSSL::X509::CRL.new
    crl.version = 1
    crl.issuer = ca.subject
    crl.last_update = Time.now - 60
    crl.next_update = Time.now + 86_400
    revoked.each do |name|
      entry = OpenSSL::X509::Revoked.new
      entry.serial = OpenSSL::X509::Certificate.new(File.read(certs.path("#{name}.pem"))).serial
      entry.time = Time.now - 30
      crl.add_revoked(entry)
    end
    # webpki wants what RFC 5280 says a CRL has: its number and the
    # issuer's key identifier.
    factory = OpenSSL::X509::ExtensionFactory.new
    factory.issuer_certificate = ca
    factory.crl = crl
    crl.add_extension(OpenSSL::X509::Extension.new("crlNumber", OpenSSL::ASN1::Integer.new(1).to_der))
    crl.add_extension(factory.create_extension("authorityKeyIdentifier", "keyid:always"))
    crl.sign(OpenSSL::PKey.read(File.read(certs.path("ca.key"))), OpenSSL::Digest.new("SHA256"))
    crl.to_pem
  end

  # Puma's verification_flags CRL_CHECK: client certificates are checked
  # against the CRLs in the ca file (OpenSSL reads them from its store).
  def test_crl_check_refuses_a_revoked_client_certificate
    in_tmpdir do |dir|
      revoked = write_file(dir, "revoked.pem", File.read(certs.path("ca.pem")) + crl_pem("client"))
      clean = write_file(dir, "clean.pem", File.read(certs.path("ca.pem")) + crl_pem)
      { revoked => false, clean => true }.each do |ca, accepted|
        bind = ssl_bind(extra: "&ca=#{ca}&verify_mode=force_peer&verification_flags=CRL_CHECK")
        with_server(APP, args: ["-b", bind]) do |server|
          port = ssl_port(server)
          if accepted
            assert_equal "hello https", get(port, **client("client"))
          else
            assert_refused(port, **client("client"))
          end
        end
      end
      # Without CRL_CHECK the CRL is not consulted, as in OpenSSL.
      with_server(APP, args: ["-b", ssl_bind(extra: "&ca=#{revoked}&verify_mode=force_peer")]) do |server|
        assert_equal "hello https", get(ssl_port(server), **client("client"))
      end
    end
  end
end
