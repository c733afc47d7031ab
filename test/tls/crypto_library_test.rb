# frozen_string_literal: true

require "tls/support"

# The crypto library under rustls (crates/tsubame-engine/src/crypto.rs):
# aws-lc-rs unless the extension was built with TLS_CRYPTO=ring (make) or
# TSUBAME_TLS_CRYPTO=ring (gem install). Checked through what a client can
# see (an ECDSA P-521 certificate, which only aws-lc-rs signs with) and
# through the build commands the Makefile and extconf.rb write, resolved
# by cargo to the one library they select.
class TlsCryptoLibraryTest < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::TlsSupport

  # `make test TLS_CRYPTO=ring` puts it in the environment of the tests.
  RING_BUILD = ENV["TLS_CRYPTO"] == "ring"

  def test_an_ecdsa_p521_certificate_serves_with_aws_lc_and_is_refused_by_name_with_ring
    in_tmpdir do |dir|
      _out, status = Open3.capture2e("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-521",
                                     "-nodes", "-days", "2", "-subj", "/CN=localhost",
                                     "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                                     "-keyout", "p521.key", "-out", "p521.pem", chdir: dir)
      assert status.success?, "openssl could not make a P-521 certificate"
      cert = File.join(dir, "p521.pem")
      key = File.join(dir, "p521.key")
      bind = ssl_bind(cert: cert, key: key)
      if RING_BUILD
        _out, err, status = run_tsubame("-b", bind, write_file(dir, "config.ru", "run ->(_) { [200, {}, []] }"))
        assert_equal 1, status.exitstatus
        assert_match(/unusable key #{Regexp.escape(key)}/, err)
      else
        with_server("run ->(env) { [200, { 'content-type' => 'text/plain' }, [env['rack.url_scheme']]] }",
                    args: ["-b", bind]) do |server|
          https(ssl_port(server), ca: cert).start do |http|
            response = http.get("/")
            assert_equal ["200", "https"], [response.code, response.body]
          end
        end
      end
    end
  end

  def test_extconf_builds_with_aws_lc_by_default_and_ring_on_request
    { nil => "aws-lc", "" => "aws-lc", "ring" => "ring", "aws-lc" => "aws-lc" }.each do |setting, feature|
      in_tmpdir do |dir|
        line = extconf_cargo_line(dir, setting)
        assert_includes line, "--no-default-features --features tsubame_native/#{feature}", setting.inspect
        assert_equal [feature], crypto_crates(line), "cargo resolves #{setting.inspect} to #{feature} alone"
      end
    end
  end

  def test_extconf_refuses_an_unknown_library_by_name
    in_tmpdir do |dir|
      _out, err, status = Open3.capture3({ "TSUBAME_TLS_CRYPTO" => "openssl" }, RbConfig.ruby,
                                         File.join(ROOT, "ext/tsubame_native/extconf.rb"), chdir: dir)
      refute status.success?
      assert_includes err, 'TSUBAME_TLS_CRYPTO must be aws-lc or ring, not "openssl"'
      refute File.exist?(File.join(dir, "Makefile"))
    end
  end

  def test_make_build_passes_tls_crypto_to_cargo
    { [] => "aws-lc", ["TLS_CRYPTO=ring"] => "ring" }.each do |args, feature|
      out, status = Open3.capture2e("make", "-n", "build", *args, chdir: ROOT)
      assert status.success?, out
      line = out.lines.find { |l| l.start_with?("cargo build --release -p tsubame_native") }
      refute_nil line, out
      assert_includes line, "--no-default-features --features tsubame_native/#{feature}"
    end
  end

  private

  # The cargo command of the Makefile extconf.rb writes in DIR.
  def extconf_cargo_line(dir, setting)
    env = { "TSUBAME_TLS_CRYPTO" => setting }
    out, status = Open3.capture2e(env, RbConfig.ruby, File.join(ROOT, "ext/tsubame_native/extconf.rb"), chdir: dir)
    assert status.success?, out
    line = File.read(File.join(dir, "Makefile")).lines.find { |l| l.include?("build --release -p tsubame_native") }
    refute_nil line, "no cargo build line in the Makefile extconf.rb wrote"
    line
  end

  # Which of aws-lc-rs and ring the features of LINE pull into the
  # extension (`cargo tree`, from the lock file: nothing is compiled).
  def crypto_crates(line)
    features = line[/--no-default-features --features \S+/].split
    out, status = Open3.capture2e(cargo, "tree", "--offline", "-q", "-p", "tsubame_native", *features,
                                  "-e", "normal", "--prefix", "none", chdir: ROOT)
    assert status.success?, out
    names = out.lines.map { |l| l.split.first }.uniq
    { "aws-lc-rs" => "aws-lc", "ring" => "ring" }.select { |crate, _| names.include?(crate) }.values
  end

  def cargo
    rustup = File.join(Dir.home, ".cargo", "bin", "cargo")
    File.executable?(rustup) ? rustup : "cargo"
  end
end
