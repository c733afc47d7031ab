# frozen_string_literal: true

require "tls/support"

# The ssl_bind options of hardened and containerised Puma configs:
# cert_pem/key_pem, key_password_command with an encrypted PKCS#8 key,
# ssl_cipher_filter and ssl_ciphersuites (mapped onto rustls's suites,
# server order), reuse and verification_flags.
class TlsPumaOptionsTest < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::TlsSupport

  APP = <<~'RUBY'
    run ->(env) { [200, { "content-type" => "text/plain" }, [env["rack.url_scheme"]]] }
  RUBY

  def serial_of(path)
    OpenSSL::X509::Certificate.new(File.read(path)).serial
  end

  def get(ssl)
    ssl.write("GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
    ssl.read
  end

  def test_cert_pem_and_key_pem_from_the_environment
    config = <<~RUBY
      ssl_bind "127.0.0.1", 0, cert_pem: ENV.fetch("TLS_CERT"), key_pem: ENV.fetch("TLS_KEY")
    RUBY
    env = { "TLS_CERT" => File.read(certs.path("server.pem")), "TLS_KEY" => File.read(certs.path("server.key")) }
    with_config_server(APP, config, env: env) do |server|
      tls_connect(ssl_port(server), ca: certs.path("ca.pem")) do |ssl|
        assert_equal serial_of(certs.path("server.pem")), ssl.peer_cert.serial
        assert_match(/\r\n\r\nhttps\z/, get(ssl))
      end
    end
    # The same as bind query keys, percent-encoded.
    escape = ->(text) { text.gsub(/[^A-Za-z0-9_.-]/) { |c| format("%%%02X", c.ord) } }
    bind = "ssl://127.0.0.1:0?cert_pem=#{escape.(env["TLS_CERT"])}&key_pem=#{escape.(env["TLS_KEY"])}"
    with_server(APP, args: ["-b", bind]) do |server|
      tls_connect(ssl_port(server), ca: certs.path("ca.pem")) do |ssl|
        assert_equal serial_of(certs.path("server.pem")), ssl.peer_cert.serial
      end
    end
  end

  def test_a_bad_key_pem_is_reported_without_printing_the_key
    in_tmpdir do |dir|
      key = File.read(certs.path("server.key"))
      config = write_file(dir, "tsubame.rb", <<~RUBY)
        ssl_bind "127.0.0.1", 0, cert_pem: #{File.read(certs.path("server2.pem")).inspect}, key_pem: #{key.inspect}
      RUBY
      _out, err, status = run_tsubame("-C", config, write_file(dir, "config.ru", APP))
      assert_equal 1, status.exitstatus
      assert_match(/key from key_pem does not go with certificate from cert_pem/, err)
      refute_includes err, key.lines[1].strip, "the private key must not be printed"
      assert_match(/key_pem=\[\d+ bytes\]/, err)
    end
  end

  def test_key_password_command_opens_an_encrypted_key_at_boot_and_on_hup
    in_tmpdir do |dir|
      key = File.join(dir, "encrypted.key")
      out, status = Open3.capture2e("openssl", "pkcs8", "-topk8", "-v2", "aes-256-cbc", "-in", certs.path("server.key"),
                                    "-out", key, "-passout", "pass:s3cret word")
      assert status.success?, out
      assert_includes File.read(key), "BEGIN ENCRYPTED PRIVATE KEY"
      runs = File.join(dir, "runs")
      command = "echo run >> #{runs}; printf 's3cret word\\n'"
      config = <<~RUBY
        ssl_bind "127.0.0.1", 0, cert: #{certs.path("server.pem").inspect}, key: #{key.inspect},
                 key_password_command: #{command.inspect}
      RUBY
      with_config_server(APP, config) do |server|
        tls_connect(ssl_port(server), ca: certs.path("ca.pem")) do |ssl|
          assert_match(/\r\n\r\nhttps\z/, get(ssl))
        end
        assert_equal 1, File.read(runs).lines.size, "run once at boot"
        server.signal("HUP")
        Timeout.timeout(15) { sleep 0.05 until server.stdout.include?("TLS certificates reloaded") }
        assert_equal 2, File.read(runs).lines.size, "run again on HUP"
      end

      rackup = write_file(dir, "config.ru", APP)
      bind = "ssl://127.0.0.1:0?cert=#{certs.path("server.pem")}&key=#{key}"
      _out, err, status = run_tsubame("-b", "#{bind}&key_password_command=echo%20wrong", rackup)
      assert_equal 1, status.exitstatus
      assert_match(/cannot decrypt key #{Regexp.escape(key)} with the key_password_command output/, err)
      _out, err, status = run_tsubame("-b", bind, rackup)
      assert_equal 1, status.exitstatus
      assert_match(/key #{Regexp.escape(key)} is encrypted; give key_password_command/, err)
      _out, err, status = run_tsubame("-b", "#{bind}&key_password_command=exit%203", rackup)
      assert_equal 1, status.exitstatus
      assert_match(/key_password_command .* failed \(exit status: 3\)/, err)
    end
  end

  def test_ssl_cipher_filter_is_served_in_the_server_order_and_unknown_suites_are_named_once
    filter = "ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-ECDSA-AES256-GCM-SHA384:" \
             "DHE-RSA-AES256-GCM-SHA384:AES256-SHA"
    config = <<~RUBY
      ssl_bind "127.0.0.1", 0, cert: #{certs.path("server.pem").inspect}, key: #{certs.path("server.key").inspect},
               ssl_cipher_filter: #{filter.inspect}, ssl_ciphersuites: "TLS_CHACHA20_POLY1305_SHA256:TLS_AES_128_CCM_SHA256",
               reuse: { size: 100, timeout: 30 }, verification_flags: ["PARTIAL_CHAIN"], no_tlsv1_1: true
    RUBY
    with_config_server(APP, config) do |server|
      port = ssl_port(server)
      warnings = server.stderr.lines.grep(/rustls does not implement/)
      assert_equal 1, warnings.size, server.stderr
      assert_includes warnings.first, "rustls does not implement TLS_AES_128_CCM_SHA256, DHE-RSA-AES256-GCM-SHA384, AES256-SHA;"
      # The client prefers AES; the server's order (the filter's) wins.
      tls12 = OpenSSL::SSL::TLS1_2_VERSION
      tls_connect(port, version: tls12, ciphers: "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305") do |ssl|
        assert_equal "ECDHE-ECDSA-CHACHA20-POLY1305", ssl.cipher.first
      end
      # A suite the filter leaves out is not served.
      assert_raises(OpenSSL::SSL::SSLError) do
        tls_connect(port, version: tls12, ciphers: "ECDHE-ECDSA-AES128-GCM-SHA256") { flunk "handshake succeeded" }
      end
      # Ruby's OpenSSL cannot set TLS 1.3 suites; openssl s_client can.
      assert_equal "TLS_CHACHA20_POLY1305_SHA256",
                   tls13_cipher(port, "TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256")
      assert_equal "(NONE)", tls13_cipher(port, "TLS_AES_256_GCM_SHA384")
    end
  end

  # The suite `openssl s_client -tls1_3` negotiates offering `suites` in
  # that order; "(NONE)" when the handshake fails.
  def tls13_cipher(port, suites)
    out, _status = Open3.capture2e("openssl", "s_client", "-connect", "127.0.0.1:#{port}", "-tls1_3",
                                   "-ciphersuites", suites, stdin_data: "")
    out[/Cipher is (\S+)/, 1] || flunk("no cipher line in: #{out}")
  end

  def test_server_order_is_the_default
    with_server(APP, args: ["-b", ssl_bind]) do |server|
      tls_connect(ssl_port(server), version: OpenSSL::SSL::TLS1_2_VERSION,
                                    ciphers: "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-ECDSA-AES128-GCM-SHA256:" \
                                             "ECDHE-ECDSA-AES256-GCM-SHA384") do |ssl|
        assert_equal "ECDHE-ECDSA-AES256-GCM-SHA384", ssl.cipher.first
      end
    end
  end

  def test_bad_tls_options_stop_the_boot_naming_the_directive
    in_tmpdir do |dir|
      rackup = write_file(dir, "config.ru", APP)
      {
        "ssl_cipher_filter=DHE-RSA-AES256-SHA:AES128-SHA" => /ssl_cipher_filter "DHE-RSA-AES256-SHA:AES128-SHA" selects no TLS 1.2 suite/,
        "ssl_ciphersuites=TLS_AES_128_CCM_SHA256" => /ssl_ciphersuites "TLS_AES_128_CCM_SHA256" names no TLS 1.3 suite/,
        "verification_flags=NO_CHECK_TIME" => /verification_flags: 'NO_CHECK_TIME' is not supported/,
        "verification_flags=CRL_CHECK&verify_mode=peer&ca=#{certs.path("ca.pem")}" => /need CRLs \(PEM X509 CRL blocks\) in ca=/,
        "reuse=lots" => /reuse must be/
      }.each do |query, message|
        _out, err, status = run_tsubame("-b", "#{ssl_bind}&#{query}", rackup)
        assert_equal 1, status.exitstatus, query
        assert_match message, err
      end
    end
  end

  # What a hot restart puts in the environment to hand the sockets over:
  # a bind carrying PEM text (or the password command) by a digest only.
  def test_hot_restart_handover_names_pem_binds_by_digest
    pem = File.read(certs.path("server.key"))
    uri = "ssl://127.0.0.1:9443?cert_pem=x&key_pem=#{pem.gsub(/\s/) { |c| format("%%%02X", c.ord) }}"
    key = Tsubame::BindURI.handover_key(uri)
    assert_match(/\Asha256:\h{64}\z/, key)
    assert_equal key, Tsubame::BindURI.handover_key(uri.dup), "the same bind, the same name after exec"
    plain = "ssl://127.0.0.1:9443?cert=/c.pem&key=/k.pem"
    assert_equal plain, Tsubame::BindURI.handover_key(plain)
  end
end
