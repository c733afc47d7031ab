# frozen_string_literal: true

require "test_helper"
require "openssl"
require "net/http"
require "json"

module Tsubame
  # Support for tls_*_test.rb and http2_*_test.rb: certificates made with
  # the openssl CLI into a temporary directory (a CA, a server certificate
  # for localhost and 127.0.0.1, client certificates from that CA and from
  # another one), and a server with an ssl:// bind next to the plain one.
  module TlsSupport
    # Made once per test process: RSA key generation is slow on a busy
    # machine, and the files are only read.
    def self.certs
      @certs ||= begin
        dir = Dir.mktmpdir("tsubame-certs")
        Minitest.after_run { FileUtils.rm_rf(dir) }
        Certs.new(dir).tap(&:generate)
      end
    end

    # One directory of PEM files, named for what they are.
    class Certs
      attr_reader :dir

      def initialize(dir)
        @dir = dir
      end

      def path(name)
        File.join(@dir, name)
      end

      def generate
        ca("ca")
        ca("other_ca")
        leaf("server", "ca", "localhost", server: true)
        leaf("server2", "other_ca", "localhost", server: true)
        leaf("client", "ca", "client", server: false)
        leaf("stranger", "other_ca", "stranger", server: false)
        leaf("site_a", "ca", "a.test", server: true, names: "DNS:a.test")
        leaf("site_c", "other_ca", "c.test", server: true, names: "DNS:c.test")
        leaf("site_b", "ca", "b.test", server: true, names: "DNS:b.test,DNS:*.b.test")
      end

      private

      def openssl(*args)
        out, status = Open3.capture2e("openssl", *args, chdir: @dir)
        raise "openssl #{args.first} failed: #{out}" unless status.success?
      end

      def ca(name)
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-keyout", "#{name}.key", "-out", "#{name}.pem", "-days", "2", "-subj", "/CN=Tsubame test #{name}")
      end

      def leaf(name, issuer, common_name, server:, names: "DNS:localhost,IP:127.0.0.1")
        openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-keyout", "#{name}.key", "-out", "#{name}.csr", "-subj", "/CN=#{common_name}")
        usage = server ? "serverAuth" : "clientAuth"
        alt = server ? "subjectAltName=#{names}\n" : ""
        File.write(path("#{name}.ext"),
                   "#{alt}basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=#{usage}\n")
        openssl("x509", "-req", "-in", "#{name}.csr", "-CA", "#{issuer}.pem", "-CAkey", "#{issuer}.key",
                "-CAcreateserial", "-out", "#{name}.pem", "-days", "2", "-extfile", "#{name}.ext")
      end
    end

    # A server whose binds all come from a config file (a -b flag would
    # replace them): for ssl_bind options and several certificates on one
    # address.
    class ConfigServer < TestServer
      def initialize(rackup, config, env: {})
        @dir = Dir.mktmpdir("tsubame-srv")
        @log_path = File.join(@dir, "server.log")
        @err_path = File.join(@dir, "server.err")
        ru = File.join(@dir, "config.ru")
        File.write(ru, rackup)
        conf = File.join(@dir, "tsubame.rb")
        File.write(conf, config)
        @pid = Process.spawn(env, RbConfig.ruby, "-w", TestHelpers::EXE, "-C", conf, ru,
                             out: @log_path, err: @err_path, in: File::NULL)
        wait_for_banner
      end
    end

    def with_config_server(rackup, config, env: {})
      server = ConfigServer.new(rackup, config, env: env)
      yield server
    ensure
      server&.kill
    end

    # A TLS connection with Ruby's OpenSSL; the block gets the socket.
    # hostname: the SNI name (nil sends none).
    def tls_connect(port, hostname: "localhost", ca: nil, version: nil, ciphers: nil)
      context = OpenSSL::SSL::SSLContext.new
      if ca
        context.ca_file = ca
        context.verify_mode = OpenSSL::SSL::VERIFY_PEER
      else
        context.verify_mode = OpenSSL::SSL::VERIFY_NONE
      end
      context.min_version = context.max_version = version if version
      context.ciphers = ciphers if ciphers
      ssl = OpenSSL::SSL::SSLSocket.new(TCPSocket.new("127.0.0.1", port), context)
      ssl.hostname = hostname if hostname
      ssl.sync_close = true
      ssl.connect
      yield ssl
    ensure
      ssl&.close
    end

    def certs
      TlsSupport.certs
    end

    def ssl_bind(cert: certs.path("server.pem"), key: certs.path("server.key"), extra: "")
      "ssl://127.0.0.1:0?cert=#{cert}&key=#{key}#{extra}"
    end

    # The port of the server's https:// listener (the banner's display form).
    def ssl_port(server)
      address = server.addresses.find { |a| a.start_with?("https://") } or raise "no https listener"
      address[/:(\d+)\z/, 1].to_i
    end

    def https(port, ca: certs.path("ca.pem"), cert: nil, key: nil)
      http = Net::HTTP.new("127.0.0.1", port)
      http.use_ssl = true
      http.ca_file = ca
      http.verify_mode = OpenSSL::SSL::VERIFY_PEER
      http.read_timeout = 20
      http.open_timeout = 10
      if cert
        http.cert = OpenSSL::X509::Certificate.new(File.read(cert))
        http.key = OpenSSL::PKey.read(File.read(key))
      end
      http
    end

    # Runs curl; returns [stdout, stderr, status]. --fail-with-body is not
    # used: status codes are asserted on the output instead.
    def curl(*args)
      Open3.capture3("curl", "-sS", "--max-time", "30", *args)
    end

    # An app that reports what the env says about the connection, and
    # echoes the body's digest and size.
    ENV_APP = <<~RUBY
      require "json"
      require "digest"
      run lambda { |env|
        body = env["rack.input"].read
        report = {
          "scheme" => env["rack.url_scheme"], "https" => env["HTTPS"], "protocol" => env["SERVER_PROTOCOL"],
          "server_name" => env["SERVER_NAME"], "server_port" => env["SERVER_PORT"],
          "method" => env["REQUEST_METHOD"], "path" => env["PATH_INFO"], "query" => env["QUERY_STRING"],
          "host" => env["HTTP_HOST"], "hijack" => env["rack.hijack?"], "hijack_callable" => !env["rack.hijack"].nil?,
          "content_length" => env["CONTENT_LENGTH"], "size" => body.bytesize, "sha256" => Digest::SHA256.hexdigest(body)
        }
        [200, { "content-type" => "application/json" }, [JSON.generate(report)]]
      }
    RUBY
  end
end
