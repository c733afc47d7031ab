# frozen_string_literal: true

require "tls/support"
require "cluster/support"

# Several certificates on one TLS bind, chosen by SNI: ssl_bind repeated
# with sni: "host" and a directory of certificate/key pairs (sni_dir); the
# first certificate for clients that send no name; OCSP responses stapled
# from DER files; all of it read again on HUP.
class TlsSniTest < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::TlsSupport
  include Tsubame::ClusterHelpers

  APP = <<~'RUBY'
    run ->(env) { [200, { "content-type" => "text/plain" }, [env["SERVER_NAME"]]] }
  RUBY

  def serial(name)
    OpenSSL::X509::Certificate.new(File.read(certs.path("#{name}.pem"))).serial
  end

  def served_serial(port, hostname)
    tls_connect(port, hostname: hostname) { |ssl| ssl.peer_cert.serial }
  end

  # A DER OCSP response from the test CA saying `status` (:good or
  # :revoked) about certificate `name`, made with `openssl ocsp` as a
  # responder would.
  def ocsp_response(dir, name, status)
    cert = certs.path("#{name}.pem")
    hex = `openssl x509 -in #{cert} -noout -serial`[/serial=(\h+)/, 1]
    index = File.join(dir, "index-#{status}.txt")
    line = status == :good ? "V\t300101000000Z\t\t#{hex}\tunknown\t/CN=x" : "R\t300101000000Z\t240101000000Z\t#{hex}\tunknown\t/CN=x"
    File.write(index, "#{line}\n")
    request = File.join(dir, "req.der")
    response = File.join(dir, "#{name}-#{status}.der")
    run = lambda do |*args|
      out, st = Open3.capture2e("openssl", "ocsp", *args)
      assert st.success?, out
    end
    run.("-issuer", certs.path("ca.pem"), "-cert", cert, "-reqout", request, "-no_nonce")
    run.("-index", index, "-rsigner", certs.path("ca.pem"), "-rkey", certs.path("ca.key"), "-CA", certs.path("ca.pem"),
         "-reqin", request, "-respout", response, "-ndays", "1")
    response
  end

  # What `openssl s_client -status` says about the stapled response.
  def stapled_status(port, hostname)
    out, _status = Open3.capture2e("openssl", "s_client", "-connect", "127.0.0.1:#{port}", "-servername", hostname,
                                   "-status", stdin_data: "")
    return :none if out.include?("OCSP response: no response sent")

    out[/Cert Status: (\w+)/, 1]&.to_sym || flunk("no OCSP answer in: #{out}")
  end

  def test_certificates_by_name_default_for_no_sni_ocsp_and_hup
    in_tmpdir do |dir|
      sites = File.join(dir, "sites")
      Dir.mkdir(sites)
      FileUtils.cp(certs.path("site_b.pem"), File.join(sites, "b.pem"))
      FileUtils.cp(certs.path("site_b.key"), File.join(sites, "b.key"))
      # A certificate with no key next to it is not a pair: ignored.
      FileUtils.cp(certs.path("site_c.pem"), File.join(sites, "lonely.crt"))
      staple = File.join(dir, "a.ocsp")
      FileUtils.cp(ocsp_response(dir, "site_a", :good), staple)
      config = <<~RUBY
        ssl_bind "127.0.0.1", 0, cert: #{certs.path("server.pem").inspect}, key: #{certs.path("server.key").inspect},
                 sni_dir: #{sites.inspect}
        ssl_bind "127.0.0.1", 0, sni: "a.test", cert: #{certs.path("site_a.pem").inspect},
                 key: #{certs.path("site_a.key").inspect}, ocsp: #{staple.inspect}
      RUBY
      with_config_server(APP, config) do |server|
        https = server.addresses.grep(/\Ahttps:/)
        assert_equal 1, https.size, "one listener for both ssl_binds: #{server.addresses}"
        port = ssl_port(server)
        assert_equal serial("site_a"), served_serial(port, "a.test")
        assert_equal serial("site_a"), served_serial(port, "A.TEST")
        assert_equal serial("site_b"), served_serial(port, "b.test")
        assert_equal serial("site_b"), served_serial(port, "www.b.test"), "the certificate's wildcard name"
        assert_equal serial("server"), served_serial(port, nil), "no SNI: the default certificate"
        assert_equal serial("server"), served_serial(port, "elsewhere.test"), "an unknown name: the default"
        assert_equal serial("server"), served_serial(port, "localhost")
        # Verified as a browser would: the chain and the name.
        tls_connect(port, hostname: "a.test", ca: certs.path("ca.pem")) do |ssl|
          ssl.write("GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n")
          assert_match(/\r\n\r\na\.test\z/, ssl.read)
        end
        assert_equal :good, stapled_status(port, "a.test")
        assert_equal :none, stapled_status(port, "b.test")

        # HUP: a new OCSP response, and a new pair in the directory.
        FileUtils.cp(ocsp_response(dir, "site_a", :revoked), staple)
        FileUtils.cp(certs.path("site_c.pem"), File.join(sites, "c.pem"))
        FileUtils.cp(certs.path("site_c.key"), File.join(sites, "c.key"))
        assert_equal serial("server"), served_serial(port, "c.test"), "not before the HUP"
        server.signal("HUP")
        Timeout.timeout(15) { sleep 0.05 until server.stdout.include?("TLS certificates reloaded") }
        assert_equal :revoked, stapled_status(port, "a.test")
        assert_equal serial("site_c"), served_serial(port, "c.test")
        assert_equal serial("site_b"), served_serial(port, "b.test")
      end
    end
  end

  # In cluster mode the workers adopt the master's socket with every
  # certificate's keys (the numbered ones too): -b flags this time.
  def test_cluster_workers_serve_every_certificate
    default = "ssl://127.0.0.1:0?cert=#{certs.path("server.pem")}&key=#{certs.path("server.key")}"
    site_a = "ssl://127.0.0.1:0?sni=a.test&cert=#{certs.path("site_a.pem")}&key=#{certs.path("site_a.key")}"
    with_cluster(APP, args: ["-b", default, "-b", site_a]) do |server|
      port = ssl_port(server)
      8.times do
        assert_equal serial("site_a"), served_serial(port, "a.test")
        assert_equal serial("server"), served_serial(port, nil)
      end
    end
  end

  def test_conflicting_and_duplicate_defaults_are_config_errors
    in_tmpdir do |dir|
      rackup = write_file(dir, "config.ru", APP)
      a = "cert: #{certs.path("site_a.pem").inspect}, key: #{certs.path("site_a.key").inspect}"
      s = "cert: #{certs.path("server.pem").inspect}, key: #{certs.path("server.key").inspect}"
      {
        "ssl_bind '127.0.0.1', 0, #{s}\nssl_bind '127.0.0.1', 0, sni: 'b.test', #{a}\nssl_bind '127.0.0.1', 0, #{a}" =>
          /2 certificates without sni/,
        "ssl_bind '127.0.0.1', 0, #{s}, verify_mode: 'none'\nssl_bind '127.0.0.1', 0, sni: 'a.test', #{a}, " \
        "verify_mode: 'peer'" => /disagree on verify_mode/,
        "ssl_bind '127.0.0.1', 0, #{s}, sni_dir: #{dir.inspect}" => /sni_dir .* holds no certificate\/key pair/,
        "ssl_bind '127.0.0.1', 0, #{s}\nssl_bind '127.0.0.1', 0, sni: 'a.test', #{a}, " \
        "ocsp: #{rackup.inspect}" => /OCSP response .* is not DER/
      }.each do |config, message|
        _out, err, status = run_tsubame("-C", write_file(dir, "tsubame.rb", config), rackup)
        assert_equal 1, status.exitstatus, config
        assert_match message, err
      end
    end
  end
end
