# frozen_string_literal: true

require "tls/support"
require "cluster/support"

# TLS in cluster mode: the master binds the ssl:// socket and the workers
# adopt it with its TLS settings; HUP to the master makes every worker
# reload its certificate.
class TlsClusterTest < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::TlsSupport
  include Tsubame::ClusterHelpers

  APP = <<~'RUBY'
    run ->(env) { [200, { "content-type" => "text/plain" }, ["#{Process.pid} #{env["rack.url_scheme"]}"]] }
  RUBY

  def test_workers_serve_the_ssl_bind_and_reload_on_hup
    in_tmpdir do |dir|
      cert = File.join(dir, "live.pem")
      key = File.join(dir, "live.key")
      FileUtils.cp(certs.path("server.pem"), cert)
      FileUtils.cp(certs.path("server.key"), key)
      with_cluster(APP, args: ["-b", ssl_bind(cert: cert, key: key)]) do |server|
        port = ssl_port(server)
        pids = server.booted_workers.values.sort
        seen = Array.new(30) do
          out, err, status = curl("--http2", "--cacert", certs.path("ca.pem"), "https://localhost:#{port}/")
          assert status.success?, err
          pid, scheme = out.split
          assert_equal "https", scheme
          pid.to_i
        end
        assert_empty seen.uniq - pids, "answered by the workers"

        FileUtils.cp(certs.path("server2.pem"), cert)
        FileUtils.cp(certs.path("server2.key"), key)
        server.signal("HUP")
        server.wait_until(15, "both workers reloaded") do
          server.stdout.scan("TLS certificates reloaded (1 bind)").size == 2 ? true : nil
        end
        _out, _err, status = curl("--cacert", certs.path("ca.pem"), "https://localhost:#{port}/")
        refute status.success?, "the old CA no longer verifies the new certificate"
        out, err, status = curl("--cacert", certs.path("other_ca.pem"), "https://localhost:#{port}/")
        assert status.success?, err
        assert_includes pids, out.split.first.to_i
        assert_equal pids, server.booted_workers.values.sort, "HUP restarted no worker"
      end
    end
  end
end
