# frozen_string_literal: true

# `make testssl` (not part of `make test`: a full testssl run takes minutes
# per certificate). Debian's testssl (package testssl.sh) audits a Tsubame
# ssl:// bind on an RSA and on an ECDSA certificate, with
# the defaults a user gets; any finding of severity MEDIUM, HIGH or
# CRITICAL fails, and is printed.
#
# The certificates are made to pass the checks that are about the
# certificate rather than the server: a CA testssl is told to trust
# (--add-ca), a year's validity, CRL and OCSP URIs (testssl rates a
# certificate with neither as HIGH). Their OCSP response is stapled.

require "test_helper"
require "json"
require "open3"

class TestsslAuditTest < Minitest::Test
  include Tsubame::TestHelpers

  # The response headers a Rails app sends by default (testssl rates a
  # response with no security header at all MEDIUM: that is the app's
  # part, not the server's).
  APP = <<~'RUBY'
    headers = {
      "content-type" => "text/plain", "strict-transport-security" => "max-age=31536000",
      "x-frame-options" => "SAMEORIGIN", "x-content-type-options" => "nosniff",
      "referrer-policy" => "strict-origin-when-cross-origin", "content-security-policy" => "default-src 'none'"
    }
    run ->(_env) { [200, headers, ["ok"]] }
  RUBY

  BAD = %w[MEDIUM HIGH CRITICAL].freeze

  def openssl(dir, *args)
    out, status = Open3.capture2e("openssl", *args, chdir: dir)
    assert status.success?, "openssl #{args.first}: #{out}"
  end

  # CA, server certificate of `kind` (:rsa or :ecdsa) and its stapled OCSP
  # response, in `dir`.
  def make_certs(dir, kind)
    key_args = kind == :rsa ? ["-newkey", "rsa:2048"] : ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"]
    openssl(dir, "req", "-x509", *key_args, "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "365",
            "-subj", "/CN=Tsubame audit CA")
    openssl(dir, "req", *key_args, "-nodes", "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost")
    File.write(File.join(dir, "server.ext"), <<~EXT)
      subjectAltName=DNS:localhost,IP:127.0.0.1
      basicConstraints=CA:FALSE
      keyUsage=digitalSignature#{",keyEncipherment" if kind == :rsa}
      extendedKeyUsage=serverAuth
      crlDistributionPoints=URI:http://127.0.0.1:9/ca.crl
      authorityInfoAccess=OCSP;URI:http://127.0.0.1:9/ocsp
    EXT
    openssl(dir, "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "server.pem", "-days", "365", "-extfile", "server.ext")
    serial = `openssl x509 -in #{File.join(dir, "server.pem")} -noout -serial`[/serial=(\h+)/, 1]
    File.write(File.join(dir, "index.txt"), "V\t300101000000Z\t\t#{serial}\tunknown\t/CN=localhost\n")
    openssl(dir, "ocsp", "-issuer", "ca.pem", "-cert", "server.pem", "-reqout", "req.der", "-no_nonce")
    openssl(dir, "ocsp", "-index", "index.txt", "-rsigner", "ca.pem", "-rkey", "ca.key", "-CA", "ca.pem",
            "-reqin", "req.der", "-respout", "server.ocsp", "-ndays", "7")
  end

  def audit(kind)
    in_tmpdir do |dir|
      make_certs(dir, kind)
      bind = "ssl://127.0.0.1:0?cert=#{dir}/server.pem&key=#{dir}/server.key&ocsp=#{dir}/server.ocsp"
      with_server(APP, args: ["-b", bind], lint: false) do |server|
        port = server.addresses.find { |a| a.start_with?("https://") }[/:(\d+)\z/, 1]
        json = File.join(dir, "testssl.json")
        out, status = Open3.capture2e("testssl", "--quiet", "--color", "0", "--warnings", "off",
                                      "--add-ca", File.join(dir, "ca.pem"), "--ip", "127.0.0.1",
                                      "--jsonfile", json, "localhost:#{port}")
        findings = JSON.parse(File.read(json))
        assert_operator findings.size, :>, 50, "testssl ran its checks (exit #{status.exitstatus}):\n#{out}"
        bad = findings.select { |f| BAD.include?(f["severity"]) }
        report = bad.map { |f| "#{f["severity"]} #{f["id"]}: #{f["finding"]}" }.join("\n")
        puts "\n#{kind}: #{findings.size} findings, #{bad.size} MEDIUM or above\n#{report}"
        assert_empty bad, "#{kind}: testssl findings of MEDIUM or above:\n#{report}"
        # The checks this issue was about, as testssl words them.
        order = findings.find { |f| f["id"] == "cipher_order" }
        assert order && order["severity"] == "OK", "server cipher order: #{order.inspect}"
        stapling = findings.find { |f| f["id"] == "OCSP_stapling" }
        assert_equal %w[OK offered], [stapling&.dig("severity"), stapling&.dig("finding")], "OCSP stapling"
      end
    end
  end

  def test_rsa_certificate
    audit(:rsa)
  end

  def test_ecdsa_certificate
    audit(:ecdsa)
  end
end

