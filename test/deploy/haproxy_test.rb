# frozen_string_literal: true

require_relative "support"

# HAProxy in front of Tsubame with send-proxy (v1) and send-proxy-v2: the
# app sees the client HAProxy names in its PROXY header, over client
# keep-alive. The client connects from 127.0.0.3 while HAProxy connects
# to Tsubame from 127.0.0.1, so the address can only have come from the
# header.
class HAProxyTest < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::DeploySupport

  def setup
    skip "haproxy is not installed (make deps)" unless system("haproxy -v > /dev/null 2>&1")
  end

  def test_send_proxy_v1
    behind_haproxy("send-proxy", "v1")
  end

  def test_send_proxy_v2
    behind_haproxy("send-proxy-v2", "v2")
  end

  def behind_haproxy(send_proxy, version)
    with_deploy_server(binds: ["tcp://127.0.0.1:0?proxy_protocol=#{version}"]) do |server, log|
      Dir.mktmpdir("tsubame-haproxy") do |dir|
        front = free_port
        config = File.join(dir, "haproxy.cfg")
        File.write(config, haproxy_config(front, port_of(server, 1), send_proxy))
        with_daemon(["haproxy", "-f", config, "-db"], ready_port: front, log: File.join(dir, "haproxy.log")) do
          http = Net::HTTP.new("127.0.0.1", front)
          http.local_host = "127.0.0.3"
          http.start do
            3.times { |i| assert_equal "127.0.0.3", http.get("/#{i}").body }
          end
          assert_equal ["127.0.0.3"] * 3, app_saw(log)
          assert_equal 0, refusals(server)
        end
      end
    end
  end

  # Connections refused on the proxy bind (none expected).
  def refusals(server)
    server.stderr.scan(/closed: .*PROXY/).size
  end
end
